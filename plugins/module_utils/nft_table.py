# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The loaded state of one nftables table, comparable across reads: `nft list table FAMILY NAME` with what changes by
itself (rule counters, handles) taken out, and its sha256. Used by the nft_table module (the firewall role records
the table it loaded, status.yml compares) and by phase_state (a table deleted or altered since the firewall phase
converged makes the phase run again).

Pure logic, stdlib only."""

from __future__ import annotations

import hashlib
import os
import re

TABLE_RE = re.compile(r'^(ip|ip6|inet|arp|bridge|netdev) [A-Za-z0-9_.-]{1,64}$')
_COUNTER_RE = re.compile(r'\bcounter packets \d+ bytes \d+')
_HANDLE_RE = re.compile(r'\s*# handle \d+')


class NftTableError(ValueError):
    """A table name nft would not take."""


def validate_table(table):
    """`FAMILY NAME` (e.g. `inet dgxspark`), or NftTableError."""
    if not isinstance(table, str) or not TABLE_RE.match(table):
        raise NftTableError('nft table %r: expected "FAMILY NAME" with FAMILY one of ip, ip6, inet, arp, bridge, netdev '
                            '(e.g. "inet dgxspark")' % (table,))
    return table.split(' ')


def normalize(listing):
    """The listing without counters' values, handles, blank lines and trailing spaces: equal for the same ruleset."""
    lines = []
    for line in listing.splitlines():
        line = _HANDLE_RE.sub('', _COUNTER_RE.sub('counter', line)).rstrip()
        if line.strip():
            lines.append(line)
    return '\n'.join(lines) + '\n' if lines else ''


def digest(listing):
    """sha256 of the normalized listing; None for no listing (the table is not loaded)."""
    if listing is None:
        return None
    return hashlib.sha256(normalize(listing).encode('utf-8')).hexdigest()


def list_table_argv(nft, table):
    return [nft, 'list', 'table'] + validate_table(table)


def read_table(run_command, nft, table):
    """(listing or None when the table is not loaded, error text). run_command is AnsibleModule.run_command's shape."""
    rc, out, err = run_command(list_table_argv(nft, table))
    if rc == 0:
        return out, ''
    return None, (err or out).strip()


def module_read_table(module, table, nft):
    """read_table for a module: a malformed table name or a missing nft binary fails it with a clear message."""
    try:
        validate_table(table)
    except NftTableError as exc:
        module.fail_json(msg=str(exc))
    if not os.path.exists(nft):
        module.fail_json(msg='%s is missing: install the nftables package' % nft)
    return read_table(module.run_command, nft, table)


def read_record(path):
    """The first line of a record file a role wrote (a digest, an instance's name), or None when there is none."""
    try:
        with open(path, 'r') as handle:
            return handle.read().strip() or None
    except OSError:
        return None
