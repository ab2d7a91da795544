# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Dropping a node's page cache right before the serving engine starts, and what it freed: the drop_caches module.

Pure logic, stdlib only; the files are paths so that tests give their own."""

from __future__ import annotations

import os
import re

# The two /proc/meminfo lines the report reads (KiB, as the kernel writes them).
MEMINFO_KEYS = ('MemAvailable', 'Cached')
_MEMINFO_LINE = re.compile(r'^([A-Za-z0-9_()]+):\s+(\d+)(?:\s+kB)?\s*$')
_KIB_PER_GIB = 1024 * 1024


class DropCachesError(Exception):
    """The cache could not be dropped, or /proc/meminfo could not be read."""


def parse_meminfo(text):
    """{MemAvailable: KiB, Cached: KiB} of a /proc/meminfo text; DropCachesError when either line is missing."""
    values = {}
    for line in text.splitlines():
        match = _MEMINFO_LINE.match(line)
        if match and match.group(1) in MEMINFO_KEYS:
            values[match.group(1)] = int(match.group(2))
    missing = [key for key in MEMINFO_KEYS if key not in values]
    if missing:
        raise DropCachesError('/proc/meminfo has no %s line' % ' or '.join(missing))
    return values


def read_meminfo(path):
    try:
        with open(path, 'r') as handle:
            return parse_meminfo(handle.read())
    except OSError as exc:
        raise DropCachesError('cannot read %s: %s' % (path, exc)) from exc


def drop(mode, drop_caches_path, sync=os.sync):
    """Flush dirty pages (only clean pages can be dropped), then write ``mode`` (1, 2 or 3) to vm.drop_caches."""
    if mode not in (1, 2, 3):
        raise DropCachesError('vm.drop_caches takes 1 (page cache), 2 (dentries and inodes) or 3 (both), not %r' % (mode,))
    sync()
    try:
        with open(drop_caches_path, 'w') as handle:
            handle.write('%d\n' % mode)
    except OSError as exc:
        raise DropCachesError('cannot set vm.drop_caches=%d (%s): %s' % (mode, drop_caches_path, exc)) from exc


def _gib(kib):
    return '%.2f' % (kib / float(_KIB_PER_GIB))


def summary(node, before, after):
    """One line: MemAvailable and Cached before and after in GiB (after is None in check mode: nothing was dropped)."""
    if after is None:
        return ('%s: would drop the page cache (check mode); MemAvailable %s GiB, Cached %s GiB now.'
                % (node, _gib(before['MemAvailable']), _gib(before['Cached'])))
    freed = after['MemAvailable'] - before['MemAvailable']
    return ('%s: MemAvailable %s -> %s GiB (%s%s GiB); Cached %s -> %s GiB.'
            % (node, _gib(before['MemAvailable']), _gib(after['MemAvailable']), '-' if freed < 0 else '+', _gib(abs(freed)),
               _gib(before['Cached']), _gib(after['Cached'])))
