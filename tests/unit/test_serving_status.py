# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the serving status table (playbooks/status.yml) and its problems."""

from __future__ import annotations

import copy
import datetime
import json
import pathlib

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.filter.serving_status import FilterModule
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.cluster_plan import serving_kinds
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.ray_membership import ray_membership
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.serving_status import ServingStatusError, build_serving_status
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_progress import container_state, first_exceptions, missing_container

FIXTURES = pathlib.Path(__file__).parent / 'fixtures'
HOSTS = ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta']
NOW = '2026-11-23T19:18:00Z'  # 2h03m after the containers started
STARTED = '2026-11-23T17:14:36.512345678Z'

CRASH = [
    '(EngineCore_DP0 pid=312) ERROR 11-23 17:15:04 [core.py:708] EngineCore failed to start.',
    '(EngineCore_DP0 pid=312) ERROR 11-23 17:15:04 [core.py:708] ValueError: Unknown quantization method: nvfp4.',
    '(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}',
]


def plan():
    return {
        'head': 'spark-alpha',
        'hf_repo': 'Qwen/Qwen3-235B-A22B-FP8',
        'nodes': [{'host': HOSTS[i], 'rank': i, 'role': 'head' if i == 0 else 'worker', 'runs': serving_kinds('ray', i),
                   'rail_addresses': {'rail1': '192.168.100.%d' % (10 + i), 'rail2': '192.168.101.%d' % (10 + i)}} for i in range(4)],
        'rails': [{'name': 'rail1', 'interface': 'enp1s0f1np1'}, {'name': 'rail2', 'interface': 'enP2p1s0f1np1'}],
    }


def container(name='dgxspark-ray', **changes):
    state = container_state((FIXTURES / 'vllm_progress' / 'docker_inspect_running.json').read_text(encoding='utf-8'))
    state['name'] = name
    state['started_at'] = STARTED
    state.update(changes)
    return state


def ray_probe(**changes):
    return {'container': container(**changes), 'logs': [], 'progress': None, 'health': None, 'models': None, 'chat': None}


def vllm_probe(**changes):
    result = {'container': container('dgxspark-vllm'), 'url': 'http://127.0.0.1:8000', 'logs': [], 'progress': None,
              'health': {'status': 200, 'error': None}, 'models': ['qwen3'], 'models_status': 200, 'models_error': None,
              'unauthorized_status': 401, 'chat': {'status': 200, 'content': 'I am Qwen3, a large language model.', 'error': None}}
    result.update(changes)
    return result


def membership(name='four_alive.json'):
    return ray_membership(json.loads((FIXTURES / 'ray_membership' / name).read_text(encoding='utf-8')), plan())


def healthy():
    return dict(plan=plan(), probes=dict((h, ray_probe()) for h in HOSTS), vllm=vllm_probe(), membership=membership(), unreachable=[],
                now=NOW, served_model_name='qwen3')


def test_healthy_cluster_table():
    status = build_serving_status(**healthy())
    assert status['ok'] is True
    assert status['problems'] == []
    assert status['table'] == [
        'node         rank  role    ray container  Ray           vLLM health  served model  uptime',
        '-----------  ----  ------  -------------  ------------  -----------  ------------  ------',
        'spark-alpha  0     head    running        alive, 1 GPU  200          qwen3         2h03m',
        'spark-beta   1     worker  running        alive, 1 GPU  -            -             2h03m',
        'spark-gamma  2     worker  running        alive, 1 GPU  -            -             2h03m',
        'spark-delta  3     worker  running        alive, 1 GPU  -            -             2h03m',
        'Ray: 4/4 nodes alive, 4 GPUs',
        'vLLM: container dgxspark-vllm on spark-alpha running; /health 200; model qwen3; chat answered: I am Qwen3, a large language model.; '
        'up 2h03m',
    ]
    assert status['rows'][1] == {'host': 'spark-beta', 'rank': 1, 'role': 'worker', 'ray_container': 'running', 'ray': 'alive, 1 GPU',
                                 'vllm_health': '-', 'served_model': '-', 'uptime': '2h03m'}


