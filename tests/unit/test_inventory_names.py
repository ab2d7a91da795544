# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Table tests for inventory_names: misspelled prefixed variables are refused with the closest known name."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import inventory_names as names
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import inventory_schema as schema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PREFIXES = ('dgxspark_', 'cx7_netplan_', 'fabric_check_', 'os_hardening_', 'node_firewall_', 'distribute_',
            'ray_cluster_', 'serving_env_', 'vllm_container_', 'supervisor_', 'monitoring_', 'fleet_router_')
KNOWN = frozenset(('dgxspark_tensor_parallel_size', 'dgxspark_pipeline_parallel_size', 'dgxspark_mtu',
                   'dgxspark_rails', 'ray_cluster_image', 'vllm_container_port', 'distribute_image'))
NODES = ('spark-a', 'spark-b', 'spark-c')
TAIL = 'a misspelled variable is ignored and its default used; fix or remove it.'


def on(hosts, *variables):
    """{host: its variable names}: the variables on the given hosts, ansible_host on every node."""
    return dict((host, ['ansible_host', 'inventory_hostname'] + (list(variables) if host in hosts else []))
                for host in NODES)


@pytest.mark.parametrize('host_vars, expected', [
    pytest.param(on(NODES, 'dgxspark_tensor_parallel_size', 'ray_cluster_image'), [], id='known names'),
    pytest.param(on(NODES, 'dgxspark_tensor_paralel_size'), [
        'dgxspark_tensor_paralel_size is not a variable of dgxspark.cluster (did you mean dgxspark_tensor_parallel_size?): '
        'set on every node; ' + TAIL], id='misspelled collection variable'),
    pytest.param(on(NODES, 'ray_cluster_imgae'), [
        'ray_cluster_imgae is not a variable of dgxspark.cluster (did you mean ray_cluster_image?): set on every node; '
        + TAIL], id='misspelled role variable'),
    pytest.param(on(NODES, 'vllm_container_prot'), [
        'vllm_container_prot is not a variable of dgxspark.cluster (did you mean vllm_container_port?): '
        'set on every node; ' + TAIL], id='misspelled short role variable'),
    # The shared prefix does not make two names alike: no suggestion rather than a wrong one.
    pytest.param(on(NODES, 'dgxspark_banana'), [
        'dgxspark_banana is not a variable of dgxspark.cluster: set on every node; ' + TAIL], id='no close match'),
    # Another prefix's variable is suggested when it is the closest one.
    pytest.param(on(NODES, 'dgxspark_image'), [
        'dgxspark_image is not a variable of dgxspark.cluster (did you mean distribute_image?): set on every node; '
        + TAIL], id='closest name of another prefix'),
    pytest.param(on(('spark-c', 'spark-a'), 'dgxspark_mtuu'), [
        'dgxspark_mtuu is not a variable of dgxspark.cluster (did you mean dgxspark_mtu?): set on spark-a, spark-c; '
        + TAIL], id='some hosts only'),
    pytest.param(on(('spark-b',), 'dgxspark_mtuu'), [
        'dgxspark_mtuu is not a variable of dgxspark.cluster (did you mean dgxspark_mtu?): set on spark-b; '
        + TAIL], id='one host'),
    pytest.param(on(NODES, '_dgxspark_internal', '_ray_cluster_plan', '_x'), [], id='internals ignored'),
    pytest.param(on(NODES, 'ansible_host', 'my_tensor_paralel_size', 'dgxspark', 'DGXSPARK_MTU', 'rails'), [],
                 id='names without a prefix ignored'),
    pytest.param(on(NODES, 'vllm_container_prot', 'dgxspark_tensor_paralel_size', 'dgxspark_banana'), [
        'dgxspark_banana is not a variable of dgxspark.cluster: set on every node; ' + TAIL,
        'dgxspark_tensor_paralel_size is not a variable of dgxspark.cluster (did you mean dgxspark_tensor_parallel_size?): '
        'set on every node; ' + TAIL,
        'vllm_container_prot is not a variable of dgxspark.cluster (did you mean vllm_container_port?): '
        'set on every node; ' + TAIL], id='every problem at once, sorted'),
])
def test_unknown_variable_problems(host_vars, expected):
    assert names.unknown_variable_problems(host_vars, KNOWN, PREFIXES) == expected


def test_same_misspelling_on_different_hosts_is_one_problem():
    host_vars = {'spark-a': {'dgxspark_mtuu': 1}, 'spark-b': {'dgxspark_mtuu': 2}, 'spark-c': {}}
    problems = names.unknown_variable_problems(host_vars, KNOWN, PREFIXES)
    assert len(problems) == 1 and 'set on spark-a, spark-b;' in problems[0], problems


