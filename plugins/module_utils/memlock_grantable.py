# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a locked-memory limit (limits.conf's memlock) can be granted to a login session: the memlock_grantable module.

Pure logic, stdlib only; getrlimit/setrlimit are arguments so that tests give their own."""

from __future__ import annotations

import resource


def limit_bytes(limit):
    """limits.conf's memlock value ('unlimited' or KiB) as setrlimit takes it (bytes, or RLIM_INFINITY)."""
    text = str(limit).strip()
    if text in ('unlimited', 'infinity', '-1'):
        return resource.RLIM_INFINITY
    if not text.isdigit():
        raise ValueError("%r is not a memlock limit: give 'unlimited' or a size in KiB" % (limit,))
    return int(text) * 1024


def as_kib(value):
    """An rlimit as `ulimit -l` prints it: 'unlimited' or KiB."""
    return 'unlimited' if value == resource.RLIM_INFINITY else str(value // 1024)


def probe(limit, getrlimit=resource.getrlimit, setrlimit=resource.setrlimit):
    """(granted, the current hard limit as `ulimit -H -l` prints it): pam_limits sets soft and hard to the value, which
    needs CAP_SYS_RESOURCE, or a hard limit at least as high, to raise. Tried in the caller's own (throw-away) process."""
    wanted = limit_bytes(limit)
    hard = getrlimit(resource.RLIMIT_MEMLOCK)[1]
    try:
        setrlimit(resource.RLIMIT_MEMLOCK, (wanted, wanted))
    except (ValueError, OSError):
        return False, as_kib(hard)
    return True, as_kib(hard)