API = {'host': '10.20.0.11', 'port': 8000, 'url': 'http://10.20.0.11:8000/v1', 'served_model_name': 'qwen3',
       'api_key_file': '/root/.config/dgxspark/mine-0123456789ab/vllm_api_key', 'api_key_given': False}


@pytest.mark.parametrize('api, key', [
    (API, '$(cat /root/.config/dgxspark/mine-0123456789ab/vllm_api_key)'),
    (dict(API, api_key_given=True), '<vllm_container_api_key>'),  # the inventory gives the key: no file on the controller
])
def test_a_healthy_cluster_says_where_it_serves_and_how_to_call_it(api, key):
    """issue 48: a deploy with nothing to do printed no endpoint and no curl line, only the status table."""
    arguments = healthy()
    arguments['plan'] = dict(plan(), api=api)
    status = build_serving_status(**arguments)
    assert status['call'] == [
        'Endpoint: http://10.20.0.11:8000/v1 serving qwen3',
        '  curl -s http://10.20.0.11:8000/v1/chat/completions -H "Authorization: Bearer %s" '
        "-H 'Content-Type: application/json' \\" % key,
        '    -d \'{"model": "qwen3", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 64}\'',
    ]


TLS = {'enabled': True, 'ca_file': '/etc/dgxspark/tls/api-ca.crt', 'controller': {'ca_file': '/root/.config/dgxspark/m/api_tls/ca.crt'}}


@pytest.mark.parametrize('tls, curl', [
    (TLS, 'curl -s --cacert /root/.config/dgxspark/m/api_tls/ca.crt https://10.20.0.11:8000/v1/chat/completions'),
    # a public CA: curl trusts it already
    (dict(TLS, ca_file=None, controller={'ca_file': None}), 'curl -s https://10.20.0.11:8000/v1/chat/completions'),
])
def test_with_tls_the_call_line_is_https_and_names_the_ca_to_trust(tls, curl):
    arguments = healthy()
    arguments['plan'] = dict(plan(), api=dict(API, url='https://10.20.0.11:8000/v1', tls=tls))
    call = build_serving_status(**arguments)['call']
    assert call[0] == 'Endpoint: https://10.20.0.11:8000/v1 serving qwen3'
    assert call[1].startswith('  ' + curl + ' -H "Authorization: Bearer $(cat '), call


def test_an_unhealthy_cluster_gives_no_call_line():
    arguments = healthy()
    arguments['plan'] = dict(plan(), api=API)
    arguments['vllm'] = vllm_probe(health={'status': 503, 'error': None})
    status = build_serving_status(**arguments)
    assert status['ok'] is False and status['call'] == []


def _change(case):
    inputs = healthy()
    case(inputs)
    return inputs


