# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The processes of given names and the memory they hold (resident set), read from /proc: the process_memory module.

Pure logic, stdlib only; the /proc root is a path so that tests give their own."""

from __future__ import annotations

import os
import re

from ansible_collections.dgxspark.cluster.plugins.module_utils.proc_files import process_ids, read_process_file

# The kernel keeps 15 characters of a process name (TASK_COMM_LEN 16 with the NUL).
COMM_LENGTH = 15
_VMRSS = re.compile(r'^VmRSS:\s+(\d+)\s+kB$', re.MULTILINE)


def vmrss_kib(status_text):
    """VmRSS of a /proc/PID/status text in KiB; None for a kernel thread, which has none."""
    match = _VMRSS.search(status_text)
    return int(match.group(1)) if match else None


def find(names, proc='/proc'):
    """[{pid, comm, rss_kib}] of the user-space processes whose name is one of ``names`` (compared on the first 15
    characters, as `ps -C` does), by pid."""
    wanted = set(name[:COMM_LENGTH] for name in names)
    found = []
    for entry in process_ids(proc):
        comm = read_process_file(os.path.join(proc, str(entry), 'comm'))
        if comm is None or comm.rstrip('\n') not in wanted:
            continue
        rss = vmrss_kib(read_process_file(os.path.join(proc, str(entry), 'status')) or '')
        if rss is not None:
            found.append({'pid': entry, 'comm': comm.rstrip('\n'), 'rss_kib': rss})
    return found


def summary(processes):
    """'Xorg (pid 1234, 61.2 MiB), gnome-shell (pid 1301, 230.5 MiB)'."""
    return ', '.join('%s (pid %d, %.1f MiB)' % (p['comm'], p['pid'], p['rss_kib'] / 1024.0) for p in processes)
