"""Table tests for the distribute role's computations (plugins/plugin_utils/distribute_plan.py) and its action
distribute_routes."""
import json
from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail
from ansible_collections.dgxspark.cluster.plugins.action import distribute_routes as routes_action
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.distribute_plan import (
    RELAY, chain, image_room_problem, image_targets, known_hosts, lacking_files, relay_argv, routes, senders)

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
GB = 10 ** 9
# Where a received image goes on a node, as distribute_survey answers: one root file system with 100 GB free.
ROOM = {'needs': [{'path': '/var/lib/dgxspark/distribute', 'role': 'spooled'}, {'path': '/var/lib/docker', 'role': 'loaded into Docker'}],
        'filesystems': [{'device': 2049, 'paths': ['/var/lib/dgxspark/distribute', '/var/lib/docker'], 'free': 100 * GB}]}


def survey(image_ids, lacking, size=19 * GB, room=None):
    """Every node's distribute_survey answer as the role registers it (_distribute_found): its image, its room for one,
    its host key, and (not on the head) its copy of the model compared with the head's."""
    found = {}
    for host in HOSTS:
        answer = {'image': {'id': image_ids[host], 'size': size} if image_ids.get(host) else None,
                  'image_room': (room or {}).get(host, ROOM), 'host_key': 'ssh-ed25519 KEY-' + host}
        if host != HOSTS[0]:
            answer['model'] = dict({'complete': host not in lacking, 'missing': [], 'wrong': [], 'disk_problem': ''},
                                   **lacking.get(host, {}))
        found[host] = {'_distribute_found': answer}
    return found


@pytest.mark.parametrize('found, image, expected', [
    # converged: nothing to send, nobody gets the key
    (survey(dict((h, 'sha256:1') for h in HOSTS), {}), True,
     {'image_targets': [], 'model_targets': [], 'any_work': False, 'senders': [], 'image_chain': [],
      'model_chain': [PLAN['nodes'][0]['rail_addresses']], 'lacking': [], 'problems': []}),
    # one node without the image, two lacking model files (listed out of rank order)
    (survey({'spark-alpha': 'sha256:1', 'spark-beta': 'sha256:1', 'spark-gamma': 'sha256:0', 'spark-delta': 'sha256:1'},
            {'spark-delta': {'missing': ['b', 'a']}, 'spark-beta': {'missing': ['a'], 'wrong': ['c']}}), True,
     {'image_targets': ['spark-gamma'], 'model_targets': ['spark-beta', 'spark-delta'], 'any_work': True,
      'senders': ['spark-alpha', 'spark-beta'], 'image_chain': ['192.168.100.12'],
      'model_chain': [PLAN['nodes'][i]['rail_addresses'] for i in (0, 1, 3)], 'lacking': ['a', 'c', 'b'], 'problems': []}),
    # the image not distributed: no image target whatever the IDs
    (survey({'spark-alpha': 'sha256:1'}, {}), False,
     {'image_targets': [], 'any_work': False, 'senders': []}),
    # the head without an image: nothing to send
    (survey({'spark-beta': 'sha256:1'}, {}), True, {'image_targets': [], 'any_work': False}),
    # no room: every node that lacks it is named, the model's first; a node with the image needs no room for it
    (survey({'spark-alpha': 'sha256:1', 'spark-beta': 'sha256:1'},
            {'spark-gamma': {'missing': ['a'], 'disk_problem': 'spark-gamma: not enough disk for the model at /m: ...'}},
            size=60 * GB), True,
     {'image_targets': ['spark-gamma', 'spark-delta'], 'model_targets': ['spark-gamma'],
      'problems': ['spark-gamma: not enough disk for the model at /m: ...',
                   'spark-gamma: not enough disk for the serving image: 60.0 GB spooled at /var/lib/dgxspark/distribute and '
                   '60.0 GB loaded into Docker at /var/lib/docker (one filesystem), 100.0 GB free; free 20.0 GB there (or '
                   'lower distribute_reserve_bytes)',
                   'spark-delta: not enough disk for the serving image: 60.0 GB spooled at /var/lib/dgxspark/distribute and '
                   '60.0 GB loaded into Docker at /var/lib/docker (one filesystem), 100.0 GB free; free 20.0 GB there (or '
                   'lower distribute_reserve_bytes)']}),
], ids=['converged', 'image and model', 'image off', 'head without image', 'no room'])
def test_routes(found, image, expected):
    result = routes(found, PLAN, HOSTS, 'spark-alpha', image=image)
    assert dict((key, result[key]) for key in expected) == expected


@pytest.mark.parametrize('filesystems, reserve, expected', [
    # Docker's store on a disk of its own: each file system is checked alone, only the short one named.
    ([{'device': 1, 'paths': ['/var/lib/dgxspark/distribute'], 'free': 100 * GB},
      {'device': 2, 'paths': ['/var/lib/docker'], 'free': 25 * GB}], 10 * GB,
     'spark-delta: not enough disk for the serving image: 19.0 GB loaded into Docker at /var/lib/docker + 10.0 GB kept free '
     '(distribute_reserve_bytes), 25.0 GB free; free 4.0 GB there (or lower distribute_reserve_bytes)'),
    ([{'device': 1, 'paths': ['/var/lib/dgxspark/distribute', '/var/lib/docker'], 'free': 38 * GB}], 0, ''),
])
def test_image_room_problem(filesystems, reserve, expected):
    assert image_room_problem('spark-delta', 19 * GB, dict(ROOM, filesystems=filesystems), reserve) == expected