@pytest.mark.parametrize('case, cells, phrases', [
    # A worker's Ray container exited: its row, the Ray membership, the problem with exit code and error lines.
    (lambda i: (i['probes'].update({'spark-delta': dict(
        ray_probe(status='exited', running=False, exit_code=137, oom_killed=True, finished_at='2026-11-23T18:00:00Z'),
        logs=[{'ts': None, 'line': 'Killed'}])}), i.update(membership=membership('delta_dead.json'))),
     {'spark-delta': ('exited (exit 137)', 'dead', '-')},
     ['The Ray container dgxspark-ray on spark-delta is not running (status exited, exit code 137, killed for lack of memory (OOMKilled)',
      'Its last error lines:\n  | Killed', 'spark-delta (rank 3, 192.168.100.13) left the Ray cluster']),
    # Restarted by Docker since it was created, running again but not back in Ray: a problem.
    (lambda i: (i['probes'].update({'spark-delta': ray_probe(restart_count=2)}), i.update(membership=membership('delta_dead.json'))),
     {'spark-delta': ('running, 2 restarts', 'dead', '2h03m')},
     ['The Ray container dgxspark-ray on spark-delta was restarted 2 times by Docker since it was created']),
    # Missing container, node not probed, unreachable node.
    (lambda i: i['probes'].update({'spark-gamma': {'container': missing_container(), 'logs': []}}),
     {'spark-gamma': ('missing', 'alive, 1 GPU', '-')},
     ['The Ray container does not exist on spark-gamma: start the cluster with the serving role.']),
    (lambda i: i['probes'].pop('spark-gamma'),
     {'spark-gamma': ('not probed', 'alive, 1 GPU', '-')},
     ['The Ray container of spark-gamma was not probed']),
    (lambda i: (i['probes'].pop('spark-beta'), i.update(unreachable=['spark-beta'], membership=membership('delta_never_joined.json'))),
     {'spark-beta': ('unreachable', 'alive, 1 GPU', '-'), 'spark-delta': ('running', 'missing', '2h03m')},
     ['spark-beta could not be reached by Ansible', 'spark-delta (rank 3, 192.168.100.13) is not in the Ray cluster']),
    # The head could not be asked for the Ray nodes.
    (lambda i: i.update(membership=None),
     {'spark-alpha': ('running', '?', '2h03m')},
     ['The Ray membership is unknown: the Ray node list could not be read on the head (spark-alpha)']),
    (lambda i: i.update(membership=membership('beta_management_port.json')),
     {'spark-beta': ('running', 'missing', '2h03m')},
     ['Ray node spark-beta joined with address 10.20.0.11']),
])
def test_ray_problems(case, cells, phrases):
    status = build_serving_status(**_change(case))
    assert status['ok'] is False
    rows = dict((r['host'], (r['ray_container'], r['ray'], r['uptime'])) for r in status['rows'])
    for host, expected in cells.items():
        assert rows[host] == expected, host
    text = '\n'.join(status['problems'])
    for phrase in phrases:
        assert phrase in text, phrase


@pytest.mark.parametrize('vllm, health, model, phrases', [
    (vllm_probe(health={'status': 503, 'error': 'HTTP 503: '}), '503', 'qwen3',
     ['vLLM /health on spark-alpha (http://127.0.0.1:8000) answers HTTP 503: the engine is not healthy']),
    (vllm_probe(health={'status': None, 'error': 'no answer from http://127.0.0.1:8000/health: [Errno 111] Connection refused'}, models=None,
                models_status=None, chat=None, unauthorized_status=None), 'no answer', '-',
     ['does not answer (no answer from http://127.0.0.1:8000/health: [Errno 111] Connection refused): the server is not up']),
    (vllm_probe(models=['Qwen/Qwen3-235B-A22B-FP8']), '200', 'Qwen/Qwen3-235B-A22B-FP8 (expected qwen3)',
     ['lists Qwen/Qwen3-235B-A22B-FP8 in /v1/models, not qwen3']),
    (vllm_probe(models=None, models_status=401, models_error='HTTP 401: {"error": "Unauthorized"}'), '200', '-',
     ['/v1/models on spark-alpha did not answer a list (HTTP 401, HTTP 401: {"error": "Unauthorized"}): check the API key']),
    (vllm_probe(chat={'status': 500, 'content': None, 'error': 'HTTP 500: {"error": "EngineDeadError"}'}), '200', 'qwen3',
     ['A chat completion on spark-alpha failed (HTTP 500: {"error": "EngineDeadError"})']),
    (vllm_probe(unauthorized_status=200), '200', 'qwen3', ['answers HTTP 200, not 401: the server does not enforce the key']),
    (None, '-', '-', ['vLLM on the head (spark-alpha) was not probed']),
    (vllm_probe(container=missing_container()), 'no container', '-', ['The vLLM container does not exist on the head (spark-alpha)']),
])
def test_vllm_problems(vllm, health, model, phrases):
    inputs = healthy()
    inputs['vllm'] = vllm
    status = build_serving_status(**inputs)
    assert status['ok'] is False
    head = status['rows'][0]
    assert (head['vllm_health'], head['served_model']) == (health if vllm is not None else 'not probed', model)
    text = '\n'.join(status['problems'])
    for phrase in phrases:
        assert phrase in text, phrase


