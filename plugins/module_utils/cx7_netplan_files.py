# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The two files the cx7_netplan role owns on a node (its rail netplan file and its IPv6 sysctl drop-in): the
cx7_netplan_files module.

``read``: what writing each would do (content, owner, group, mode), the node's other netplan files, and
``netplan generate`` on a scratch root holding them and the candidate; ``present``: back up and write; ``restored``:
put back what ``present`` replaced (or remove what it created). A file spec is ``{path, content, mode, owner, group}``.
Stdlib only; the netplan runner is a callable so that tests give their own."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import tempfile

from ansible_collections.dgxspark.cluster.plugins.module_utils.private_file import write_private_file

# Where netplan reads its configuration, in this order (netplan.io's own search path).
NETPLAN_DIRS = ('/etc/netplan', '/run/netplan', '/lib/netplan')
FILES = ('netplan', 'sysctl')


class NetplanFilesError(Exception):
    """A file could not be read or written; ``result`` holds what was done before (for the rollback)."""

    def __init__(self, msg, result=None):
        super(NetplanFilesError, self).__init__(msg)
        self.result = result or {}


def mode_bits(mode):
    """0o600 from '0600', '600' or 0o600."""
    try:
        return mode if isinstance(mode, int) and not isinstance(mode, bool) else int(str(mode), 8)
    except ValueError as exc:
        raise NetplanFilesError('mode %r is not an octal mode such as "0600"' % (mode,)) from exc


def _name(lookup, number):
    try:
        return lookup(number)[0]
    except KeyError:
        return str(number)


def file_state(spec):
    """What writing ``spec`` would do: ``path``, ``exists``, ``differs`` (the content differs, or there is no regular file),
    ``write`` (content, owner, group or mode differ: writing would change something) and ``previous`` (the content now,
    None when there is no file)."""
    path = spec['path']
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {'path': path, 'exists': False, 'differs': True, 'write': True, 'previous': None}
    except OSError as exc:
        raise NetplanFilesError('cannot look at %s: %s' % (path, exc)) from exc
    try:
        with open(path, 'rb') as handle:   # a link is read through; the write replaces it with a file
            data = handle.read()
        previous = data.decode('utf-8')
    except (OSError, UnicodeDecodeError) as exc:
        raise NetplanFilesError('cannot read %s (%s): it must be a text file the role can replace; remove it and run again.' % (path, exc)) from exc
    differs = not stat.S_ISREG(info.st_mode) or previous != spec['content']
    owner, group = _name(pwd.getpwuid, info.st_uid), _name(grp.getgrgid, info.st_gid)
    write = (differs or owner != spec.get('owner', 'root') or group != spec.get('group', 'root')
             or stat.S_IMODE(info.st_mode) != mode_bits(spec['mode']))
    return {'path': path, 'exists': True, 'differs': differs, 'write': write, 'previous': previous}


def other_netplan_files(own_path, dirs=NETPLAN_DIRS):
    """``[{path, content}]``: the regular ``*.yaml`` files of ``dirs`` (not hidden, not the role's own), in netplan's order."""
    found = []
    own = os.path.normpath(own_path)
    for directory in dirs:
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise NetplanFilesError('cannot list %s: %s' % (directory, exc)) from exc
        for name in names:
            path = os.path.join(directory, name)
            if not name.endswith('.yaml') or name.startswith('.') or os.path.normpath(path) == own:
                continue
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
                with open(path, 'rb') as handle:
                    found.append({'path': path, 'content': handle.read().decode('utf-8', 'replace')})
            except OSError as exc:
                raise NetplanFilesError('cannot read the netplan file %s: %s' % (path, exc)) from exc
    return found


