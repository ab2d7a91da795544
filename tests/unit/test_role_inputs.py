# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""role_inputs: the roles' variables checked by the plan, with the roles' own argument specs (read from this checkout)."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import role_inputs as ri
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import role_networks as rn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = ri.role_specs(ROOT)
RAY = dict(SPECS['ray_cluster']['ray_cluster_ports']['default'])
SINGLE = {'vllm_container_port': 8000, 'fabric_check_nccl_port': 29533, 'fabric_check_ib_base_port': 20515}
NODES = ('spark-alpha', 'spark-beta')


def everywhere(**values):
    return dict((node, dict(values)) for node in NODES)


def test_specs_are_read_from_every_role_with_its_defaults():
    with open(os.path.join(ROOT, 'roles', 'vllm_container', 'defaults', 'main.yml')) as handle:
        defaults = yaml.safe_load(handle)
    assert set(SPECS) == set(os.listdir(os.path.join(ROOT, 'roles')))
    assert SPECS['vllm_container']['vllm_container_port']['default'] == defaults['vllm_container_port']
    with open(os.path.join(ROOT, 'roles', 'ray_cluster', 'defaults', 'main.yml')) as handle:
        assert RAY == yaml.safe_load(handle)['ray_cluster_ports']
    options = dict((name, spec) for role in SPECS.values() for name, spec in role.items())
    assert SINGLE == dict((name, options[name]['default']) for name, _what in rn.SINGLE_PORTS)


@pytest.mark.parametrize('values, expected', [
    ({'vllm_container_port': 8001, 'ray_cluster_restart_policy': 'always'}, []),
    ({'vllm_container_port': '8001'}, []),  # a string of digits converts, as the role's own check takes it
    ({'vllm_container_port': 'eight'}, ["vllm_container_port: must be an integer, got the string 'eight'"]),
    ({'ray_cluster_restart_policy': 'never'}, ['value of ray_cluster_restart_policy must be one of: no, always, unless-stopped, '
                                               'on-failure, got: never; see the role ray_cluster']),
    # a map of options may carry a secret: its value is not repeated
    ({'vllm_container_extra_args': ['--max-num-seqs', '8']}, ['vllm_container_extra_args: must be a mapping, got the list;']),
    ({'distribute_ssh_port': 'x22', 'os_hardening_swappiness': 'low'},
     ["distribute_ssh_port: must be an integer, got the string 'x22'", 'roles/distribute/meta/argument_specs.yml',
      "os_hardening_swappiness: must be an integer, got the string 'low'"]),
    ({'some_other_thing': 'x'}, []),  # not a role's: the misspelling check names it
])
def test_role_variables_are_checked_against_their_role_s_spec(values, expected):
    problems = ri.spec_problems(everywhere(**values), SPECS)
    text = '\n'.join(problems)
    for part in expected:
        assert part in text, (part, text)
    if not expected:
        assert problems == []
    assert all(p.endswith('(set on every node)') for p in problems)


def test_a_problem_of_one_host_names_that_host():
    values = {'spark-alpha': {'vllm_container_port': 8000}, 'spark-beta': {'vllm_container_port': 'x'}}
    [problem] = ri.spec_problems(values, SPECS)
    assert problem.startswith('vllm_container_port: ') and problem.endswith('(set on spark-beta)')


@pytest.mark.parametrize('variable, key, way', [
    ('vllm_container_extra_args', 'api_key', 'vllm_container_api_key'),
    ('vllm_container_extra_args', '--api-key', 'vllm_container_api_key'),
    ('vllm_container_site_args', 'hf-token', 'vllm_container_hf_token'),
    ('dgxspark_vllm_site_args', '--hf_token', 'vllm_container_hf_token'),
    ('vllm_container_extra_env', 'VLLM_API_KEY', 'vllm_container_api_key'),
    ('vllm_container_extra_env', 'HF_TOKEN', 'dgxspark_hf_token'),
    ('ray_cluster_extra_env', 'RAY_AUTH_TOKEN', 'ray_cluster_auth_token'),
    ('distribute_download_env', 'HUGGING_FACE_HUB_TOKEN', 'dgxspark_hf_token'),
    ('fabric_check_nccl_env', 'HF_HUB_TOKEN', 'dgxspark_hf_token'),
])
def test_a_secret_in_an_extra_map_is_refused_with_the_supported_way(variable, key, way):
    [problem] = ri.secret_problems(everywhere(**{variable: {key: 'hunter2'}}))
    assert problem.startswith('%s sets %s, a secret' % (variable, key)) and way in problem
    assert 'hunter2' not in problem


# issue 48: {gpu_memory_utilization: 0.95, tensor_parallel_size: 2, max_model_len: 1000000} planned cleanly while the plan
# table showed 0.85, TP 8 and 262144
@pytest.mark.parametrize('variable, key, instead', [
    ('vllm_container_extra_args', 'gpu_memory_utilization', 'dgxspark_gpu_memory_utilization'),
    ('vllm_container_extra_args', 'tensor-parallel-size', 'dgxspark_tensor_parallel_size'),
    ('vllm_container_extra_args', '--max-model-len', 'dgxspark_max_model_len'),
    ('vllm_container_extra_args', 'pipeline_parallel_size', 'dgxspark_pipeline_parallel_size'),
    ('vllm_container_extra_args', 'port', 'vllm_container_port'),
    ('vllm_container_extra_args', 'served-model-name', 'vllm_container_served_model_name'),
    ('vllm_container_extra_args', 'model', 'vllm_container_model'),
    ('vllm_container_site_args', 'kv_cache_dtype', 'dgxspark_kv_cache_dtype'),
    ('dgxspark_vllm_site_args', 'enable_expert_parallel', 'dgxspark_enable_expert_parallel'),
    ('dgxspark_vllm_site_args', 'revision', 'dgxspark_model_revision'),
])
def test_an_extra_option_that_the_plan_decides_is_refused_with_the_variable_to_use(variable, key, instead):
    [problem] = ri.planned_option_problems(everywhere(**{variable: {key: 2}}))
    assert problem == ('%s sets %s, which the plan decides: it would run while the plan table shows the planned value; '
                       'remove it and set %s instead (set on every node)' % (variable, key, instead))


def test_the_extras_that_undo_the_plan_are_named_together_once_for_every_node():
    problems = ri.planned_option_problems(everywhere(vllm_container_extra_args={
        'gpu_memory_utilization': 0.95, 'tensor_parallel_size': 2, 'max_model_len': 1000000, 'max_num_seqs': 8}))
    named = [p.split(' sets ')[1].split(',')[0] for p in problems]
    assert named == ['gpu_memory_utilization', 'max_model_len', 'tensor_parallel_size']


