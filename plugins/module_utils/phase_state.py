# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Phase stamps: has a deployment phase converged on this node with the same inputs, and is its result still there?

A phase (network, os, ray, vllm) records, after it converged, a stamp on the node: the digest of its inputs (the
controller's variables, the plan and the collection's code) and the digest of what it left (files, live interfaces,
containers, kernel settings, nftables tables). A later run compares both: equal means nothing to do, so the phase is skipped; any
difference (a new variable, a file edited by hand, an address gone, a container recreated or restarted by Docker)
runs the phase in full. Pure functions; the module reads the node, and the controller computes the inputs digest
(plugin_utils/phase_inputs.py).
"""

from __future__ import annotations

import hashlib
import json
import re

from collections.abc import Mapping

from ansible_collections.dgxspark.cluster.plugins.module_utils.nft_table import NftTableError, validate_table

PHASE_RE = re.compile(r'^[a-z][a-z0-9_]*$')
WATCH_KINDS = ('files', 'interfaces', 'containers', 'sysctls', 'nft_tables', 'services')
STAMP_VERSION = 1


class PhaseStateError(ValueError):
    """Inputs that cannot describe a phase's state."""


def canonical_json(data):
    """JSON with sorted keys and no spaces: the same data always gives the same text."""
    return json.dumps(data, sort_keys=True, separators=(',', ':'), default=str)


def digest(data):
    return hashlib.sha256(canonical_json(data).encode('utf-8')).hexdigest()


def validate_phase(phase):
    if not isinstance(phase, str) or not PHASE_RE.match(phase):
        raise PhaseStateError('phase is %r: give a lower-case name such as network, os, ray or vllm.' % (phase,))
    return phase


def validate_watch(watch):
    """Return {kind: sorted unique list of names}; unknown kinds and non-string names are refused."""
    if watch is None:
        watch = {}
    if not isinstance(watch, Mapping):
        raise PhaseStateError('watch must be a mapping of %s to lists of names, got %s.' % (', '.join(WATCH_KINDS), type(watch).__name__))
    unknown = sorted(str(k) for k in watch if k not in WATCH_KINDS)
    if unknown:
        raise PhaseStateError('watch has unknown kind(s) %s; the kinds are %s.' % (', '.join(unknown), ', '.join(WATCH_KINDS)))
    result = {}
    for kind in WATCH_KINDS:
        names = watch.get(kind) or []
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise PhaseStateError('watch.%s must be a list of names, got %r.' % (kind, names))
        for name in names:
            if not isinstance(name, str) or not name:
                raise PhaseStateError('watch.%s has %r; every entry must be a non-empty string.' % (kind, name))
            if kind in ('files', 'sysctls') and not name.startswith('/'):
                raise PhaseStateError('watch.%s has %r; give an absolute path.' % (kind, name))
            if kind == 'nft_tables':
                try:
                    validate_table(name)
                except NftTableError as exc:
                    raise PhaseStateError('watch.nft_tables: %s' % exc)
        result[kind] = sorted(set(names))
    return result


def interface_state(ip_json):
    """What counts of one interface in `ip -j addr show dev X` output: state, MTU, IPv4 and global IPv6 addresses."""
    links = json.loads(ip_json) if isinstance(ip_json, str) else ip_json
    if not links:
        return None
    link = links[0]
    addresses = sorted('%s/%s' % (a.get('local'), a.get('prefixlen')) for a in link.get('addr_info') or []
                       if a.get('family') == 'inet' or (a.get('family') == 'inet6' and a.get('scope') == 'global'))
    return {'operstate': link.get('operstate'), 'mtu': link.get('mtu'), 'addresses': addresses}


def container_state(inspect_record):
    """What counts of one container in `docker inspect` output: identity, image, running, restarts."""
    if not inspect_record:
        return None
    state = inspect_record.get('State') or {}
    return {'id': inspect_record.get('Id'), 'image': inspect_record.get('Image'), 'running': bool(state.get('Running')),
            'restart_count': inspect_record.get('RestartCount', 0)}


def service_state(show_output):
    """What counts of one systemd unit in `systemctl show --property=LoadState,ActiveState,UnitFileState UNIT`: whether
    it is there, running and enabled (None when the unit is not loaded)."""
    values = dict(line.split('=', 1) for line in show_output.splitlines() if '=' in line)
    if values.get('LoadState', 'not-found') != 'loaded':
        return None
    return {'active': values.get('ActiveState') == 'active', 'enabled': values.get('UnitFileState') == 'enabled'}


def compare(stamp, phase, inputs_digest, observed):
    """(converged, reason) for a stamp read from the node (None when absent or unreadable)."""
    observed_digest = digest(observed)
    if not stamp:
        return False, 'no record that phase %s converged on this node' % phase
    if not isinstance(stamp, Mapping) or stamp.get('version') != STAMP_VERSION or stamp.get('phase') != phase:
        return False, 'the record of phase %s is from another version of the collection' % phase
    if stamp.get('inputs_digest') != inputs_digest:
        return False, 'the inputs of phase %s changed (variables, plan or collection code)' % phase
    if stamp.get('observed_digest') != observed_digest:
        changed = sorted(kind for kind in WATCH_KINDS
                         if digest((stamp.get('observed') or {}).get(kind)) != digest(observed.get(kind)))
        return False, 'what phase %s left on this node changed since it converged (%s)' % (phase, ', '.join(changed) or 'state')
    return True, 'phase %s converged before with the same inputs, and nothing it manages changed since' % phase


def make_stamp(phase, inputs_digest, observed):
    return {'version': STAMP_VERSION, 'phase': phase, 'inputs_digest': inputs_digest, 'observed_digest': digest(observed),
            'observed': observed}
