# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet router's two instances and their swap (roles/fleet_router, issue 51 item 2: reloaded without dropping
connections): each instance's start script listens on its own port, the router's own nft table redirects the router's
port to the serving instance (never node_firewall's table), node_firewall accepts the port the client called, and the
swap stops the old instance only after the port leads to a checked new one. The swap under load is molecule's
fleet_router scenario (its last check)."""

from __future__ import annotations

import os
import re
import subprocess

import jinja2
import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import fleet_router

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, 'roles', 'fleet_router')
PLAN = {'port': 4000, 'instances': {'a': 4001, 'b': 4002}, 'scheme': 'http', 'tls': {'enabled': False}}


def render(name, **values):
    """A template of the role, rendered by Jinja2 with the role's one filter it uses and the given variables."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, 'templates')), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters['dgxspark.cluster.fleet_router_args'] = fleet_router.proxy_args
    return env.get_template(name).render(dict({'ansible_managed': 'managed', '_fleet_router_plan': PLAN,
                                               '_fleet_router_nft_table': 'dgxspark_router'}, **values))


@pytest.fixture(name='start_script')
def fixture_start_script(tmp_path):
    """start.sh rendered over a stand-in venv whose litellm prints its arguments and the key's variable's length."""
    (tmp_path / 'venv' / 'bin').mkdir(parents=True)
    litellm = tmp_path / 'venv' / 'bin' / 'litellm'
    litellm.write_text('#!/bin/sh\necho "$@"\necho "key ${#LITELLM_MASTER_KEY}"\n')
    litellm.chmod(0o755)
    (tmp_path / 'api_key').write_text('k' * 48)
    script = tmp_path / 'start.sh'
    script.write_text(render('start.sh.j2', _fleet_router_key_file=str(tmp_path / 'api_key'), _fleet_router_venv=str(tmp_path / 'venv'),
                             _fleet_router_config_file='/etc/dgxspark/router/config.yaml',
                             _fleet_router_config_dir='/etc/dgxspark/router',
                             fleet_router_workers='3'))  # as -e gives it: a string
    return script


@pytest.mark.parametrize('instance, port', [('a', 4001), ('b', 4002)])
def test_each_instance_listens_on_its_own_port(start_script, instance, port):
    out = subprocess.run(['sh', str(start_script), instance], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ['--config /etc/dgxspark/router/config.yaml --host 0.0.0.0 --port %d --num_workers 3' % port, 'key 48']


@pytest.mark.parametrize('argv', [[], ['c'], ['a b']])
def test_an_unknown_instance_does_not_start(start_script, argv):
    proc = subprocess.run(['sh', str(start_script)] + argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and 'not one of a, b' in proc.stderr and '--port' not in proc.stdout


@pytest.mark.parametrize('serving, port', [('a', 4001), ('b', 4002)])
def test_the_router_port_is_redirected_to_the_serving_instance_in_a_table_of_the_routers_own(serving, port):
    ruleset = render('dgxspark-router.nft.j2', _fleet_router_serving=serving)
    # one nft -f transaction replaces the table whole (atomic), and never node_firewall's table inet dgxspark
    assert re.findall(r'^(?:delete )?table inet (\S+)', ruleset, re.M) == ['dgxspark_router'] * 3
    rules = re.findall(r'^\s*(fib .*)$', ruleset, re.M)
    # from other hosts and from the node itself, to the node's own addresses only (not Docker's forwarded traffic)
    assert rules == ['fib daddr type local tcp dport 4000 redirect to :%d' % port] * 2
    assert 'hook prerouting priority dstnat' in ruleset and 'hook output priority -100' in ruleset


def test_node_firewall_accepts_the_port_the_client_called_not_the_instances():
    template = open(os.path.join(ROOT, 'roles', 'node_firewall', 'templates', 'dgxspark.nft.j2'), encoding='utf-8').read()
    # the input chain sees the instance's port after the redirect: it matches conntrack's original destination
    assert 'meta l4proto tcp ct original proto-dst {{ node_firewall_router_port }} ip saddr @api_nets accept' in template
    assert 'tcp dport {{ node_firewall_router_port }}' not in template


def _names(path):
    with open(os.path.join(ROLE, path), encoding='utf-8') as handle:
        tasks = yaml.safe_load(handle)
    flat = []
    for task in tasks:
        flat += [task['name']] + [t['name'] for t in task.get('block', [])]
    return flat


def test_the_swap_stops_the_old_instance_only_after_the_port_leads_to_a_checked_new_one():
    names = _names('tasks/swap.yml')
    order = [names.index(n) for n in (
        'Start the idle instance with the new configuration',
        'Wait for the idle instance to list the planned models with the fleet\'s key',
        'Swap the router\'s port to the new instance (one nft transaction; open connections stay where they are)',
        'Record the serving instance (status and the roll read it)',
        'Stop the old instance once its requests in flight are done (at most fleet_router_drain_timeout_s)')]
    assert order == sorted(order)
    unit = open(os.path.join(ROLE, 'templates', 'dgxspark-router@.service.j2'), encoding='utf-8').read()
    assert 'TimeoutStopSec={{ fleet_router_drain_timeout_s }}' in unit and 'ExecStart={{ _fleet_router_start_script }} %i' in unit
    handlers = open(os.path.join(ROLE, 'handlers', 'main.yml'), encoding='utf-8').read()
    assert 'tasks/swap.yml' in handlers and 'state: restarted' not in handlers