@pytest.mark.parametrize('variable, key, who', [
    ('vllm_container_extra_env', 'VLLM_HOST_IP', "the plan (each node's rail-1 address, which Ray registers the node with"),
    ('ray_cluster_extra_env', 'NCCL_SOCKET_IFNAME', 'the plan (from the rails, dgxspark_rails)'),
    ('ray_cluster_extra_env', 'RAY_AUTH_MODE', 'the collection: token authentication stays on'),
    ('vllm_container_extra_env', 'DGXSPARK_RAY_ADDRESS', "the plan (the head's rail-1 address"),
])
def test_an_extra_environment_that_the_plan_sets_is_refused(variable, key, who):
    [problem] = ri.planned_environment_problems(everywhere(**{variable: {key: 'x', 'NCCL_IB_TIMEOUT': '22'}}))
    assert problem.startswith('%s sets %s, which is set by %s' % (variable, key, who)), problem
    assert problem.endswith('; remove it (set on every node)'), problem


def test_extra_environments_the_plan_leaves_pass():
    assert ri.planned_environment_problems(everywhere(
        vllm_container_extra_env={'NCCL_IB_TIMEOUT': '22', 'VLLM_LOGGING_LEVEL': 'DEBUG'},
        # The NCCL test's own map may pick interfaces: no serving process reads it.
        fabric_check_nccl_env={'NCCL_SOCKET_IFNAME': '=enp1s0f1np1'})) == []


@pytest.mark.parametrize('options', [
    {'max_num_seqs': 8, 'enforce_eager': True, 'limit_mm_per_prompt.video': 0, 'quantization': None},
    {'kv_cache_memory_bytes': '256M', 'compilation_config': '{"mode": 2}', 'middleware': ['x.Y']},
])
def test_options_the_plan_leaves_to_the_profile_and_the_site_pass(options):
    assert ri.planned_option_problems(everywhere(vllm_container_extra_args=options, dgxspark_vllm_site_args=options)) == []


@pytest.mark.parametrize('values', [
    {'vllm_container_extra_args': {'max_num_seqs': 8, 'api_server_count': 2}},
    {'vllm_container_extra_env': {'VLLM_API_KEY_FILE': '/run/key', 'HF_HOME': '/models'}},  # paths, not secrets
    {'ray_cluster_extra_env': {'RAY_AUTH_TOKEN_PATH': '/etc/dgxspark/secrets/ray_token'}},
    {'vllm_container_extra_args': 'not a map'},  # the spec check says it
])
def test_what_is_no_secret_passes(values):
    assert ri.secret_problems(everywhere(**values)) == []


@pytest.mark.parametrize('values, expected', [
    ({}, []),
    ({'vllm_container_port': 8080, 'fabric_check_nccl_port': 29600}, []),
    ({'vllm_container_port': 6379}, ['port 6379 is given to ray_cluster_ports.gcs and vllm_container_port (the vLLM API)']),
    ({'vllm_container_port': 22}, ['port 22 is given to vllm_container_port (the vLLM API) and SSH']),
    ({'ansible_port': 8000}, ['port 8000 is given to vllm_container_port (the vLLM API) and SSH']),
    ({'fabric_check_nccl_port': 12000}, ["fabric_check_nccl_port (the NCCL test's rendezvous) is 12000, inside Ray's worker "
                                         "port range 10002-19999"]),
    ({'fabric_check_ib_base_port': 18515}, ["fabric_check_ib_base_port (ib_write_bw's first port) is 18515, inside Ray's"]),
    ({'vllm_container_port': 70000}, ['vllm_container_port (the vLLM API) is 70000, not a TCP port: use 1 to 65535']),
    ({'ray_cluster_ports': dict(RAY, min_worker=21000, max_worker=21999)}, []),
    # a moved worker range meets a default of another role
    ({'ray_cluster_ports': dict(RAY, min_worker=20000, max_worker=20999)},
     ["fabric_check_ib_base_port (ib_write_bw's first port) is 20515, inside Ray's worker port range 20000-20999"]),
    ({'ray_cluster_ports': dict(RAY, max_worker=10000)}, ['min_worker 10002 is above max_worker 10000']),
    ({'ray_cluster_ports': {'gcs': 6390}}, ['ray_cluster_ports lacks client_server, dashboard, dashboard_agent_grpc']),
    ({'ray_cluster_ports': dict(RAY, gsc=6390)}, ['ray_cluster_ports has gsc, which Ray does not take here']),
    ({'ray_cluster_ports': dict(RAY, gcs='six')}, ["ray_cluster_ports.gcs is 'six', not a port number"]),
    ({'ray_cluster_ports': dict(RAY, dashboard=6379)}, ['port 6379 is given to ray_cluster_ports.dashboard and '
                                                        'ray_cluster_ports.gcs']),
    ({'node_firewall_api_port': 8001}, ['node_firewall_api_port is 8001 but vLLM listens on vllm_container_port 8000']),
    ({'node_firewall_api_port': 8001, 'vllm_container_port': 8001}, []),
])
def test_ports_of_a_node(values, expected):
    problems = rn.port_problems(everywhere(**values), RAY, SINGLE)
    text = '\n'.join(problems)
    assert len(problems) == len(expected), text
    for part in expected:
        assert part in text, (part, text)


def test_the_defaults_of_every_role_share_no_port():
    assert rn.port_problems(everywhere(), RAY, SINGLE) == []


@pytest.mark.parametrize('cidrs, problems, warnings', [
    (['10.0.0.0/24', '192.168.0.0/16'], [], []),
    (['0.0.0.0/0'], [], ['dgxspark_api_allowed_cidrs has 0.0.0.0/0: the vLLM API is open to every address']),
    (['10.0.0.1/24'], ['has 10.0.0.1/24, which has host bits set: did you mean 10.0.0.0/24?'], []),
    (['10.0.0.7'], ['has 10.0.0.7, a single address: write the network it belongs to, like 10.0.0.0/24'], []),
    (['10.0.0.7/32'], ['has 10.0.0.7/32, a single address'], []),
    (['fd00::/64'], ['has fd00::/64, an IPv6 network: the firewall takes IPv4 networks only'], []),
    (['office'], ["has 'office', not an IPv4 network: write it like 10.0.0.0/24"], []),
    ('10.0.0.0/24', ["dgxspark_api_allowed_cidrs is '10.0.0.0/24': give a list of IPv4 networks like [10.0.0.0/24]"], []),
])
def test_api_networks(cidrs, problems, warnings):
    got_problems, got_warnings = rn.allowed_network_problems(everywhere(dgxspark_api_allowed_cidrs=cidrs))
    assert len(got_problems) == len(problems) and len(got_warnings) == len(warnings), (got_problems, got_warnings)
    for part, line in zip(problems + warnings, got_problems + got_warnings):
        assert part in line and line.endswith('(set on every node)'), (part, line)


@pytest.mark.parametrize('variable', ['dgxspark_monitoring_allowed_cidrs', 'node_firewall_monitoring_allowed_cidrs',
                                      'monitoring_allowed_cidrs'])
