# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A deployment phase's inputs, on the controller: which variables are a phase's inputs, and one digest of them, of the
plan and of the collection code its roles run (the stamp the node keeps compares it: module_utils/phase_state.py).
A phase is defined in playbooks/vars/phases.yml (roles, inputs_from, model_free, containers, unread, watch)."""

from __future__ import annotations

import hashlib
import os
import re

from collections.abc import Mapping

from ansible_collections.dgxspark.cluster.plugins.module_utils.phase_state import PhaseStateError, digest

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


#: Code every phase runs: the plugins, and the model profiles the plan reads.
ALWAYS = ('plugins', 'profiles')
#: Facts the collection's roles set while they run, and the plan: never a user's input (the plan is digested whole).
RUN_FACTS = ('serving_env_from_node', 'ray_cluster_changed', 'ray_cluster_membership', 'vllm_container_starts',
             'vllm_container_ready', 'dgxspark_plan', 'dgxspark_status', 'cx7_netplan_fabric_probe')
#: The deployment's own bookkeeping (the phase being run, its definitions, the releases, the plan's presets).
BOOKKEEPING_RE = re.compile(r'^dgxspark_(phase|release|plan)(_|$)')
DEFINITION_KEYS = ('roles', 'inputs_from', 'model_free', 'containers', 'unread', 'watch')
_CODE_CACHE = {}


def input_roles(definition):
    """The roles whose variables and code are a phase's inputs."""
    return list(definition.get('inputs_from') or definition['roles'])


def input_names(names, definition):
    """The variable names, among those defined (names), that are a phase's inputs: the cluster's (dgxspark_*) and those of
    the roles it takes its inputs from, less the facts roles set while running, the bookkeeping and what it leaves unread."""
    prefix = re.compile(r'^(dgxspark|%s)_' % '|'.join(re.escape(role) for role in input_roles(definition)))
    unread = set(definition.get('unread') or [])
    return sorted(name for name in set(names) if prefix.match(name) and name not in RUN_FACTS and name not in unread
                  and not BOOKKEEPING_RE.match(name))


def inputs_digest(data, code_paths=None, model_free=False, containers=None):
    """sha256 of the data ({'plan': ..., 'vars': ...}, less the plan's reports and the raw planned variables) and of the
    collection files under code_paths, plugins/ and profiles/; with model_free, without the model's parts of the data or
    profiles/; of the plan's serving containers, only the kinds named in containers."""
    always = tuple(path for path in ALWAYS if not (model_free and path == 'profiles'))
    paths = tuple(sorted(set(list(code_paths or []) + list(always))))
    data = with_containers(without_reports(data), containers)
    if model_free:
        data = without_model_inputs(data)
    if paths not in _CODE_CACHE:
        # The collection's root: this file is plugins/plugin_utils/phase_inputs.py.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        _CODE_CACHE[paths] = code_digest(root, paths)
    return digest({'data': data, 'code': _CODE_CACHE[paths]})


def definition_problems(phase, definition):
    """What is wrong with a phase's definition (playbooks/vars/phases.yml), as sentences."""
    if not isinstance(definition, Mapping):
        return ['phase %s has no definition in dgxspark_phase_definitions' % phase]
    problems = ['phase %s: unknown key %s (known: %s)' % (phase, key, ', '.join(DEFINITION_KEYS))
                for key in sorted(set(definition) - set(DEFINITION_KEYS))]
    if not definition.get('roles') or not isinstance(definition.get('roles'), list):
        problems.append('phase %s: roles must list the roles it runs' % phase)
    return problems


def phases_from(phase, definitions):
    """The phase and every phase defined after it (definitions: in the order the phases run)."""
    names = list(definitions or {})
    if phase not in names:
        raise PhaseStateError('phase %s has no definition in dgxspark_phase_definitions (defined: %s)'
                              % (phase, ', '.join(names) or 'none'))
    return names[names.index(phase):]


def phase_checks(phases, definitions, names, value_of):
    """For each phase named: {'phase', 'inputs_digest', 'watch'}, the digest over its input variables (value_of(name)
    gives a variable's value) and the plan (value_of('dgxspark_plan'))."""
    checks = []
    for phase in phases:
        definition = (definitions or {}).get(phase)
        problems = definition_problems(phase, definition)
        if problems:
            raise PhaseStateError('; '.join(problems))
        chosen = input_names(names, definition)
        data = {'plan': value_of('dgxspark_plan'), 'vars': dict((name, value_of(name)) for name in chosen)}
        checks.append({'phase': phase, 'watch': definition.get('watch') or {},
                       'inputs_digest': inputs_digest(data, ['roles/' + role for role in input_roles(definition)],
                                                      model_free=bool(definition.get('model_free')),
                                                      containers=definition.get('containers') or [])})
    return checks