@pytest.mark.parametrize('changes', [
    dict(status='restarting', running=False, restarting=True, exit_code=1, restart_count=5),
    dict(restart_count=3),
])
def test_vllm_crash_loop_quotes_the_error_lines(changes):
    inputs = healthy()
    inputs['vllm'] = vllm_probe(container=container('dgxspark-vllm', **changes), logs=[{'ts': None, 'line': line} for line in CRASH],
                                health={'status': None, 'error': 'no answer'}, models=None, chat=None)
    status = build_serving_status(**inputs)
    text = '\n'.join(status['problems'])
    assert 'The vLLM container dgxspark-vllm on spark-alpha is in a crash loop: Docker restarted it %d times' % changes['restart_count'] in text
    assert '  | (EngineCore_DP0 pid=312) ERROR 11-23 17:15:04 [core.py:708] ValueError: Unknown quantization method: nvfp4.' in text
    assert 'Engine core initialization failed' in text


@pytest.mark.parametrize('changes, opening', [
    (dict(status='exited', running=False, exit_code=1, restart_count=0), 'is not running (status exited, exit code 1).'),
    (dict(status='restarting', running=False, restarting=True, exit_code=1, restart_count=2), 'is in a crash loop'),
])
def test_a_stopped_engine_quotes_its_first_exceptions_before_its_last_lines(changes, opening):
    # The lab's real log of a rank that could not read a corrupt shard: its tail shows only the shutdown that followed.
    log = (FIXTURES / 'vllm_progress' / 'vllm_0.32_cpu_corrupt_shard_on_one_rank.log').read_text(encoding='utf-8').splitlines()
    first = first_exceptions(log)
    inputs = healthy()
    inputs['vllm'] = vllm_probe(container=container('dgxspark-vllm', **changes), logs=[{'ts': None, 'line': line} for line in log[-15:]],
                                first_exceptions=first, health={'status': None, 'error': 'no answer'}, models=None, chat=None)
    text = '\n'.join(build_serving_status(**inputs)['problems'])
    assert opening in text
    assert text.index('Its first exceptions:\n  | ray.exceptions.RayTaskError(SafetensorError)') < text.index('Its last error lines:')
    assert 'ip=192.168.100.13' in text and 'Error while deserializing header' in text


def test_unreachable_head_makes_vllm_unknown_not_a_second_problem():
    inputs = healthy()
    inputs.update(unreachable=['spark-alpha'], vllm=None, membership=None)
    inputs['probes'].pop('spark-alpha')
    status = build_serving_status(**inputs)
    assert status['problems'] == ['spark-alpha could not be reached by Ansible: its Ray and vLLM state is unknown; check that the node is up '
                                  'and that SSH to it works.']
    assert status['table'][-2:] == ['Ray: membership unknown', 'vLLM: unknown (spark-alpha unreachable)']
    assert status['rows'][0]['ray_container'] == 'unreachable'