@pytest.mark.parametrize('cidrs, problems, warnings', [
    (['10.0.0.0/24'], [], []),
    (['0.0.0.0/0'], [], ['has 0.0.0.0/0: Prometheus is open to every address']),
    (['10.0.0.1/24'], ['has 10.0.0.1/24, which has host bits set'], []),
    (['10.0.0.7'], ['has 10.0.0.7, a single address'], []),
    ('10.0.0.0/24', ["is '10.0.0.0/24': give a list of IPv4 networks"], []),
])
def test_monitoring_networks_follow_the_api_networks_rules(variable, cidrs, problems, warnings):
    got_problems, got_warnings = rn.allowed_network_problems(everywhere(**{variable: cidrs}))
    assert len(got_problems) == len(problems) and len(got_warnings) == len(warnings), (got_problems, got_warnings)
    for part, line in zip(problems + warnings, got_problems + got_warnings):
        assert part in line and line.endswith('(set on every node)'), (part, line)


@pytest.mark.parametrize('name, ok', [
    ('enp1s0f1np1', True), ('enP2p1s0f1np1', True), ('bond0.100', True), ('eth-rail_1', True),
    ('enP2p1s0f1np1x1', True), ('enP2p1s0f1np1x12', False),  # 16 characters: Linux takes 15
    ('', False), ('en p1', False), ('en/p1', False), ('enp1;reboot', False), ('-enp1', False), (None, False),
])
def test_interface_names(name, ok):
    problem = rn.interface_name_problem('dgxspark_rails[0] (rail1).interface', name)
    assert (problem is None) is ok, problem
    if not ok:
        assert problem.startswith('dgxspark_rails[0] (rail1).interface is %r, not a Linux interface name' % (name,))


@pytest.mark.parametrize('variables, api_warnings, expected', [
    ({'dgxspark_gpu_memory_utilization': 0.85, 'dgxspark_nccl_transport': 'rdma'}, [], []),
    ({'dgxspark_gpu_memory_utilization': 0.92, 'dgxspark_allow_gpu_memory_utilization_above_ceiling': True},
     [], ['dgxspark_gpu_memory_utilization is 0.92, above the unified-memory ceiling 0.85']),
    ({'dgxspark_nccl_transport': 'socket'}, [], ['dgxspark_nccl_transport is socket: NCCL runs over TCP']),
    ({}, ['open to every address'], ['open to every address']),
])
def test_risky_choices_are_said(variables, api_warnings, expected):
    warnings = ri.input_warnings(variables, api_warnings)
    assert len(warnings) == len(expected)
    for part, line in zip(expected, warnings):
        assert part in line


RAILS = [{'name': 'rail1', 'subnet': '192.168.100.0/24'}, {'name': 'rail2', 'subnet': '192.168.101.0/24'}]


@pytest.mark.parametrize('management, expected', [
    ({'spark-alpha': '10.0.0.10', 'spark-beta': 'spark-beta.lan'}, []),
    ({'spark-alpha': '192.168.100.5'}, ["spark-alpha: its management address 192.168.100.5 (ansible_host) is inside rail1's "
                                        "subnet 192.168.100.0/24"]),
    ({'spark-alpha': '192.168.101.200', 'spark-beta': '192.168.100.9'},
     ["spark-alpha: its management address 192.168.101.200 (ansible_host) is inside rail2's",
      "spark-beta: its management address 192.168.100.9 (ansible_host) is inside rail1's"]),
    ({'spark-alpha': 'fe80::1'}, []),
])
def test_management_addresses_stay_out_of_the_rails(management, expected):
    problems = rn.management_overlap_problems(management, RAILS)
    assert len(problems) == len(expected), problems
    for part, line in zip(expected, problems):
        assert line.startswith(part), (part, line)


TWO_NODES = ('spark-alpha', 'spark-beta')


@pytest.mark.parametrize('values, expected', [
    ({'dgxspark_api_allowed_cidrs': ['172.31.240.0/24', '10.0.0.0/8']}, []),
    ({'dgxspark_api_allowed_cidrs': []}, []),
    ({'dgxspark_api_allowed_cidrs': ['0.0.0.0/0']}, []),  # the world: allowed_network_problems' warning, not an overlap
    ({'dgxspark_api_allowed_cidrs': ['10.0.0.1']}, []),  # refused on its own (a single address)
    ({'dgxspark_api_allowed_cidrs': ['192.168.100.128/25']},
     ["dgxspark_api_allowed_cidrs has 192.168.100.128/25, which overlaps rail1's subnet 192.168.100.0/24: the rails are "
      "trusted with every port (Ray, NCCL, the distribution key), so API clients must be on another network (or the "
      "rails on subnets of their own: dgxspark_rails) (set on every node)"]),
    # a management LAN of 192.168.0.0/16 holds both rails
    ({'node_firewall_api_allowed_cidrs': ['192.168.0.0/16']},
     ["node_firewall_api_allowed_cidrs has 192.168.0.0/16, which overlaps rail1's",
      "node_firewall_api_allowed_cidrs has 192.168.0.0/16, which overlaps rail2's"]),
])
def test_api_networks_stay_off_the_rails(values, expected):
    problems = rn.allowed_network_rail_overlap_problems(dict((host, values) for host in TWO_NODES), RAILS)
    assert len(problems) == len(expected), problems
    for part, line in zip(expected, problems):
        assert line.startswith(part), (part, line)


def test_an_api_network_on_one_node_only_names_that_node():
    values = {'spark-alpha': {'dgxspark_api_allowed_cidrs': ['10.0.0.0/24']},
              'spark-beta': {'dgxspark_api_allowed_cidrs': ['192.168.101.0/24']}}
    assert rn.allowed_network_rail_overlap_problems(values, RAILS) == [
        "dgxspark_api_allowed_cidrs has 192.168.101.0/24, which overlaps rail2's subnet 192.168.101.0/24: the rails are "
        "trusted with every port (Ray, NCCL, the distribution key), so API clients must be on another network (or the "
        "rails on subnets of their own: dgxspark_rails) (set on spark-beta)"]


def test_every_variable_the_checks_name_is_a_role_s_or_the_collection_s():
    """The cross-checks name variables; a renamed role variable must not leave a check reading nothing."""
    options = set(name for role in SPECS.values() for name in role)
    named = [name for name, _what in rn.SINGLE_PORTS] + list(ri.OPTION_MAPS) + list(ri.ENVIRONMENT_MAPS) + \
        ['ray_cluster_ports', 'node_firewall_api_port', 'node_firewall_api_allowed_cidrs',
         'vllm_container_api_key', 'vllm_container_hf_token', 'ray_cluster_auth_token']
    assert [name for name in named if not name.startswith('dgxspark_') and name not in options] == []
    from ansible_collections.dgxspark.cluster.plugins.plugin_utils import inventory_names  # pylint: disable=C0415
    known = inventory_names.known_names(ROOT)
    assert [name for name in named + list(rn.API_CIDR_VARIABLES) + ['dgxspark_hf_token'] if name not in known] == []


