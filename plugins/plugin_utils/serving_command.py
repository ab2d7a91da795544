# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving containers of every node, exactly as the deploy runs them, computed once by the plan on the controller.

For each node: the Ray container (with the ray backend) and the vLLM container (the head's with Ray, every node's with
mp), each with its image, start script, argv, environment, mounts, devices, limits and capabilities. The roles
ray_cluster and vllm_container give these to Docker as they are; the plan table prints them (``command_lines``).

Only what a node alone knows is left to the node: its RDMA devices (``NCCL_IB_HCA``, from its sysfs), named in
``node_env``. Every other value of the NCCL environment follows from the plan (the rails, the node's planned rail-1
address, the transport), and the node's own computation (nccl_env) is checked against it before anything starts.
Nothing secret is here: a key or token travels as a 0600 file, and its mount is all the command shows.
"""

from __future__ import annotations

import json
import shlex

from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_env import NODE_VALUE, NON_CARRY_OVER_KEY, planned_nccl_env
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.api_tls import TLS_DIR
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.profile_schema import patch_container_env
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.ray_start import ray_start_argv
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.vllm_args import executor, vllm_argv

# Paths on a node, and where the containers see them (the roles write the files there).
PATHS = {
    'secrets_dir': '/etc/dgxspark/secrets',
    'python_dir': '/etc/dgxspark/python',
    'patches_dir': '/etc/dgxspark/patches',
    'tls_dir': TLS_DIR,
}
API_KEY_IN_CONTAINER = '/run/secrets/dgxspark/vllm_api_key'
#: What the head's vLLM start script needs to open the key's file (CAP_DAC_READ_SEARCH) and then to give that up for every
#: process it starts (CAP_SETPCAP: the bounding set); neither is left to vLLM.
KEY_READER_CAPABILITIES = ('DAC_READ_SEARCH', 'SETPCAP')
HF_TOKEN_IN_CONTAINER = '/run/secrets/dgxspark/hf_token'
RAY_TOKEN_IN_CONTAINER = '/run/secrets/dgxspark/ray_token'
# The cluster's one Python hash seed (generated once on the controller, kept across releases): the start scripts export it
# as PYTHONHASHSEED, so that vLLM's prefix-cache hashes agree on every rank and after a restart. A file, not a variable:
# who knows the seed can aim prompts at the cache's hashes.
HASH_SEED_IN_CONTAINER = '/run/secrets/dgxspark/hash_seed'
PYTHON_IN_CONTAINER = '/opt/dgxspark/python'
# vLLM's config root inside the containers (vllm-serve.sh writes the non-carry-over list there).
VLLM_CONFIG_DIR = '/run/dgxspark/vllm-config'
# /tmp/ray of the head's Ray container, a Docker volume its vLLM container shares: the driver finds its raylet there.
RAY_TMP_VOLUME = 'dgxspark-ray-tmp'
# Names vLLM's Ray executor must not copy from the head to the workers besides the per-host ones: the secrets, and the
# driver's PYTHONPATH (its container's own: the API guard).
NEVER_CARRIED = ('VLLM_API_KEY', 'HF_TOKEN', 'HUGGING_FACE_HUB_TOKEN', 'PYTHONPATH')
GUARD_MIDDLEWARE = ['--middleware', 'dgxspark_api_guard.KeyOnEveryRoute']

# The role variables the commands are made of (the plan resolves each as the role would: the inventory, -e, then the
# role's default), by role.
INPUTS = {
    'vllm_container': ('vllm_container_image', 'vllm_container_name', 'vllm_container_model', 'vllm_container_served_model_name',
                       'vllm_container_host', 'vllm_container_port', 'vllm_container_site_args', 'vllm_container_extra_args',
                       'vllm_container_extra_env', 'vllm_container_open_paths', 'vllm_container_gpus',
                       'vllm_container_capabilities', 'vllm_container_hf_token', 'vllm_container_restart_policy'),
    'ray_cluster': ('ray_cluster_image', 'ray_cluster_container_name', 'ray_cluster_ports', 'ray_cluster_num_gpus',
                    'ray_cluster_dashboard', 'ray_cluster_client_server', 'ray_cluster_object_store_memory', 'ray_cluster_gpus',
                    'ray_cluster_rdma_devices', 'ray_cluster_memlock_ulimit', 'ray_cluster_capabilities', 'ray_cluster_model_dir',
                    'ray_cluster_vllm_cache_dir', 'ray_cluster_extra_env', 'ray_cluster_extra_volumes',
                    'ray_cluster_restart_policy'),
}
# Read only to know whether it is set: the value itself never enters the plan.
SECRET_INPUTS = ('vllm_container_hf_token',)


class ServingCommandError(ValueError):
    """An input the serving commands cannot be made from."""


def _layers(layers):
    """Merge environment layers in order: a later one wins, a value None removes the variable."""
    env = {}
    for layer in layers:
        env.update(layer or {})
    return dict((key, value) for key, value in env.items() if value is not None)


def node_serving_env(plan, host, inputs):
    """(env, node_env) of every serving container of ``host``: NCCL's, vLLM's, Ray's, the cache's, the patches' and
    ray_cluster_extra_env; node_env lists the keys whose value the node supplies."""
    node = _node(plan, host)
    ray = 'ray' in node['runs']
    rail = plan['rails'][0]['name']
    nccl, per_host, node_keys = _planned_nccl(plan, node)
    if not ray:  # its one Ray variable (RAY_memory_monitor_refresh_ms) means nothing without Ray
        nccl = dict((k, v) for k, v in nccl.items() if not k.startswith('RAY_'))
    serving = {'VLLM_CONFIG_ROOT': VLLM_CONFIG_DIR, 'HF_HOME': inputs['ray_cluster_model_dir'], 'HF_HUB_OFFLINE': '1',
               'DGXSPARK_HASH_SEED_FILE': HASH_SEED_IN_CONTAINER}
    if ray:
        head_address = _node(plan, plan['head'])['rail_addresses'][rail]
        serving.update({
            'RAY_AUTH_MODE': 'token', 'RAY_AUTH_TOKEN_PATH': RAY_TOKEN_IN_CONTAINER, 'RAY_USAGE_STATS_ENABLED': '0',
            'DGXSPARK_RAY_ADDRESS': '%s:%s' % (head_address, inputs['ray_cluster_ports']['gcs']),
            # the engine core reaches its own node's rank over ZMQ sockets under this path: the volume both containers share
            'VLLM_RPC_BASE_PATH': '/tmp/ray',
        })
    cache = {'VLLM_CACHE_ROOT': inputs['ray_cluster_vllm_cache_dir']} if inputs['ray_cluster_vllm_cache_dir'] else {}
    env = _layers([{NON_CARRY_OVER_KEY: json.dumps(sorted(set(per_host) | set(NEVER_CARRIED)))}, nccl, serving, cache,
                   patch_container_env(plan.get('patches')), _mapping(inputs, 'ray_cluster_extra_env')])
    return env, [key for key in node_keys if key in env and env[key] == nccl.get(key)]


def bind(volume):
    """A mount as Docker records it (docker inspect's Binds): SRC:DEST with its mode, rw unless one is given."""
    return volume if str(volume).count(':') >= 2 else '%s:rw' % volume


def node_serving_volumes(plan, host, inputs):
    """The mounts every serving container of a node needs: the model, the hash seed, with Ray its token and /tmp/ray, the
    patches, vLLM's cache, then ray_cluster_extra_volumes."""
    model_dir, cache_dir = inputs['ray_cluster_model_dir'], inputs['ray_cluster_vllm_cache_dir']
    volumes = ['%s:%s:ro' % (model_dir, model_dir), '%s/hash_seed:%s:ro' % (PATHS['secrets_dir'], HASH_SEED_IN_CONTAINER)]
    if 'ray' in _node(plan, host)['runs']:
        volumes += ['%s/ray_token:%s:ro' % (PATHS['secrets_dir'], RAY_TOKEN_IN_CONTAINER), RAY_TMP_VOLUME + ':/tmp/ray']
    patches = patch_container_env(plan.get('patches'))
    if patches:
        volumes.append('%s:%s:ro' % (PATHS['patches_dir'], patches['DGXSPARK_PATCH_DIR']))
    if cache_dir:
        volumes.append('%s:%s' % (cache_dir, cache_dir))
    return [bind(volume) for volume in volumes + list(inputs['ray_cluster_extra_volumes'] or [])]


def rdma(inputs):
    """What the container of a node's NCCL rank needs for RoCE: the RDMA devices (without them NCCL falls back to TCP),
    the memlock limit and IPC_LOCK (memory registration)."""
    memlock = str(inputs['ray_cluster_memlock_ulimit'] if inputs['ray_cluster_memlock_ulimit'] is not None else '')
    return {'devices': list(inputs['ray_cluster_rdma_devices'] or []),
            'ulimits': ['memlock:%s:%s' % (memlock, memlock)] if memlock else [],
            'capabilities': list(inputs['ray_cluster_capabilities'] or [])}


def ray_container(plan, host, inputs):
    """The Ray container of ``host`` (the ray backend), or None under mp."""
    node, rail = _node(plan, host), plan['rails'][0]['name']
    if 'ray' not in node['runs']:
        return None
    env, node_env = node_serving_env(plan, host, inputs)
    argv = [node['role']] + ray_start_argv(
        inputs['ray_cluster_ports'], node['role'], node['rail_addresses'][rail], _node(plan, plan['head'])['rail_addresses'][rail],
        num_gpus=inputs['ray_cluster_num_gpus'], dashboard=inputs['ray_cluster_dashboard'],
        client_server=inputs['ray_cluster_client_server'], object_store_memory=inputs['ray_cluster_object_store_memory'])
    spec = {'name': inputs['ray_cluster_container_name'], 'image': inputs['ray_cluster_image'], 'script': 'ray-node.sh',
            'argv': argv, 'env': env, 'node_env': node_env, 'volumes': node_serving_volumes(plan, host, inputs),
            # Its own PID namespace on every node: nothing of Ray needs the host's processes (the head's vLLM container
            # joins this one instead, vllm_container).
            'pid_mode': None, 'init': True, 'gpus': inputs['ray_cluster_gpus'] == 'all',
            'restart_policy': inputs['ray_cluster_restart_policy']}
    spec.update(rdma(inputs))
    return spec


def vllm_container(plan, host, inputs):
    """The vLLM container of ``host``: the head's with Ray, every node's with mp (rank 0 with the API, the others
    --headless); None where none runs."""
    runs = _node(plan, host)['runs']
    if 'vllm' not in runs:
        return None
    head = host == plan['head']
    # Without a Ray container on the node (mp), this one holds the node's NCCL rank: RoCE's devices and limits, its own PIDs.
    rank = 'ray' not in runs
    model = inputs['vllm_container_model'] or plan['hf_repo']
    served = inputs['vllm_container_served_model_name'] or plan['hf_repo']
    # The profile's options, then what the plan decided, then the site's, then the user's extras (refused by the plan
    # where they would contradict a planned value).
    options = dict(plan['vllm_options'])
    options.update({
        'tensor_parallel_size': plan['tensor_parallel_size'], 'pipeline_parallel_size': plan['pipeline_parallel_size'],
        'max_model_len': plan['max_model_len'], 'gpu_memory_utilization': plan['gpu_memory_utilization'],
        'kv_cache_dtype': plan['kv_cache_dtype'], 'enable_expert_parallel': plan['enable_expert_parallel'],
        'served_model_name': [served], 'host': inputs['vllm_container_host'], 'port': inputs['vllm_container_port'],
    })
    tls = ((plan.get('api') or {}).get('tls') or {}) if head else {}
    if tls.get('enabled'):  # paths only: the key's content stays in its 0600 file, mounted read-only
        options.update({'ssl_certfile': tls['cert_in_container'], 'ssl_keyfile': tls['key_in_container']})
    executor_options, executor_env = executor(plan, host)
    options.update(executor_options)
    options.update(_mapping(inputs, 'vllm_container_site_args'))
    options.update(_mapping(inputs, 'vllm_container_extra_args'))
    argv = ['serve', model] + vllm_argv(options) + (GUARD_MIDDLEWARE if head else [])

    node_env, node_keys = node_serving_env(plan, host, inputs)
    extra_env = _mapping(inputs, 'vllm_container_extra_env')
    # vLLM reads a Hugging Face token only with the Hub online; only the head's vLLM resolves the model.
    offline = str(_layers([node_env, extra_env]).get('HF_HUB_OFFLINE')) == '1'
    hf_token = head and bool(inputs['vllm_container_hf_token']) and not offline
    own = {'DGXSPARK_API_KEY_FILE': API_KEY_IN_CONTAINER,
           'DGXSPARK_API_OPEN_PATHS': json.dumps(list(inputs['vllm_container_open_paths']))} if head else {}
    own.update(executor_env)
    env = _layers([node_env, {'DGXSPARK_PYTHON_DIR': PYTHON_IN_CONTAINER}, own,
                   {'HF_TOKEN_PATH': HF_TOKEN_IN_CONTAINER} if hf_token else {}, extra_env])
    volumes = node_serving_volumes(plan, host, inputs)
    if head:
        volumes.append('%s/vllm_api_key:%s:ro' % (PATHS['secrets_dir'], API_KEY_IN_CONTAINER))
    if tls.get('enabled'):
        volumes += ['%s:%s:ro' % (tls['cert_file'], tls['cert_in_container']), '%s:%s:ro' % (tls['key_file'], tls['key_in_container'])]
    volumes.append('%s:%s:ro' % (PATHS['python_dir'], PYTHON_IN_CONTAINER))
    if hf_token:
        volumes.append('%s/hf_token:%s:ro' % (PATHS['secrets_dir'], HF_TOKEN_IN_CONTAINER))
    node_rdma = rdma(inputs)
    capabilities = list(inputs['vllm_container_capabilities'] or [])
    # The key's file is readable only with CAP_DAC_READ_SEARCH (mode 0400 of an owner no process runs as): the start
    # script opens it with that capability, then drops it and CAP_SETPCAP for good before vLLM starts
    # (vllm-serve.sh), so that no other process of this container nor of the Ray container can open the file.
    for name in KEY_READER_CAPABILITIES if head else ():
        if name not in capabilities:
            capabilities.append(name)
    for name in node_rdma['capabilities'] if rank else []:  # it registers RDMA memory as Ray's container does
        if name not in capabilities:
            capabilities.append(name)
    return {'name': inputs['vllm_container_name'], 'image': inputs['vllm_container_image'], 'script': 'vllm-serve.sh',
            'argv': argv, 'env': env, 'node_env': [key for key in node_keys if env.get(key) == node_env.get(key)],
            # With Ray the driver finds its raylet by scanning the processes it sees (Ray >= 2.55, ray#63923): it joins
            # the PID namespace of the node's Ray container, never the host's. A rank of mp keeps its own.
            'volumes': volumes, 'pid_mode': None if rank else 'container:%s' % inputs['ray_cluster_container_name'],
            # Docker's init only in a PID namespace of its own: in the Ray container's, orphans go to that one's init,
            # and docker-init would be a dumpable process of this container (its /proc/PID/root opens this container's
            # files, the TLS key, to root in the Ray container); vLLM's processes are non-dumpable (dgxspark_api_guard).
            'init': bool(rank),
            'gpus': inputs['vllm_container_gpus'] == 'all',
            'devices': node_rdma['devices'] if rank else None, 'ulimits': node_rdma['ulimits'] if rank else None,
            'capabilities': capabilities, 'restart_policy': inputs['vllm_container_restart_policy'],
            'served_model_name': served, 'hf_token_file': hf_token}


def planned_node_env(plan):
    """{host: {'env': its NCCL environment as the plan knows it, 'node_keys': what only the node fills}}: what the
    serving_env role checks the node's own computation against."""
    found = {}
    for node in plan['nodes']:
        env, _per_host, node_keys = _planned_nccl(plan, node)
        found[node['host']] = {'env': env, 'node_keys': node_keys}
    return found


def serving_containers(plan, inputs_by_host):
    """{host: {'ray': spec or None, 'vllm': spec or None}} for every node of the plan."""
    containers = {}
    for node in plan['nodes']:
        host = node['host']
        try:
            inputs = inputs_by_host[host]
            containers[host] = {'ray': ray_container(plan, host, inputs), 'vllm': vllm_container(plan, host, inputs)}
        except KeyError as exc:
            raise ServingCommandError('the serving command of %s lacks %s' % (host, exc)) from exc
        except (TypeError, ValueError) as exc:
            raise ServingCommandError('the serving command of %s cannot be made: %s' % (host, exc)) from exc
    return containers


def docker_options(spec):
    """Docker's options of a container other than its environment and mounts, as `docker run` spells them."""
    words = ['--network host', '--ipc host'] + (['--pid %s' % spec['pid_mode']] if spec.get('pid_mode') else [])
    words += (['--init'] if spec.get('init') else []) + ['--cap-drop ALL'] + ['--cap-add %s' % cap for cap in spec.get('capabilities') or []]
    words += ['--security-opt no-new-privileges'] + (['--gpus all'] if spec.get('gpus') else [])
    words += ['--device %s' % device for device in spec.get('devices') or []]
    words += ['--ulimit %s=%s' % tuple(limit.split(':', 1)) for limit in spec.get('ulimits') or []]
    return words + ['--restart %s' % spec['restart_policy']]


def env_words(spec):
    """NAME=value of the container's environment, sorted (a value only the node knows shows as the plan's NODE_VALUE)."""
    return ['%s=%s' % (key, spec['env'][key]) for key in sorted(spec['env'])]


def command_lines(containers):
    """The plan table's section: each node's containers, image, start script and argv, environment, mounts, options."""
    lines = ['Serving containers, as the deploy runs them (%s: read from the node\'s CX-7 ports before it starts):'
             % NODE_VALUE]
    for host in containers:
        for kind in ('ray', 'vllm'):
            spec = containers[host][kind]
            if not spec:
                continue
            lines.append('%s %s: image %s' % (host, spec['name'], spec['image']))
            lines.append('  command: %s %s' % (spec['script'], ' '.join(shlex.quote(str(a)) for a in spec['argv'])))
            lines.append('  environment: %s' % ' '.join(env_words(spec)))
            lines.append('  mounts: %s' % ' '.join(spec['volumes']))
            lines.append('  docker: %s' % ' '.join(docker_options(spec)))
    return lines


def _planned_nccl(plan, node):
    """planned_nccl_env of a node of the plan: its rails, its rail-1 address, the plan's transport."""
    return planned_nccl_env([r['interface'] for r in plan['rails']], node['rail_addresses'][plan['rails'][0]['name']],
                            plan['nccl_transport'])


def _node(plan, host):
    for node in plan['nodes']:
        if node['host'] == host:
            return node
    raise ServingCommandError('%s is not a node of the plan' % host)


def _mapping(inputs, name):
    value = inputs.get(name) or {}
    if not isinstance(value, dict):
        raise ServingCommandError('%s must be a mapping' % name)
    return dict(value)