RELAY_VARS = {'path': '/usr/local/lib/dgxspark/distribute_relay.py', 'ssh': dict((k, v) for k, v in SSH.items() if k != 'progress'),
              'progress': {'image': '/run/dgxspark/distribute/image.json', 'model': '/run/dgxspark/distribute/model.json'},
              'entries': '/run/dgxspark/distribute/model-entries.json', 'send_files': '/run/dgxspark/distribute/model-send.json',
              'spool_dir': '/var/lib/dgxspark/distribute', 'connect_wait': '300'}
SUBNETS = dict(PLAN, rails=[{'name': 'rail1', 'subnet': '192.168.100.0/24'}, {'name': 'rail2', 'subnet': '192.168.101.0/24'}])
MANIFEST = {'files': [{'path': p, 'size': 1, 'mtime_ns': 1, 'sha256': 's'} for p in ('a', 'b', 'c', 'config.json')]}


def test_what_the_copies_are_made_of():
    found = survey({'spark-alpha': 'sha256:1', 'spark-beta': 'sha256:1', 'spark-gamma': 'sha256:1'},
                   {'spark-delta': {'missing': ['c', 'a']}}, size=404000000)
    result = routes(found, SUBNETS, HOSTS, 'spark-alpha', relay=RELAY_VARS, image_name='vllm:0.33', model_dir='/m',
                    manifest=MANIFEST)
    assert result['image_argv'] == RELAY + [
        'image', '--source', 'vllm:0.33', '--total', '404000000', '--image-id', 'sha256:1', '--chain', '192.168.100.13',
        '--connect-wait', '300', '--progress', '/run/dgxspark/distribute/image.json'] + SSH_ARGV[2:]
    assert result['model_argv'] == RELAY + [
        'model-send', '--dir', '/m', '--files', '/run/dgxspark/distribute/model-send.json',
        '--entries', '/run/dgxspark/distribute/model-entries.json',
        '--chain', json.dumps([PLAN['nodes'][0]['rail_addresses'], PLAN['nodes'][3]['rail_addresses']]),
        '--connect-wait', '300', '--rail=rail1', '--rail=rail2'] + SSH_ARGV
    # what some node lacks, in the manifest's order
    assert [entry['path'] for entry in result['model_send']] == ['a', 'c']
    assert result['forced_config'] == {
        'relay': '/usr/local/lib/dgxspark/distribute_relay.py', 'ssh_key': '/etc/dgxspark/secrets/distribute_ed25519',
        'known_hosts': '/etc/dgxspark/distribute_known_hosts', 'user': 'root',
        'progress': {'image': '/run/dgxspark/distribute/image.json', 'model-recv': '/run/dgxspark/distribute/model.json'},
        'entries': '/run/dgxspark/distribute/model-entries.json', 'model_dirs': ['/m'],
        'rail_nets': ['192.168.100.0/24', '192.168.101.0/24'], 'image_id': 'sha256:1'}
    assert result['known_hosts'].splitlines() == ['192.168.100.%d,192.168.101.%d ssh-ed25519 KEY-%s' % (10 + i, 10 + i, h)
                                                  for i, h in enumerate(HOSTS)]
    # nothing to do: no host key is needed
    converged = survey(dict((h, 'sha256:1') for h in HOSTS), {})
    for host in HOSTS:
        converged[host]['_distribute_found']['host_key'] = ''
    assert routes(converged, SUBNETS, HOSTS, 'spark-alpha', relay=RELAY_VARS)['known_hosts'] == ''


@pytest.mark.parametrize('keys, message', [
    ({'spark-gamma': ''}, r"^no SSH host key \(/etc/ssh/ssh_host_ed25519_key.pub\) on spark-gamma: the nodes pin each other's"),
    ({'spark-alpha': '', 'spark-delta': None}, r'^no SSH host key .* on spark-alpha, spark-delta:'),
])
def test_known_hosts_refuses_a_node_without_a_host_key(keys, message):
    host_keys = dict((host, 'ssh-ed25519 K') for host in HOSTS)
    host_keys.update(keys)
    with pytest.raises(ValueError, match=message):
        known_hosts(PLAN, host_keys)


def run_routes(args, hostvars):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    action = routes_action.ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars={'hostvars': hostvars, 'ansible_play_batch': list(HOSTS), 'inventory_hostname': HOSTS[0]})


def test_the_routes_action():
    found = survey({'spark-alpha': 'sha256:1'}, {'spark-gamma': {'missing': ['x']}})
    result = run_routes({'plan': PLAN, 'head': 'spark-alpha', 'image': 'yes'}, found)
    assert result['changed'] is False and not result.get('failed')
    assert dict((key, result[key]) for key in routes(found, PLAN, HOSTS, 'spark-alpha')) == routes(found, PLAN, HOSTS, 'spark-alpha')
    assert result['image_targets'] == HOSTS[1:] and result['senders'] == ['spark-alpha', 'spark-beta', 'spark-gamma']
    with pytest.raises(AnsibleActionFail, match='^distribute_routes: not nodes of the plan: spark-omega'):
        run_routes({'plan': PLAN, 'head': 'spark-omega'}, found)
    # a node without room fails the task, naming it, with the routes still said
    short = survey({'spark-alpha': 'sha256:1'}, {}, size=60 * GB)
    failed = run_routes({'plan': PLAN, 'head': 'spark-alpha', 'reserve_bytes': '10000000000'}, short)
    assert failed['failed'] and failed['image_targets'] == HOSTS[1:]
    assert failed['msg'].split(' | ')[0].startswith('spark-beta: not enough disk for the serving image: 60.0 GB spooled')
    assert len(failed['msg'].split(' | ')) == 3 and ' + 10.0 GB kept free' in failed['msg']