@pytest.mark.parametrize('values, expected', [
    ({'os_hardening_swappiness': 1, 'ray_cluster_object_store_memory': 100000000}, []),
    ({'ray_cluster_object_store_memory': None}, []),  # Ray's own default
    ({'os_hardening_swappiness': 250}, ['os_hardening_swappiness is 250: use 0 to 200 (vm.swappiness takes 0 to 200;']),
    ({'vllm_container_stall_timeout': 0}, ['vllm_container_stall_timeout is 0: use at least 1 (seconds)']),
    ({'ray_cluster_num_gpus': 0}, ['ray_cluster_num_gpus is 0: use at least 1 (a DGX Spark has one GPU)']),
    ({'node_firewall_watch_interval_s': 90}, ['node_firewall_watch_interval_s is 90: use 5 to 50 (seconds; a table gone is']),
    ({'ray_cluster_object_store_memory': 1000000}, ["ray_cluster_object_store_memory is 1000000: use at least 78643200 (Ray's"]),
    ({'fabric_check_nccl_memory_fraction': 0.95}, ['fabric_check_nccl_memory_fraction is 0.95: use 0.01 to 0.9']),
    ({'vllm_container_ready_timeout': 'soon'}, []),  # a wrong type is the spec check's
    ({'vllm_container_name': 'vllm-0.33', 'node_firewall_service': 'dgxspark-fw'}, []),
    ({'vllm_container_name': 'vllm; rm -rf /'}, ["vllm_container_name is 'vllm; rm -rf /', not a Docker container name"]),
    ({'node_firewall_service': 'fw unit'}, ["node_firewall_service is 'fw unit', not a systemd unit name"]),
    ({'vllm_container_name': 'dgxspark-ray'}, ["ray_cluster_container_name and vllm_container_name are both 'dgxspark-ray'"]),
    ({'os_hardening_gpu_clocks_mhz': [0, 2200]}, []),
    ({'os_hardening_gpu_clocks_mhz': []}, []),
    ({'os_hardening_gpu_clocks_mhz': [2200, 1800]}, ["os_hardening_gpu_clocks_mhz is [2200, 1800]: give [MIN, MAX] in MHz"]),
    ({'os_hardening_gpu_clocks_mhz': [2200]}, ["os_hardening_gpu_clocks_mhz is [2200]: give [MIN, MAX] in MHz"]),
    ({'os_hardening_gpu_clocks_mhz': [0, 0]}, ["os_hardening_gpu_clocks_mhz is [0, 0]: give [MIN, MAX] in MHz"]),
    ({'os_hardening_swappiness': -1}, ['os_hardening_swappiness is -1: use 0 to 200 (vm.swappiness takes 0 to 200; 1, the '
                                       'default, swaps only as a last resort)']),
    ({'os_hardening_earlyoom_mem_percent': 4.5}, []),
    ({'os_hardening_earlyoom_mem_percent': 0}, ['os_hardening_earlyoom_mem_percent is 0: use 1 to 50 (the percentage']),
    ({'os_hardening_earlyoom_mem_percent': 60}, ['os_hardening_earlyoom_mem_percent is 60: use 1 to 50 (the percentage']),
    ({'os_hardening_earlyoom_mem_percent': 60, 'os_hardening_earlyoom': False}, []),  # earlyoom off: never read
    ({'supervisor_interval_s': 0}, ['supervisor_interval_s is 0: use at least 1 (seconds between two probes)']),
    ({'supervisor_interval_s': '15', 'supervisor_budget_restarts': 0, 'supervisor_crash_budget_restarts': 0}, []),
    ({'supervisor_budget_restarts': -1}, ['supervisor_budget_restarts is -1: use at least 0 (a count of restarts; 0 never']),
    ({'supervisor_failures_to_restart': 0}, ['supervisor_failures_to_restart is 0: use at least 1']),
    ({'monitoring_scrape_interval_s': 0, 'monitoring_node_metrics_interval_s': '0'},
     ['monitoring_node_metrics_interval_s is 0: use at least 1', 'monitoring_scrape_interval_s is 0: use at least 1']),
])
def test_values(values, expected):
    problems = ri.value_problems(everywhere(**values))
    assert len(problems) == len(expected), problems
    for part, line in zip(expected, problems):
        assert line.startswith(part) and line.endswith('(set on every node)'), (part, line)


