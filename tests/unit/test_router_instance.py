# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which instance of the fleet's router serves its port (issue 51, status.yml): module_utils/router_instance over the
formats the router's node gives (`nft list table inet dgxspark_router` as nft lists it, the file the swap loads,
`systemctl is-active` of both instances), and fleet_status's router line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jinja2
import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.module_utils import router_instance
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.fleet_operations import fleet_status
from stand_ins import stand_in

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures', 'router')
ROLE = os.path.join(ROOT, 'roles', 'fleet_router')
INSTANCES = {'a': 4001, 'b': 4002}
COLLECTIONS = os.path.join(ROOT, '.build', 'collections')


def listing(name):
    with open(os.path.join(FIXTURES, name), encoding='utf-8') as handle:
        return handle.read()


def swap_file(serving):
    """The file swap.yml writes and loads (dgxspark-router.nft.j2), for the instance it swaps to."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, 'templates')), undefined=jinja2.StrictUndefined)
    return env.get_template('dgxspark-router.nft.j2').render(
        ansible_managed='managed', _fleet_router_serving=serving, _fleet_router_nft_table='dgxspark_router',
        _fleet_router_plan={'port': 4000, 'instances': INSTANCES})


@pytest.mark.parametrize('text, port, found', [
    (listing('nft_list_serving_b.txt'), 4000, {'prerouting': 4002, 'output': 4002}),
    (listing('nft_list_serving_a.txt'), 4000, {'prerouting': 4001, 'output': 4001}),
    (listing('nft_list_chains_disagree.txt'), 4000, {'prerouting': 4002, 'output': 4001}),
    (listing('nft_list_no_rule.txt'), 4000, {}),
    (listing('nft_list_serving_b.txt'), 8000, {}),  # another port's rule is not the router's
    (swap_file('a'), 4000, {'prerouting': 4001, 'output': 4001}),
    (swap_file('b'), 4000, {'prerouting': 4002, 'output': 4002}),
    (None, 4000, {}),
])
def test_redirects(text, port, found):
    assert router_instance.redirects(text, port) == found


@pytest.mark.parametrize('output, states', [
    ('inactive\nactive\n', {'a': 'inactive', 'b': 'active'}),
    ('active\ninactive\n', {'a': 'active', 'b': 'inactive'}),
    ('failed\nactivating\n', {'a': 'failed', 'b': 'activating'}),
    ('inactive\n', {'a': 'inactive', 'b': 'unknown'}),
    ('', {'a': 'unknown', 'b': 'unknown'}),
])
def test_unit_states(output, states):
    assert router_instance.unit_states(output, ['a', 'b']) == states


B_ACTIVE = {'a': 'inactive', 'b': 'active'}


@pytest.mark.parametrize('text, states, recorded, serving, active, line, problem', [
    (listing('nft_list_serving_b.txt'), B_ACTIVE, 'b', 'b', True, 'router: instance b (port 4002) serves port 4000, active', None),
    (listing('nft_list_serving_a.txt'), {'a': 'active', 'b': 'inactive'}, 'a', 'a', True,
     'router: instance a (port 4001) serves port 4000, active', None),
    # a swap that left no record yet (an earlier release): the redirect decides
    (listing('nft_list_serving_b.txt'), B_ACTIVE, None, 'b', True, 'router: instance b (port 4002) serves port 4000, active', None),
    (listing('nft_list_serving_b.txt'), {'a': 'active', 'b': 'failed'}, 'b', 'b', False,
     'router: instance b (port 4002) serves port 4000, NOT active (failed)', 'whose unit dgxspark-router@b.service is failed'),
    (None, B_ACTIVE, 'b', None, False, 'router: no instance serves port 4000',
     "the router's nft table inet dgxspark_router is not loaded"),
    (listing('nft_list_no_rule.txt'), B_ACTIVE, 'b', None, False, 'router: no instance serves port 4000', 'redirects its port 4000 nowhere'),
    (listing('nft_list_chains_disagree.txt'), {'a': 'active', 'b': 'active'}, 'b', None, False, 'router: no instance serves port 4000',
     'to several ports (output to 4001, prerouting to 4002)'),
    (listing('nft_list_serving_b.txt').replace(':4002', ':4003'), B_ACTIVE, 'b', None, False, 'router: no instance serves port 4000',
     'redirected to 4003, which is no instance of the router (a on 4001, b on 4002)'),
    (listing('nft_list_serving_b.txt'), B_ACTIVE, 'a', 'b', True, 'router: instance b (port 4002) serves port 4000, active',
     'but the last swap recorded a'),
])
def test_serving_instance(text, states, recorded, serving, active, line, problem):
    got = router_instance.serving_instance(text, 4000, INSTANCES, states, recorded)
    assert (got['serving'], got['active'], got['line']) == (serving, active, line)
    assert got['serving_port'] == (INSTANCES[serving] if serving else None)
    if problem is None:
        assert got['problem'] is None
    else:
        assert problem in got['problem'], got['problem']
    assert got['installed']


def test_a_router_never_set_up_is_not_installed():
    got = router_instance.serving_instance(None, 4000, INSTANCES, {'a': 'inactive', 'b': 'inactive'}, None)
    assert not got['installed'] and got['serving'] is None


def test_the_modules_defaults_are_the_roles_paths():
    """router_instance reads what fleet_router writes: its table, its units and its record."""
    with open(os.path.join(ROLE, 'vars', 'main.yml'), encoding='utf-8') as handle:
        role = yaml.safe_load(handle)
    with open(os.path.join(ROOT, 'plugins', 'modules', 'router_instance.py'), encoding='utf-8') as handle:
        source = handle.read()
    options = yaml.safe_load(source.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])['options']
    assert options['table']['default'] == 'inet ' + role['_fleet_router_nft_table']
    assert options['unit_prefix']['default'] == role['_fleet_router_unit_prefix']
    assert options['record']['default'] == role['_fleet_router_active_file']
    for name in ('table', 'unit_prefix', 'record'):
        assert "%s=dict(type='%s', default='%s')" % (name, options[name]['type'], options[name]['default']) in source


def group_status(ok):
    return {'table': ['table of a group'], 'problems': [] if ok else ['h: vLLM not healthy'], 'ok': ok}


FLEET = {'models': [{'served_model_name': 'm', 'replicas': ['fleet_a', 'fleet_b']}],
         'endpoint': {'note': 'https://r:4000 (the router on r: every model above)'}}


@pytest.mark.parametrize('router, lines, ok, problems', [
    (None, [], True, []),
    # failed or skipped on the router's node: no line
    ({'failed': True, 'msg': 'no nft'}, [], True, []),
    ({'skipped': True}, [], True, []),
    (router_instance.serving_instance(listing('nft_list_serving_b.txt'), 4000, INSTANCES, B_ACTIVE, 'b'),
     ['  router: instance b (port 4002) serves port 4000, active'], True, []),
    (router_instance.serving_instance(None, 4000, INSTANCES, B_ACTIVE, 'b'),
     ['  router: no instance serves port 4000', "    router: the router's nft table inet dgxspark_router is not loaded"], False,
     ["router: the router's nft table inet dgxspark_router is not loaded"]),
    (router_instance.serving_instance(None, 4000, INSTANCES, {'a': 'inactive', 'b': 'inactive'}, None),
     ['  router: not set up on its node yet (deploy.yml --tags router)'], True, []),
])
def test_fleet_status_names_the_routers_serving_instance(router, lines, ok, problems):
    got = fleet_status([{'name': 'fleet_a', 'status': group_status(True)}, {'name': 'fleet_b', 'status': group_status(True)}],
                       FLEET, router)
    endpoint = got['table'].index('  endpoint: https://r:4000 (the router on r: every model above)')
    shown = got['table'][endpoint + 1:got['table'].index('Serving group fleet_a')]
    # each line as expected, up to the problem's advice at its end
    assert len(shown) == len(lines) and all(line.startswith(want) for line, want in zip(shown, lines)), shown
    assert got['ok'] == ok
    assert len(got['problems']) == len(problems) and all(p.startswith(w) for p, w in zip(got['problems'], problems)), got


def test_one_group_shows_no_router():
    got = fleet_status([{'name': '', 'status': group_status(True)}], None,
                       router_instance.serving_instance(None, 4000, INSTANCES, B_ACTIVE, 'b'))
    assert got['table'] == ['table of a group', 'healthy'] and got['ok']


def test_status_reads_the_router_on_its_node_and_shows_it_in_the_fleets_lines():
    with open(os.path.join(ROOT, 'playbooks', 'status.yml'), encoding='utf-8') as handle:
        plays = yaml.safe_load(handle)
    read = [task for play in plays for task in play.get('tasks', []) if 'dgxspark.cluster.router_instance' in task]
    assert len(read) == 1 and read[0]['register'] == 'status_router'
    assert 'inventory_hostname == dgxspark_fleet.router.host' in read[0]['when']
    assert read[0]['dgxspark.cluster.router_instance']['instances'] == '{{ dgxspark_fleet.router.instances }}'
    show = [play for play in plays if play.get('hosts') == 'localhost'][-1]
    assert 'hostvars[dgxspark_fleet.router.host].status_router' in show['vars']['_status_router']
    built = [task for task in show['tasks'] if 'ansible.builtin.set_fact' in task and 'dgxspark_status' in task['ansible.builtin.set_fact']]
    facts = built[0]['ansible.builtin.set_fact']
    assert all('fleet_status(dgxspark_fleet | default(none), _status_router)' in facts[name] for name in ('dgxspark_status', '_status_shown'))


@pytest.mark.parametrize('table_there, states, record, serving, active', [
    (True, 'inactive\nactive\n', 'b\n', 'b', True),
    (True, 'inactive\nfailed\n', 'b\n', 'b', False),
    (False, 'inactive\nactive\n', None, None, False),
])
def test_the_module_reads_nft_systemctl_and_the_record(tmp_path, table_there, states, record, serving, active):
    """The module as Ansible runs it, over stand-ins of nft (the listing of the fixture) and systemctl (is-active's lines)."""
    bindir = tmp_path / 'bin'
    fixture = os.path.join(FIXTURES, 'nft_list_serving_b.txt')
    nft = stand_in(bindir, 'nft', '#!/bin/sh\n[ "$*" = "list table inet dgxspark_router" ] || exit 2\n' + (
        'cat %s\n' % fixture if table_there else 'echo "Error: No such file or directory" >&2; exit 1\n'))
    systemctl = stand_in(bindir, 'systemctl', '#!/bin/sh\n[ "$*" = "is-active dgxspark-router@a.service dgxspark-router@b.service" ]'
                         ' || exit 2\nprintf "%s"\nexit 3\n' % states.replace('\n', '\\n'))
    if record:
        (tmp_path / 'active').write_text(record)
    args = tmp_path / 'args.json'
    args.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': {'port': 4000, 'instances': INSTANCES, 'nft': str(nft),
                                                        'systemctl': str(systemctl), 'record': str(tmp_path / 'active')}}))
    proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.router_instance', str(args)],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=COLLECTIONS), timeout=60, check=False)
    got = json.loads(proc.stdout)
    assert (got['serving'], got['active'], got['changed']) == (serving, active, False), got
    assert got['recorded'] == (record.strip() if record else None)
    assert (got['problem'] is None) == (serving is not None and active), got
