# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving containers the plan makes (plugin_utils/serving_command.py) over real plans of cluster_plan: what each
node runs under Ray and mp, what only the node fills, what the table prints, and the node's own NCCL environment
(compute_nccl_env over a GB10's real device records) matching the planned one."""

from __future__ import annotations

import json
import os
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import cluster_plan as cp
from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_env import NODE_VALUE, compute_nccl_env
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.phase_inputs import with_containers
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import serving_command as sc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cluster_plan import PROFILES, cluster  # noqa: E402  pylint: disable=wrong-import-position
from test_nccl_env import gb10  # noqa: E402  pylint: disable=wrong-import-position

HOSTS = ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta']
# The roles' defaults on a real DGX Spark, as the plan action resolves them from roles/*/defaults/main.yml.
SPARK_INPUTS = {
    'vllm_container_image': 'vllm/vllm-openai:v0.33.0', 'vllm_container_name': 'dgxspark-vllm', 'vllm_container_model': '',
    'vllm_container_served_model_name': '', 'vllm_container_host': '0.0.0.0', 'vllm_container_port': 8000,
    'vllm_container_site_args': {}, 'vllm_container_extra_args': {}, 'vllm_container_extra_env': {},
    'vllm_container_open_paths': ['/health'], 'vllm_container_gpus': 'all', 'vllm_container_capabilities': [],
    'vllm_container_hf_token': False, 'vllm_container_restart_policy': 'no',
    'ray_cluster_image': 'vllm/vllm-openai:v0.33.0', 'ray_cluster_container_name': 'dgxspark-ray',
    'ray_cluster_ports': {'gcs': 6379, 'node_manager': 6380, 'object_manager': 6381, 'runtime_env_agent': 6382,
                          'dashboard_agent_grpc': 6383, 'dashboard_agent_listen': 52365, 'metrics_export': 6384,
                          'dashboard': 8265, 'client_server': 10001, 'min_worker': 10002, 'max_worker': 19999},
    'ray_cluster_num_gpus': 1, 'ray_cluster_dashboard': False, 'ray_cluster_client_server': False,
    'ray_cluster_object_store_memory': None, 'ray_cluster_gpus': 'all', 'ray_cluster_rdma_devices': ['/dev/infiniband'],
    'ray_cluster_memlock_ulimit': '-1', 'ray_cluster_capabilities': ['IPC_LOCK'],
    'ray_cluster_model_dir': '/root/.cache/huggingface', 'ray_cluster_vllm_cache_dir': '/var/cache/dgxspark/vllm',
    'ray_cluster_extra_env': {}, 'ray_cluster_extra_volumes': [], 'ray_cluster_restart_policy': 'no',
}


def plan_of(backend='ray', **cluster_vars):
    groups, hostvars = cluster(HOSTS, dgxspark_executor_backend=backend,
                               dgxspark_rails=[{'name': 'rail1', 'interface': 'enp1s0f1np1', 'subnet': '192.168.100.0/24'},
                                               {'name': 'rail2', 'interface': 'enP2p1s0f1np1', 'subnet': '192.168.101.0/24'}],
                               **cluster_vars)
    return cp.build_plan(groups, hostvars, PROFILES)


def containers(plan, **changes):
    return sc.serving_containers(plan, dict((host, dict(SPARK_INPUTS, **changes)) for host in HOSTS))


def test_every_role_input_the_commands_need_is_resolved_from_the_roles_defaults():
    assert sorted(SPARK_INPUTS) == sorted(n for names in sc.INPUTS.values() for n in names)


@pytest.mark.parametrize('backend, host, ray, vllm', [
    ('ray', 'spark-alpha', True, True),
    ('ray', 'spark-beta', True, False),
    ('mp', 'spark-alpha', False, True),
    ('mp', 'spark-delta', False, True),
])
def test_which_containers_run_where(backend, host, ray, vllm):
    found = containers(plan_of(backend))[host]
    assert (found['ray'] is not None, found['vllm'] is not None) == (ray, vllm)


def test_the_heads_vllm_under_ray_is_the_planned_command():
    spec = containers(plan_of('ray'))['spark-alpha']['vllm']
    argv = spec['argv']
    assert argv[:2] == ['serve', 'Qwen/Qwen3.5-397B-A17B-FP8']
    for option, value in (('--tensor-parallel-size', '4'), ('--pipeline-parallel-size', '1'),
                          ('--distributed-executor-backend', 'ray'), ('--gpu-memory-utilization', '0.85'),
                          ('--served-model-name', 'Qwen/Qwen3.5-397B-A17B-FP8'), ('--port', '8000')):
        assert argv[argv.index(option) + 1] == value, option
    assert argv[-2:] == sc.GUARD_MIDDLEWARE
    env = spec['env']
    assert env['DGXSPARK_VLLM_GPUS'] == '4' and env['DGXSPARK_API_KEY_FILE'] == sc.API_KEY_IN_CONTAINER
    assert env['VLLM_HOST_IP'] == '192.168.100.10' and env['DGXSPARK_RAY_ADDRESS'] == '192.168.100.10:6379'
    assert env['NCCL_IB_HCA'] == NODE_VALUE and spec['node_env'] == ['NCCL_IB_HCA']
    assert json.loads(env['DGXSPARK_RAY_NON_CARRY_OVER'])[:3] == ['GLOO_SOCKET_IFNAME', 'HF_TOKEN', 'HUGGING_FACE_HUB_TOKEN']
    assert '/etc/dgxspark/secrets/vllm_api_key:/run/secrets/dgxspark/vllm_api_key:ro' in spec['volumes']
    # The driver joins its Ray container's PID namespace (it finds the raylet by process), never the host's.
    assert 'dgxspark-ray-tmp:/tmp/ray:rw' in spec['volumes'] and spec['pid_mode'] == 'container:dgxspark-ray'
    # Only the start script opens the key's file (CAP_DAC_READ_SEARCH), then drops both for vLLM (CAP_SETPCAP).
    assert spec['devices'] is None and spec['capabilities'] == ['DAC_READ_SEARCH', 'SETPCAP'] and spec['hf_token_file'] is False
    assert '--pid container:dgxspark-ray' in sc.docker_options(spec) and '--pid host' not in sc.docker_options(spec)
    # No docker-init in the Ray container's namespace: a dumpable process of this container (issue 49, item A).
    assert spec['init'] is False and '--init' not in sc.docker_options(spec)


@pytest.mark.parametrize('backend, host, container', [
    ('ray', 'spark-alpha', 'ray'), ('ray', 'spark-gamma', 'ray'), ('mp', 'spark-alpha', 'vllm'), ('mp', 'spark-delta', 'vllm'),
])
def test_a_container_with_a_pid_namespace_of_its_own_runs_dockers_init(backend, host, container):
    spec = containers(plan_of(backend))[host][container]
    assert spec['init'] is True and '--init' in sc.docker_options(spec)


@pytest.mark.parametrize('backend, host, container', [
    ('ray', 'spark-alpha', 'ray'), ('ray', 'spark-gamma', 'ray'), ('mp', 'spark-alpha', 'vllm'), ('mp', 'spark-delta', 'vllm'),
])
def test_no_container_shares_the_hosts_pid_namespace(backend, host, container):
    assert containers(plan_of(backend))[host][container]['pid_mode'] is None


def test_rank_0_of_mp_opens_the_key_and_a_headless_rank_has_no_key_capability():
    found = containers(plan_of('mp'))
    assert found['spark-alpha']['vllm']['capabilities'] == ['DAC_READ_SEARCH', 'SETPCAP', 'IPC_LOCK']
    assert found['spark-delta']['vllm']['capabilities'] == ['IPC_LOCK']


def test_a_ray_worker_joins_the_heads_rail_1_address_and_keeps_its_own_pid_namespace():
    spec = containers(plan_of('ray'))['spark-gamma']['ray']
    assert spec['argv'][:4] == ['worker', '--block', '--node-ip-address=192.168.100.12', '--num-gpus=1']
    assert '--address=192.168.100.10:6379' in spec['argv'] and spec['pid_mode'] is None
    assert spec['devices'] == ['/dev/infiniband'] and spec['ulimits'] == ['memlock:-1:-1'] and spec['capabilities'] == ['IPC_LOCK']


def test_an_mp_rank_is_headless_with_the_nodes_rdma_and_nothing_of_ray():
    spec = containers(plan_of('mp'))['spark-delta']['vllm']
    argv = spec['argv']
    assert '--headless' in argv and argv[argv.index('--node-rank') + 1] == '3' and argv[argv.index('--nnodes') + 1] == '4'
    assert '--middleware' not in argv
    assert spec['env']['DGXSPARK_RANK_WATCH'].startswith('192.168.100.10:')
    assert not [k for k in spec['env'] if k.startswith('RAY_')] and 'DGXSPARK_API_KEY_FILE' not in spec['env']
    assert not [v for v in spec['volumes'] if 'ray_token' in v or '/tmp/ray' in v]
    assert spec['devices'] == ['/dev/infiniband'] and spec['capabilities'] == ['IPC_LOCK'] and spec['pid_mode'] is None


@pytest.mark.parametrize('changes, key, value, from_node', [
    # a user's extra environment wins over the plan's, and a value it sets is no longer the node's to fill
    ({'ray_cluster_extra_env': {'NCCL_IB_HCA': '=mlx5_0:1'}}, 'NCCL_IB_HCA', '=mlx5_0:1', False),
    ({'vllm_container_extra_env': {'NCCL_DEBUG': 'INFO'}}, 'NCCL_DEBUG', 'INFO', False),
    ({'vllm_container_extra_env': {'HF_HUB_OFFLINE': None}}, 'HF_HUB_OFFLINE', None, False),
    ({}, 'NCCL_IB_HCA', NODE_VALUE, True),
    ({'ray_cluster_vllm_cache_dir': ''}, 'VLLM_CACHE_ROOT', None, False),
])
def test_the_environment_layers_and_what_the_node_fills(changes, key, value, from_node):
    spec = containers(plan_of('ray'), **changes)['spark-alpha']['vllm']
    assert spec['env'].get(key) == value
    assert (key in spec['node_env']) == from_node


@pytest.mark.parametrize('extra_env, used', [({}, False), ({'HF_HUB_OFFLINE': '0'}, True)])
def test_a_hugging_face_token_is_mounted_only_where_vllm_reads_it(extra_env, used):
    specs = containers(plan_of('ray'), vllm_container_hf_token=True, vllm_container_extra_env=extra_env)['spark-alpha']
    spec = specs['vllm']
    assert spec['hf_token_file'] is used and ('HF_TOKEN_PATH' in spec['env']) is used
    assert any(v.endswith(':/run/secrets/dgxspark/hf_token:ro') for v in spec['volumes']) is used


def test_extra_args_and_extra_volumes_reach_the_command_as_given():
    spec = containers(plan_of('ray'), vllm_container_extra_args={'max_num_seqs': 32},
                      ray_cluster_extra_volumes=['/opt/site:/opt/site'])['spark-alpha']['vllm']
    assert spec['argv'][spec['argv'].index('--max-num-seqs') + 1] == '32'
    assert '/opt/site:/opt/site:rw' in spec['volumes']


@pytest.mark.parametrize('transport', ['rdma', 'socket'])
def test_the_nodes_own_nccl_environment_is_the_planned_one_but_for_its_rdma_devices(transport):
    # What serving_env checks on every node, over a GB10's device records: equal apart from NCCL_IB_HCA.
    plan = plan_of('ray', dgxspark_nccl_transport=transport)
    planned = sc.planned_node_env(plan)['spark-alpha']
    found = compute_nccl_env(gb10(), ['enp1s0f1np1', 'enP2p1s0f1np1'], transport=transport, node='spark-alpha')['env']
    keys = planned['node_keys']
    assert keys == (['NCCL_IB_HCA'] if transport == 'rdma' else [])
    assert dict((k, v) for k, v in found.items() if k not in keys) == dict((k, v) for k, v in planned['env'].items() if k not in keys)
    assert all(found[key] == '=rocep1s0f1:1,roceP2p1s0f1:1' for key in keys)


def test_the_plan_table_prints_each_container_with_what_the_node_fills_named():
    lines = sc.command_lines(containers(plan_of('ray')))
    assert lines[0].startswith('Serving containers, as the deploy runs them')
    assert 'spark-alpha dgxspark-vllm: image vllm/vllm-openai:v0.33.0' in lines
    command = [line for line in lines if line.startswith('  command: vllm-serve.sh serve Qwen/Qwen3.5-397B-A17B-FP8 ')]
    assert len(command) == 1 and command[0].endswith('--middleware dgxspark_api_guard.KeyOnEveryRoute')
    assert sum('NCCL_IB_HCA=%s' % NODE_VALUE in line for line in lines) == 5  # 4 Ray containers and the head's vLLM
    assert '  docker: --network host --ipc host --init --cap-drop ALL --cap-add IPC_LOCK --security-opt no-new-privileges ' \
           '--gpus all --device /dev/infiniband --ulimit memlock=-1:-1 --restart no' in lines


def test_an_input_that_is_missing_names_the_node():
    inputs = dict((host, dict(SPARK_INPUTS)) for host in HOSTS)
    del inputs['spark-beta']['ray_cluster_model_dir']
    with pytest.raises(sc.ServingCommandError, match="spark-beta lacks 'ray_cluster_model_dir'"):
        sc.serving_containers(plan_of('ray'), inputs)


def test_a_phase_digests_only_the_containers_it_runs():
    # A vLLM option is the vllm phase's input, never the ray phase's, the supervisor's or the monitoring's.
    plan = plan_of('ray')
    before = dict(plan, containers=containers(plan), node_env=sc.planned_node_env(plan))
    after = dict(before, containers=containers(plan, vllm_container_extra_args={'max_num_seqs': 32}))
    for kinds, same in ((['ray'], True), ([], True), (['vllm'], False)):
        assert (with_containers({'plan': before}, kinds) == with_containers({'plan': after}, kinds)) is same, kinds
    assert 'node_env' not in with_containers({'plan': before}, [])['plan']


@pytest.mark.parametrize('backend', ['ray', 'mp'])
def test_every_serving_container_reads_the_one_hash_seed_from_its_file(backend):
    """Issue 50, item 8: one PYTHONHASHSEED for the cluster (prefix-cache hashes agree on every rank and after a restart),
    from a mounted 0600 file: never a value in the environment docker inspect shows."""
    specs = [spec for node in containers(plan_of(backend)).values() for spec in node.values() if spec]
    assert len(specs) == (5 if backend == 'ray' else 4)
    for spec in specs:
        assert spec['env']['DGXSPARK_HASH_SEED_FILE'] == sc.HASH_SEED_IN_CONTAINER and 'PYTHONHASHSEED' not in spec['env']
        assert '/etc/dgxspark/secrets/hash_seed:%s:ro' % sc.HASH_SEED_IN_CONTAINER in spec['volumes'], spec['volumes']


def test_with_tls_the_heads_vllm_serves_the_planned_certificate_from_read_only_mounts():
    plan = plan_of('ray')
    plan['api'] = {'tls': {'enabled': True, 'cert_file': '/etc/dgxspark/tls/api.crt', 'key_file': '/etc/dgxspark/secrets/api_tls_key',
                           'cert_in_container': '/run/dgxspark/tls/api.crt', 'key_in_container': '/run/secrets/dgxspark/api_tls_key'}}
    found = containers(plan)
    spec = found['spark-alpha']['vllm']
    argv = spec['argv']
    assert argv[argv.index('--ssl-certfile') + 1] == '/run/dgxspark/tls/api.crt'
    assert argv[argv.index('--ssl-keyfile') + 1] == '/run/secrets/dgxspark/api_tls_key'
    assert {'/etc/dgxspark/tls/api.crt:/run/dgxspark/tls/api.crt:ro',
            '/etc/dgxspark/secrets/api_tls_key:/run/secrets/dgxspark/api_tls_key:ro'} <= set(spec['volumes'])
    # the other ranks serve no API; and with TLS off nothing of it anywhere
    assert not any('ssl' in word for word in ' '.join(found['spark-beta']['ray']['argv']).split())
    plan['api']['tls'] = {'enabled': False}
    off = containers(plan)['spark-alpha']['vllm']
    assert '--ssl-certfile' not in off['argv'] and not any('api_tls' in volume for volume in off['volumes'])
