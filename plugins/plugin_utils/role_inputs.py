# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' variables an inventory sets, checked by the plan on the controller before any host is contacted.

- Every role variable a node has is checked against its role's ``meta/argument_specs.yml`` (the rules the role itself
  states: one source of truth).
- Secrets never travel in an extra map: an API key, Ray token or Hugging Face token given as a vLLM option or a
  container variable would sit in vLLM's argv or in what ``docker inspect`` shows. ``SECRET_OPTIONS`` and
  ``SECRET_ENVIRONMENT`` list them, each with the supported way (a variable that becomes a 0600 file).
- What the specs cannot state: ranges (``BOUNDS``) and the forms of values written as they are into a file or a command
  line (``FORMATS``, ``ITEMS``: a memlock limit, a drop-in path, earlyoom's names...). A role restates none of these.
- The cross-checks of ports and networks (no two services on one port of a node, nothing inside Ray's worker port range,
  allowed networks that parse) are in role_networks.py.
- Risky but legal choices are said out loud (``input_warnings``).

Every function returns every problem at once, each naming the variable, the hosts when not every node, and the fix.
"""

from __future__ import annotations

import functools
import os
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.inventory_schema import plain, type_word

try:
    import yaml
except ImportError:  # only role_specs reads YAML; it runs on the controller, which has PyYAML with Ansible
    yaml = None

_HF_TOKEN_WAY = ('vllm_container_hf_token for vLLM, dgxspark_hf_token for the download (vaulted; each becomes a 0600 file '
                 'read at start)')
# Above it on unified memory: refused unless allowed (inventory_schema), warned when allowed.
GPU_MEMORY_UTILIZATION_CEILING = 0.85
# vLLM options (as an extra-args key: with or without --, dashes or underscores) that carry a secret.
SECRET_OPTIONS = {
    'api_key': 'vllm_container_api_key (vaulted; the role writes it to a 0600 file that the API guard reads at start)',
    'hf_token': _HF_TOKEN_WAY,
}
# Environment variables vLLM, Ray or the Hugging Face Hub read as a secret.
SECRET_ENVIRONMENT = {
    'VLLM_API_KEY': 'vllm_container_api_key (vaulted; the role writes it to a 0600 file that the API guard reads at start)',
    'HF_TOKEN': _HF_TOKEN_WAY,
    'HUGGING_FACE_HUB_TOKEN': _HF_TOKEN_WAY,
    'HF_HUB_TOKEN': _HF_TOKEN_WAY,
    'RAY_AUTH_TOKEN': 'ray_cluster_auth_token (vaulted; a 0600 file mounted read-only, RAY_AUTH_TOKEN_PATH)',
}
# A Hugging Face commit id: the only revision that cannot change after it was reviewed.
REVIEWED_COMMIT = re.compile(r'^[0-9a-f]{40}$')
# The maps that end in a serving or helper container's argv or environment.
OPTION_MAPS = ('vllm_container_extra_args', 'vllm_container_site_args', 'dgxspark_vllm_site_args')
ENVIRONMENT_MAPS = ('vllm_container_extra_env', 'ray_cluster_extra_env', 'distribute_download_env', 'fabric_check_nccl_env')

# vLLM options the executor backend owns (dgxspark_executor_backend gives every rank its value): set in an options map
# they would override it on one rank and split the group.
BACKEND_OPTIONS = ('distributed_executor_backend', 'nnodes', 'node_rank', 'master_addr', 'master_port', 'headless')
# vLLM options the plan decides (its table shows them), by the variable that sets each: set in an options map they would
# replace the planned value in the container's argv while the plan table still showed the planned one.
PLANNED_OPTIONS = {
    'tensor_parallel_size': 'dgxspark_tensor_parallel_size',
    'pipeline_parallel_size': 'dgxspark_pipeline_parallel_size',
    'gpu_memory_utilization': 'dgxspark_gpu_memory_utilization',
    'max_model_len': 'dgxspark_max_model_len',
    'kv_cache_dtype': 'dgxspark_kv_cache_dtype',
    'enable_expert_parallel': 'dgxspark_enable_expert_parallel',
    'revision': 'dgxspark_model_revision',
    'model': 'vllm_container_model',
    'served_model_name': 'vllm_container_served_model_name',
    'host': 'vllm_container_host',
    'port': 'vllm_container_port',
    # TLS follows dgxspark_api_tls, so that the probes, the supervisor and Prometheus speak what vLLM serves
    'ssl_certfile': 'dgxspark_api_tls (files or generated)',
    'ssl_keyfile': 'dgxspark_api_tls (files or generated)',
    'ssl_ca_certs': 'dgxspark_api_tls (files or generated)',
}
# Environment variables the plan gives every serving container: set in an extra environment they would override it on
# that node only. The maps of the NCCL test and of the download are the user's own (no serving process reads them).
SERVING_ENVIRONMENT_MAPS = ('vllm_container_extra_env', 'ray_cluster_extra_env')
_RAILS = 'the plan (from the rails, dgxspark_rails), the same for every rank'
PLANNED_ENVIRONMENT = {
    'VLLM_HOST_IP': ("the plan (each node's rail-1 address, which Ray registers the node with: vLLM pins its placement group's "
                     "first bundle to this address, so another one waits for ever, eugr/spark-vllm-docker #227)"),
    'NCCL_SOCKET_IFNAME': _RAILS,
    'GLOO_SOCKET_IFNAME': _RAILS,
    'TP_SOCKET_IFNAME': _RAILS,
    'DGXSPARK_RAY_ADDRESS': "the plan (the head's rail-1 address and ray_cluster_ports.gcs)",
    'RAY_AUTH_MODE': ('the collection: token authentication stays on, as without it anyone who reaches a Ray port runs code '
                      'on every node'),
    'RAY_AUTH_TOKEN_PATH': 'the collection (ray_cluster_auth_token becomes this 0600 file)',
}
# vLLM options only its Ray executor reads (any other ray_* option too): with mp they would be ignored.
RAY_ONLY_OPTION_PREFIX = 'ray_'

# Bounds the argument specs cannot state (they type a value, not its range): (lowest, highest or None, why).
BOUNDS = {
    'os_hardening_swappiness': (0, 200, 'vm.swappiness takes 0 to 200; 1, the default, swaps only as a last resort'),
    'os_hardening_swap_min_gib': (0, None, 'a size'),
    'os_hardening_earlyoom_mem_percent': (1, 50, 'the percentage of memory available at which earlyoom acts; 4, the default, '
                                          'is about 4.9 GiB of a Spark'),
    'ray_cluster_num_gpus': (1, None, 'a DGX Spark has one GPU'),
    'node_firewall_watch_interval_s': (5, 50, 'seconds; a table gone is back, or the node stops serving, within 60 s'),
    'ray_cluster_object_store_memory': (78643200, None, "Ray's smallest object store is 75 MiB"),
    'ray_cluster_ready_timeout': (1, None, 'seconds'),
    'vllm_container_ready_timeout': (1, None, 'seconds'),
    'vllm_container_stall_timeout': (1, None, 'seconds'),
    'vllm_container_progress_interval': (1, None, 'seconds'),
    'distribute_progress_interval': (1, None, 'seconds'),
    'distribute_stall_timeout': (1, None, 'seconds'),
    'distribute_ssh_key_lifetime_s': (600, None, 'seconds'),
    'distribute_timeout': (1, None, 'seconds'),
    'distribute_reserve_bytes': (0, None, 'bytes'),
    'fabric_check_ping_count': (1, None, 'a count'),
    'fabric_check_ib_duration': (1, None, 'seconds'),
    'fabric_check_ib_qps': (1, None, 'a count of queue pairs'),
    'fabric_check_nccl_memory_fraction': (0.01, 0.9, 'a fraction of the node memory, leaving room for the OS'),
    'supervisor_interval_s': (1, None, 'seconds between two probes'),
    'supervisor_deadline_s': (1, None, 'seconds a probe may take'),
    'supervisor_failures_to_restart': (1, None, 'a count of failed probes in a row'),
    'supervisor_grace_s': (1, None, 'seconds'),
    'supervisor_stall_s': (1, None, 'seconds'),
    'supervisor_frozen_s': (1, None, 'seconds'),
    'supervisor_memory_wait_s': (1, None, 'seconds'),
    'supervisor_stop_timeout_s': (1, None, 'seconds'),
    'supervisor_budget_restarts': (0, None, 'a count of restarts; 0 never restarts'),
    'supervisor_budget_window_s': (1, None, 'seconds'),
    'supervisor_crash_budget_restarts': (0, None, 'a count of restarts; 0 never restarts'),
    'supervisor_crash_backoff_s': (1, None, 'seconds'),
    'supervisor_crash_backoff_max_s': (1, None, 'seconds'),
    'monitoring_scrape_interval_s': (1, None, 'seconds'),
    'monitoring_evaluation_interval_s': (1, None, 'seconds'),
    'monitoring_node_metrics_interval_s': (1, None, 'seconds'),
}
# Pairs of values where the first may not exceed the second: (smaller, larger, why).
ORDERS = (
    ('supervisor_deadline_s', 'supervisor_interval_s', 'a probe ends before the next one starts'),
    ('supervisor_crash_backoff_s', 'supervisor_crash_backoff_max_s', 'the first wait after a crash doubles up to the most'),
    ('vllm_container_stall_timeout', 'vllm_container_ready_timeout', 'a load that stalls is stopped before the deadline of '
     'the whole load'),
)
# [MIN, MAX] MHz for `nvidia-smi -lgc MIN,MAX` at boot; [] leaves the driver's own clocks.
GPU_CLOCKS = 'os_hardening_gpu_clocks_mhz'
# Names written into docker commands, systemd units and files: what Docker and systemd take, nothing to quote.
NAMES = {
    'ray_cluster_container_name': (re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$'), 'a Docker container name'),
    'vllm_container_name': (re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$'), 'a Docker container name'),
    'node_firewall_service': (re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.:-]*$'), 'a systemd unit name'),
}
# Values the roles write into a file or a command line as they are, in a form their types cannot state:
# (the whole value must match, what it must be and the fix).
FORMATS = {
    'os_hardening_memlock': (re.compile(r'unlimited|[1-9][0-9]*'),
                             'neither "unlimited" nor a positive integer (KiB, the limits.conf unit): use "unlimited" (the '
                             'default) or e.g. 8192'),
    'os_hardening_default_target': (re.compile(r'[A-Za-z0-9:_.@-]+\.target'),
                                    'not a systemd target unit name (NAME.target): use multi-user.target (the default) for a '
                                    'headless node'),
    'os_hardening_sysctl_file': (re.compile(r'/etc/sysctl\.d/[^/]+\.conf'),
                                 'not a .conf file directly under /etc/sysctl.d/ (systemd-sysctl reads no other name): use '
                                 'e.g. /etc/sysctl.d/90-dgxspark-os.conf (the default)'),
    'cx7_netplan_file_name': (re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.-]*\.yaml'),
                              'not a plain file name ending in .yaml (netplan reads only *.yaml from its directory): use '
                              'e.g. 40-cx7.yaml (the default)'),
    'ray_cluster_image': (re.compile(r'[^\s]+'), 'not an image reference (empty or with spaces): set dgxspark_serving_image, '
                          'e.g. vllm/vllm-openai:v0.33.0'),
    'vllm_container_image': (re.compile(r'[^\s]+'), 'not an image reference (empty or with spaces): set '
                             'dgxspark_serving_image, e.g. vllm/vllm-openai:v0.33.0'),
    # Written into service files (Prometheus' ARGS, the supervisor's unit): the service's own format, or it does not start.
    'monitoring_retention_time': (re.compile(r'([0-9]+(ms|s|m|h|d|w|y))+'),
                                  "not a Prometheus duration: use e.g. 15d (the default), 12h or 2w"),
    'monitoring_retention_size': (re.compile(r'[0-9]+(B|KB|MB|GB|TB|PB|EB)'),
                                  "not a Prometheus size (a whole number and B, KB, MB, GB, TB, PB or EB): use e.g. 10GB "
                                  "(the default)"),
    'supervisor_memory_max': (re.compile(r'[0-9]+[KMGT]?|[0-9]+(\.[0-9]+)?%|infinity'),
                              "not a systemd MemoryMax= (bytes with K, M, G or T, a percentage, or infinity): use e.g. 256M "
                              "(the default)"),
    'distribute_model_path': (re.compile(r'(/.*)?'), 'not an absolute path: give the model directory on the head (the same path '
                              'on every node), or leave it empty for dgxspark_model'),
    'os_hardening_limits_file': (re.compile(r'/etc/security/limits\.d/[^/]+\.conf'),
                                 'not a .conf file directly under /etc/security/limits.d/ (pam_limits reads no other name '
                                 "there; /etc/security/limits.conf itself is never edited): use e.g. "
                                 '/etc/security/limits.d/90-dgxspark-memlock.conf (the default)'),
}
# earlyoom anchors each name and joins them into one argument of EARLYOOM_ARGS, which systemd splits at spaces.
_EARLYOOM_NAME = (re.compile(r'[^\s"\'^$]+'), True,
                  'every name must be a non-empty regex without spaces, quotes or anchors (the role anchors them; systemd '
                  'splits EARLYOOM_ARGS at spaces), e.g. "VLLM::.*"')
# Lists whose every item the roles write as it is: (the whole item must match, whether the list may be empty, the fix).
ITEMS = {
    'os_hardening_memlock_domains': (re.compile(r'[*]|@?[A-Za-z0-9_.:-]+'), False,
                                     'give a non-empty list of limits.conf domains ("*", a user, @group, or a uid/gid '
                                     'range), without spaces, e.g. [root] (the default)'),
    'os_hardening_earlyoom_prefer': _EARLYOOM_NAME,
    'os_hardening_earlyoom_avoid': _EARLYOOM_NAME,
}
# Inputs a role reads only while a switch is on (each switch defaults to on): what it would never use is not refused.
SWITCHED_BY = dict((name, 'os_hardening_earlyoom') for name in (
    'os_hardening_earlyoom_mem_percent', 'os_hardening_earlyoom_prefer', 'os_hardening_earlyoom_avoid'))


def _where(hosts, all_hosts):
    return 'every node' if set(hosts) == set(all_hosts) else ', '.join(sorted(hosts))


def _merge(found, all_hosts):
    """{problem text: hosts} -> sorted lines, each saying where it was set."""
    return ['%s (set on %s)' % (text, _where(hosts, all_hosts)) for text, hosts in sorted(found.items())]


@functools.lru_cache(maxsize=None)
def role_entry_points(root):
    """{role: {entry point: {variable: its option spec}}} from every role's meta/argument_specs.yml."""
    found = {}
    roles_dir = os.path.join(root, 'roles')
    for role in sorted(os.listdir(roles_dir)) if os.path.isdir(roles_dir) else []:
        path = os.path.join(roles_dir, role, 'meta', 'argument_specs.yml')
        if not os.path.isfile(path):
            continue
        with open(path, 'r', encoding='utf-8') as handle:
            data = yaml.safe_load(handle) or {}
        found[role] = dict((entry, dict((spec or {}).get('options') or {}))
                           for entry, spec in (data.get('argument_specs') or {}).items())
    return found


def role_specs(root):
    """{role: {variable: its option spec}} of every role's entry point main."""
    return dict((role, entries.get('main', {})) for role, entries in role_entry_points(root).items())


def _without_descriptions(spec):
    spec = dict((k, v) for k, v in spec.items() if k not in ('description', 'version_added'))
    if isinstance(spec.get('options'), dict):
        spec['options'] = dict((name, _without_descriptions(sub)) for name, sub in spec['options'].items())
    return spec


def _as_given(spec):
    """An option's spec for a value the inventory set: not required, no default (both concern absent values)."""
    return dict((k, v) for k, v in _without_descriptions(spec).items() if k not in ('required', 'default'))


def spec_problems(values_by_host, specs):
    """Each role variable a node has, checked against its role's argument spec.

    values_by_host: {host: {variable: value}}; names no role declares are left to the misspelling check."""
    options = dict((name, (role, spec)) for role, role_options in specs.items() for name, spec in role_options.items())
    found = {}
    for host, values in values_by_host.items():
        for name in sorted(values):
            if name not in options:
                continue
            role, spec = options[name]
            value = plain(values[name])
            result = ArgumentSpecValidator({name: _as_given(spec)}).validate({name: value})
            for message in result.error_messages:
                text = '%s: %s; see the role %s (roles/%s/meta/argument_specs.yml) for what it takes' % (
                    name, _readable(name, message, spec, value), role, role)
                found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


# ArgumentSpecValidator's type error ("argument 'x' is of type <class 'list'> and we were unable to convert to dict:
# <class '...'> cannot be converted to a dict"): said in the inventory's words instead.
_CONVERT_ERROR = re.compile(r"^argument '[^']+' is of type .* and we were unable to convert to (\w+)")
# The same for one item of a list ("Elements value for option 'x' is of type str and we were unable to convert to int").
_ELEMENT_ERROR = re.compile(r"^Elements value for option '[^']+' is of type .* and we were unable to convert to (\w+)")
_SPEC_TYPE_WORDS = {'dict': 'a mapping', 'list': 'a list', 'int': 'an integer', 'float': 'a number', 'bool': 'a boolean',
                    'str': 'a string', 'path': 'a path', 'raw': 'a value'}


def _readable(name, message, spec, value):
    """A spec validator message without Python's or Ansible's class names."""
    match = _CONVERT_ERROR.match(message) or _ELEMENT_ERROR.match(message)
    if not match:
        return message
    wanted = match.group(1)
    # A map of options or environment, or a key or token, may carry a secret: its value is never repeated.
    sensitive = name in OPTION_MAPS + ENVIRONMENT_MAPS or re.search(r'(key|token|password|secret)', name)
    shown = '' if sensitive else ' %r' % (value,)
    if spec.get('type') == 'list' and spec.get('elements') and wanted != 'list':
        return 'every item must be %s, got the %s%s' % (_SPEC_TYPE_WORDS.get(wanted, wanted), type_word(value), shown)
    return 'must be %s, got the %s%s' % (_SPEC_TYPE_WORDS.get(wanted, wanted), type_word(value), shown)


def _number(value):
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None  # the spec check names a value of the wrong type


def order_problems(values_by_host, defaults):
    """Pairs of values in the wrong order (ORDERS), each value as the node sets it, else its role's default (defaults:
    {variable: default}, spec_defaults)."""
    found = {}
    for host, values in values_by_host.items():
        for smaller, larger, why in ORDERS:
            if smaller not in values and larger not in values:
                continue
            low, high = (_number(values.get(name, defaults.get(name))) for name in (smaller, larger))
            if low is not None and high is not None and low > high:
                text = '%s is %s, above %s %s: give it at most %s (%s)' % (
                    smaller, values.get(smaller, defaults.get(smaller)), larger, values.get(larger, defaults.get(larger)),
                    larger, why)
                found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def spec_defaults(specs):
    """{variable: the default its role's argument spec states} (specs: role_specs)."""
    return dict((name, spec.get('default')) for role in specs.values() for name, spec in role.items() if 'default' in spec)


def value_problems(values_by_host):
    """Numbers outside what the kernel, Ray or the role takes (BOUNDS), names Docker or systemd would refuse or that
    collide (NAMES), and the firewall's ephemeral range."""
    found = {}
    for host, values in values_by_host.items():
        for name, (low, high, why) in sorted(BOUNDS.items()):
            number = _number(values.get(name)) if in_use(name, values) else None
            if number is None or (number >= low and (high is None or number <= high)):
                continue
            text = '%s is %s: use %s (%s)' % (name, values[name], ('%s to %s' % (low, high)) if high is not None
                                              else 'at least %s' % low, why)
            found.setdefault(text, set()).add(host)
        for name, (pattern, what) in sorted(NAMES.items()):
            if name in values and not pattern.match(str(values[name])):
                text = '%s is %r, not %s: letters, digits, _ . - (starting with a letter or digit)' % (name, values[name], what)
                found.setdefault(text, set()).add(host)
        containers = [values.get(name, default) for name, default in (('ray_cluster_container_name', 'dgxspark-ray'),
                                                                      ('vllm_container_name', 'dgxspark-vllm'))]
        if containers[0] == containers[1]:
            text = ('ray_cluster_container_name and vllm_container_name are both %r: the head runs both containers, give '
                    'each its own name' % containers[0])
            found.setdefault(text, set()).add(host)
        clocks = values.get(GPU_CLOCKS)
        if clocks and not (isinstance(clocks, list) and len(clocks) == 2 and all(_number(c) is not None for c in clocks)
                           and 0 <= _number(clocks[0]) <= _number(clocks[1]) and _number(clocks[1]) > 0):
            text = ("%s is %r: give [MIN, MAX] in MHz with MIN <= MAX, e.g. [0, 2200] (nvidia-smi -lgc MIN,MAX at boot), "
                    "or [] for the driver's own clocks" % (GPU_CLOCKS, clocks))
            found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def in_use(name, values):
    """Whether the role reads NAME with these values: not when the switch it depends on (SWITCHED_BY) is off."""
    switch = SWITCHED_BY.get(name)
    return switch is None or boolean(plain(values.get(switch, True)), strict=False)


def format_problem(name, value):
    """Why VALUE of NAME is not in its FORMATS or ITEMS form, or None (ITEMS: a value that is no list is the spec check's)."""
    value = plain(value)
    if name in FORMATS:
        pattern, what = FORMATS[name]
        return None if pattern.fullmatch(str(value)) else '%s is %r: %s' % (name, value, what)
    pattern, may_be_empty, fix = ITEMS[name]
    if not isinstance(value, list) or (all(pattern.fullmatch(str(item)) for item in value) and (value or may_be_empty)):
        return None
    return '%s is %r: %s' % (name, value, fix)


def format_problems(values_by_host):
    """Values a role would write into a file or a command line that do not have the form it needs (FORMATS, ITEMS)."""
    found = {}
    for host, values in values_by_host.items():
        for name in sorted(set(values) & (set(FORMATS) | set(ITEMS))):
            text = format_problem(name, values[name]) if in_use(name, values) else None
            if text:
                found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def download_problems(values_by_host):
    """A download (distribute_model_download, dgxspark_model_download) writes the Hugging Face cache layout: the model may
    be neither a directory of its own (distribute_model_path) nor a path (dgxspark_model)."""
    found = {}
    for host, values in values_by_host.items():
        def given(name, fallback, default):
            return boolean(plain(values.get(name, values.get(fallback, default))), strict=False)
        if not (given('distribute_model', 'dgxspark_distribute_model', True)
                and given('distribute_model_download', 'dgxspark_model_download', False)):
            continue
        path, model = plain(values.get('distribute_model_path')) or '', str(plain(values.get('dgxspark_model')) or '')
        if path or model.startswith('/'):
            text = ('the model download needs the Hugging Face cache layout, but %s is %r: leave distribute_model_path empty '
                    'and give dgxspark_model as a repository, or turn dgxspark_model_download off and put the model there'
                    % (('distribute_model_path', path) if path else ('dgxspark_model', model)))
            found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def _option_key(key):
    return str(key).lstrip('-').replace('-', '_').lower()


def secret_problems(values_by_host):
    """A secret given through an extra-args or extra-env map, refused with the supported way."""
    found = {}
    for host, values in values_by_host.items():
        for variable in OPTION_MAPS + ENVIRONMENT_MAPS:
            # A map given as a string is refused by its type check; a secret in it is refused too, never hidden by it.
            given = values.get(variable)
            if isinstance(given, str) and re.search(r'api[-_]key|hf[-_]token|_TOKEN\b|VLLM_API_KEY', given, re.I):
                text = ('%s is a string that names a secret: give secrets only as the vaulted variables (%s, %s), '
                        'never in an options or environment map' % (variable, 'vllm_container_api_key', 'vllm_container_hf_token'))
                found.setdefault(text, set()).add(host)
        for variable in OPTION_MAPS:
            for key in (values.get(variable) or {}) if isinstance(values.get(variable), dict) else {}:
                if _option_key(key) in SECRET_OPTIONS:
                    text = ('%s sets %s, a secret: it would sit in vLLM\'s argv (ps, docker inspect); remove it and set %s'
                            % (variable, key, SECRET_OPTIONS[_option_key(key)]))
                    found.setdefault(text, set()).add(host)
        for variable in ENVIRONMENT_MAPS:
            for key in (values.get(variable) or {}) if isinstance(values.get(variable), dict) else {}:
                if str(key) in SECRET_ENVIRONMENT:
                    text = ('%s sets %s, a secret: it would sit in the container\'s environment (docker inspect); remove it '
                            'and set %s' % (variable, key, SECRET_ENVIRONMENT[str(key)]))
                    found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


# A key shorter than this is guessed, and too short for the diagnostics bundle to look for by value.
MIN_API_KEY_LENGTH = 16
# Keys that documentation shows (vLLM's own docs: token-abc123): anyone who read the same page knows them.
EXAMPLE_API_KEYS = ('token-abc123', 'empty', 'none', 'changeme', 'change-me', 'secret', 'password', 'sk-1234', 'test',
                    'your-api-key', 'your_api_key', 'api-key', 'sk-xxx')


def api_key_problems(values_by_host, head):
    """The key the inventory gives (vllm_container_api_key; empty: one is generated): long enough, not a documentation
    example, and visible ASCII with no space (it travels in an HTTP header, which clients encode as ASCII). The key
    itself is never part of a message."""
    key = (values_by_host.get(head) or {}).get('vllm_container_api_key')
    if not isinstance(key, str) or not key:
        return []
    where = 'vllm_container_api_key (on %s)' % head
    if not re.match(r'^[\x21-\x7e]+$', key):
        return ['%s has a space, a control or a non-ASCII character: an HTTP header carries it, and clients send '
                'headers as ASCII; use visible ASCII characters only (leave it empty and the deploy generates one)' % where]
    if key.lower() in EXAMPLE_API_KEYS:
        return ['%s is an example key from documentation, known to anyone who read it: use a random one of at least 32 '
                'characters (leave it empty and the deploy generates one)' % where]
    if len(key) < MIN_API_KEY_LENGTH:
        return ['%s has %d characters, too few to resist guessing: use a random one of at least 32 characters (leave '
                'it empty and the deploy generates one)' % (where, len(key))]
    return []


def planned_option_problems(values_by_host):
    """An options map that sets what the plan decides (TP, PP, utilization, context, KV dtype, model, port...): refused
    with the variable that sets it, so that what runs is what the plan table shows."""
    found = {}
    for host, values in values_by_host.items():
        for variable in OPTION_MAPS:
            options = values.get(variable) if isinstance(values.get(variable), dict) else {}
            for key in options:
                option = _option_key(key).split('.', 1)[0]
                if option in PLANNED_OPTIONS:
                    text = ('%s sets %s, which the plan decides: it would run while the plan table shows the planned value; '
                            'remove it and set %s instead' % (variable, key, PLANNED_OPTIONS[option]))
                    found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def planned_environment_problems(values_by_host):
    """An extra serving environment that sets what the plan or the collection gives every serving container
    (PLANNED_ENVIRONMENT): refused, naming who sets it."""
    found = {}
    for host, values in values_by_host.items():
        for variable in SERVING_ENVIRONMENT_MAPS:
            environment = values.get(variable) if isinstance(values.get(variable), dict) else {}
            for key in sorted(k for k in environment if str(k) in PLANNED_ENVIRONMENT):
                text = '%s sets %s, which is set by %s; remove it' % (variable, key, PLANNED_ENVIRONMENT[key])
                found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def remote_code_problems(values_by_host, revision, hf_repo):
    """trust_remote_code set in an options map runs the repository's Python, as a profile that sets it does: served only
    from a reviewed commit (the planned revision), never from a branch or tag that changes under the cluster."""
    if isinstance(revision, str) and REVIEWED_COMMIT.match(revision):
        return []
    found = {}
    for host, values in values_by_host.items():
        for variable in OPTION_MAPS:
            options = values.get(variable) if isinstance(values.get(variable), dict) else {}
            for key, value in options.items():
                if _option_key(key) == 'trust_remote_code' and value not in (None, False) \
                        and str(value).lower() not in ('false', 'no', '0'):
                    text = ('%s sets %s, so vLLM runs the Python files of %s as root in every serving container, but the '
                            'model revision is %r: a branch or tag runs whatever is pushed there next. Review the code '
                            'at one commit and set dgxspark_model_revision to it (40 hex digits, from '
                            'https://huggingface.co/%s/commits/main)' % (variable, key, hf_repo, revision, hf_repo))
                    found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def backend_problems(values_by_host, backend):
    """The options an executor backend owns, set in an options map (any backend); with mp, the options only Ray takes.
    (The mp rendezvous' port is checked with the node's other ports: role_networks.rendezvous_port_problems.)"""
    found = {}
    mp = backend == 'mp'
    for host, values in values_by_host.items():
        for variable in OPTION_MAPS:
            options = values.get(variable) if isinstance(values.get(variable), dict) else {}
            for key in options:
                option = _option_key(key)
                if option in BACKEND_OPTIONS:
                    text = ('%s sets %s, which dgxspark_executor_backend (%s) sets for every rank: remove it (the backend '
                            'is chosen with dgxspark_executor_backend, its port with dgxspark_mp_master_port)'
                            % (variable, key, backend))
                    found.setdefault(text, set()).add(host)
                elif mp and option.startswith(RAY_ONLY_OPTION_PREFIX):
                    text = ('%s sets %s, an option of vLLM\'s Ray executor, but dgxspark_executor_backend is mp: no Ray '
                            'runs; remove it, or use the ray backend' % (variable, key))
                    found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def input_warnings(plan_variables, api_warnings):
    """Legal but risky choices, one line each, for the plan table."""
    warnings = list(api_warnings)
    utilization = plan_variables.get('dgxspark_gpu_memory_utilization')
    if plan_variables.get('dgxspark_allow_gpu_memory_utilization_above_ceiling') and utilization is not None \
            and utilization > GPU_MEMORY_UTILIZATION_CEILING:
        warnings.append('dgxspark_gpu_memory_utilization is %.2f, above the unified-memory ceiling %.2f (allowed by '
                        'dgxspark_allow_gpu_memory_utilization_above_ceiling): the OS and Docker share that memory, '
                        'an OOM at profiling is likely' % (utilization, GPU_MEMORY_UTILIZATION_CEILING))
    if plan_variables.get('dgxspark_nccl_transport') == 'socket':
        warnings.append('dgxspark_nccl_transport is socket: NCCL runs over TCP, a fraction of RoCE\'s bandwidth '
                        '(a fallback, not a setting to keep)')
    return warnings


def node_os_settings(head_values, specs):
    """What the os phase sets on every node that preflight checks before it ran (os_hardening's settings, as the inventory
    (the head's values) or its argument spec sets them): logind keeping a user's IPC objects, the GPU clock lock."""
    options = specs.get('os_hardening') or {}

    def value(name):
        return plain(head_values[name]) if name in head_values else (options.get(name) or {}).get('default')

    return {'logind_keep_ipc': boolean(value('os_hardening_logind_keep_ipc'), strict=False),
            'gpu_clocks_mhz': list(value('os_hardening_gpu_clocks_mhz') or [])}
