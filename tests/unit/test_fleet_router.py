# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet router's LiteLLM configuration (plugin_utils/fleet_router.py, issue 51 item 2), rendered from the router as
the plan makes it (fleet_plan.router_plan over groups planned by cluster_plan.build_plan)."""

from __future__ import annotations

import copy
import os
import re

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.action.cluster_plan import load_profiles, port_defaults
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import api_tls, fleet_plan, fleet_router, role_inputs, role_networks
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import cluster_plan as cp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILES = load_profiles([os.path.join(ROOT, 'profiles', 'models')])[0]
PORTS = port_defaults(role_inputs.role_specs(ROOT))
INT4 = {'dgxspark_model_profile': 'qwen3_5_397b_a17b_int4_autoround', 'dgxspark_tensor_parallel_size': 4,
        'dgxspark_gpu_memory_utilization': 0.78}
VL = {'dgxspark_model_profile': 'qwen3_vl_235b_a22b_awq', 'dgxspark_tensor_parallel_size': 4,
      'dgxspark_gpu_memory_utilization': 0.75, 'dgxspark_max_model_len': 32768, 'dgxspark_kv_cache_dtype': 'fp8'}
HOSTS = {'fleet_a': ['s1', 's2', 's3', 's4'], 'fleet_b': ['s5', 's6', 's7', 's8']}
INT4_NAME, VL_NAME = 'Intel/Qwen3.5-397B-A17B-int4-AutoRound', 'QuantTrio/Qwen3-VL-235B-A22B-Instruct-AWQ'
KEY = 'os.environ/DGXSPARK_UPSTREAM_API_KEY'


def router(b_values, tls, secrets):
    """The plan's router for fleet_a (INT4) and fleet_b (b_values), with the API's TLS generated (tls) or off."""
    plans = {}
    for base, (name, values) in enumerate((('fleet_a', INT4), ('fleet_b', b_values))):
        hosts = HOSTS[name]
        plan = cp.build_plan({'head': hosts[:1], 'workers': hosts[1:]}, dict((h, copy.deepcopy(values)) for h in hosts),
                             PROFILES, address_base=4 * base, hosts_where='group %s' % name)
        api = role_networks.api_endpoint(plan['head'], {}, plan['hf_repo'], 8000, '/keys')
        names = api_tls.client_names(api['host'], plan['head'], list(plan['nodes'][0]['rail_addresses'].values()))
        planned_tls = api_tls.plan_tls({'mode': 'generated' if tls else 'off'}, api['host'], names, secrets, plan['head'],
                                       group=name)[0]
        plan['api'] = role_networks.api_with_tls(api, planned_tls, '0.0.0.0')
        plan['serving'] = {'prometheus': {'host': plan['head']}, 'prometheus_port': 9090, 'node_exporter_port': 9100}
        plans[name] = plan
    ports = dict((h, role_networks.node_ports({}, *PORTS)) for hosts in HOSTS.values() for h in hosts)
    planned, problems = fleet_plan.router_plan(plans, {'host': None, 'port': None}, {}, ports,
                                               dict((name, 'file:/keys/vllm_api_key') for name in plans))
    assert problems == []
    return planned


def deployment(name, group, api_base, ca=None):
    params = {'model': 'hosted_vllm/' + name, 'api_base': api_base, 'api_key': KEY}
    if ca:
        params['ssl_verify'] = ca
    return {'model_name': name, 'litellm_params': params, 'model_info': {'id': group}}


CA = fleet_plan.ROUTER_UPSTREAM_CA
CASES = [
    ('two-models', VL, False, [deployment(INT4_NAME, 'fleet_a', 'http://192.168.100.10:8000/v1'),
                               deployment(VL_NAME, 'fleet_b', 'http://192.168.100.14:8000/v1')]),
    ('two-replicas', INT4, False, [deployment(INT4_NAME, 'fleet_a', 'http://192.168.100.10:8000/v1'),
                                   deployment(INT4_NAME, 'fleet_b', 'http://192.168.100.14:8000/v1')]),
    ('two-models-tls', VL, True, [deployment(INT4_NAME, 'fleet_a', 'https://192.168.100.10:8000/v1', CA),
                                  deployment(VL_NAME, 'fleet_b', 'https://192.168.100.14:8000/v1', CA)]),
    ('two-replicas-tls', INT4, True, [deployment(INT4_NAME, 'fleet_a', 'https://192.168.100.10:8000/v1', CA),
                                      deployment(INT4_NAME, 'fleet_b', 'https://192.168.100.14:8000/v1', CA)]),
]


@pytest.mark.parametrize('b_values, tls, expected', [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_deployment_per_group_named_by_its_served_model(b_values, tls, expected, tmp_path):
    config = fleet_router.proxy_config(router(b_values, tls, str(tmp_path)))
    assert config['model_list'] == expected
    # what the proxy reads as it is written: YAML, no Python objects
    assert yaml.safe_load(yaml.safe_dump(config)) == config


def test_the_proxy_balances_by_load_leaves_a_failing_replica_within_seconds_and_keeps_every_secret_in_the_environment(tmp_path):
    config = fleet_router.proxy_config(router(INT4, False, str(tmp_path)))
    assert config['router_settings'] == {'routing_strategy': 'least-busy', 'allowed_fails': 1, 'cooldown_time': 10,
                                         'num_retries': 2}
    assert config['general_settings'] == {'master_key': 'os.environ/LITELLM_MASTER_KEY'}
    assert config['litellm_settings'] == {'callbacks': ['prometheus'], 'require_auth_for_metrics_endpoint': True}
    # every key is a name of the environment, never a value
    secrets = [config['general_settings']['master_key']] + [d['litellm_params']['api_key'] for d in config['model_list']]
    assert all(value.startswith('os.environ/') for value in secrets)
    # the table's settings are copies: a config changed by its caller leaves the next one as it was
    config['router_settings']['num_retries'] = 9
    config['litellm_settings']['callbacks'].append('other')
    assert fleet_router.proxy_config(router(INT4, False, str(tmp_path)))['litellm_settings']['callbacks'] == ['prometheus']


@pytest.mark.parametrize('tls, workers, expected', [
    (False, 1, ['--config', '/etc/dgxspark/router/config.yaml', '--host', '0.0.0.0', '--port', '4000', '--num_workers', '1']),
    (False, 4, ['--config', '/etc/dgxspark/router/config.yaml', '--host', '0.0.0.0', '--port', '4000', '--num_workers', '4']),
    (True, 2, ['--config', '/etc/dgxspark/router/config.yaml', '--host', '0.0.0.0', '--port', '4000', '--num_workers', '2',
               '--ssl_certfile_path', '${CREDENTIALS_DIRECTORY}/api_tls_cert',
               '--ssl_keyfile_path', '${CREDENTIALS_DIRECTORY}/api_tls_key']),
], ids=['plain', 'four-workers', 'tls'])
def test_the_command_line_names_paths_only(tls, workers, expected, tmp_path):
    assert fleet_router.proxy_args(router(VL, tls, str(tmp_path)), '/etc/dgxspark/router/config.yaml',
                                   workers=workers) == expected


@pytest.mark.parametrize('workers', [0, 17, -1, '2', 2.0, True, None])
def test_workers_that_are_not_a_count_of_processes_are_refused(workers, tmp_path):
    with pytest.raises(ValueError, match=r"the router's workers are .*, not a whole number from 1 to 16: give "
                                         r"fleet_router_workers"):
        fleet_router.proxy_args(router(VL, False, str(tmp_path)), '/etc/dgxspark/router/config.yaml', workers=workers)


def test_the_units_environment_keeps_the_proxy_off_the_network_at_start_and_holds_no_key():
    environment = fleet_router.unit_environment()
    assert environment == {'LITELLM_LOCAL_MODEL_COST_MAP': 'True', 'LITELLM_MODE': 'PRODUCTION', 'DISABLE_ADMIN_UI': 'True',
                           'NO_DOCS': 'True'}
    assert not set(environment) & {fleet_router.MASTER_KEY_ENV, fleet_router.UPSTREAM_KEY_ENV}


ROTATION = [
    ('replicas-without-a', INT4, ['fleet_a'], [deployment(INT4_NAME, 'fleet_b', 'http://192.168.100.14:8000/v1')], None),
    ('replicas-without-b', INT4, ['fleet_b'], [deployment(INT4_NAME, 'fleet_a', 'http://192.168.100.10:8000/v1')], None),
    ('replicas-all-in', INT4, [], [deployment(INT4_NAME, 'fleet_a', 'http://192.168.100.10:8000/v1'),
                                   deployment(INT4_NAME, 'fleet_b', 'http://192.168.100.14:8000/v1')], None),
    ('replicas-both-out', INT4, ['fleet_a', 'fleet_b'], None, 'leaves Intel/Qwen3.5-397B-A17B-int4-AutoRound without a replica'),
    ('two-models-lone-replica', VL, ['fleet_b'], None, 'leaves QuantTrio/Qwen3-VL-235B-A22B-Instruct-AWQ without a replica'),
    ('unknown-group', INT4, ['fleet_c'], None, 'fleet_c is no serving group of the fleet (fleet_a, fleet_b)'),
]


@pytest.mark.parametrize('b_values, out, expected, refused', [c[1:] for c in ROTATION], ids=[c[0] for c in ROTATION])
def test_a_roll_takes_a_replica_out_of_the_router_only_while_another_serves_its_model(b_values, out, expected, refused, tmp_path):
    planned = router(b_values, False, str(tmp_path))
    before = copy.deepcopy(planned)
    if refused:
        with pytest.raises(ValueError, match=re.escape(refused)):
            fleet_router.in_rotation(planned, out)
    else:
        config = fleet_router.proxy_config(fleet_router.in_rotation(planned, out))
        assert config['model_list'] == expected
        # the router's other settings and the models it lists stay as planned
        assert config['router_settings'] == fleet_router.proxy_config(planned)['router_settings']
    assert planned == before
