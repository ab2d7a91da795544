"""Table tests for the distribute role's computations (plugins/plugin_utils/distribute_plan.py), its action distribute_routes
and its filter distribute_relay_argv."""
from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail, AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.action import distribute_routes as routes_action
from ansible_collections.dgxspark.cluster.plugins.filter.distribute_relay_argv import FilterModule
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.distribute_plan import (
    RELAY, chain, image_targets, lacking_files, relay_argv, routes, senders)

PLAN = {
    'rails': [{'name': 'rail1'}, {'name': 'rail2'}],
    'nodes': [{'host': h, 'rail_addresses': {'rail1': '192.168.100.%d' % (10 + i), 'rail2': '192.168.101.%d' % (10 + i)}}
              for i, h in enumerate(['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta'])],
}


@pytest.mark.parametrize('targets,head,rail,expected', [
    # The model: the head first, then the targets in rank order whatever order they come in.
    (['spark-delta', 'spark-beta'], 'spark-alpha', None,
     [{'rail1': '192.168.100.10', 'rail2': '192.168.101.10'}, {'rail1': '192.168.100.11', 'rail2': '192.168.101.11'},
      {'rail1': '192.168.100.13', 'rail2': '192.168.101.13'}]),
    # The image: the targets only, on rail 1.
    (['spark-gamma', 'spark-beta'], None, 'rail1', ['192.168.100.11', '192.168.100.12']),
    (['spark-gamma'], None, 'rail2', ['192.168.101.12']),
    ([], 'spark-alpha', 'rail1', ['192.168.100.10']),
    ([], None, 'rail1', []),
    # The head among the targets is not repeated.
    (['spark-alpha', 'spark-beta'], 'spark-alpha', 'rail1', ['192.168.100.10', '192.168.100.11']),
])
def test_chain(targets, head, rail, expected):
    assert chain(PLAN, targets, head=head, rail=rail) == expected


@pytest.mark.parametrize('targets,head,rail,message', [
    (['spark-omega'], None, None, 'not nodes of the plan: spark-omega'),
    ([], 'spark-zeta', None, 'not nodes of the plan: spark-zeta'),
    (['spark-beta'], None, 'rail3', "rail 'rail3' is not a rail of the plan (rail1, rail2)"),
])
def test_chain_refuses_what_is_not_in_the_plan(targets, head, rail, message):
    with pytest.raises(ValueError, match=message.replace('(', r'\(').replace(')', r'\)')):
        chain(PLAN, targets, head=head, rail=rail)


HOSTS = ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta']


@pytest.mark.parametrize('ids,enabled,expected', [
    # every node has the head's image: nothing to send
    ({'spark-alpha': 'sha256:a', 'spark-beta': 'sha256:a', 'spark-gamma': 'sha256:a', 'spark-delta': 'sha256:a'}, True, []),
    # one lacks it, one has another build: both, in the play's order
    ({'spark-alpha': 'sha256:a', 'spark-beta': 'sha256:a', 'spark-gamma': '', 'spark-delta': 'sha256:b'}, True,
     ['spark-gamma', 'spark-delta']),
    # a node the survey did not reach has no fact: it receives too
    ({'spark-alpha': 'sha256:a', 'spark-beta': 'sha256:a', 'spark-gamma': 'sha256:a'}, True, ['spark-delta']),
    # the head has no image: there is nothing to send
    ({'spark-alpha': '', 'spark-beta': 'sha256:a'}, True, []),
    # distribute_image false
    ({'spark-alpha': 'sha256:a', 'spark-beta': ''}, False, []),
])
def test_image_targets(ids, enabled, expected):
    assert image_targets(HOSTS, 'spark-alpha', ids, enabled=enabled) == expected


@pytest.mark.parametrize('comparisons,expected', [
    ([], []),
    ([{'missing': ['a.safetensors'], 'wrong': []}], ['a.safetensors']),
    # two nodes lacking overlapping files: each path once, first seen first
    ([{'missing': ['b', 'a'], 'wrong': ['c']}, {'missing': ['a'], 'wrong': ['d', 'b']}], ['b', 'a', 'c', 'd']),
    # a comparison without lists (a node that lacks nothing)
    ([{'missing': None}, {}], []),
])
def test_lacking_files(comparisons, expected):
    assert lacking_files(comparisons) == expected


SSH = {'ssh_key': '/etc/dgxspark/secrets/distribute_ed25519', 'known_hosts': '/etc/dgxspark/distribute_known_hosts',
       'user': 'root', 'ssh_port': 22, 'cipher': 'aes128-gcm@openssh.com', 'progress': '/run/dgxspark/distribute/model.json'}
SSH_ARGV = ['--progress', '/run/dgxspark/distribute/model.json', '--ssh-key', '/etc/dgxspark/secrets/distribute_ed25519',
            '--known-hosts', '/etc/dgxspark/distribute_known_hosts', '--user', 'root', '--ssh-port', '22',
            '--cipher', 'aes128-gcm@openssh.com']


