# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's compile cache (VLLM_CACHE_ROOT, one directory per node, mounted read-write into the serving containers) belongs
to one release: when another release starts (a deploy's new one, a rollback), the directory is emptied first and a marker
file in it names the release it now belongs to. A rollback must not load torch.compile artefacts that the failed release
wrote: vLLM's own cache key covers its version and config, not who wrote the files. Restarts of one release keep it."""

from __future__ import annotations

import os
import shutil

#: The file in the cache directory that names the release the directory belongs to (kept when it is emptied).
MARKER = '.dgxspark-release'
CACHE_ENV = 'VLLM_CACHE_ROOT'


class VllmCacheError(Exception):
    """A spec or a directory that cannot be used; the message says which and why."""


def cache_dirs(specs):
    """The cache directories that the serving containers ``specs`` (the plan's or a release's, each with its 'env') mount,
    sorted, each once; a container without VLLM_CACHE_ROOT has none. Raises VllmCacheError on one that is not absolute or
    is '/'."""
    found = set()
    for spec in specs or []:
        if spec is None:
            continue
        if not isinstance(spec, dict) or not isinstance(spec.get('env') or {}, dict):
            raise VllmCacheError('a serving container spec without an environment mapping: %r' % (spec,))
        path = (spec.get('env') or {}).get(CACHE_ENV) or ''
        if not path:
            continue
        normal = os.path.normpath(path)
        if not os.path.isabs(normal) or normal == '/':
            raise VllmCacheError('%s=%r of container %s is not an absolute directory below /: the cache is not emptied'
                                 % (CACHE_ENV, path, spec.get('name', '?')))
        found.add(normal)
    return sorted(found)


def read_marker(path):
    """The release the directory ``path`` belongs to, '' when it has no marker, None when the directory is missing."""
    if not os.path.isdir(path):
        if os.path.lexists(path):
            raise VllmCacheError('%s is not a directory' % path)
        return None
    try:
        with open(os.path.join(path, MARKER), encoding='utf-8') as handle:
            return handle.read().strip()
    except FileNotFoundError:
        return ''
    except OSError as exc:
        raise VllmCacheError('the marker of %s cannot be read: %s' % (path, exc.strerror)) from exc


def entries(path):
    """What emptying ``path`` removes: every entry but the marker, sorted."""
    return sorted(name for name in os.listdir(path) if name != MARKER)


def decide(previous, release):
    """What becomes of a directory whose marker says ``previous`` when ``release`` starts: 'missing' (no directory:
    nothing to empty, Docker makes it when it mounts it), 'kept' (the same release) or 'emptied'."""
    if previous is None:
        return 'missing'
    return 'kept' if previous == release else 'emptied'


def empty(path, release):
    """Remove every entry of ``path`` but the marker (links are removed, never followed), then write the marker."""
    for name in entries(path):
        target = os.path.join(path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        else:
            os.unlink(target)
    temporary = os.path.join(path, MARKER + '.tmp')
    with open(temporary, 'w', encoding='utf-8') as handle:
        handle.write(release + '\n')
    os.replace(temporary, os.path.join(path, MARKER))


def apply(paths, release, check_mode=False):
    """{path: {'previous': release or ''/None, 'outcome': decide(), 'removed': entries removed}} for each directory,
    emptied (unless ``check_mode``) where its release is another one."""
    if not release or not str(release).strip():
        raise VllmCacheError('the release the cache belongs to is empty')
    release = str(release).strip()
    result = {}
    for path in paths:
        previous = read_marker(path)
        outcome = decide(previous, release)
        removed = entries(path) if outcome == 'emptied' else []
        if outcome == 'emptied' and not check_mode:
            try:
                empty(path, release)
            except OSError as exc:
                raise VllmCacheError('%s cannot be emptied: %s' % (path, exc)) from exc
        result[path] = {'previous': previous, 'outcome': outcome, 'removed': removed}
    return result