DEFAULT_OR = '(the default)'
OS_FORMATS = [
    # (id, values, the problem's start, what else it says; [] when passed)
    ('memlock-unlimited', {'os_hardening_memlock': 'unlimited'}, None, []),
    ('retention-days', {'monitoring_retention_time': '15d', 'monitoring_retention_size': '10GB'}, None, []),
    ('retention-combined', {'monitoring_retention_time': '1h30m', 'monitoring_retention_size': '512MB'}, None, []),
    ('retention-time-word', {'monitoring_retention_time': '15 days'},
     "monitoring_retention_time is '15 days': not a Prometheus duration", ['15d']),
    ('retention-size-injection', {'monitoring_retention_size': '10GB --web.enable-admin-api'},
     "monitoring_retention_size is '10GB --web.enable-admin-api': not a Prometheus size", ['10GB']),
    ('retention-size-lower-case', {'monitoring_retention_size': '10gb'},
     "monitoring_retention_size is '10gb': not a Prometheus size", []),
    ('memory-max-units', {'supervisor_memory_max': '256M'}, None, []),
    ('memory-max-percent', {'supervisor_memory_max': '5%'}, None, []),
    ('memory-max-infinity', {'supervisor_memory_max': 'infinity'}, None, []),
    ('memory-max-newline', {'supervisor_memory_max': '256M\nExecStartPre=/bin/sh'},
     "supervisor_memory_max is '256M\\nExecStartPre=/bin/sh': not a systemd MemoryMax=", ['256M']),
    ('memlock-kib', {'os_hardening_memlock': 8192}, None, []),
    ('memlock-kib-string', {'os_hardening_memlock': '8192'}, None, []),
    ('memlock-word', {'os_hardening_memlock': 'lots'},
     'os_hardening_memlock is \'lots\': neither "unlimited" nor a positive integer', ['KiB', '8192']),
    ('memlock-zero', {'os_hardening_memlock': 0}, 'os_hardening_memlock is 0: neither "unlimited"', []),
    ('memlock-unit', {'os_hardening_memlock': '64M'}, "os_hardening_memlock is '64M': neither", []),
    ('memlock-newline', {'os_hardening_memlock': '8192\n'}, "os_hardening_memlock is '8192\\n': neither", []),
    ('target', {'os_hardening_default_target': 'graphical.target'}, None, []),
    ('target-without-suffix', {'os_hardening_default_target': 'multi-user'},
     "os_hardening_default_target is 'multi-user': not a systemd target unit name (NAME.target)", ['multi-user.target']),
    ('target-with-space', {'os_hardening_default_target': 'multi user.target'}, 'os_hardening_default_target is', []),
    ('sysctl-file', {'os_hardening_sysctl_file': '/etc/sysctl.d/99-mine.conf'}, None, []),
    ('sysctl-conf-itself', {'os_hardening_sysctl_file': '/etc/sysctl.conf'},
     "os_hardening_sysctl_file is '/etc/sysctl.conf': not a .conf file directly under /etc/sysctl.d/",
     ['/etc/sysctl.d/90-dgxspark-os.conf ' + DEFAULT_OR]),
    ('sysctl-file-nested', {'os_hardening_sysctl_file': '/etc/sysctl.d/a/b.conf'}, 'os_hardening_sysctl_file is', []),
    ('limits-file', {'os_hardening_limits_file': '/etc/security/limits.d/95-rdma.conf'}, None, []),
    ('limits-conf-itself', {'os_hardening_limits_file': '/etc/security/limits.conf'},
     "os_hardening_limits_file is '/etc/security/limits.conf': not a .conf file directly under /etc/security/limits.d/",
     ['limits.conf itself is never edited']),
    ('limits-file-not-conf', {'os_hardening_limits_file': '/etc/security/limits.d/memlock'}, 'os_hardening_limits_file is', []),
    ('domains', {'os_hardening_memlock_domains': ['root', '@rdma', '*', '1000:2000']}, None, []),
    ('domains-empty', {'os_hardening_memlock_domains': []},
     'os_hardening_memlock_domains is []: give a non-empty list of limits.conf domains', ['[root] ' + DEFAULT_OR]),
    ('domain-with-space', {'os_hardening_memlock_domains': ['* hard']}, "os_hardening_memlock_domains is ['* hard']: give", []),
    ('domain-percent', {'os_hardening_memlock_domains': ['%admin']}, "os_hardening_memlock_domains is ['%admin']", []),
    ('domains-not-a-list', {'os_hardening_memlock_domains': 'root'}, None, []),  # the spec check's
    ('earlyoom-names', {'os_hardening_earlyoom_prefer': ['VLLM::.*', 'ray::.*'], 'os_hardening_earlyoom_avoid': []}, None, []),
    ('earlyoom-name-with-space', {'os_hardening_earlyoom_prefer': ['VLLM:: .*']},
     "os_hardening_earlyoom_prefer is ['VLLM:: .*']: every name must be a non-empty regex without spaces, quotes or "
     "anchors", ['systemd splits EARLYOOM_ARGS at spaces']),
    ('earlyoom-name-anchored', {'os_hardening_earlyoom_avoid': ['^sshd$']}, "os_hardening_earlyoom_avoid is ['^sshd$']", []),
    ('earlyoom-name-quoted', {'os_hardening_earlyoom_avoid': ['"sshd"']}, 'os_hardening_earlyoom_avoid is', []),
    ('earlyoom-name-empty', {'os_hardening_earlyoom_prefer': ['']}, "os_hardening_earlyoom_prefer is ['']", []),
    ('earlyoom-off', {'os_hardening_earlyoom_prefer': ['a b'], 'os_hardening_earlyoom': False}, None, []),
    ('earlyoom-off-as-string', {'os_hardening_earlyoom_prefer': ['a b'], 'os_hardening_earlyoom': 'no'}, None, []),
    ('netplan-file', {'cx7_netplan_file_name': '40-cx7.yaml'}, None, []),
    ('netplan-file-yml', {'cx7_netplan_file_name': '40-cx7.yml'}, "cx7_netplan_file_name is '40-cx7.yml': not a plain file "
     'name ending in .yaml (netplan reads only *.yaml', []),
    ('netplan-file-path', {'cx7_netplan_file_name': '../40-cx7.yaml'}, "cx7_netplan_file_name is '../40-cx7.yaml'", []),
    ('image', {'vllm_container_image': 'registry.local:5000/vllm/vllm-openai:v0.33.0'}, None, []),
    ('image-empty', {'ray_cluster_image': ''}, "ray_cluster_image is '': not an image reference (empty or with spaces): set "
     'dgxspark_serving_image', []),
    ('image-with-space', {'vllm_container_image': 'vllm openai'}, "vllm_container_image is 'vllm openai'", []),
    ('model-path', {'distribute_model_path': '/data/models/qwen'}, None, []),
    ('model-path-empty', {'distribute_model_path': ''}, None, []),
    ('model-path-relative', {'distribute_model_path': 'models/qwen'}, "distribute_model_path is 'models/qwen': not an "
     'absolute path', ['or leave it empty for dgxspark_model']),
]


@pytest.mark.parametrize('values, start, also', [case[1:] for case in OS_FORMATS], ids=[case[0] for case in OS_FORMATS])
def test_role_formats(values, start, also):
    problems = ri.format_problems(everywhere(**values))
    if start is None:
        assert problems == []
        return
    [problem] = problems
    assert problem.startswith(start) and problem.endswith('(set on every node)'), problem
    assert all(part in problem for part in also), problem


def test_a_format_problem_of_one_host_names_that_host():
    values = {'spark-alpha': {'os_hardening_memlock': 8192}, 'spark-beta': {'os_hardening_memlock': '8 GiB'}}
    assert ri.format_problems(values) == [
        "os_hardening_memlock is '8 GiB': neither \"unlimited\" nor a positive integer (KiB, the limits.conf unit): use "
        "\"unlimited\" (the default) or e.g. 8192 (set on spark-beta)"]


@pytest.mark.parametrize('name, values, used', [
    ('os_hardening_memlock', {}, True),
    ('os_hardening_earlyoom_prefer', {}, True),  # earlyoom is on by default
    ('os_hardening_earlyoom_prefer', {'os_hardening_earlyoom': True}, True),
    ('os_hardening_earlyoom_prefer', {'os_hardening_earlyoom': False}, False),
    ('os_hardening_earlyoom_mem_percent', {'os_hardening_earlyoom': 'false'}, False),
    ('os_hardening_memlock', {'os_hardening_earlyoom': False}, True),
])
def test_an_input_is_checked_only_while_its_role_reads_it(name, values, used):
    assert ri.in_use(name, values) is used


def test_every_format_rule_names_a_variable_of_its_role_and_passes_its_default():
    options = dict((name, spec) for role in SPECS.values() for name, spec in role.items())
    rules = sorted(set(ri.FORMATS) | set(ri.ITEMS) | set(ri.SWITCHED_BY) | set(ri.SWITCHED_BY.values()))
    assert [name for name in rules if name not in options] == []
    # The images default to dgxspark_serving_image (templated): the plan checks them as each node resolves them.
    defaults = dict((name, options[name]['default']) for name in set(ri.FORMATS) | set(ri.ITEMS) if 'default' in options[name])
    assert sorted((set(ri.FORMATS) | set(ri.ITEMS)) - set(defaults)) == ['ray_cluster_image', 'vllm_container_image']
    assert ri.format_problems({'node': defaults}) == []