@pytest.mark.parametrize('command,options,rails,ssh,expected', [
    # the model streams: options in order, one --rail= per rail, then the connection
    ('model-send', {'dir': '/m', 'files': '/r/send.json', 'entries': '/r/entries.json', 'chain': '[{"rail1": "x"}]',
                    'connect_wait': 120}, ['rail1', 'rail2'], SSH,
     RELAY + ['model-send', '--dir', '/m', '--files', '/r/send.json', '--entries', '/r/entries.json',
              '--chain', '[{"rail1": "x"}]', '--connect-wait', '120', '--rail=rail1', '--rail=rail2'] + SSH_ARGV),
    # the image chain: numbers become strings, no rails
    ('image', {'source': 'vllm:0.33', 'total': 404000000, 'chain': '192.168.100.11,192.168.100.12', 'connect_wait': 60}, [],
     SSH, RELAY + ['image', '--source', 'vllm:0.33', '--total', '404000000', '--chain', '192.168.100.11,192.168.100.12',
                   '--connect-wait', '60'] + SSH_ARGV),
    # a null option or connection setting is left out
    ('image', {'source': 'x', 'total': None}, [], {'user': 'root', 'cipher': None}, RELAY + ['image', '--source', 'x', '--user', 'root']),
])
def test_relay_argv(command, options, rails, ssh, expected):
    assert relay_argv(command, options, rails=rails, ssh=ssh) == expected


@pytest.mark.parametrize('image_targets_, model_targets, expected', [
    # Only the head sends when every chain has one target; the last of each chain only receives.
    (['spark-gamma'], [], ['spark-alpha']),
    (['spark-delta', 'spark-beta'], [], ['spark-alpha', 'spark-beta']),
    (['spark-beta', 'spark-gamma', 'spark-delta'], ['spark-gamma', 'spark-delta'],
     ['spark-alpha', 'spark-beta', 'spark-gamma']),
    ([], ['spark-delta', 'spark-gamma', 'spark-beta'], ['spark-alpha', 'spark-beta', 'spark-gamma']),
    # Nothing to copy: nobody gets the key.
    ([], [], []),
    # The head among the targets is not a second sender.
    (['spark-alpha', 'spark-beta'], [], ['spark-alpha']),
], ids=['one target', 'two, in rank order', 'both chains', 'model only', 'nothing', 'head listed'])
def test_senders(image_targets_, model_targets, expected):
    assert senders(PLAN, 'spark-alpha', image_targets_, model_targets) == expected


def test_senders_refuse_a_host_outside_the_plan():
    with pytest.raises(ValueError, match='not nodes of the plan: spark-omega'):
        senders(PLAN, 'spark-alpha', ['spark-omega'], [])


HOSTS = [n['host'] for n in PLAN['nodes']]
COPY_OK = {'complete': True, 'missing': [], 'wrong': []}


def survey(image_ids, lacking):
    """Every node's findings as the role's survey leaves them: its image ID, and what it lacks of the model (head: nothing)."""
    return dict((host, {'_distribute_image_id': image_ids.get(host, ''), '_distribute_needs_model': host in lacking,
                        '_distribute_model_copy': dict(COPY_OK, complete=False, **lacking[host]) if host in lacking else COPY_OK})
                for host in HOSTS)


@pytest.mark.parametrize('found, image, expected', [
    # converged: nothing to send, nobody gets the key
    (survey(dict((h, 'sha256:1') for h in HOSTS), {}), True,
     {'image_targets': [], 'model_targets': [], 'any_work': False, 'senders': [], 'image_chain': [],
      'model_chain': [PLAN['nodes'][0]['rail_addresses']], 'lacking': []}),
    # one node without the image, two lacking model files (listed out of rank order)
    (survey({'spark-alpha': 'sha256:1', 'spark-beta': 'sha256:1', 'spark-gamma': 'sha256:0', 'spark-delta': 'sha256:1'},
            {'spark-delta': {'missing': ['b', 'a']}, 'spark-beta': {'missing': ['a'], 'wrong': ['c']}}), True,
     {'image_targets': ['spark-gamma'], 'model_targets': ['spark-beta', 'spark-delta'], 'any_work': True,
      'senders': ['spark-alpha', 'spark-beta'], 'image_chain': ['192.168.100.12'],
      'model_chain': [PLAN['nodes'][i]['rail_addresses'] for i in (0, 1, 3)], 'lacking': ['a', 'c', 'b']}),
    # the image not distributed: no image target whatever the IDs
    (survey({'spark-alpha': 'sha256:1'}, {}), False,
     {'image_targets': [], 'any_work': False, 'senders': []}),
    # the head without an image: nothing to send
    (survey({'spark-beta': 'sha256:1'}, {}), True, {'image_targets': [], 'any_work': False}),
])
def test_routes(found, image, expected):
    result = routes(found, PLAN, HOSTS, 'spark-alpha', image=image)
    assert dict((key, result[key]) for key in expected) == expected


def run_routes(args, hostvars):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    action = routes_action.ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars={'hostvars': hostvars, 'ansible_play_hosts': list(HOSTS), 'inventory_hostname': HOSTS[0]})


def test_the_routes_action():
    found = survey({'spark-alpha': 'sha256:1'}, {'spark-gamma': {'missing': ['x']}})
    result = run_routes({'plan': PLAN, 'head': 'spark-alpha', 'image': 'yes'}, found)
    assert result['changed'] is False and not result.get('failed')
    assert dict((key, result[key]) for key in routes(found, PLAN, HOSTS, 'spark-alpha')) == routes(found, PLAN, HOSTS, 'spark-alpha')
    assert result['image_targets'] == HOSTS[1:] and result['senders'] == ['spark-alpha', 'spark-beta', 'spark-gamma']
    with pytest.raises(AnsibleActionFail, match='^distribute_routes: not nodes of the plan: spark-omega'):
        run_routes({'plan': PLAN, 'head': 'spark-omega'}, found)


def test_the_relay_filter():
    filters = FilterModule().filters()
    assert list(filters) == ['distribute_relay_argv']   # who receives what is the action distribute_routes (issue 47)
    assert filters['distribute_relay_argv']('image', {'source': 'x'}) == RELAY + ['image', '--source', 'x']
    with pytest.raises(AnsibleFilterError, match='^distribute_relay_argv: '):
        filters['distribute_relay_argv']('image', 'not options')
