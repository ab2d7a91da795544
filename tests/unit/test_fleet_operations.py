# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Operating a fleet's serving groups (issue 51 items 1 and 4): the filters serving_hosts, serving_batches and
fleet_status (tables), then the node plays over inventories/8node (two groups) and inventories/4node (one), run on the
controller only: each batch is exactly one group, in order, with its own plan; one group is one batch as before."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter.fleet_operations import fleet_status, serving_batches, serving_hosts
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import fleet_operations

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(ROOT, '.venv', 'bin', 'ansible-playbook')
BATCHES = os.path.join('tests', 'unit', 'fixtures', 'fleet', 'batches.yml')
EIGHT = os.path.join(ROOT, 'inventories', '8node')
FOUR = os.path.join(ROOT, 'inventories', '4node')
GROUP_397B = ['spark-01', 'spark-02', 'spark-03', 'spark-04']
GROUP_VL = ['spark-05', 'spark-06', 'spark-07', 'spark-08']

# Ansible's groups of a fleet of a 3-node group and a 2-node group, and of a one-group inventory.
FLEET = {'all': ['a1', 'a2', 'a3', 'b1', 'b2', 'router'], 'ungrouped': ['router'], 'fleet_a': ['a1', 'a2', 'a3'],
         'fleet_b': ['b1', 'b2']}
DECLARED = ['fleet_a', 'fleet_b']
ONE = {'all': ['h', 'w1', 'w2'], 'head': ['h'], 'workers': ['w1', 'w2'], 'ungrouped': []}


@pytest.mark.parametrize('groups, declared, selected, hosts', [
    (ONE, None, '', ['h', 'w1', 'w2']),
    (ONE, [], '', ['h', 'w1', 'w2']),
    (dict(ONE, workers=[]), None, '', ['h']),
    (FLEET, DECLARED, '', ['a1', 'a2', 'a3', 'b1', 'b2']),
    (FLEET, ['fleet_b', 'fleet_a'], '', ['b1', 'b2', 'a1', 'a2', 'a3']),
    (FLEET, DECLARED, 'fleet_b', ['b1', 'b2']),
    (FLEET, DECLARED, 'fleet_a', ['a1', 'a2', 'a3']),
    # head/workers that plan.yml adds in memory do not change a fleet's hosts
    (dict(FLEET, head=['a1', 'b1'], workers=['a2', 'a3', 'b2']), DECLARED, '', ['a1', 'a2', 'a3', 'b1', 'b2']),
])
def test_serving_hosts(groups, declared, selected, hosts):
    assert serving_hosts(groups, declared, selected) == hosts


@pytest.mark.parametrize('groups, declared, selected, words', [
    (FLEET, DECLARED, 'fleet_c', ["'fleet_c', which is no serving group", 'fleet_a, fleet_b']),
    (FLEET, DECLARED, 'router', ["'router', which is no serving group"]),
    (ONE, None, 'fleet_a', ['one serving group', 'leave dgxspark_serving_group out']),
])
def test_serving_hosts_refuses_a_group_that_is_no_serving_group(groups, declared, selected, words):
    with pytest.raises(AnsibleFilterError) as raised:
        serving_hosts(groups, declared, selected)
    message = str(raised.value)
    assert message.startswith('serving_hosts: ') and all(word in message for word in words), message


@pytest.mark.parametrize('groups, declared, selected, limit, batches', [
    (ONE, None, '', None, [3]),
    (ONE, None, '', 'w1', [3]),               # one group: one batch whatever the limit, as before
    (ONE, None, '', 'spark-*', [3]),          # any pattern: Ansible's own limit, untouched
    (FLEET, DECLARED, '', None, [3, 2]),
    (FLEET, DECLARED, 'fleet_b', None, [2]),
    (FLEET, DECLARED, '', 'fleet_b,localhost', [2]),
    (FLEET, DECLARED, '', 'fleet_a:localhost', [3]),
    (FLEET, DECLARED, '', 'a2,b1,b2', [1, 2]),
    (FLEET, DECLARED, '', 'all,!fleet_a', [2]),
    (FLEET, DECLARED, '', '!a1', [2, 2]),
    (FLEET, DECLARED, '', ['fleet_a', 'b2'], [3, 1]),
    (FLEET, DECLARED, '', 'localhost', [3, 2]),  # no serving node: the play has no host anyway
])
def test_serving_batches(groups, declared, selected, limit, batches):
    assert serving_batches(groups, declared, selected, limit) == batches


@pytest.mark.parametrize('limit', ['spark-0*', 'fleet_a&fleet_b', '~b.*', '@retry.txt'])
def test_serving_batches_refuses_a_limit_that_could_split_a_group(limit):
    with pytest.raises(AnsibleFilterError) as raised:
        serving_batches(FLEET, DECLARED, '', limit)
    assert 'group or host names' in str(raised.value) and 'dgxspark_serving_group=NAME' in str(raised.value)


