# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Phase stamps: has a deployment phase converged on this node with the same inputs, and is its result still there?

A phase (network, os, ray, vllm) records, after it converged, a stamp on the node: the digest of its inputs (the
controller's variables, the plan and the collection's code) and the digest of what it left (files, live interfaces,
containers, kernel settings, nftables tables). A later run compares both: equal means nothing to do, so the phase is skipped; any
difference (a new variable, a file edited by hand, an address gone, a container recreated or restarted by Docker)
runs the phase in full. Pure functions; the module reads the node.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from collections.abc import Mapping

from ansible_collections.dgxspark.cluster.plugins.module_utils.nft_table import NftTableError, validate_table

PHASE_RE = re.compile(r'^[a-z][a-z0-9_]*$')
WATCH_KINDS = ('files', 'interfaces', 'containers', 'sysctls', 'nft_tables', 'services')
STAMP_VERSION = 1

# What only the model's phases read (distribute, ray, vllm): the plan's model, sizing and serving parts, and the
# variables that choose and size the model. A phase whose roles read none of them (network, os, firewall: the rails,
# the OS, the ports) leaves them out of its inputs, so that another model, context length or Hugging Face token does
# not run it again. tests/unit/test_phase_state.py checks that those roles read none of them.
MODEL_PLAN_KEYS = ('api', 'assumptions', 'decode', 'enable_expert_parallel', 'gpu_memory_utilization', 'gpus', 'hf_repo',
                   'kv_cache', 'kv_cache_dtype', 'max_model_len', 'memory', 'model_profile', 'model_revision', 'patches',
                   'pipeline_parallel_size', 'presets', 'tensor_parallel_size', 'variables', 'vllm_options', 'warnings',
                   'world_size')
MODEL_VARIABLES = ('dgxspark_allow_expert_parallel_with_fp8_moe', 'dgxspark_allow_gpu_memory_utilization_above_ceiling',
                   'dgxspark_distribute_image', 'dgxspark_distribute_model', 'dgxspark_enable_expert_parallel',
                   'dgxspark_gpu_memory_utilization', 'dgxspark_hf_token', 'dgxspark_kv_cache_dtype',
                   'dgxspark_max_model_len', 'dgxspark_model', 'dgxspark_model_dir', 'dgxspark_model_download',
                   'dgxspark_model_profile', 'dgxspark_model_revision', 'dgxspark_node_memory_bandwidth_gbs',
                   'dgxspark_node_memory_gib', 'dgxspark_pipeline_parallel_size', 'dgxspark_profiles_dir',
                   # a seed playbook's fixed shape (model, TP x PP): what it changes is in the plan, digested as such
                   'dgxspark_plan_presets',
                   'dgxspark_runtime_overhead_gib', 'dgxspark_site_patches', 'dgxspark_site_patches_dir',
                   'dgxspark_tensor_parallel_size', 'dgxspark_vllm_site_args')


class PhaseStateError(ValueError):
    """Inputs that cannot describe a phase's state."""


def canonical_json(data):
    """JSON with sorted keys and no spaces: the same data always gives the same text."""
    return json.dumps(data, sort_keys=True, separators=(',', ':'), default=str)


def digest(data):
    return hashlib.sha256(canonical_json(data).encode('utf-8')).hexdigest()


def without_model_inputs(data):
    """The inputs {'plan': ..., 'vars': ...} of a phase that reads nothing of the model, less MODEL_PLAN_KEYS and
    MODEL_VARIABLES (other keys are kept as they are)."""
    if not isinstance(data, Mapping):
        raise PhaseStateError('the inputs of a model-free phase must be a mapping with plan and vars, got %s'
                              % type(data).__name__)
    kept = dict(data)
    for part, names in (('plan', MODEL_PLAN_KEYS), ('vars', MODEL_VARIABLES)):
        if isinstance(kept.get(part), Mapping):
            kept[part] = dict((k, v) for k, v in kept[part].items() if k not in names)
    return kept


#: What the plan reports about how it was made, never what a node runs: where a value came from (the playbook's presets)
#: and the warnings. A value set in the inventory instead of a preset, with the same result, is no new input.
PLAN_REPORT_KEYS = ('presets', 'warnings')


def without_reports(data):
    """The inputs {'plan': ..., 'vars': ...} less the plan's reports (PLAN_REPORT_KEYS) and less the raw variables that the
    plan resolved (its 'variables'): the roles read the plan's values, so only those are inputs."""
    if not isinstance(data, Mapping) or not isinstance(data.get('plan'), Mapping):
        return data
    plan = dict((key, value) for key, value in data['plan'].items() if key not in PLAN_REPORT_KEYS)
    planned = set(plan.get('variables') or {})
    variables = data.get('vars')
    if isinstance(variables, Mapping):
        variables = dict((name, value) for name, value in variables.items() if name not in planned)
    return dict(data, plan=plan, vars=variables)


def with_containers(data, kinds):
    """The inputs {'plan': ..., 'vars': ...} of a phase with only the serving containers of the plan it runs (kinds: of
    'ray', 'vllm'): a changed vLLM option is the vllm phase's input alone, not Ray's or the supervisor's."""
    if not isinstance(data, Mapping) or not isinstance(data.get('plan'), Mapping):
        return data
    kinds = list(kinds or [])
    plan = dict(data['plan'])
    if kinds and isinstance(plan.get('containers'), Mapping):
        plan['containers'] = dict((host, dict((kind, (specs or {}).get(kind)) for kind in kinds))
                                  for host, specs in plan['containers'].items())
    else:
        plan.pop('containers', None)
        plan.pop('node_env', None)
    return dict(data, plan=plan)


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


def code_digest(root, paths):
    """sha256 over the relative names and contents of every file under root/<path> (sorted), caches excluded."""
    sha = hashlib.sha256()
    for rel in sorted(paths):
        top = os.path.join(root, rel)
        if not os.path.exists(top):
            raise PhaseStateError('%s does not exist: name a file or directory of the collection.' % top)
        files = [top] if os.path.isfile(top) else sorted(
            os.path.join(d, f) for d, dirs, fs in os.walk(top) for f in fs
            if '__pycache__' not in d and not f.endswith('.pyc'))
        for path in files:
            sha.update(os.path.relpath(path, root).encode('utf-8') + b'\0')
            with open(path, 'rb') as handle:
                sha.update(handle.read())
            sha.update(b'\0')
    return sha.hexdigest()
