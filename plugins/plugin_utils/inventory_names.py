# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The variable names dgxspark.cluster knows, and the inventory variables it does not know.

A misspelled variable (a tensor parallel size with one l) is silently ignored by Ansible and its default used; on a
400 GB model that costs an hour. The plan refuses every variable that carries the collection's prefix (``dgxspark_``)
or a role's prefix (the role's directory name and ``_``) but is no name the collection knows.

The known names are what the collection declares, never what its files happen to mention: every option of every
role's argument specs (all entry points) and every name of the inventory schema (planned, shared, run and lab
variables, inventory_schema.py). Inventories and documents are not read, so a typo is caught wherever the inventory
lives, ``inventories/`` included.
"""

from __future__ import annotations

import difflib
import functools
import os

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.inventory_schema import declared_names
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.role_inputs import role_entry_points

COLLECTION_PREFIX = 'dgxspark_'


@functools.lru_cache(maxsize=None)
def variable_prefixes(root):
    """The collection's prefix and one per role (its directory name under roles/ and ``_``), longest first."""
    roles_dir = os.path.join(root, 'roles')
    roles = sorted(name for name in os.listdir(roles_dir) if os.path.isdir(os.path.join(roles_dir, name))) \
        if os.path.isdir(roles_dir) else []
    # Longest first, so that a name is split at the most specific prefix.
    return tuple(sorted([COLLECTION_PREFIX] + ['%s_' % role for role in roles], key=lambda p: (-len(p), p)))


def argument_spec_names(root):
    """Every option of every entry point of every role's meta/argument_specs.yml."""
    return set(name for entries in role_entry_points(root).values() for options in entries.values() for name in options)


@functools.lru_cache(maxsize=None)
def known_names(root):
    """Every name the collection declares: its roles' argument specs and the inventory schema (cached per process)."""
    return frozenset(argument_spec_names(root)) | declared_names()


def _prefix_of(name, prefixes):
    """The longest prefix the name carries, or None."""
    for prefix in prefixes:
        if name.startswith(prefix) and len(name) > len(prefix):
            return prefix
    return None


def closest_name(name, known, prefixes):
    """The known name closest to ``name``, or None.

    Compared without the prefixes: ``dgxspark_`` shared by every candidate would make any two names look alike
    (the collection's prefix followed by banana vs by rails). A candidate of the same prefix wins over an equally close other one.
    """
    prefixes = tuple(sorted(prefixes, key=lambda p: (-len(p), p)))
    own_prefix = _prefix_of(name, prefixes)
    by_rest = {}
    for candidate in sorted(known):
        prefix = _prefix_of(candidate, prefixes)
        if prefix is None:
            continue
        by_rest.setdefault(candidate[len(prefix):], []).append(candidate)
    close = difflib.get_close_matches(name[len(own_prefix):], list(by_rest), n=1, cutoff=0.6)
    if not close:
        return None
    candidates = by_rest[close[0]]
    same = [c for c in candidates if c.startswith(own_prefix)]
    return (same or candidates)[0]


def unknown_variable_problems(host_vars_by_host, known, prefixes):
    """One problem per unknown prefixed variable, naming the hosts that set it; sorted, every problem at once.

    host_vars_by_host: {host: the names of its variables (a mapping's keys will do)} for every node of the cluster.
    Names starting with ``_`` are internals of the roles and are not checked, nor names without one of ``prefixes``.
    """
    prefixes = tuple(sorted(prefixes, key=lambda p: (-len(p), p)))
    known = frozenset(known)
    hosts_by_name = {}
    for host, names in host_vars_by_host.items():
        for name in names:
            name = str(name)
            if name.startswith('_') or name in known or _prefix_of(name, prefixes) is None:
                continue
            hosts_by_name.setdefault(name, set()).add(host)
    all_hosts = set(host_vars_by_host)
    problems = []
    for name in sorted(hosts_by_name):
        hosts = hosts_by_name[name]
        where = 'every node' if hosts == all_hosts else ', '.join(sorted(hosts))
        close = closest_name(name, known, prefixes)
        problems.append('%s is not a variable of dgxspark.cluster%s: set on %s; a misspelled variable is ignored and '
                        'its default used; fix or remove it.' % (name, ' (did you mean %s?)' % close if close else '', where))
    return problems