def status(ok, problems=(), notes=()):
    return {'ok': ok, 'table': ['NODE RANK', 'h 0'], 'problems': list(problems), 'call': ['call: curl ...'], 'notes': list(notes)}


def test_fleet_status_of_one_group_is_its_table_as_before():
    got = fleet_status([{'name': '', 'status': status(False, ['h: vLLM not healthy'], ['w1: restarted once'])}])
    assert got['table'] == ['NODE RANK', 'h 0', 'problems:', 'h: vLLM not healthy', 'call: curl ...', 'notes:', 'w1: restarted once']
    assert (got['ok'], got['problems']) == (False, ['h: vLLM not healthy'])
    healthy = fleet_status([{'name': '', 'status': status(True)}])
    assert healthy['table'] == ['NODE RANK', 'h 0', 'healthy', 'call: curl ...'] and healthy['ok']


FLEET_VIEW = {'models': [{'served_model_name': 'lab', 'replicas': ['fleet_a', 'fleet_b']}],
              'endpoint': {'note': 'no router: clients call each group at its own address'}}


@pytest.mark.parametrize('a_ok, b_ok, headline, replicas, ok', [
    (True, True, 'Fleet: 2 serving groups, 2 healthy', 'model lab: replicas fleet_a (healthy), fleet_b (healthy)', True),
    (True, False, 'Fleet: 2 serving groups, 1 healthy (not: fleet_b)',
     'model lab: replicas fleet_a (healthy), fleet_b (NOT healthy)', False),
])
def test_fleet_status_shows_the_fleet_then_each_group(a_ok, b_ok, headline, replicas, ok):
    got = fleet_status([{'name': 'fleet_a', 'status': status(a_ok)},
                        {'name': 'fleet_b', 'status': status(b_ok, [] if b_ok else ['b1: vLLM not healthy'])}], FLEET_VIEW)
    table = got['table']
    assert table[:3] == [headline, '  ' + replicas, '  endpoint: no router: clients call each group at its own address']
    assert table.index('Serving group fleet_a') < table.index('Serving group fleet_b')
    assert '  ' + ('healthy' if b_ok else 'problems:') in table[table.index('Serving group fleet_b'):]
    assert got['ok'] is ok and got['groups'] == [{'name': 'fleet_a', 'ok': a_ok}, {'name': 'fleet_b', 'ok': b_ok}]
    assert got['problems'] == ([] if b_ok else ['group fleet_b: b1: vLLM not healthy'])


def test_fleet_status_refuses_no_group():
    with pytest.raises(AnsibleFilterError, match='fleet_status: no serving group was read'):
        fleet_status([])


needs_ansible = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='run `make setup` first (.venv/bin/ansible-playbook)')


