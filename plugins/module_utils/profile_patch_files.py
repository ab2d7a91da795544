# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's patch directory made to hold exactly the given files: the profile_patch_files module.

``sync(directory, files)`` writes each file (``{path under the directory: text}``) whose content, owner or mode differ,
atomically (file mode 0644, directories 0755), and removes every other file under the directory (the patches of an
earlier profile). Stdlib only; the owner is a parameter so that tests run unprivileged."""

from __future__ import annotations

import os
import stat
import tempfile

FILE_MODE = 0o644
DIR_MODE = 0o755


class PatchFilesError(Exception):
    """A file could not be read, written or removed; ``result`` holds what was done before."""

    def __init__(self, msg, result=None):
        super(PatchFilesError, self).__init__(msg)
        self.result = result or {}


def relative_path(path):
    """``path`` normalized, refused when it is absolute or leaves the directory."""
    norm = os.path.normpath(str(path))
    if not path or os.path.isabs(norm) or norm == '.' or norm.split(os.sep)[0] == '..':
        raise PatchFilesError('%r is not a path under the patch directory' % (path,))
    return norm


def _read(path):
    with open(path, 'rb') as handle:
        return handle.read().decode('utf-8', 'replace')


def _needs_write(path, content, uid, gid):
    """(write, previous text or None): whether ``path`` must be written to hold ``content`` with owner and mode."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return True, None
    if not stat.S_ISREG(info.st_mode):
        return True, '' if stat.S_ISDIR(info.st_mode) else _read(path)
    previous = _read(path)
    return (previous != content or stat.S_IMODE(info.st_mode) != FILE_MODE
            or (info.st_uid, info.st_gid) != (uid, gid)), previous


def _directory(path, uid, gid, check_mode):
    """Make ``path`` a directory of mode 0755 owned by uid:gid; True when that changed anything."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise PatchFilesError('%s is in the way of a directory of the patches: remove it and run again' % path)
    if info is not None and stat.S_IMODE(info.st_mode) == DIR_MODE and (info.st_uid, info.st_gid) == (uid, gid):
        return False
    if not check_mode:
        if info is None:
            os.mkdir(path, DIR_MODE)
        os.chown(path, uid, gid)
        os.chmod(path, DIR_MODE)
    return True


def _write(path, content, uid, gid):
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.%s.' % os.path.basename(path))
    try:
        with os.fdopen(handle, 'wb') as out:
            out.write(content.encode('utf-8'))
            out.flush()
            os.fchown(out.fileno(), uid, gid)
            os.fchmod(out.fileno(), FILE_MODE)
            os.fsync(out.fileno())
        os.rename(temporary, path)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def _diff(path, before, after):
    return {'before_header': path, 'after_header': path, 'before': before or '', 'after': after or ''}


def sync(directory, files, check_mode=False, uid=0, gid=0):
    """Make ``directory`` hold exactly ``files`` (``{relative path: text}``). Returns ``changed``, ``written`` and
    ``removed`` (absolute paths, sorted), ``directories`` (those created or given their mode/owner) and ``diff``.
    In check mode nothing is written; the result says what would be."""
    directory = os.path.normpath(directory)
    wanted = dict((os.path.join(directory, relative_path(name)), text) for name, text in (files or {}).items())
    result = {'changed': False, 'written': [], 'removed': [], 'directories': [], 'diff': []}
    try:
        needed = {directory}
        for path in wanted:
            parent = os.path.dirname(path)
            while parent != directory:
                needed.add(parent)
                parent = os.path.dirname(parent)
        for path in sorted(needed):   # a parent sorts before its children
            if _directory(path, uid, gid, check_mode):
                result['directories'].append(path)
        for path in sorted(wanted):
            write, previous = _needs_write(path, wanted[path], uid, gid)
            if write:
                if not check_mode:
                    _write(path, wanted[path], uid, gid)
                result['written'].append(path)
                result['diff'].append(_diff(path, previous, wanted[path]))
        stale = []
        if os.path.isdir(directory):
            for root, dirs, names in os.walk(directory):
                dirs.sort()
                stale.extend(os.path.join(root, name) for name in names
                             + [d for d in dirs if os.path.islink(os.path.join(root, d))])
        for path in sorted(p for p in stale if p not in wanted):
            before = '' if os.path.islink(path) else _read(path)
            if not check_mode:
                os.unlink(path)
            result['removed'].append(path)
            result['diff'].append(_diff(path, before, ''))
    except OSError as exc:
        raise PatchFilesError('cannot make %s hold the patches: %s' % (directory, exc), result) from exc
    result['changed'] = bool(result['written'] or result['removed'] or result['directories'])
    return result
