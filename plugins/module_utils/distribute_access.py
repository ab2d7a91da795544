# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node-to-node access of a distribution on one node: the relay and its files, the node-to-node key (on the nodes that
send) and its authorization in a user's ``authorized_keys`` (the relay's forced command only, from the rails only, until
an expiry time); and their removal. Raises OSError, KeyError (an unknown user)."""

from __future__ import annotations

import os
import pwd
import shutil
import time

COMMENT = 'dgxspark-distribute'
# The owner of the files the role writes (root's; tests give their own).
ROOT = (0, 0)


def key_options(relay_path, forced_config, rail_nets, expiry):
    """The options of the key's authorization: whatever is asked, the relay's forced-command check runs instead
    (command=); no forwarding, no pty (restrict); only from the rails (from=); sshd refuses it after ``expiry`` (epoch
    seconds) even when the controller died before the phase removed it (expiry-time=, UTC)."""
    return 'command="/usr/bin/python3 %s --forced %s",from="%s",restrict,expiry-time="%sZ"' % (
        relay_path, forced_config, ','.join(rail_nets), time.strftime('%Y%m%d%H%M', time.gmtime(expiry)))


def _is_ours(line, blob, comment):
    words = line.split()
    return bool(words) and not line.lstrip().startswith('#') and (blob in words or words[-1] == comment)


def authorized_text(text, public_key, options, comment=COMMENT):
    """``text`` (an authorized_keys file) without any line of the key (its base64 blob, or a line that ends with its
    ``comment``, as the survey counts them), plus, when ``options`` is not None, the key's one line with them."""
    kind, blob = public_key.split()[:2] if public_key else ('', None)
    lines = [line for line in (text or '').splitlines() if not _is_ours(line, blob or '\0', comment)]
    if options is not None:
        lines.append('%s %s %s %s' % (options, kind, blob, comment))
    return ''.join('%s\n' % line for line in lines)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _write(path, text, mode, uid=None, gid=None, check_mode=False):
    """Write ``text`` to ``path`` (atomically, ``mode`` from its creation) unless it holds it already; whether it changed."""
    uid, gid = (uid, gid) if uid is not None else ROOT
    st = os.stat(path) if os.path.exists(path) else None
    if _read(path) == text and st and (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (mode, uid, gid):
        return False
    if not check_mode:
        tmp = path + '.dgxspark-tmp'
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), 'w') as handle:
            handle.write(text)
        os.chown(tmp, uid, gid)
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    return True


def _directory(path, mode, uid=None, gid=None, check_mode=False):
    uid, gid = (uid, gid) if uid is not None else ROOT
    st = os.stat(path) if os.path.isdir(path) else None
    if st and (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (mode, uid, gid):
        return False
    if not check_mode:
        os.makedirs(path, mode=mode, exist_ok=True)
        os.chown(path, uid, gid)
        os.chmod(path, mode)
    return True


def _authorized_keys(user):
    entry = pwd.getpwnam(user)
    return os.path.join(entry.pw_dir, '.ssh'), entry.pw_uid, entry.pw_gid


def grant(key_path, private_key, public_key, user, options, files, run_dir, check_mode=False):
    """Make the node ready to relay: ``files`` ({path: (text, mode)}, root's; a missing directory is made 0755),
    ``run_dir`` empty (0700: the progress of an earlier copy goes), the private key at ``key_path`` (0600, in a 0700
    directory) when ``private_key`` is given, and the key authorized for ``user`` with ``options``.
    Returns (changed paths, diff)."""
    changed, before, after = [], {}, {}
    if _directory(os.path.dirname(key_path), 0o700, check_mode=check_mode):
        changed.append(os.path.dirname(key_path))
    for path, (text, mode) in sorted(files.items()):
        old = _read(path)
        if not os.path.isdir(os.path.dirname(path)) and not check_mode:
            os.makedirs(os.path.dirname(path), mode=0o755)
        if _write(path, text, mode, check_mode=check_mode):
            changed.append(path)
            before[path], after[path] = old, text
    if os.path.lexists(run_dir) and not (os.path.isdir(run_dir) and not os.listdir(run_dir)):
        changed.append(run_dir)
        if check_mode:
            pass
        elif os.path.isdir(run_dir) and not os.path.islink(run_dir):
            shutil.rmtree(run_dir)
        else:
            os.remove(run_dir)
    if _directory(run_dir, 0o700, check_mode=check_mode) and run_dir not in changed:
        changed.append(run_dir)
    if private_key and _write(key_path, private_key.rstrip('\n') + '\n', 0o600, check_mode=check_mode):
        changed.append(key_path)  # its content never in the diff
    ssh_dir, uid, gid = _authorized_keys(user)
    keys = os.path.join(ssh_dir, 'authorized_keys')
    old = _read(keys)
    text = authorized_text(old, public_key, options)
    if _directory(ssh_dir, 0o700, uid, gid, check_mode):
        changed.append(ssh_dir)
    if _write(keys, text, 0o600, uid, gid, check_mode):
        changed.append(keys)
        before[keys], after[keys] = old, text
    return changed, {'before': _diff_text(before), 'after': _diff_text(after)}


def revoke(key_path, public_key, user, check_mode=False):
    """Remove the private key at ``key_path`` and every authorization of the key for ``user``. Returns (changed, diff)."""
    changed, before, after = [], {}, {}
    if os.path.lexists(key_path):
        changed.append(key_path)
        if not check_mode:
            os.remove(key_path)
    keys = os.path.join(_authorized_keys(user)[0], 'authorized_keys')
    old = _read(keys)
    if old is not None:
        text = authorized_text(old, public_key, None)
        if text != old:
            st = os.stat(keys)
            _write(keys, text, st.st_mode & 0o7777, st.st_uid, st.st_gid, check_mode)
            changed.append(keys)
            before[keys], after[keys] = old, text
    return changed, {'before': _diff_text(before), 'after': _diff_text(after)}


def _diff_text(files):
    """One text of the files that change (a file's whole text is short: the relay's is shown by its size only)."""
    def shown(text):
        return '(absent)\n' if text is None else text if len(text) < 4096 else '(%d bytes)\n' % len(text)
    return ''.join('# %s\n%s' % (path, shown(text)) for path, text in sorted(files.items()))
