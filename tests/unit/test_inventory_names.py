# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Table tests for inventory_names: misspelled prefixed variables are refused with the closest known name."""

from __future__ import annotations

import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import inventory_names as names

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PREFIXES = ('dgxspark_', 'cx7_netplan_', 'fabric_check_', 'os_hardening_', 'node_firewall_', 'distribute_',
            'ray_cluster_', 'vllm_container_', 'supervisor_', 'monitoring_')
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
    'dgxspark_api_allowed_cidrs',  # read with default(...) only
    'dgxspark_monitoring_allowed_cidrs',
    'monitoring_scrape_ray',
    'dgxspark_hf_token',
    'dgxspark_model_download',
    'dgxspark_profiles_dir',
    'dgxspark_lab_state_dir',  # the lab inventory's
    'dgxspark_plan_result',  # registered by a playbook
])
def test_known_names_of_the_collection(name):
    assert name in names.known_names(ROOT)


@pytest.mark.parametrize('name', ['dgxspark_tensor_paralel_size', 'ray_cluster_imgae', 'dgxspark_made_up_variable',
                                  '_ray_cluster_plan'])
def test_known_names_leave_out_made_up_names_and_internals(name):
    assert name not in names.known_names(ROOT)


def test_known_names_scan_only_the_collection_directories(tmp_path):
    (tmp_path / 'roles' / 'myrole' / 'defaults').mkdir(parents=True)
    (tmp_path / 'roles' / 'myrole' / 'defaults' / 'main.yml').write_text('myrole_port: 1\nother_x: 2\n')
    (tmp_path / 'playbooks').mkdir()
    (tmp_path / 'playbooks' / 'p.yml').write_text('- debug: {msg: "{{ dgxspark_a | default(1) }} {{ _myrole_b }}"}\n')
    (tmp_path / 'playbooks' / 'notes.txt').write_text('dgxspark_not_scanned\n')
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'd.md').write_text('dgxspark_in_docs\n')
    assert names.known_names(str(tmp_path)) == frozenset(('myrole_port', 'dgxspark_a'))