def test_every_bounded_variable_is_a_number_of_its_role():
    options = dict((name, spec) for role in SPECS.values() for name, spec in role.items())
    assert dict((name, options[name]['type']) for name in ri.BOUNDS if options[name]['type'] not in ('int', 'float')) == {}
    assert dict((name, options[name]['type']) for name in ri.NAMES) == dict((name, 'str') for name in ri.NAMES)
    assert (options['ray_cluster_container_name']['default'], options['vllm_container_name']['default']) == \
        ('dgxspark-ray', 'dgxspark-vllm')


SITE = 'dgxspark_vllm_site_args'


@pytest.mark.parametrize('backend, master_port, values, expected', [
    # The options the backend owns, in any options map, under either backend.
    ('ray', 29501, {'vllm_container_extra_args': {'distributed_executor_backend': 'mp'}},
     ['vllm_container_extra_args sets distributed_executor_backend, which dgxspark_executor_backend (ray) sets for every rank']),
    ('ray', 29501, {SITE: {'--nnodes': 2, 'node-rank': 1}},
     ['%s sets --nnodes, which dgxspark_executor_backend (ray)' % SITE, '%s sets node-rank, which' % SITE]),
    ('mp', 29501, {'vllm_container_site_args': {'master_addr': '10.0.0.1', 'headless': True}},
     ['vllm_container_site_args sets headless, which dgxspark_executor_backend (mp)',
      'vllm_container_site_args sets master_addr, which dgxspark_executor_backend (mp)']),
    # Options only Ray's executor reads: fine with Ray, refused with mp.
    ('ray', 29501, {'vllm_container_extra_args': {'ray_workers_use_nsight': True}}, []),
    ('mp', 29501, {'vllm_container_extra_args': {'ray-workers-use-nsight': True}},
     ["vllm_container_extra_args sets ray-workers-use-nsight, an option of vLLM's Ray executor, but dgxspark_executor_backend is mp"]),
    # The master port: another service's port is refused with mp, ignored with Ray (no rendezvous opens).
    ('mp', 8000, {}, ['dgxspark_mp_master_port is 8000, the port of vllm_container_port (the vLLM API)']),
    ('mp', '9000', {'vllm_container_port': 9000}, ['dgxspark_mp_master_port is 9000, the port of vllm_container_port']),
    ('ray', 8000, {}, []),
    ('mp', 29501, {'vllm_container_extra_args': {'max_num_seqs': 8}, SITE: {'enforce_eager': True}}, []),
    ('mp', 'not a port', {}, []),  # the schema names a master port of the wrong type
])
def test_the_executor_backend_owns_its_options(backend, master_port, values, expected):
    values_by_host = {'spark-a': values, 'spark-b': values}
    mp_master = {'address': '192.168.100.10', 'port': master_port} if backend == 'mp' else None  # as the plan has it
    problems = ri.backend_problems(values_by_host, backend) + rn.rendezvous_port_problems(
        values_by_host, mp_master, {'vllm_container_port': 8000})
    assert len(problems) == len(expected), problems
    for text, problem in zip(sorted(expected), problems):
        assert problem.startswith(text) and problem.endswith('(set on every node)'), (text, problem)


def test_an_owned_option_on_one_node_names_that_node():
    problems = ri.backend_problems({'spark-a': {}, 'spark-b': {'vllm_container_extra_args': {'master_port': 1}}}, 'ray')
    assert problems == ['vllm_container_extra_args sets master_port, which dgxspark_executor_backend (ray) sets for every '
                        'rank: remove it (the backend is chosen with dgxspark_executor_backend, its port with '
                        'dgxspark_mp_master_port) (set on spark-b)']


@pytest.mark.parametrize('head_values, expected', [
    ({}, {'host': 'spark-alpha', 'port': 8000, 'url': 'http://spark-alpha:8000/v1', 'served_model_name': 'Qwen/Q',
          'api_key_file': '/keys/vllm_api_key', 'api_key_given': False}),
    ({'ansible_host': '10.20.0.11', 'vllm_container_port': 8443, 'vllm_container_served_model_name': 'qwen'},
     {'host': '10.20.0.11', 'port': 8443, 'url': 'http://10.20.0.11:8443/v1', 'served_model_name': 'qwen',
      'api_key_file': '/keys/vllm_api_key', 'api_key_given': False}),
    ({'vllm_container_api_key': 'vaulted'}, {'host': 'spark-alpha', 'port': 8000, 'url': 'http://spark-alpha:8000/v1',
                                             'served_model_name': 'Qwen/Q', 'api_key_file': '/keys/vllm_api_key',
                                             'api_key_given': True}),
], ids=['defaults', 'management-address-and-port', 'key-from-the-inventory'])
def test_the_api_endpoint_is_the_heads_address_and_port(head_values, expected):
    assert rn.api_endpoint('spark-alpha', head_values, 'Qwen/Q', 8000, '/keys') == expected


@pytest.mark.parametrize('head_values, warned', [
    ({}, True),
    ({'dgxspark_api_allowed_cidrs': []}, True),
    ({'dgxspark_api_allowed_cidrs': ['10.20.0.0/24']}, False),
    ({'dgxspark_api_allowed_cidrs': [], 'node_firewall_api_allowed_cidrs': ['10.20.0.0/24']}, False),
    ({'dgxspark_api_allowed_cidrs': ['10.20.0.0/24'], 'node_firewall_api_allowed_cidrs': []}, True),
], ids=['unset', 'empty', 'a-client-network', 'the-role-variable-wins', 'the-role-variable-empties-it'])
def test_the_plan_warns_when_no_client_network_reaches_the_api(head_values, warned):
    warnings = rn.api_reach_warnings({'spark-alpha': head_values, 'spark-beta': {}}, 'spark-alpha')
    assert bool(warnings) == warned
    assert all(w.startswith('dgxspark_api_allowed_cidrs is empty: only the nodes and the rails reach the vLLM API')
               for w in warnings)


@pytest.mark.parametrize('variable, value, expected', [
    ('vllm_container_extra_args', [1], "vllm_container_extra_args: must be a mapping, got the list;"),
    ('vllm_container_port', 'abc', "vllm_container_port: must be an integer, got the string 'abc'"),
    ('vllm_container_extra_env', 'x', "vllm_container_extra_env: must be a mapping, got the string;"),
    # one line for the list, however many of its items are wrong
    ('os_hardening_gpu_clocks_mhz', ['fast', 'faster'],
     "os_hardening_gpu_clocks_mhz: every item must be an integer, got the list ['fast', 'faster'];"),
])
def test_a_wrong_type_is_said_in_the_inventorys_words(variable, value, expected):
    [problem] = ri.spec_problems(everywhere(**{variable: value}), SPECS)
    assert problem.startswith(expected), problem
    assert '<class' not in problem and 'unable to convert' not in problem


