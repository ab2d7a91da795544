# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_container_env (module_utils/nccl_env.py): a node's serving containers'
environment from its layers, over the real output of compute_nccl_env for a GB10 with port 1 cabled."""

from __future__ import annotations

import json

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_env import (
    NON_CARRY_OVER_KEY, NcclEnvError, compute_nccl_env, serving_container_env)

from test_nccl_env import RAILS, gb10

NCCL = compute_nccl_env(gb10(), RAILS, node='spark-alpha')
SECRETS = ['VLLM_API_KEY', 'HF_TOKEN', 'HUGGING_FACE_HUB_TOKEN', 'PYTHONPATH']
PATCHES = {'DGXSPARK_PATCH_DIR': '/opt/dgxspark/patches', 'PYTHONPATH': '/opt/dgxspark/patches/site'}


def non_carry_over(env):
    return json.loads(env[NON_CARRY_OVER_KEY])


@pytest.mark.parametrize('layers, present, absent', [
    # The node's NCCL environment alone: every variable of it, as it is.
    ([NCCL['env']], dict(NCCL['env']), []),
    # A later layer wins: the cache root, then the patches' PYTHONPATH.
    ([NCCL['env'], {'VLLM_CACHE_ROOT': '/var/cache/vllm'}, PATCHES], dict(PATCHES, VLLM_CACHE_ROOT='/var/cache/vllm'), []),
    # The user's extra environment (last) overrides a computed value and removes another with null.
    ([NCCL['env'], {'NCCL_DEBUG': 'INFO', 'NCCL_NET_PLUGIN': None}], {'NCCL_DEBUG': 'INFO'}, ['NCCL_NET_PLUGIN']),
    ([NCCL['env'], {'NCCL_SOCKET_IFNAME': '=enp1s0f0np0'}], {'NCCL_SOCKET_IFNAME': '=enp1s0f0np0'}, []),
    # A variable removed by one layer and set again by a later one is present.
    ([NCCL['env'], {'NCCL_NET_PLUGIN': None}, {'NCCL_NET_PLUGIN': 'aws'}], {'NCCL_NET_PLUGIN': 'aws'}, []),
    # Empty layers (no cache root, no patches) change nothing.
    ([NCCL['env'], {}, {}], dict(NCCL['env']), []),
], ids=['nccl-only', 'later-layer-wins', 'extra-overrides-and-removes', 'extra-overrides-interface', 'removed-then-set',
        'empty-layers'])
def test_layers_merge_in_order(layers, present, absent):
    env = serving_container_env(layers, NCCL['per_host_keys'] + SECRETS)
    assert {k: env[k] for k in present} == present
    assert not set(absent) & set(env)
    assert None not in env.values()
    expected_keys = {k for layer in layers for k in layer} - set(absent) | {NON_CARRY_OVER_KEY}
    assert set(env) == expected_keys


@pytest.mark.parametrize('names, expected', [
    (NCCL['per_host_keys'] + SECRETS, sorted(set(NCCL['per_host_keys'] + SECRETS))),
    # PYTHONPATH named twice (never carried, and a patch sets it): once in the list.
    (['PYTHONPATH', 'VLLM_HOST_IP', 'PYTHONPATH'], ['PYTHONPATH', 'VLLM_HOST_IP']),
    ([], []),
], ids=['per-host-and-secrets', 'deduplicated', 'empty'])
def test_the_names_never_carried_are_a_sorted_json_list(names, expected):
    env = serving_container_env([NCCL['env']], names)
    assert non_carry_over(env) == expected
    # The text vLLM's start script writes as it is: JSON that Jinja's to_json gave before this filter.
    assert env[NON_CARRY_OVER_KEY] == json.dumps(expected)


def test_without_the_names_a_layer_keeps_its_own_list():
    # vllm_container's use: ray_cluster's node environment (first layer) holds the list already.
    node_env = serving_container_env([NCCL['env']], NCCL['per_host_keys'] + SECRETS)
    env = serving_container_env([node_env, {'DGXSPARK_PYTHON_DIR': '/opt/dgxspark/python'}, {'HF_TOKEN': None}])
    assert env == dict(node_env, DGXSPARK_PYTHON_DIR='/opt/dgxspark/python')
    assert NON_CARRY_OVER_KEY not in serving_container_env([NCCL['env']])


def test_the_inputs_are_not_changed():
    layers = [dict(NCCL['env']), {'NCCL_NET_PLUGIN': None}]
    copies = [dict(layer) for layer in layers]
    serving_container_env(layers, ['VLLM_HOST_IP'])
    assert layers == copies


@pytest.mark.parametrize('layers, names, fragment', [
    ({'NCCL_DEBUG': 'INFO'}, [], 'the layers must be a list of mappings, got dict'),
    ([NCCL['env'], ['NCCL_DEBUG=INFO']], [], 'layer 1 must be a mapping of variable names to values, got list'),
    ([NCCL['env'], None], [], 'layer 1 must be a mapping'),
    ([NCCL['env']], ['VLLM_HOST_IP', 3], 'non_carry_over must be a list of variable names'),
], ids=['layers-not-a-list', 'layer-a-list', 'layer-none', 'name-not-a-string'])
def test_bad_input_is_refused_with_a_clear_error(layers, names, fragment):
    with pytest.raises(NcclEnvError, match='serving_container_env: ' + fragment):
        serving_container_env(layers, names)
