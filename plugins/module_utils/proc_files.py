# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the host's process table (/proc) when processes come and go while it is read: shared by the modules that
look for processes (process_memory, engine_nccl_build).

Pure logic, stdlib only; the /proc root is a path so that tests give their own."""

from __future__ import annotations

import os


def process_ids(proc='/proc'):
    """The pids listed under ``proc``, in ascending order."""
    return sorted(int(name) for name in os.listdir(proc) if name.isdigit())


def read_process_file(path):
    """The text of a /proc file; None when the process ended meanwhile or hides itself (hidepid)."""
    try:
        with open(path, 'r') as handle:
            return handle.read()
    except OSError:
        return None