def generate(netplan, candidate_name, content, others, run):
    """``netplan generate --root-dir`` on a scratch root holding ``others`` (their paths under it) and the candidate as
    etc/netplan/``candidate_name``: what the real configuration would be. ``run(argv)`` -> (rc, stdout, stderr).
    Returns ``{rc, stdout, stderr, cmd}``; rc 127 when there is no netplan command."""
    if not netplan:
        return {'rc': 127, 'stdout': '', 'stderr': 'netplan is not installed (no netplan command in PATH, /sbin or /usr/sbin).', 'cmd': []}
    scratch = tempfile.mkdtemp(suffix='.cx7_netplan')
    try:
        for directory in NETPLAN_DIRS:
            os.makedirs(scratch + directory, mode=0o700)
        files = [(item['path'], item['content']) for item in others] + [(os.path.join('/etc/netplan', candidate_name), content)]
        for path, text in files:
            target = scratch + path
            if not os.path.isdir(os.path.dirname(target)):
                os.makedirs(os.path.dirname(target), mode=0o700)
            with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'w') as handle:
                handle.write(text)
        argv = [netplan, 'generate', '--root-dir', scratch]
        rc, out, err = run(argv)
        return {'rc': rc, 'stdout': out, 'stderr': err, 'cmd': argv}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_file(spec, content=None):
    """Replace ``spec['path']`` atomically by ``content`` (default ``spec['content']``) with the spec's owner, group and mode."""
    path = spec['path']
    directory = os.path.dirname(path) or '.'
    if not os.path.isdir(directory):
        raise NetplanFilesError('cannot write %s: the directory %s does not exist' % (path, directory))
    try:
        uid, gid = pwd.getpwnam(spec.get('owner', 'root')).pw_uid, grp.getgrnam(spec.get('group', 'root')).gr_gid
    except KeyError as exc:
        raise NetplanFilesError('cannot write %s: no such user or group (%s)' % (path, exc)) from exc
    handle, temporary = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(path))
    try:
        with os.fdopen(handle, 'wb') as out:
            out.write((spec['content'] if content is None else content).encode('utf-8'))
            out.flush()
            os.fchown(out.fileno(), uid, gid)
            os.fchmod(out.fileno(), mode_bits(spec['mode']))
            os.fsync(out.fileno())
        os.rename(temporary, path)
    except OSError as exc:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise NetplanFilesError('cannot write %s: %s' % (path, exc)) from exc


def _diff(path, before, after):
    return {'before_header': path, 'after_header': path, 'before': before or '', 'after': after or ''}


def present(specs, backup_dir=None, check_mode=False):
    """Write each spec (``{key: spec}``, keys of FILES) whose content, owner, group or mode differ; back up the previous
    content of the netplan file to ``backup_dir`` first when its content changes.

    Returns ``changed``, ``{key: file_state + changed}``, ``previous`` (``{key: content before, None: there was none}`` for each
    file written, what ``restored`` takes), ``backup`` (the backup's path or None) and ``diff``. A failure raises
    NetplanFilesError whose ``result`` says what was written before it (for the rollback)."""
    result = {'changed': False, 'previous': {}, 'backup': None, 'diff': []}
    states = dict((key, file_state(specs[key])) for key in FILES if key in specs)
    for key, state in states.items():
        result[key] = dict((k, v) for k, v in state.items() if k != 'previous')
        result[key]['changed'] = False
    for key, state in states.items():
        if not state['write']:
            continue
        try:
            if not check_mode:
                if key == 'netplan' and backup_dir and state['differs'] and state['previous'] is not None:
                    result['backup'] = os.path.join(backup_dir, os.path.basename(state['path']))
                    try:
                        write_private_file(result['backup'], state['previous'])
                    except OSError as exc:
                        raise NetplanFilesError('cannot back up %s to %s: %s' % (state['path'], result['backup'], exc)) from exc
                write_file(specs[key])
        except NetplanFilesError as exc:
            raise NetplanFilesError(str(exc), result) from exc
        result['changed'] = result[key]['changed'] = True
        result['previous'][key] = state['previous']
        result['diff'].append(_diff(state['path'], state['previous'], specs[key]['content']))
    return result


def restored(specs, previous, check_mode=False):
    """Put back each file of ``previous`` (``{key: content}``, as ``present`` returned it): write the content with the spec's
    owner, group and mode, or remove the file where the content is None (there was none). Returns ``changed``,
    ``restored`` and ``removed`` (paths), ``diff`` and ``msg``."""
    result = {'changed': False, 'restored': [], 'removed': [], 'diff': []}
    for key in FILES:
        if key not in (previous or {}):
            continue
        spec, content = specs[key], previous[key]
        path = spec['path']
        now = file_state(dict(spec, content='' if content is None else content))
        if content is None:
            if now['exists']:
                if not check_mode:
                    try:
                        os.unlink(path)
                    except OSError as exc:
                        raise NetplanFilesError('cannot remove %s: %s' % (path, exc), result) from exc
                result['removed'].append(path)
                result['diff'].append(_diff(path, now['previous'], ''))
        elif now['write']:
            if not check_mode:
                try:
                    write_file(spec, content)
                except NetplanFilesError as exc:
                    raise NetplanFilesError(str(exc), result) from exc
            result['restored'].append(path)
            result['diff'].append(_diff(path, now['previous'], content))
    result['changed'] = bool(result['restored'] or result['removed'])
    done = ['restored the previous %s' % p for p in result['restored']] + ['removed %s (there was none)' % p for p in result['removed']]
    result['msg'] = '; '.join(done) if done else 'nothing to restore'
    return result