@pytest.mark.parametrize('now', [
    NOW, 1795461480, 1795461480.0, datetime.datetime(2026, 11, 23, 19, 18, 0),
    datetime.datetime(2026, 11, 23, 20, 18, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
])
def test_now_forms(now):
    inputs = healthy()
    inputs['now'] = now
    assert build_serving_status(**inputs)['rows'][0]['uptime'] == '2h03m'


@pytest.mark.parametrize('result, phrase', [
    ({}, 'The Ray container of spark-gamma was not probed: check'),
    (None, 'The Ray container of spark-gamma was not probed: check'),
    ({'changed': False, 'skipped': True, 'skip_reason': 'Conditional result was False'}, 'was not probed (the probe was skipped)'),
    ({'failed': True, 'msg': '`docker inspect dgxspark-ray` failed (rc 1): permission denied while trying to connect to the Docker daemon'},
     'was not probed (the probe failed: `docker inspect dgxspark-ray` failed (rc 1): permission denied'),
])
def test_probe_results_that_did_not_run(result, phrase):
    """status.yml passes {} (default) for a node that was not reached, and skipped or failed task results as they come."""
    inputs = healthy()
    inputs['probes']['spark-gamma'] = result
    status = build_serving_status(**inputs)
    assert status['rows'][2]['ray_container'] == 'not probed'
    assert phrase in '\n'.join(status['problems'])


def test_failed_vllm_probe():
    inputs = healthy()
    inputs['vllm'] = {'failed': True, 'msg': 'api_key_file /etc/dgxspark/secrets/vllm_api_key cannot be read (FileNotFoundError)'}
    problems = build_serving_status(**inputs)['problems']
    assert problems == ['vLLM on the head (spark-alpha) was not probed (the probe failed: api_key_file /etc/dgxspark/secrets/vllm_api_key '
                        'cannot be read (FileNotFoundError)): start it with the serving role, or check why the status playbook could not '
                        'probe it.']


@pytest.mark.parametrize('source', ['result', 'invocation'])
def test_served_model_name_from_the_probe(source):
    inputs = healthy()
    inputs.pop('served_model_name')
    inputs['vllm'] = vllm_probe(models=['Qwen/Qwen3-235B-A22B-FP8'])
    if source == 'result':
        inputs['vllm']['served_model_name'] = 'qwen3'
    else:
        inputs['vllm']['invocation'] = {'module_args': {'container': 'dgxspark-vllm', 'served_model_name': 'qwen3',
                                                        'api_key_file': 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'}}
    status = build_serving_status(**inputs)
    assert status['rows'][0]['served_model'] == 'Qwen/Qwen3-235B-A22B-FP8 (expected qwen3)'


def test_served_model_name_default_accepts_any_model():
    inputs = healthy()
    inputs.pop('served_model_name')
    inputs['vllm'] = vllm_probe(models=['anything'])
    assert build_serving_status(**inputs)['ok'] is True


@pytest.mark.parametrize('changes, match', [
    (dict(plan={'nodes': 'x'}), 'cluster plan'),
    (dict(probes=['x']), 'probes'),
    (dict(probes={'spark-alpha': {'logs': []}}), 'serving_probe'),
    (dict(probes={'spark-alpha': 'running'}), 'serving_probe'),
    (dict(membership={'ok': True}), 'membership'),
    (dict(now='yesterday'), 'now'),
    (dict(now=True), 'now'),
])
def test_rejects(changes, match):
    inputs = healthy()
    inputs.update(changes)
    with pytest.raises(ServingStatusError, match=match):
        build_serving_status(**inputs)


def test_filter():
    status_filter = FilterModule().filters()['serving_status']
    inputs = healthy()
    status = status_filter(inputs['plan'], inputs['probes'], inputs['vllm'], inputs['membership'], [], now=NOW, served_model_name='qwen3')
    assert status['ok'] is True
    with pytest.raises(AnsibleFilterError, match='^serving_status: '):
        status_filter(copy.deepcopy(inputs['plan']), ['x'])


@pytest.mark.parametrize('change, note', [
    (lambda i: i['probes'].update({'spark-beta': ray_probe(restart_count=2)}),
     'The Ray container dgxspark-ray on spark-beta was restarted 2 times by Docker and works again (it healed by itself)'),
    (lambda i: i['vllm'].update(container=container('dgxspark-vllm', restart_count=1)),
     'The vLLM container dgxspark-vllm on spark-alpha was restarted 1 time by Docker and works again'),
])
def test_a_container_that_healed_by_itself_is_healthy_with_a_note(change, note):
    inputs = healthy()
    change(inputs)
    status = build_serving_status(**inputs)
    assert status['ok'] and status['problems'] == []
    assert [n for n in status['notes'] if note in n]


FIREWALL_OK = {'loaded': True, 'matches': True, 'problem': None, 'changed': False}
NOT_LOADED = ('the nftables table inet dgxspark is not loaded (Error: No such file or directory): its ports are open to every '
              'network; the firewall phase loads it again (deploy.yml --tags firewall)')


@pytest.mark.parametrize('beta, problem', [
    (FIREWALL_OK, None),
    (None, None),                                   # not read (an older status run): nothing said
    ({'skipped': True}, None),
    ({'loaded': False, 'matches': False, 'problem': NOT_LOADED}, 'The firewall of spark-beta: the nftables table inet dgxspark is '
                                                                 'not loaded (Error: No such file or directory)'),
    ({'loaded': True, 'matches': False, 'problem': 'the nftables table inet dgxspark differs from the one the firewall phase loaded'},
     'The firewall of spark-beta: the nftables table inet dgxspark differs from the one the firewall phase loaded.'),
    ({'failed': True, 'msg': '/usr/sbin/nft is missing: install the nftables package'},
     'The firewall of spark-beta: /usr/sbin/nft is missing: install the nftables package.'),
])
def test_a_node_whose_firewall_table_is_not_the_loaded_one_is_a_problem(beta, problem):
    firewall = dict((h, FIREWALL_OK) for h in HOSTS)
    firewall['spark-beta'] = beta
    status = build_serving_status(firewall=firewall, **healthy())
    if problem is None:
        assert status['ok'] and status['problems'] == []
    else:
        assert not status['ok'] and len(status['problems']) == 1 and status['problems'][0].startswith(problem)


def test_an_unreachable_node_s_firewall_is_not_a_second_problem():
    inputs = healthy()
    inputs['unreachable'] = ['spark-beta']
    firewall = {'spark-beta': {'loaded': False, 'matches': False, 'problem': NOT_LOADED}}
    problems = build_serving_status(firewall=firewall, **inputs)['problems']
    assert not any('firewall' in p for p in problems)


def test_firewall_must_be_a_mapping():
    with pytest.raises(ServingStatusError, match='firewall'):
        build_serving_status(firewall=['x'], **healthy())


# ---------------------------------------------------------------- vLLM's own multi-node backend (issue 23)

def mp_status(**changes):
    mp_plan = dict(plan(), mp_master={'address': '192.168.100.10', 'port': 29501})
    mp_plan['nodes'] = [dict(node, runs=serving_kinds('mp', node['rank'])) for node in mp_plan['nodes']]
    probes = dict((h, ray_probe(name='dgxspark-vllm')) for h in HOSTS)
    for host, probe in changes.items():
        probes[host.replace('_', '-')] = probe
    return build_serving_status(mp_plan, probes, vllm=vllm_probe(), membership=None, unreachable=[], now=NOW,
                                served_model_name='qwen3')


def test_with_mp_each_node_shows_its_vllm_rank_and_no_ray_is_asked_for():
    status = mp_status()
    assert status['ok'] is True, status['problems']
    assert status['table'][0].split() == ['node', 'rank', 'role', 'rank', 'container', 'Ray', 'vLLM', 'health', 'served', 'model',
                                          'uptime']
    assert status['table'][4].split() == ['spark-gamma', '2', 'worker', 'running', '-', '-', '-', '2h03m']
    assert "Ranks: vLLM's own multi-node backend (mp), 4 nodes, rendezvous 192.168.100.10:29501" in status['table']
    assert not any(line.startswith('Ray:') for line in status['table'])


def test_with_mp_a_stopped_headless_rank_is_named():
    status = mp_status(spark_delta=ray_probe(name='dgxspark-vllm', status='exited', running=False, exit_code=1))
    assert not status['ok']
    assert status['problems'] == ['The vLLM rank container dgxspark-vllm on spark-delta is not running (status exited, exit '
                                  'code 1).\nRead `docker logs dgxspark-vllm` on spark-delta and start it again with the serving role.']
