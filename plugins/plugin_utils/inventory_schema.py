# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory variables of dgxspark.cluster: one definition, used by the plan, argument specs and docs.

Every public inventory variable is described once here, as data. ``validate_cluster_vars`` and
``validate_host_vars`` check values against these definitions, apply static defaults and return
ALL problems found (they never stop at the first one).
"""

from __future__ import annotations

import copy
import difflib

# Defaults that depend on something else than the variable itself are named by a marker; the
# plan (cluster_plan.py) resolves them.
DEFAULT_NODE_COUNT = '@number_of_nodes'
DEFAULT_FROM_PROFILE = '@model_profile'

GPU_MEMORY_UTILIZATION_CEILING = 0.85
DEFAULT_RUNTIME_OVERHEAD_GIB = 6.0

DEFAULT_RAILS = [
    {'name': 'rail1', 'interface': 'enp1s0f1np1', 'subnet': '192.168.100.0/24', 'address_offset': 10},
    {'name': 'rail2', 'interface': 'enP2p1s0f1np1', 'subnet': '192.168.101.0/24', 'address_offset': 10},
]

RAIL_FIELDS = (
    {'name': 'name', 'type': 'str', 'required': True,
     'description': 'Rail name, the key used in dgxspark_rail_addresses (for example rail1).'},
    {'name': 'interface', 'type': 'str', 'required': True,
     'description': 'CX-7 netdev carrying the rail on every node (for example enp1s0f1np1).'},
    {'name': 'subnet', 'type': 'str', 'required': True,
     'description': 'IPv4 network of the rail in CIDR form (for example 192.168.100.0/24); one subnet per rail.'},
    {'name': 'address_offset', 'type': 'int', 'required': False, 'default': 10, 'min': 0,
     'description': 'Node address = subnet network address + address_offset + rank.'},
)

CLUSTER_VARIABLES = (
    {'name': 'dgxspark_model_profile', 'type': 'str', 'required': True, 'default': None,
     'description': 'Model profile: a file name without .yml in profiles/models/ (or in the profiles_dir given to cluster_plan).'},
    {'name': 'dgxspark_model_revision', 'type': 'str', 'default': DEFAULT_FROM_PROFILE,
     'description': "Revision of the profile's repository that is downloaded and served (vLLM --revision): a branch, a tag or "
                    "a commit; defaults to the profile's revision, else main. A profile with trust_remote_code needs a commit "
                    "(40 hex digits): its Python runs as root in every serving container."},
    {'name': 'dgxspark_tensor_parallel_size', 'type': 'int', 'default': DEFAULT_NODE_COUNT, 'min': 1,
     'description': 'vLLM --tensor-parallel-size. One GPU per Spark, so TP x PP must equal the number of nodes.'},
    {'name': 'dgxspark_pipeline_parallel_size', 'type': 'int', 'default': 1, 'min': 1,
     'description': 'vLLM --pipeline-parallel-size. PP stages run one after another for each token.'},
    {'name': 'dgxspark_gpu_memory_utilization', 'type': 'float', 'default': 0.85, 'min_exclusive': 0.0, 'max': 1.0,
     'description': 'vLLM --gpu-memory-utilization, the fraction of dgxspark_node_memory_gib vLLM may use. Unified memory: '
                    'above 0.85 is refused unless dgxspark_allow_gpu_memory_utilization_above_ceiling is true.'},
    {'name': 'dgxspark_allow_gpu_memory_utilization_above_ceiling', 'type': 'bool', 'default': False,
     'description': 'Allow dgxspark_gpu_memory_utilization above the unified-memory ceiling 0.85 (up to 1.0).'},
    {'name': 'dgxspark_max_model_len', 'type': 'int', 'default': DEFAULT_FROM_PROFILE, 'min': 1,
     'description': "vLLM --max-model-len; defaults to the profile's default_max_model_len."},
    {'name': 'dgxspark_kv_cache_dtype', 'type': 'str', 'default': DEFAULT_FROM_PROFILE, 'choices': ['auto', 'fp8'],
     'description': "vLLM --kv-cache-dtype (auto = the model dtype, bf16 here; fp8 halves the KV cache); defaults to the profile's."},
    {'name': 'dgxspark_enable_expert_parallel', 'type': 'bool', 'default': False,
     'description': 'vLLM --enable-expert-parallel. Refused for FP8 MoE profiles (fatal dimension error, seed 000) unless allowed.'},
    {'name': 'dgxspark_allow_expert_parallel_with_fp8_moe', 'type': 'bool', 'default': False,
     'description': 'Allow dgxspark_enable_expert_parallel with a profile whose MoE weights are FP8.'},
    {'name': 'dgxspark_rails', 'type': 'list', 'elements': 'rail', 'default': DEFAULT_RAILS,
     'description': 'RoCE rails: list of {name, interface, subnet, address_offset}. One subnet per rail (per CX-7 twin).'},
    {'name': 'dgxspark_mtu', 'type': 'int', 'default': 9000, 'min': 1280, 'max': 9216,
     'description': 'MTU of the CX-7 interfaces (and the switch ports).'},
    {'name': 'dgxspark_nccl_transport', 'type': 'str', 'default': 'rdma', 'choices': ['rdma', 'socket'],
     'description': 'NCCL transport: rdma (NET/IB over RoCE v2) or socket (NCCL_IB_DISABLE=1 fallback).'},
    {'name': 'dgxspark_executor_backend', 'type': 'str', 'default': 'ray', 'choices': ['ray', 'mp'],
     'description': "How vLLM's ranks span the nodes: ray (a Ray container on every node, vLLM on the head with "
                    "--distributed-executor-backend ray) or mp (vLLM's own multi-node backend: vLLM on every node, rank 0 "
                    "serving the API, the others --headless, no Ray; the layout of NVIDIA's NGC images, which ship "
                    "without Ray)."},
    {'name': 'dgxspark_mp_master_port', 'type': 'int', 'default': 29501, 'min': 1024, 'max': 65535,
     'description': "With dgxspark_executor_backend mp: the port of rank 0's rendezvous (vLLM --master-port, a torch "
                    "TCPStore on the head's rail-1 address); open only on the rails."},
    {'name': 'dgxspark_node_memory_gib', 'type': 'float', 'default': 121.7, 'min_exclusive': 0.0,
     'description': 'Memory the GPU can address per node, GiB (MemTotal of a DGX Spark reads about 121.7 GiB).'},
    {'name': 'dgxspark_node_memory_bandwidth_gbs', 'type': 'float', 'default': 273.0, 'min_exclusive': 0.0,
     'description': 'Memory bandwidth per node in GB/s (1 GB = 1e9 bytes); 273 on GB10. Used for the decode roofline.'},
    {'name': 'dgxspark_runtime_overhead_gib', 'type': 'float', 'default': DEFAULT_FROM_PROFILE, 'min': 0.0,
     'description': "Per-node memory besides weights and KV cache (CUDA context, activations, NCCL/RoCE buffers), GiB; "
                    "defaults to the profile's runtime_overhead_gib, else 6.0."},
    {'name': 'dgxspark_release_rollback', 'type': 'bool', 'default': True,
     'description': 'When the new release of a deploy fails (its ray or vllm phase), put the last proven release back by '
                    'itself, then fail naming the cause; false leaves the failed release in place to be looked at.'},
    {'name': 'dgxspark_release_keep', 'type': 'int', 'default': 3, 'min': 2,
     'description': 'How many proven releases each node keeps, with their images and model copies, the current one '
                    'included (playbooks/rollback.yml puts back the one before the current); a model copy the '
                    'distribution made that no kept release serves is removed (never the head\'s source).'},
)

HOST_VARIABLES = (
    {'name': 'dgxspark_rail_addresses', 'type': 'dict', 'default': None,
     'description': 'Per host: {rail name: IPv4 address without prefix}, overriding the computed address '
                    '(subnet network + address_offset + rank) on that rail.'},
)

# Cluster-wide names that are not planned values: read by several roles (each role's own variable defaults to it) or by
# the playbooks. Declared here so that a misspelling is caught wherever the inventory lives (inventory_names.py).
SHARED_VARIABLES = (
    {'name': 'dgxspark_model', 'description': "The model to serve: a Hugging Face repository, or a directory on the head."},
    {'name': 'dgxspark_model_dir', 'description': 'The Hugging Face cache directory on every node (default /root/.cache/huggingface).'},
    {'name': 'dgxspark_model_download', 'description': 'Download the model into the head\'s cache when it is missing there (distribute).'},
    {'name': 'dgxspark_hf_token', 'description': 'Hugging Face token for the download (vault it); travels only in a 0600 file.'},
    {'name': 'dgxspark_serving_image', 'description': 'The serving image (vLLM) on the head, distributed to every node.'},
    {'name': 'dgxspark_serving_docker_gpus', 'description': "The serving containers' GPU request: all (a Spark) or empty (no GPU)."},
    {'name': 'dgxspark_serving_rdma_devices', 'description': "The RDMA devices the serving containers get (default /dev/infiniband)."},
    {'name': 'dgxspark_serving_memlock_ulimit', 'description': "The serving containers' memlock ulimit (default -1, unlimited)."},
    {'name': 'dgxspark_serving_extra_volumes', 'description': 'Extra mounts of the serving containers (Docker volume strings).'},
    {'name': 'dgxspark_vllm_site_args', 'description': "vLLM options this site sets over the profile's (a labelled difference)."},
    {'name': 'dgxspark_site_patches', 'description': "Patches of this site, checked and applied at container start like a profile's."},
    {'name': 'dgxspark_site_patches_dir', 'description': 'The directory of the files that dgxspark_site_patches names.'},
    {'name': 'dgxspark_secrets_dir', 'description': 'The controller directory of the generated secrets (default ~/.config/dgxspark/...).'},
    {'name': 'dgxspark_api_allowed_cidrs', 'description': 'Networks allowed to reach the vLLM API port (empty: the nodes and rails only).'},
    {'name': 'dgxspark_api_tls', 'description': 'TLS of the vLLM API: off (default), generated (a cluster CA the collection makes) or files.'},
    {'name': 'dgxspark_api_tls_cert_file', 'description': 'With dgxspark_api_tls files: the PEM certificate (then its chain) on the controller.'},
    {'name': 'dgxspark_api_tls_key_file', 'description': 'With dgxspark_api_tls files: its PEM key (no passphrase) on the controller.'},
    {'name': 'dgxspark_api_tls_ca_file', 'description': 'With dgxspark_api_tls files: the CA clients trust (empty: a public CA).'},
    {'name': 'dgxspark_api_tls_names', 'description': 'Names and addresses a generated certificate also holds (a DNS alias).'},
    {'name': 'dgxspark_monitoring_allowed_cidrs', 'description': "Networks allowed to reach Prometheus and the node exporters."},
    {'name': 'dgxspark_network_apply_sysctls', 'description': "Apply the rails' sysctl drop-in at run time too (default true)."},
    {'name': 'dgxspark_cx7_sysfs_root', 'description': 'Where the CX-7 facts read sysfs (default /sys; the lab: its stand-in tree).'},
    {'name': 'dgxspark_meminfo_path', 'description': 'Where memory is read (default /proc/meminfo; the lab: a stand-in).'},
    {'name': 'dgxspark_expected_link_speed_mbps', 'description': "The rails' expected link speed (default 200000)."},
    {'name': 'dgxspark_expected_gpu_name', 'description': 'The GPU name preflight expects on every node (default NVIDIA GB10).'},
    {'name': 'dgxspark_preflight_max_clock_skew_s', 'description': "The clock skew preflight allows between nodes (default 5 s)."},
    {'name': 'dgxspark_preflight_timeout', 'description': "Seconds preflight's read of a node may take (default 120)."},
    {'name': 'dgxspark_distribute_image', 'description': 'Whether the deploy brings the serving image to every node (default true).'},
    {'name': 'dgxspark_distribute_model', 'description': 'Whether the deploy brings the model to every node (default true).'},
    {'name': 'dgxspark_profiles_dir', 'description': 'A directory of model profiles of your own, beside the collection\'s.'},
    {'name': 'dgxspark_serving_groups', 'description': 'The Ansible groups that each serve one model (a fleet), first host the head.'},
    {'name': 'dgxspark_router_host', 'description': "The node the fleet's router runs on (default: the first serving group's head)."},
    {'name': 'dgxspark_router_port', 'description': "The fleet router's port (default 4000), free of the plan's ports on its node."},
    {'name': 'dgxspark_fleet', 'description': "Set by plan.yml with serving groups: the fleet's groups, models and endpoint."},
)

# Switches of one run, given with -e: they change what a playbook does, never the plan.
RUN_VARIABLES = (
    {'name': 'dgxspark_plan_presets', 'description': "Values a playbook sets where the inventory does not (the seed playbooks' model and shape)."},
    {'name': 'dgxspark_plan_presets_by', 'description': 'The playbook that sets dgxspark_plan_presets, as the plan names it.'},
    {'name': 'dgxspark_plan_show', 'description': 'Print the plan table (default true; status.yml and benchmark.yml do not).'},
    {'name': 'dgxspark_plan_playbook', 'description': "plan.yml plans with this playbook's presets (-e dgxspark_plan_playbook=deploy-397b.yml)."},
    {'name': 'dgxspark_phase_force', 'description': 'Run every phase, even those that converged before (-e dgxspark_phase_force=true).'},
    {'name': 'dgxspark_release_rollback', 'description': 'Put the last proven release back when a new one fails (default true).'},
    {'name': 'dgxspark_init_dir', 'description': 'playbooks/init.yml: the directory the inventory draft is written to.'},
    {'name': 'dgxspark_init_client_cidrs', 'description': 'playbooks/init.yml: the client networks of the API (comma-separated).'},
    {'name': 'dgxspark_init_model_profile', 'description': 'playbooks/init.yml: the model profile to draft (default: the first that plans).'},
    {'name': 'dgxspark_init_force', 'description': 'playbooks/init.yml: replace a draft file that was edited (default false).'},
    {'name': 'dgxspark_serving_group', 'description': 'Act on one serving group of a fleet (stop.yml, status.yml, ...): its name.'},
    {'name': 'dgxspark_status_report_only', 'description': 'status.yml prints the table and does not fail (diagnose.yml sets it).'},
)

# The lab's labelled variables (inventories/lab): what only the virtual Spark lab sets.
LAB_VARIABLES = (
    {'name': 'dgxspark_lab_state_dir', 'description': "LAB: the lab's state directory (lab.json, secrets), read by the lab inventory."},
)

_BY_NAME = dict((v['name'], v) for v in CLUSTER_VARIABLES + HOST_VARIABLES)

_TYPE_WORDS = {
    'str': 'a string', 'int': 'an integer', 'float': 'a number', 'bool': 'a boolean (true/false)',
    'list': 'a list', 'dict': 'a mapping',
}


def cluster_variable_names():
    """Names of the cluster-wide variables, in documentation order."""
    return [v['name'] for v in CLUSTER_VARIABLES]


def host_variable_names():
    """Names of the per-host variables."""
    return [v['name'] for v in HOST_VARIABLES]


def declared_names():
    """Every variable name this schema declares: the planned ones and the shared, run and lab ones."""
    return frozenset(v['name'] for v in CLUSTER_VARIABLES + HOST_VARIABLES + SHARED_VARIABLES + RUN_VARIABLES + LAB_VARIABLES)


def get_variable(name):
    """The definition of one variable (a copy), or None."""
    spec = _BY_NAME.get(name)
    return copy.deepcopy(spec) if spec is not None else None


def type_word(value):
    """The YAML name of a value's type, as a user wrote it (never Ansible's internal classes such as
    _AnsibleTaggedStr, which wrap every inventory value)."""
    for kind, word in ((bool, 'boolean'), (str, 'string'), (int, 'integer'), (float, 'number'), (dict, 'mapping'),
                       (list, 'list'), (tuple, 'list')):
        if isinstance(value, kind):
            return word
    return 'null' if value is None else 'value'


def plain(value):
    """A value as plain Python types, deeply (Ansible's tagged wrappers dropped), for messages and checks."""
    if isinstance(value, bool) or value is None:
        return value
    for kind in (str, int, float):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, dict):
        return dict((plain(k), plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _type_ok(value, type_name):
    # bool is a subclass of int in Python: a YAML `true` is not a number here.
    if type_name == 'str':
        return isinstance(value, str)
    if type_name == 'int':
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == 'float':
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if type_name == 'bool':
        return isinstance(value, bool)
    if type_name == 'list':
        return isinstance(value, (list, tuple))
    if type_name == 'dict':
        return isinstance(value, dict)
    raise ValueError('unknown schema type %r' % type_name)


def _plain(value, type_name):
    """Convert a checked value to a plain Python type (drops Ansible's tagged/unsafe wrappers)."""
    if type_name == 'str':
        return str(value)
    if type_name == 'int':
        return int(value)
    if type_name == 'float':
        return float(value)
    if type_name == 'bool':
        return bool(value)
    return value


def _range_problems(where, spec, value):
    problems = []
    if 'min' in spec and value < spec['min']:
        problems.append('%s is %r; it must be at least %r.' % (where, value, spec['min']))
    if 'min_exclusive' in spec and value <= spec['min_exclusive']:
        problems.append('%s is %r; it must be greater than %r.' % (where, value, spec['min_exclusive']))
    if 'max' in spec and value > spec['max']:
        problems.append('%s is %r; it must be at most %r.' % (where, value, spec['max']))
    if 'choices' in spec and value not in spec['choices']:
        close = difflib.get_close_matches(str(value).lower(), spec['choices'], n=1, cutoff=0.5)
        problems.append('%s is %r%s; it must be one of: %s.' % (
            where, value, ' (did you mean %s?)' % close[0] if close else '', ', '.join(spec['choices'])))
    return problems


def check_value(where, spec, value):
    """Check one value against a field definition. Returns (plain value or None, [problems])."""
    type_name = spec['type']
    if not _type_ok(value, type_name):
        hint = ''
        if isinstance(value, str) and type_name in ('int', 'float', 'bool'):
            hint = (' (a quoted value is a string: write it unquoted in YAML, or pass it as JSON, '
                    'e.g. -e \'{"%s": ...}\')' % spec['name'])
        return None, ['%s must be %s, got the %s %r%s.' % (where, _TYPE_WORDS[type_name], type_word(value), plain(value), hint)]
    value = _plain(value, type_name)
    return value, _range_problems(where, spec, value)


def _validate_rails(where, rails):
    problems = []
    result = []
    for index, rail in enumerate(rails):
        item_where = '%s[%d]' % (where, index)
        if not isinstance(rail, dict):
            problems.append('%s must be a mapping {name, interface, subnet, address_offset}, got %r.' % (item_where, rail))
            continue
        unknown = sorted(set(rail) - set(f['name'] for f in RAIL_FIELDS))
        if unknown:
            problems.append('%s has unknown keys %s; allowed: name, interface, subnet, address_offset.' % (item_where, ', '.join(map(str, unknown))))
        clean = {}
        for field in RAIL_FIELDS:
            field_where = '%s.%s' % (item_where, field['name'])
            if field['name'] not in rail or rail[field['name']] is None:
                if field.get('required'):
                    problems.append('%s is missing: %s' % (field_where, field['description']))
                else:
                    clean[field['name']] = field['default']
                continue
            value, field_problems = check_value(field_where, field, rail[field['name']])
            problems.extend(field_problems)
            clean[field['name']] = value
        result.append(clean)
    return result, problems


def validate_cluster_vars(values):
    """Check the cluster-wide variables in ``values`` (a mapping; unknown keys are ignored).

    Returns ``(resolved, problems)``. ``resolved`` has every cluster variable: the given value
    (as a plain Python type) or the static default. Defaults that depend on the node count or on
    the model profile are left as the markers DEFAULT_NODE_COUNT / DEFAULT_FROM_PROFILE.
    A variable whose value is wrong is set to None in ``resolved``.
    """
    problems = []
    resolved = {}
    for spec in CLUSTER_VARIABLES:
        name = spec['name']
        if name not in values or values[name] is None:
            if spec.get('required'):
                problems.append('%s is not set: %s Set it in group_vars/all.' % (name, spec['description']))
                resolved[name] = None
            else:
                resolved[name] = copy.deepcopy(spec['default'])
            continue
        value, value_problems = check_value(name, spec, values[name])
        if value is not None and spec.get('elements') == 'rail':
            value, rail_problems = _validate_rails(name, value)
            value_problems.extend(rail_problems)
            if not value and not rail_problems:
                value_problems.append('%s is empty; define at least one rail.' % name)
        problems.extend(value_problems)
        resolved[name] = None if value_problems else value
    return resolved, problems


def validate_host_vars(host, values):
    """Check the per-host variables of ``host``. Returns ``(resolved, problems)``."""
    problems = []
    resolved = {}
    for spec in HOST_VARIABLES:
        name = spec['name']
        where = '%s (host %s)' % (name, host)
        if name not in values or values[name] is None:
            resolved[name] = copy.deepcopy(spec['default'])
            continue
        value, value_problems = check_value(where, spec, values[name])
        if value is not None and name == 'dgxspark_rail_addresses':
            clean = {}
            for rail_name, address in value.items():
                if not isinstance(address, str):
                    value_problems.append('%s[%s] must be an IPv4 address string such as 192.168.100.10, got %r.' % (where, rail_name, address))
                    continue
                clean[str(rail_name)] = str(address).strip()
            value = clean
        problems.extend(value_problems)
        resolved[name] = None if value_problems else value
    return resolved, problems


def documentation_rows():
    """Rows (name, type, default, description) for docs and argument specs."""
    rows = []
    for spec in CLUSTER_VARIABLES + HOST_VARIABLES:
        default = spec.get('default')
        if spec.get('required'):
            default = 'required'
        elif default == DEFAULT_NODE_COUNT:
            default = 'number of nodes'
        elif default == DEFAULT_FROM_PROFILE:
            default = "the profile's"
        kind = spec['type']
        if 'choices' in spec:
            kind = '%s (%s)' % (kind, ' / '.join(spec['choices']))
        rows.append((spec['name'], kind, default, spec['description']))
    return rows
