# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node has for the distribution, read through the Docker CLI and the file system (the Docker SDK for Python is
not needed): the serving image's ID and size, where a received image would go and the room there, the SSH host key."""

from __future__ import annotations

import json
import os
import re

from ansible_collections.dgxspark.cluster.plugins.module_utils.disk_room import filesystems

# Docker 20.10 to 28 say "No such image" (the daemon's words; older clients print "Error: No such image").
_NO_SUCH_IMAGE = re.compile(r'no such image', re.IGNORECASE)


class SurveyError(Exception):
    """Docker did not answer as expected; the message carries its words."""


def image_of(run_command, docker, name):
    """{'id', 'size'} of the image ``name`` in the node's Docker, or None when Docker has no such image.

    run_command: AnsibleModule.run_command. Raises SurveyError when Docker cannot answer (its daemon down, no permission).
    """
    rc, out, err = run_command([docker, 'image', 'inspect', name])
    if rc != 0:
        if _NO_SUCH_IMAGE.search(err or ''):
            return None
        raise SurveyError('docker image inspect %s failed (rc %s): %s' % (name, rc, (err or out).strip()))
    try:
        records = json.loads(out)
        return {'id': records[0]['Id'], 'size': int(records[0]['Size'])} if records else None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise SurveyError('docker image inspect %s printed no image record (%s): %s' % (name, exc, out.strip()[:200]))


def docker_root(run_command, docker):
    """Docker's store on the node (docker info's DockerRootDir), where a received image's layers are written."""
    rc, out, err = run_command([docker, 'info', '--format', '{{json .DockerRootDir}}'])
    try:
        root = json.loads(out) if rc == 0 else None
    except ValueError:
        root = None
    if not isinstance(root, str) or not root.startswith('/'):
        raise SurveyError('docker info gave no DockerRootDir (rc %s): %s' % (rc, (err or out).strip()))
    return root


def host_key(text):
    """'TYPE BASE64' of an OpenSSH public key file's content (the comment left out), or '' for an empty file."""
    return ' '.join(text.split()[:2])


def image_room(spool_dir, store, stat=None, device=None):
    """Where a received image goes on this node - spooled in ``spool_dir``, then loaded into Docker's ``store`` - and the
    free bytes of each file system there (disk_room.filesystems, with no bytes yet: the head's image size is known on the
    controller, which checks the room; both places on one file system need twice the image)."""
    needs = [{'path': spool_dir, 'bytes': 0, 'role': 'spooled'}, {'path': store, 'bytes': 0, 'role': 'loaded into Docker'}]
    probes = dict((name, value) for name, value in (('stat', stat), ('device', device)) if value is not None)
    return {'needs': [{'path': need['path'], 'role': need['role']} for need in needs],
            'filesystems': [{'device': fs['device'], 'paths': fs['paths'], 'free': fs['free']}
                            for fs in filesystems(needs, **probes)]}


def relay_key_left(key_path, authorized_keys, comment):
    """Whether the node-to-node key (its file, ``key_path``) or an authorization of it (a line of the ``authorized_keys``
    file that ends with the key's ``comment``) is still on the node; None for ``authorized_keys`` means the user is
    unknown here, which the removal should say, so it counts as left."""
    if os.path.lexists(key_path) or authorized_keys is None:
        return True
    try:
        with open(authorized_keys) as handle:
            return any(line.split() and line.split()[-1] == comment for line in handle if not line.lstrip().startswith('#'))
    except OSError:
        return False


def mismatch(node, name, found, expected_id):
    """The message for a node whose image ``name`` (``found``: image_of's answer) is not ``expected_id`` after a copy,
    or None when it is."""
    found_id = (found or {}).get('id') or ''
    if found_id == expected_id:
        return None
    return ("%s: after the copy the image %s has ID %s, the head's is %s: re-run the distribute phase."
            % (node, name, found_id or 'none', expected_id))