def test_no_nodes_no_problems():
    assert names.unknown_variable_problems({}, KNOWN, PREFIXES) == []


def test_prefixes_are_the_collection_and_its_roles():
    assert sorted(names.variable_prefixes(ROOT)) == sorted(PREFIXES)


@pytest.mark.parametrize('name', [
    'dgxspark_tensor_parallel_size',  # inventory schema
    'ray_cluster_image',  # role defaults
    'vllm_container_port',
    'node_firewall_api_allowed_cidrs',
    'dgxspark_api_allowed_cidrs',  # shared by several roles
    'dgxspark_monitoring_allowed_cidrs',
    'monitoring_scrape_ray',
    'dgxspark_hf_token',
    'dgxspark_model_download',
    'dgxspark_profiles_dir',
    'dgxspark_serving_groups',  # an inventory's serving groups (issue 51)
    'dgxspark_router_host',  # the fleet's router (issue 51)
    'dgxspark_router_port',
    'dgxspark_lab_state_dir',  # the lab inventory's
    'dgxspark_phase_force',  # a run's switch
])
def test_known_names_of_the_collection(name):
    assert name in names.known_names(ROOT)


@pytest.mark.parametrize('name', ['dgxspark_tensor_paralel_size', 'ray_cluster_imgae', 'dgxspark_made_up_variable',
                                  '_ray_cluster_plan'])
def test_known_names_leave_out_made_up_names_and_internals(name):
    assert name not in names.known_names(ROOT)


def test_known_names_are_what_the_collection_declares_never_what_its_files_mention(tmp_path):
    """Every entry point's argument specs and the inventory schema; not defaults, playbooks, inventories or docs."""
    (tmp_path / 'roles' / 'myrole' / 'meta').mkdir(parents=True)
    (tmp_path / 'roles' / 'myrole' / 'meta' / 'argument_specs.yml').write_text(
        'argument_specs:\n  main:\n    options:\n      myrole_port: {type: int}\n'
        '  other:\n    options:\n      myrole_other_entry: {type: str}\n')
    (tmp_path / 'roles' / 'myrole' / 'defaults').mkdir()
    (tmp_path / 'roles' / 'myrole' / 'defaults' / 'main.yml').write_text('myrole_port: 1\nmyrole_undeclared: 2\n')
    (tmp_path / 'playbooks').mkdir()
    (tmp_path / 'playbooks' / 'p.yml').write_text('- debug: {msg: "{{ dgxspark_a | default(1) }}"}\n')
    (tmp_path / 'inventories' / 'mine' / 'group_vars').mkdir(parents=True)
    (tmp_path / 'inventories' / 'mine' / 'group_vars' / 'all.yml').write_text('dgxspark_pipline_parallel_size: 1\n')
    (tmp_path / 'README.md').write_text('dgxspark_in_docs\n')
    known = names.known_names(str(tmp_path))
    assert {'myrole_port', 'myrole_other_entry'} <= known
    assert {'myrole_undeclared', 'dgxspark_a', 'dgxspark_pipline_parallel_size', 'dgxspark_in_docs'}.isdisjoint(known)
    assert known - {'myrole_port', 'myrole_other_entry'} == schema.declared_names()


def _shipped_inventory_names():
    """Every prefixed variable a shipped inventory (inventories/, molecule's group_vars, tests/inventories) sets."""
    found = set()
    for top in ('inventories', 'molecule', os.path.join('tests', 'inventories')):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            if top == 'molecule' and 'group_vars' not in dirpath.split(os.sep) or 'state' in dirpath.split(os.sep):
                continue
            for name in files:
                if name.endswith(('.yml', '.yaml')):
                    with open(os.path.join(dirpath, name), encoding='utf-8') as handle:
                        data = yaml.safe_load(handle)
                    found.update(_prefixed_keys(data))
    return sorted(found)


def _prefixed_keys(data):
    """Variable names of a group_vars file or of a YAML inventory (hosts' and groups' vars)."""
    keys = set()
    if isinstance(data, dict):
        for key, value in data.items():
            if key in ('all', 'children', 'hosts') or key in ('head', 'workers') or isinstance(value, dict) and (
                    'hosts' in value or 'children' in value or 'vars' in value):
                keys |= _prefixed_keys(value)
            elif key == 'vars':
                keys |= set(value or {})
            elif any(str(key).startswith(p) for p in names.variable_prefixes(ROOT)):
                keys.add(key)
            elif isinstance(value, dict):
                keys |= _prefixed_keys(value)  # a host's own variables
    return keys


@pytest.mark.parametrize('name', _shipped_inventory_names())
def test_every_variable_a_shipped_inventory_sets_is_declared(name):
    assert name in names.known_names(ROOT) or not any(name.startswith(p) for p in names.variable_prefixes(ROOT))
