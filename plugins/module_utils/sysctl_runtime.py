# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One kernel setting in the running kernel and at boot: the sysctl_runtime module.

Pure logic, stdlib only; the /proc/sys root is a path so that tests give their own."""

from __future__ import annotations

import os
import re

NAME_RE = re.compile(r'^[a-z0-9_]+([./][A-Za-z0-9_-]+)+$')
# `systemd-analyze cat-config sysctl.d` starts each file with "# PATH", in the order systemd-sysctl reads them.
_FILE_HEADER = re.compile(r'^# (/\S+)$')


class SysctlError(ValueError):
    """A name that is not a sysctl, or a running value that cannot be read or written."""


def proc_path(name, proc_sys='/proc/sys'):
    """The /proc/sys file of ``name`` (vm.swappiness or vm/swappiness)."""
    if not NAME_RE.match(name or ''):
        raise SysctlError('%r is not a sysctl name (e.g. vm.swappiness)' % (name,))
    return os.path.join(proc_sys, *re.split(r'[./]', name))


def normalized(value):
    """A value as the kernel compares it: fields separated by one space (/proc/sys writes tabs between them)."""
    return ' '.join(str(value).split())


def boot_value(cat_config, name):
    """(the value the last file sets for ``name``, or None; the files in the order systemd-sysctl reads them) from the
    output of `systemd-analyze cat-config sysctl.d`. A leading '-' (ignore errors) and '/' separators are the same
    setting."""
    key = re.compile(r'^\s*-?%s\s*=\s*(.*)$' % '[./]'.join(re.escape(part) for part in re.split(r'[./]', name)))
    files, value = [], None
    for line in cat_config.splitlines():
        header = _FILE_HEADER.match(line)
        if header:
            files.append(header.group(1))
            continue
        match = key.match(line)
        if match:
            value = normalized(match.group(1))
    return value, files


def read_running(path):
    try:
        with open(path, 'r') as handle:
            return normalized(handle.read())
    except OSError as exc:
        raise SysctlError('cannot read %s: %s' % (path, exc)) from exc


def write_running(path, value):
    try:
        with open(path, 'w') as handle:
            handle.write('%s\n' % value)
    except OSError as exc:
        raise SysctlError('cannot write %s: %s' % (path, exc)) from exc