def run(playbook, inventory, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    return subprocess.run([ANSIBLE_PLAYBOOK, playbook, '-i', inventory] + list(extra), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def batches(tmp_path, inventory, *extra):
    dump = tmp_path / 'batches.jsonl'
    result = run(BATCHES, inventory, '-e', 'fleet_batches_dump=%s' % dump, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in dump.read_text(encoding='utf-8').splitlines()]


@needs_ansible
@pytest.mark.parametrize('extra, groups', [
    ((), [GROUP_397B, GROUP_VL]),
    (('-e', 'dgxspark_serving_group=fleet_vl'), [GROUP_VL]),
    (('--limit', 'fleet_vl,localhost'), [GROUP_VL]),
    (('--limit', 'spark-03,spark-04,fleet_vl,localhost'), [['spark-03', 'spark-04'], GROUP_VL]),
])
def test_a_node_play_over_the_8node_fleet_runs_one_group_a_batch(tmp_path, extra, groups):
    got = batches(tmp_path, EIGHT, *extra)
    assert [line['batch'] for line in got] == groups
    for line, hosts in zip(got, groups):
        head = 'spark-01' if hosts[-1] in GROUP_397B else 'spark-05'
        assert line['heads'] == [head] * len(hosts), line  # each node has its own group's plan
    # plan.yml put each group's head into head and the others into workers, every serving node into dgxspark_serving_nodes
    assert got[0]['head'] == ['spark-01', 'spark-05']
    assert got[0]['workers'] == GROUP_397B[1:] + GROUP_VL[1:] and got[0]['serving_nodes'] == GROUP_397B + GROUP_VL


@needs_ansible
def test_a_node_play_over_one_group_is_one_batch_as_before(tmp_path):
    got = batches(tmp_path, FOUR, '--limit', 'spark-alpha,spark-gamma,localhost')
    assert [line['batch'] for line in got] == [['spark-alpha', 'spark-gamma']]
    got = batches(tmp_path / 'all', FOUR) if (tmp_path / 'all').mkdir() is None else None
    assert got == [{'batch': ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta'], 'heads': ['spark-alpha'] * 4,
                    'head': ['spark-alpha'], 'workers': ['spark-beta', 'spark-gamma', 'spark-delta'],
                    'serving_nodes': ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta']}]


@needs_ansible
def test_an_unknown_serving_group_is_refused_before_any_host_is_contacted(tmp_path):
    result = run(os.path.join('playbooks', 'stop.yml'), EIGHT, '-e', 'dgxspark_serving_group=fleet_xl')
    output = ' '.join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert "dgxspark_serving_group is 'fleet_xl', which is no serving group of this inventory: name one of fleet_397b, fleet_vl" in output
    assert 'UNREACHABLE' not in output


@needs_ansible
@pytest.mark.parametrize('playbook', ['deploy.yml', 'stop.yml', 'status.yml', 'rollback.yml', 'benchmark.yml', 'diagnose.yml',
                                      'preflight.yml', 'network.yml', 'os.yml', 'firewall.yml', 'distribute.yml', 'monitoring.yml'])
@pytest.mark.parametrize('inventory', [EIGHT, FOUR])
def test_every_operation_parses_over_a_fleet_and_over_one_group(playbook, inventory):
    result = run(os.path.join('playbooks', playbook), inventory, '--syntax-check', '-e', 'dgxspark_serving_group=fleet_vl'
                 if inventory == EIGHT else 'dgxspark_serving_group=')
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize('value, listed', [
    (None, None),
    (['fleet_a', 'fleet_b'], ['fleet_a', 'fleet_b']),
    (('fleet_a',), ['fleet_a']),
    ([], []),
    ('fleet_a', 'fleet_a'),  # not a list: as it is, which the plan refuses and serving_hosts lists no host for
])
def test_listed_declaration(value, listed):
    assert fleet_operations.listed_declaration(value) == listed


def listed_hosts(playbook, inventory, *extra):
    """{play number: (play name, sorted hosts)} of `ansible-playbook --list-hosts` (no hostvars there: nothing runs)."""
    result = run(os.path.join('playbooks', playbook), inventory, '--list-hosts', *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    plays, current = {}, None
    for line in result.stdout.splitlines():
        match = re.match(r'^  play #(\d+) \([^)]*\): (.*?)\tTAGS', line)
        if match:
            current = int(match.group(1))
            plays[current] = (match.group(2), [])
        elif current and re.match(r'^      \S+$', line):
            plays[current][1].append(line.strip())
    return {number: (name, sorted(hosts)) for number, (name, hosts) in plays.items()}


def node_plays(listing):
    """The listed hosts of every play but the controller's (localhost) and the router's (hosts: all)."""
    return {number: hosts for number, (name, hosts) in listing.items()
            if hosts != ['localhost'] and not name.startswith('Route the fleet')}


@needs_ansible
@pytest.mark.parametrize('playbook', ['deploy.yml', 'stop.yml', 'status.yml', 'firewall.yml'])
@pytest.mark.parametrize('inventory, extra, nodes', [
    (EIGHT, (), GROUP_397B + GROUP_VL),
    (EIGHT, ('-e', 'dgxspark_serving_group=fleet_vl'), GROUP_VL),
    (FOUR, (), ['spark-alpha', 'spark-beta', 'spark-delta', 'spark-gamma']),
    # one group: the group asked for is not known when listing, as before (a run refuses it)
    (FOUR, ('-e', 'dgxspark_serving_group=fleet_vl'), ['spark-alpha', 'spark-beta', 'spark-delta', 'spark-gamma']),
])
def test_listing_shows_the_serving_nodes_of_every_node_play(playbook, inventory, extra, nodes):
    listing = listed_hosts(playbook, inventory, *extra)
    plays = node_plays(listing)
    assert plays and all(hosts == sorted(nodes) for hosts in plays.values()), listing
    assert all(hosts == ['localhost'] for number, (_name, hosts) in listing.items() if number not in plays
               and not _name.startswith('Route the fleet'))


@needs_ansible
def test_listing_reads_the_serving_groups_wherever_the_inventory_sets_them(tmp_path):
    """Set in the inventory file's own vars, with a host in no serving group: only the serving groups' nodes are listed."""
    inventory = tmp_path / 'hosts.yml'
    inventory.write_text(json.dumps({'all': {
        'vars': {'dgxspark_serving_groups': ['fleet_b', 'fleet_a']},
        'hosts': {'router-only': {}},
        'children': {'fleet_a': {'hosts': {'a1': {}, 'a2': {}}}, 'fleet_b': {'hosts': {'b1': {}, 'b2': {}}},
                     'monitoring': {'hosts': {'mon': {}}}}}}), encoding='utf-8')
    plays = node_plays(listed_hosts('stop.yml', str(inventory)))
    assert plays and all(hosts == ['a1', 'a2', 'b1', 'b2'] for hosts in plays.values()), plays
    plays = node_plays(listed_hosts('stop.yml', str(inventory), '-e', 'dgxspark_serving_group=fleet_a'))
    assert plays and all(hosts == ['a1', 'a2'] for hosts in plays.values()), plays
