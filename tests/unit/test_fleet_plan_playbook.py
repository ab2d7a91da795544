# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/plan.yml on inventories/8node, two serving groups (issue 51), and on broken copies of it: each host gets
its group's plan, the table shows each group and the fleet, and every refusal names the hosts, groups and values.
Controller only: no host of the inventory is contacted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(ROOT, '.venv', 'bin', 'ansible-playbook')
EIGHT = os.path.join(ROOT, 'inventories', '8node')
GROUP_397B = ['spark-01', 'spark-02', 'spark-03', 'spark-04']
GROUP_VL = ['spark-05', 'spark-06', 'spark-07', 'spark-08']

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='run `make setup` first (.venv/bin/ansible-playbook)')


def run(playbook, inventory, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    return subprocess.run([ANSIBLE_PLAYBOOK, playbook, '-i', inventory] + list(extra), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_8node_inventory_plans_each_group_and_gives_each_host_its_groups_plan(tmp_path):
    dump = tmp_path / 'plan.json'
    result = run(os.path.join('tests', 'unit', 'fixtures', 'plans', 'dump_plan.yml'), EIGHT, '-e', 'golden_plan_dump=%s' % dump)
    assert result.returncode == 0, result.stdout + result.stderr
    got = json.loads(dump.read_text(encoding='utf-8'))
    for name, hosts, profile, head in (('fleet_397b', GROUP_397B, 'qwen3_5_397b_a17b_int4_autoround', 'spark-01'),
                                       ('fleet_vl', GROUP_VL, 'qwen3_vl_235b_a22b_awq', 'spark-05')):
        for host in hosts:
            plan = got['hosts'][host]
            assert (plan['model_profile'], plan['head'], [n['host'] for n in plan['nodes']]) == (profile, head, hosts)
            # the group's name, which its Prometheus labels every target with (`group`)
            assert plan['serving_group'] == name
            # Its Ray node joins its own group's head, at the head's rail-1 address.
            head_rail1 = plan['nodes'][0]['rail_addresses']['rail1']
            argv = plan['containers'][host]['ray']['argv']
            assert ('--address=%s:6379' % head_rail1 in argv) if host != head else ('head' in argv), argv
    rail1 = [n['rail_addresses']['rail1'] for hosts in (GROUP_397B, GROUP_VL) for n in got['hosts'][hosts[0]]['nodes']]
    assert rail1 == ['192.168.100.%d' % i for i in range(10, 18)]
    # Each group's Ray meets at its own head: no container of one group names the other's head.
    for host in GROUP_VL:
        assert '192.168.100.10:' not in json.dumps(got['hosts'][host]['containers'])
    assert [g['name'] for g in got['fleet']['groups']] == ['fleet_397b', 'fleet_vl']
    assert [m['replicas'] for m in got['fleet']['models']] == [['fleet_397b'], ['fleet_vl']]
    assert got['plan'] == got['hosts']['spark-01']


def test_the_8node_table_shows_each_group_then_the_fleet():
    result = run(os.path.join('playbooks', 'plan.yml'), EIGHT)
    output = ' '.join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    for text in ['Serving group fleet_397b (spark-01, spark-02, spark-03, spark-04)',
                 'Serving group fleet_vl (spark-05, spark-06, spark-07, spark-08)',
                 '0 spark-05 head 192.168.100.14 192.168.101.14', '3 spark-08 worker 192.168.100.17 192.168.101.17',
                 'Fleet: 2 serving groups, 8 nodes, 2 models',
                 'group fleet_vl: QuantTrio/Qwen3-VL-235B-A22B-Instruct-AWQ (qwen3_vl_235b_a22b_awq), head spark-05, TP 4 x PP 1, '
                 'ray, http://spark-05:8000/v1', 'endpoint: http://spark-01:4000/v1 (the router on spark-01: every model above',
                 'router: QuantTrio/Qwen3-VL-235B-A22B-Instruct-AWQ -> http://192.168.100.14:8000/v1 (fleet_vl)']:
        assert text in output, (text, output)


def broken_copy(tmp_path, change):
    """inventories/8node copied, then CHANGE(hosts, group_vars) applied to its parsed files (hosts.yml, group_vars/*; and
    _tmp, the test's directory)."""
    target = tmp_path / '8node'
    shutil.copytree(EIGHT, str(target))
    files = dict((name, yaml.safe_load((target / name).read_text(encoding='utf-8')))
                 for name in ('hosts.yml', 'group_vars/all.yml', 'group_vars/fleet_397b.yml', 'group_vars/fleet_vl.yml'))
    given = dict(files, _tmp=tmp_path)  # _tmp: a directory of the test's own (a secrets directory)
    change(given)
    files = dict((name, data) for name, data in given.items() if name != '_tmp')
    for name, data in files.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(yaml.safe_dump(data), encoding='utf-8')
    return str(target)


def _hosts(files, group):
    return files['hosts.yml']['all']['children'][group]['hosts']


CASES = [
    ('node-in-two-groups', lambda f: _hosts(f, 'fleet_vl').update({'spark-04': {'ansible_host': 'spark-04'}}), 2,
     ['Host spark-04 is in serving groups fleet_397b and fleet_vl: a node serves in one group only']),
    ('colliding-addresses', lambda f: f.update({'host_vars/spark-06.yml': {'dgxspark_rail_addresses': {'rail1': '192.168.100.11'}}}), 2,
     ['Rail address 192.168.100.11 (subnet 192.168.100.0/24) is given to spark-02 of group fleet_397b (rail rail1) and '
      'spark-06 of group fleet_vl (rail rail1)']),
    ('colliding-api-ports', lambda f: (_hosts(f, 'fleet_vl')['spark-05'].update({'ansible_host': 'spark-api'}),
                                       _hosts(f, 'fleet_397b')['spark-01'].update({'ansible_host': 'spark-api'})), 2,
     ['Serving groups fleet_397b and fleet_vl all serve their API at spark-api:8000']),
    ('shape-does-not-fit', lambda f: f['group_vars/fleet_vl.yml'].update({'dgxspark_tensor_parallel_size': 2}), 2,
     ['serving group fleet_vl (spark-05, spark-06, spark-07, spark-08): dgxspark_tensor_parallel_size x '
      'dgxspark_pipeline_parallel_size = 2 x 1 = 2 GPUs, but the inventory has 4 nodes', 'change the number of hosts in group fleet_vl.']),
    ('one-name-two-models', lambda f: f['group_vars/fleet_vl.yml'].update(
        {'vllm_container_served_model_name': 'Intel/Qwen3.5-397B-A17B-int4-AutoRound'}), 2,
     ['Serving groups fleet_397b and fleet_vl serve the model name Intel/Qwen3.5-397B-A17B-int4-AutoRound for different models']),
    ('unknown-group', lambda f: f['group_vars/all.yml'].update({'dgxspark_serving_groups': ['fleet_397b', 'fleet_v1']}), 2,
     ['dgxspark_serving_groups names fleet_v1, but the inventory has no host in group fleet_v1']),
    ('router-not-a-node', lambda f: f['group_vars/all.yml'].update({'dgxspark_router_host': 'spark-09'}), 2,
     ["dgxspark_router_host is 'spark-09', not a node of a serving group (spark-01, spark-02"]),
    ('router-port-taken', lambda f: f['group_vars/all.yml'].update({'dgxspark_router_port': 8265}), 2,
     ['dgxspark_router_port is 8265, the port of ray_cluster_ports.dashboard on spark-01']),
    ('router-port-of-one-group', lambda f: f['group_vars/fleet_vl.yml'].update({'dgxspark_router_port': 4100}), 2,
     ['dgxspark_router_port differs between the serving groups (fleet_397b: not set, fleet_vl: 4100): the fleet has one '
      'router; set it in group_vars/all only.']),
    ('router-in-a-classic-inventory', lambda f: f['hosts.yml']['all'].update(children={
        'head': {'hosts': {'spark-01': {}}}, 'workers': {'hosts': {'spark-02': {}, 'spark-03': {}, 'spark-04': {}}}}) or
     f['group_vars/all.yml'].update(dgxspark_serving_groups=None, dgxspark_router_host='spark-01', **f['group_vars/fleet_397b.yml']), 2,
     ['dgxspark_router_host is set, but the inventory has one serving group']),
    ('router-on-a-worker-with-tls', lambda f: f['group_vars/all.yml'].update(
        {'dgxspark_router_host': 'spark-06', 'dgxspark_api_tls': 'generated', 'dgxspark_secrets_dir': str(f['_tmp'] / 'secrets')}), 2,
     ['dgxspark_router_host is spark-06, but with dgxspark_api_tls generated the router serves HTTPS with the API '
      'certificate of a head']),
    ('router-two-api-keys', lambda f: f['group_vars/fleet_vl.yml'].update({'vllm_container_api_key': 'a-key-of-fleet-vl-only'}), 2,
     ['the serving groups do not share one API key (fleet_397b: the generated key; fleet_vl: its own vllm_container_api_key)']),
    ('replicas', lambda f: f['group_vars/fleet_vl.yml'].clear() or f['group_vars/fleet_vl.yml'].update(
        f['group_vars/fleet_397b.yml']), 0,
     ['Fleet: 2 serving groups, 8 nodes, 1 model', '2 replicas (fleet_397b, fleet_vl)']),
]


@pytest.mark.parametrize('change, rc, expected', [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_broken_fleet_is_refused_naming_hosts_groups_and_values(change, rc, expected, tmp_path):
    result = run(os.path.join('playbooks', 'plan.yml'), broken_copy(tmp_path, change))
    output = ' '.join((result.stdout + result.stderr).split())  # the callback folds long lines
    assert result.returncode == rc, output
    for text in expected:
        assert text in output, (text, output)
    if rc:
        # a fleet's problem, or the one group's (the classic inventory)
        assert 'The fleet plan is invalid' in output or 'The cluster plan is invalid' in output