@pytest.mark.parametrize('variable, given', [
    ('vllm_container_extra_args', '--api-key sk-live-1234'),
    ('vllm_container_extra_env', 'HF_TOKEN=hf_abcd'),
])
def test_a_map_given_as_a_string_with_a_secret_is_refused_as_a_secret_and_never_repeated(variable, given):
    """issue 48: a failed type check hid the --api-key secret check behind it; the value must not be echoed either."""
    values = everywhere(**{variable: given})
    problems = ri.spec_problems(values, SPECS) + ri.secret_problems(values)
    assert any(p.startswith('%s is a string that names a secret' % variable) for p in problems), problems
    # (key=value text converts to a mapping, as Ansible's own check takes it: then the secret check alone speaks)
    assert variable.endswith('_env') or any(p.startswith('%s: must be a mapping, got the string;' % variable)
                                            for p in problems), problems
    assert not [p for p in problems if given.split()[-1].split('=')[-1] in p], problems


COMMIT_ID = '0123456789abcdef0123456789abcdef01234567'


@pytest.mark.parametrize('variable, key, value, revision, refused', [
    # issue 49: the revision check read only the profile's options
    ('vllm_container_extra_args', 'trust_remote_code', True, 'main', True),
    ('vllm_container_site_args', '--trust-remote-code', True, 'v1.0', True),
    ('dgxspark_vllm_site_args', 'trust-remote-code', 'true', None, True),
    ('vllm_container_extra_args', 'trust_remote_code', True, COMMIT_ID, False),  # a reviewed commit
    ('vllm_container_extra_args', 'trust_remote_code', False, 'main', False),  # switched off
    ('vllm_container_extra_args', 'trust_remote_code', 'false', 'main', False),
    ('vllm_container_extra_args', 'trust_remote_code', None, 'main', False),
    ('vllm_container_extra_args', 'max_num_seqs', 8, 'main', False),
])
def test_remote_code_from_an_options_map_needs_a_reviewed_commit(variable, key, value, revision, refused):
    problems = ri.remote_code_problems(everywhere(**{variable: {key: value}}), revision, 'org/model')
    if not refused:
        assert problems == []
        return
    assert problems == [
        '%s sets %s, so vLLM runs the Python files of org/model as root in every serving container, but the model revision '
        'is %r: a branch or tag runs whatever is pushed there next. Review the code at one commit and set '
        'dgxspark_model_revision to it (40 hex digits, from https://huggingface.co/org/model/commits/main) (set on every '
        'node)' % (variable, key, revision)]


@pytest.mark.parametrize('key, refused', [
    ('', None),  # generated by the deploy
    ('Zq7vR2mLx9TbW4kNc8PdYh3Jf6Gs1Ae5', None),
    ('abcdefghijklmnop', None),  # 16: the least taken
    ('token-abc123', 'is an example key from documentation'),  # vLLM's docs
    ('EMPTY', 'is an example key from documentation'),
    ('short-key-12345', 'has 15 characters, too few to resist guessing'),
    ('clé-ünïcode-0123456789', 'has a space, a control or a non-ASCII character'),
    ('two words of a long key here', 'has a space, a control or a non-ASCII character'),
    ('tab\tseparated-0123456789', 'has a space, a control or a non-ASCII character'),
])
def test_an_api_key_the_inventory_gives_is_long_random_ascii(key, refused):
    problems = ri.api_key_problems({'spark-alpha': {'vllm_container_api_key': key}, 'spark-beta': {}}, 'spark-alpha')
    if refused is None:
        assert problems == []
        return
    [problem] = problems
    assert problem.startswith('vllm_container_api_key (on spark-alpha) ' + refused), problem
    assert problem.endswith('(leave it empty and the deploy generates one)')
    assert key not in problem  # the key is never printed


@pytest.mark.parametrize('values, warned', [
    ({}, False),  # the default: the rails only
    ({'dgxspark_monitoring_allowed_cidrs': []}, False),
    ({'dgxspark_monitoring_allowed_cidrs': ['10.20.0.0/24']}, True),
    ({'node_firewall_monitoring_allowed_cidrs': ['10.20.0.0/24', '10.21.0.0/24']}, True),
])
def test_prometheus_opened_to_a_network_is_said_out_loud(values, warned):
    """Issue 49: Prometheus republishes the metrics the API key protects at the engine; its password (basic auth)
    crosses the allowed networks in clear over plain HTTP."""
    warnings = rn.monitoring_reach_warnings({'spark-alpha': values}, 'spark-alpha')
    assert bool(warnings) is warned
    if warned:
        assert warnings[0].startswith('dgxspark_monitoring_allowed_cidrs opens Prometheus to 10.20.0.0/24')
        assert 'it asks for its password (basic auth, prometheus_password in the controller\'s secrets directory), ' \
               'which plain HTTP carries in clear' in warnings[0]


@pytest.mark.parametrize('values, expected', [
    ({}, []),
    ({'supervisor_deadline_s': 30, 'supervisor_interval_s': 30}, []),
    ({'supervisor_deadline_s': 40}, ['supervisor_deadline_s is 40, above supervisor_interval_s 30: give it at most '
                                     'supervisor_interval_s (a probe ends before the next one starts)']),
    ({'supervisor_interval_s': '20'}, ['supervisor_deadline_s is 30, above supervisor_interval_s 20']),
    ({'supervisor_interval_s': 'soon'}, []),  # a wrong type is the spec check's
    ({'supervisor_crash_backoff_s': 900}, ['supervisor_crash_backoff_s is 900, above supervisor_crash_backoff_max_s 600']),
    ({'vllm_container_stall_timeout': 4000}, ['vllm_container_stall_timeout is 4000, above vllm_container_ready_timeout 3600']),
    ({'vllm_container_stall_timeout': 4000, 'vllm_container_ready_timeout': 7200}, []),
])
def test_values_that_bound_each_other(values, expected):
    defaults = ri.spec_defaults(SPECS)
    problems = ri.order_problems(everywhere(**values), defaults)
    assert len(problems) == len(expected), problems
    for part, line in zip(expected, problems):
        assert line.startswith(part) and line.endswith('(set on every node)'), (part, line)


@pytest.mark.parametrize('chosen, expected', [
    ('', []),
    ('spark-beta', []),
    ('prometheus.example', ["monitoring_prometheus_host is 'prometheus.example', not a node of the cluster (spark-alpha, "
                            "spark-beta): name one of them, or leave it empty for the head (set on every node)"]),
])
def test_prometheus_runs_on_a_node_of_the_cluster(chosen, expected):
    values = dict((host, {'monitoring_prometheus_host': chosen}) for host in TWO_NODES)
    assert rn.prometheus_host_problems(values, list(TWO_NODES)) == expected


REPO = 'Qwen/Qwen3.5-397B-A17B-FP8'
LAYOUT = 'the model download needs the Hugging Face cache layout, but '


