# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's directory of a cluster's generated secrets (Ray token, API key, distribution key): one per
inventory, named by the inventory directory's name and a digest of its real path, so that two clusters whose
inventory directories share a name (inventories/prod in two checkouts) never share a secret."""

from __future__ import annotations

import hashlib
import os

BASE = os.path.join('.config', 'dgxspark')


def shared_secrets_dir(inventory_dir, home=None):
    """Where releases before 0.3.0 kept them: by the inventory directory's name alone, shared between namesakes."""
    real = os.path.realpath(os.path.expanduser(str(inventory_dir)))
    return os.path.join(home or os.path.expanduser('~'), BASE, os.path.basename(real))


def controller_secrets_dir(inventory_dir, home=None):
    """``<home>/.config/dgxspark/<inventory directory name>-<12 hex digits of sha256(its real path)>``."""
    real = os.path.realpath(os.path.expanduser(str(inventory_dir)))
    return '%s-%s' % (shared_secrets_dir(real, home), hashlib.sha256(real.encode('utf-8')).hexdigest()[:12])


def secrets_dir_problem(inventory_dir, home=None):
    """The refusal for an inventory whose secrets are still only in the directory shared by name ('' otherwise): a new
    directory would mean new secrets (a new API key for every client, a new Ray token), so the user moves them."""
    old, new = shared_secrets_dir(inventory_dir, home), controller_secrets_dir(inventory_dir, home)
    if not os.path.isdir(old) or os.path.exists(new):
        return ''
    return ('the secrets of inventory %s are in %s, a directory named after the inventory directory alone, which '
            'another inventory of that name would share. This release keeps them per inventory in %s: if %s belongs '
            'to this inventory, run `mv %s %s`; else set dgxspark_secrets_dir to the directory that holds them.'
            % (os.path.realpath(str(inventory_dir)), old, new, old, old, new))


# The public halves that the secrets directory keeps beside their keys: SSH public keys and certificates (the API's
# generated CA and server certificate). Everything else in it, in any folder, is a secret.
PUBLIC_SUFFIXES = ('.pub', '.crt')


def secret_files(secrets_dir):
    """{path relative to ``secrets_dir``: text} of every secret file under it (folders included, public halves left
    out); {} when there is no such directory."""
    found = {}
    for root, _dirs, names in os.walk(secrets_dir):
        for name in sorted(names):
            path = os.path.join(root, name)
            if not name.endswith(PUBLIC_SUFFIXES) and os.path.isfile(path):
                with open(path, encoding='utf-8', errors='replace') as handle:
                    found[os.path.relpath(path, secrets_dir)] = handle.read()
    return dict(sorted(found.items()))
