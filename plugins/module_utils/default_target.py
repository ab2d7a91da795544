# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systemd target a node boots into: what `systemctl set-default` does, as a link that check mode and diff can show
before it is made. The default_target module.

Pure logic, stdlib only; systemctl is called through a run_command of AnsibleModule's shape."""

from __future__ import annotations

import os


class DefaultTargetError(Exception):
    """systemctl could not answer, or the target has no unit file."""


def systemctl(run_command, program, *args):
    rc, out, err = run_command([program] + list(args))
    if rc != 0:
        raise DefaultTargetError('%s %s failed (rc %d): %s' % (program, ' '.join(args), rc, (err or out).strip()))
    return out.strip()


def unit_file(run_command, program, target):
    """The file systemd loads ``target`` from (what `systemctl set-default` links to)."""
    path = systemctl(run_command, program, 'show', '--property=FragmentPath', '--value', target)
    if not path:
        raise DefaultTargetError('%s has no unit file on this node (systemctl show --property=FragmentPath is empty)' % target)
    return path


def read_link(link):
    try:
        return os.readlink(link)
    except OSError:
        return None


def make_link(link, src):
    """``link`` -> ``src``, replacing whatever is there in one step."""
    temporary = '%s.dgxspark-%d' % (link, os.getpid())
    os.symlink(src, temporary)
    os.replace(temporary, link)