@pytest.mark.parametrize('values, refused', [
    ({'dgxspark_model': REPO, 'dgxspark_model_download': True}, None),
    ({'dgxspark_model': REPO, 'distribute_model_download': 'yes'}, None),
    ({'dgxspark_model': '/data/models/qwen'}, None),  # no download: a path is the model itself
    ({'distribute_model_path': '/data/models/qwen'}, None),
    ({'dgxspark_model': '/data/models/qwen', 'dgxspark_model_download': True}, "dgxspark_model is '/data/models/qwen'"),
    ({'distribute_model_path': '/data/m', 'dgxspark_model_download': True}, "distribute_model_path is '/data/m'"),
    ({'distribute_model_path': '/data/m', 'dgxspark_model_download': True, 'distribute_model_download': False}, None),
    ({'distribute_model_path': '/data/m', 'dgxspark_model_download': True, 'distribute_model': False}, None),
    ({'distribute_model_path': '/data/m', 'dgxspark_model_download': True, 'dgxspark_distribute_model': 'no'}, None),
], ids=['repo', 'repo-role-switch', 'path-no-download', 'own-path-no-download', 'path', 'own-path', 'role-switch-off',
        'model-off', 'model-off-by-cluster-switch'])
def test_a_download_needs_the_hugging_face_cache_layout(values, refused):
    problems = ri.download_problems(everywhere(**values))
    if refused is None:
        assert problems == []
        return
    [problem] = problems
    assert problem.startswith(LAYOUT + refused) and problem.endswith('(set on every node)'), problem


# The plan's api.tls as api_tls.plan_tls makes it: generated (a cluster CA every node holds), files with a public CA's
# certificate (no CA file: the system's trust store), and off.
TLS_GENERATED = {'enabled': True, 'mode': 'generated', 'server_name': '10.0.0.5', 'names': ['10.0.0.5', 'spark-alpha'],
                 'ca_file': '/etc/dgxspark/tls/api-ca.crt',
                 'controller': {'cert_file': '/keys/api_tls/api.crt', 'key_file': '/keys/api_tls/api.key',
                                'ca_file': '/keys/api_tls/ca.crt'}}
TLS_PUBLIC = dict(TLS_GENERATED, mode='files', server_name='api.example', names=['api.example'], ca_file=None,
                  controller={'cert_file': '/pki/api.pem', 'key_file': '/pki/api.key', 'ca_file': None})
TLS_OFF = {'enabled': False, 'mode': 'off', 'server_name': None, 'names': [], 'ca_file': None,
           'controller': {'cert_file': None, 'key_file': None, 'ca_file': None}}
PROMETHEUS_COPIES = {'cert_file': '/etc/prometheus/dgxspark-tls.crt', 'key_file': '/etc/prometheus/dgxspark-tls.key'}


@pytest.mark.parametrize('values, tls, expected', [
    # TLS off: plain HTTP on the head's address (ansible_host), else its name; the copies' paths stay (the role removes them)
    ({'spark-alpha': {'ansible_host': '10.0.0.5'}}, TLS_OFF, {
        'host': 'spark-alpha', 'address': '10.0.0.5', 'port': 9090, 'scheme': 'http', 'url': 'http://10.0.0.5:9090',
        'local_url': 'http://127.0.0.1:9090',
        'tls': dict(PROMETHEUS_COPIES, enabled=False, server_name=None, ca_file=None,
                    controller={'cert_file': None, 'key_file': None, 'ca_file': None})}),
    ({}, TLS_OFF, {'host': 'spark-alpha', 'address': 'spark-alpha', 'url': 'http://spark-alpha:9090'}),
    # TLS off, Prometheus on a worker: that worker's address
    ({'spark-alpha': {'monitoring_prometheus_host': 'spark-beta'}, 'spark-beta': {'ansible_host': '10.0.0.6'}}, TLS_OFF,
     {'host': 'spark-beta', 'url': 'http://10.0.0.6:9090'}),
    # generated: https, the cluster CA on the nodes, the name the API's certificate is for, copies from the controller
    ({'spark-alpha': {'ansible_host': '10.0.0.5'}}, TLS_GENERATED, {
        'scheme': 'https', 'url': 'https://10.0.0.5:9090', 'local_url': 'https://127.0.0.1:9090',
        'tls': dict(PROMETHEUS_COPIES, enabled=True, server_name='10.0.0.5', ca_file='/etc/dgxspark/tls/api-ca.crt',
                    controller=TLS_GENERATED['controller'])}),
    # a public CA's certificate: no CA file (the system's trust store), the name it is for
    ({'spark-alpha': {'ansible_host': '10.0.0.5'}}, TLS_PUBLIC, {
        'url': 'https://10.0.0.5:9090',
        'tls': dict(PROMETHEUS_COPIES, enabled=True, server_name='api.example', ca_file=None,
                    controller=TLS_PUBLIC['controller'])}),
    # Prometheus bound to one address: its own node reaches it there
    ({'spark-alpha': {'monitoring_prometheus_listen_address': '10.0.0.5'}}, TLS_GENERATED,
     {'local_url': 'https://10.0.0.5:9090'}),
])
def test_the_plan_says_where_prometheus_answers_and_with_which_tls(values, tls, expected):
    """Issue 49: the plan's serving.prometheus, which the monitoring role serves and every client of Prometheus reads."""
    endpoint = rn.prometheus_endpoint('spark-alpha', values, 9090, tls)
    assert dict((key, endpoint[key]) for key in expected) == expected


@pytest.mark.parametrize('chosen, tls, refused', [
    ('', TLS_GENERATED, False),
    ('spark-alpha', TLS_GENERATED, False),
    ('spark-beta', TLS_OFF, False),
    ('spark-beta', TLS_GENERATED, True),
    ('spark-beta', TLS_PUBLIC, True),
])
def test_prometheus_serves_the_apis_certificate_on_the_head_only(chosen, tls, refused):
    """With the API's TLS Prometheus serves the API's certificate: on a worker, clients would refuse a certificate that
    names the head, and the API's key would leave the head."""
    problems = rn.prometheus_tls_problems({'spark-alpha': {'monitoring_prometheus_host': chosen}}, 'spark-alpha', tls)
    assert bool(problems) is refused
    if refused:
        [problem] = problems
        assert problem.startswith('monitoring_prometheus_host is spark-beta, but with dgxspark_api_tls %s Prometheus serves '
                                  "HTTPS with the API's certificate, which is for the head's names (%s)"
                                  % (tls['mode'], ', '.join(tls['names'])))
        assert problem.endswith('leave monitoring_prometheus_host empty to run Prometheus on the head, or set '
                                'dgxspark_api_tls: off')


def test_prometheus_opened_to_a_network_over_https_is_not_said_to_be_in_clear():
    values = {'spark-alpha': {'dgxspark_monitoring_allowed_cidrs': ['10.20.0.0/24']}}
    assert rn.monitoring_reach_warnings(values, 'spark-alpha', tls_enabled=True) == []
    assert 'turn on dgxspark_api_tls' in rn.monitoring_reach_warnings(values, 'spark-alpha')[0]
