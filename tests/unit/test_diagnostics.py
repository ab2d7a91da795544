"""Redaction of diagnostics bundles (plugins/module_utils/diagnostics.py) and the node_diagnostics module run whole on
this machine against stand-in docker, nvidia-smi, journalctl and dmesg commands that print real formats with the
node's secrets inside: no secret value comes back anywhere, and what is not a secret stays readable."""
import json
import os
import stat
import subprocess
import sys
import tarfile

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.diagnostics import (
    redact, redact_env, secret_values, tail)
from stand_ins import path_first, stand_in

COLLECTIONS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '.build', 'collections')
API_KEY = 'Qm9vc3RlZEtleUZvclRoZUxhYjAxMjM0NTY3ODkwYWJj'
RAY_TOKEN = 'f3a1c9e07b2d4e5f8a6b1c0d9e8f7a6b'
HF_TOKEN = 'hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345'
SECRETS = secret_values({'vllm_api_key': API_KEY + '\n', 'ray_token': RAY_TOKEN, 'hf_token': HF_TOKEN, 'short': 'abc'})


@pytest.mark.parametrize('text, expected', [
    ('curl -H "Authorization: Bearer %s" http://x/v1/models' % API_KEY,
     'curl -H "Authorization: Bearer <redacted:vllm_api_key>" http://x/v1/models'),
    ('Authorization: Bearer sk-not-one-we-know-1234', 'Authorization: Bearer <redacted>'),
    ('vllm serve m --api-key sk-some-other-key --port 8000', 'vllm serve m --api-key <redacted> --port 8000'),
    ('vllm serve m --api-key=sk-some-other-key', 'vllm serve m --api-key=<redacted>'),
    ('RAY_AUTH_TOKEN=%s ray start' % RAY_TOKEN, 'RAY_AUTH_TOKEN=<redacted:ray_token> ray start'),
    ('downloading with hf_ZzYyXxWwVvUuTtSsRrQqPp0987 now', 'downloading with <redacted:hf-token> now'),
    ('token %s in a log line' % HF_TOKEN, 'token <redacted:hf_token> in a log line'),
    ('-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n-----END OPENSSH PRIVATE KEY-----\nafter',
     '<redacted:private-key>\nafter'),
    # what is not a secret stays: short values are not looked for by value, ordinary words and paths stay
    ('abc abcdef /etc/dgxspark/secrets/vllm_api_key NCCL_IB_HCA=rocep1s0f1',
     'abc abcdef /etc/dgxspark/secrets/vllm_api_key NCCL_IB_HCA=rocep1s0f1'),
])
def test_redact(text, expected):
    assert redact(text, SECRETS) == expected


def test_a_secret_is_found_with_or_without_its_newline_and_the_longest_first():
    values = secret_values({'a': 'x' * 10 + '\n', 'b': 'x' * 10 + 'yyyy'})
    assert [name for _value, name in values] == ['b', 'a', 'a']
    assert redact('k=' + 'x' * 10 + 'yyyy', values) == 'k=<redacted:b>'


@pytest.mark.parametrize('env, expected', [
    (['NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1', 'NCCL_SOCKET_IFNAME=enp1s0f1np1', 'PATH=/usr/bin', 'HOME=/root'],
     ['NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1', 'NCCL_SOCKET_IFNAME=enp1s0f1np1']),
    (['VLLM_API_KEY=' + API_KEY, 'RAY_AUTH_TOKEN=anything-at-all', 'HF_TOKEN=x', 'HF_TOKEN_PATH=/run/secrets/hf_token'],
     ['HF_TOKEN=<redacted>', 'HF_TOKEN_PATH=/run/secrets/hf_token', 'RAY_AUTH_TOKEN=<redacted>', 'VLLM_API_KEY=<redacted>']),
    (['VLLM_EXTRA=--api-key %s' % API_KEY, 'GLOO_SOCKET_IFNAME=enp1s0f1np1', 'UCX_NET_DEVICES=enp1s0f1np1'],
     ['GLOO_SOCKET_IFNAME=enp1s0f1np1', 'UCX_NET_DEVICES=enp1s0f1np1', 'VLLM_EXTRA=--api-key <redacted:vllm_api_key>']),
    (None, []),
])
def test_redact_env_keeps_the_serving_variables_only(env, expected):
    assert redact_env(env, SECRETS) == expected


@pytest.mark.parametrize('text, lines, expected', [
    ('a\nb\nc\n', 2, 'b\nc\n'), ('a\nb', 5, 'a\nb\n'), ('', 3, ''), ('a\n', 0, ''),
])
def test_tail(text, lines, expected):
    assert tail(text, lines) == expected


INSPECT = [{
    'Name': '/dgxspark-vllm', 'RestartCount': 0, 'Image': 'sha256:4f1c', 'Mounts': [
        {'Source': '/etc/dgxspark/secrets/vllm_api_key', 'Destination': '/run/secrets/vllm_api_key', 'RW': False}],
    'State': {'Status': 'exited', 'ExitCode': 1, 'StartedAt': '2026-11-27T05:01:02.1Z', 'FinishedAt': '2026-11-27T05:03:02.1Z',
              'OOMKilled': False},
    'HostConfig': {'RestartPolicy': {'Name': 'no'}},
    'Config': {'Image': 'dgxspark-lab/serving:abc', 'Entrypoint': ['/opt/dgxspark/vllm-serve.sh'],
               'Cmd': ['serve', '/models/m', '--api-key', API_KEY],
               'Env': ['VLLM_API_KEY=' + API_KEY, 'NCCL_IB_DISABLE=0', 'PATH=/usr/bin']}}]
STANDINS = {
    'docker': '''case "$1" in
  inspect) echo '%s'; echo "Error: No such object: dgxspark-ray" >&2; exit 1;;
  logs) echo "2026-11-27T05:01:03.000000000Z INFO serving with key %s"; echo "2026-11-27T05:01:02.000000000Z WARNING first" >&2;;
  ps) printf 'dgxspark-vllm\\tdgxspark-lab/serving:abc\\tExited (1) 2 minutes ago\\n';;
  version) echo "client 26.1.0, server 26.1.0";;
esac''' % (json.dumps(INSPECT), API_KEY),
    'nvidia-smi': 'echo "NVIDIA GB10, 580.95.05"',
    'journalctl': 'echo "2026-11-27T05:00:00+0000 spark-alpha python3[77]: probe with Authorization: Bearer %s"' % API_KEY,
    'dmesg': 'echo "[Fri Nov 27 05:00:00 2026] NVRM: Xid 79"',
}


def run_module(tmp_path, args):
    bin_dir = tmp_path / 'bin'
    for name, body in STANDINS.items():
        stand_in(bin_dir, name, '#!/bin/sh\n' + body + '\n')
    args_file = tmp_path / 'args.json'
    args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS_PATH + os.pathsep + os.environ.get('PYTHONPATH', ''),
               PATH=path_first(bin_dir))
    proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.node_diagnostics',
                           str(args_file)], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120, check=False)
    result = [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith('{')]
    assert result, 'no JSON result; stdout=%r stderr=%r' % (proc.stdout, proc.stderr)
    return proc.returncode, result[-1]


def test_the_module_reads_everything_and_returns_no_secret(tmp_path):
    secrets = tmp_path / 'secrets'
    secrets.mkdir()
    (secrets / 'vllm_api_key').write_text(API_KEY)
    (secrets / 'ray_token').write_text(RAY_TOKEN + '\n')
    config = tmp_path / 'config.json'
    config.write_text(json.dumps({'url': 'http://127.0.0.1:8000', 'token': RAY_TOKEN}))
    rc, result = run_module(tmp_path, {'secret_paths': [str(secrets)], 'files': [str(config), str(tmp_path / 'missing')],
                                       'units': ['dgxspark-supervisor.service'], 'lines': 50})
    assert rc == 0 and result['changed'] is False, result
    assert result['redacted'] == ['ray_token', 'vllm_api_key']
    sections = result['sections']
    everything = json.dumps(result)
    assert API_KEY not in everything and RAY_TOKEN not in everything
    assert sections['versions.txt'].splitlines()[2:] == ['gpu (name, driver): NVIDIA GB10, 580.95.05',
                                                         'docker: client 26.1.0, server 26.1.0']
    containers = sections['containers.txt']
    assert 'dgxspark-ray: not on this node' in containers
    assert 'state: exited, exit code 1' in containers and 'restart policy: no' in containers
    assert '"--api-key", "<redacted:vllm_api_key>"' in containers
    assert '    NCCL_IB_DISABLE=0' in containers and 'VLLM_API_KEY=<redacted>' in containers and 'PATH=' not in containers
    assert sections['logs/dgxspark-vllm.log'].splitlines() == [
        '2026-11-27T05:01:02.000000000Z WARNING first',
        '2026-11-27T05:01:03.000000000Z INFO serving with key <redacted:vllm_api_key>']
    assert 'logs/dgxspark-ray.log' not in sections
    assert 'Bearer <redacted:vllm_api_key>' in sections['journal/dgxspark-supervisor.service.log']
    assert 'NVRM: Xid 79' in sections['dmesg.txt']
    assert sections['files/' + str(config).strip('/').replace('/', '_')] == json.dumps(
        {'url': 'http://127.0.0.1:8000', 'token': '<redacted:ray_token>'})
    assert 'No such file or directory' in sections['files/' + str(tmp_path / 'missing').strip('/').replace('/', '_')]


def test_the_module_refuses_no_lines(tmp_path):
    rc, result = run_module(tmp_path, {'lines': 0})
    assert rc != 0 and result['msg'] == 'lines must be 1 or more, got 0'


from ansible_collections.dgxspark.cluster.plugins.action.diagnostics_bundle import controller_secrets  # noqa: E402
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import diagnostics_bundle  # noqa: E402
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.diagnostics_bundle import (  # noqa: E402
    bundle_files, node_view, pack, secret_hits)


def test_node_views_say_why_a_node_was_not_read():
    read = node_view({'diagnose_node': {'sections': {'versions.txt': 'os: x\n'}}, 'diagnose_cx7': {'devices': []},
                      'diagnose_image': {'image_id': 'sha256:1'}})
    unreachable = node_view({'diagnose_node': {
        'unreachable': True, 'msg': 'Failed to connect to the host via ssh: ssh: connect to host 10.0.0.4 port 22: No route to host'}})
    never = node_view({})
    assert read['error'] == '' and read['sections'] == {'versions.txt': 'os: x\n'}
    assert unreachable['error'].endswith('No route to host') and never['error'] == 'not read'


def test_the_bundle_has_the_plan_the_status_every_node_and_the_unreachable_ones():
    views = {'spark-alpha': node_view({'diagnose_node': {'sections': {'versions.txt': 'os: x\n', 'logs/dgxspark-vllm.log': 'l\n'}},
                                       'diagnose_cx7': {'devices': [{'ibdev': 'rocep1s0f1'}], 'invocation': {'x': 1}},
                                       'diagnose_image': {'image_id': 'sha256:1', 'vllm_version': '0.32.0',
                                                          'ray_version': '2.60.0'}}),
             'spark-delta': node_view({'diagnose_node': {'unreachable': True, 'msg': 'No route to host'}})}
    status = {'table': ['node  rank', 'spark-alpha 0'], 'problems': ['spark-delta: unreachable'], 'ok': False}
    files = dict((f['path'], f['content']) for f in bundle_files(views, ['spark-alpha', 'spark-delta'], {'head': 'spark-alpha'}, status))
    assert sorted(files) == ['plan.json', 'spark-alpha/cx7.json', 'spark-alpha/image.txt', 'spark-alpha/logs/dgxspark-vllm.log',
                             'spark-alpha/versions.txt', 'status.txt', 'unreachable.txt']
    assert files['unreachable.txt'] == 'spark-delta: No route to host\n'
    assert files['status.txt'] == 'node  rank\nspark-alpha 0\nproblems:\nspark-delta: unreachable\n'
    assert json.loads(files['spark-alpha/cx7.json']) == {'devices': [{'ibdev': 'rocep1s0f1'}]}
    assert files['spark-alpha/image.txt'] == 'image ID: sha256:1\nvLLM: 0.32.0\nRay: 2.60.0\n'
    assert json.loads(files['plan.json']) == {'head': 'spark-alpha'}


def test_no_status_table_is_said_so():
    files = dict((f['path'], f['content']) for f in bundle_files({}, [], {}, {}))
    assert files['status.txt'] == 'no status table: no node could be read\n' and files['unreachable.txt'] == ''


@pytest.mark.parametrize('contents, secrets, hits', [
    ({'a/x.log': 'key %s here' % API_KEY, 'b/y.log': 'nothing'}, [API_KEY + '\n', RAY_TOKEN], ['a/x.log']),
    ({'a/x.log': 'key <redacted:vllm_api_key> here'}, [API_KEY, '', None], []),
    ({'a/x.log': 'abc'}, ['abc'], []),  # too short to search by value
])
def test_the_controller_finds_a_secret_left_in_the_bundle(contents, secrets, hits):
    files = [{'path': path, 'content': text} for path, text in contents.items()]
    assert secret_hits(files, [s for s in secrets if s]) == hits


def test_the_bundle_is_one_tarball_only_its_owner_reads(tmp_path):
    files = [{"path": "plan.json", "content": "{}"}, {"path": "spark-alpha/logs/dgxspark-ray.log", "content": "é\n"},
             {"path": "spark-alpha/versions.txt", "content": "os: Debian"}]
    dest = tmp_path / "new" / "b.tar.gz"
    size = diagnostics_bundle.write_bundle(files, str(dest), "b", 1764236100)
    assert size == dest.stat().st_size and stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert stat.S_IMODE(dest.parent.stat().st_mode) == 0o700
    with tarfile.open(str(dest)) as bundle:
        members = dict((m.name, m) for m in bundle.getmembers())
        assert sorted(members) == ["b", "b/plan.json", "b/spark-alpha", "b/spark-alpha/logs", "b/spark-alpha/logs/dgxspark-ray.log",
                                   "b/spark-alpha/versions.txt"]
        assert all(m.mode == (0o700 if m.isdir() else 0o600) for m in members.values())
        assert bundle.extractfile("b/spark-alpha/logs/dgxspark-ray.log").read().decode("utf-8") == "é\n"
    assert not list(dest.parent.glob("*.tmp"))


def test_an_existing_directory_keeps_its_mode(tmp_path):
    tmp_path.chmod(0o1777)
    diagnostics_bundle.write_bundle([{"path": "a", "content": ""}], str(tmp_path / "b.tar.gz"), "b", 0)
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o1777


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", ""])
def test_a_path_leaving_the_bundle_is_refused(tmp_path, path):
    with pytest.raises(ValueError, match="must stay inside the bundle"):
        diagnostics_bundle.write_bundle([{"path": path, "content": ""}], str(tmp_path / "b.tar.gz"), "b", 0)
    assert not list(tmp_path.iterdir())


NODE_VARS = {'spark-alpha': {'diagnose_node': {'sections': {'logs/dgxspark-vllm.log': 'served\n'}},
                             'diagnose_cx7': {'devices': []}, 'diagnose_image': {'image_id': 'sha256:1'}},
             'spark-beta': {'diagnose_node': {'unreachable': True, 'msg': 'No route to host'}}}


@pytest.mark.parametrize('write', [True, False])
def test_a_bundle_is_packed_with_the_nodes_not_read_named(tmp_path, write):
    dest = tmp_path / 'b.tar.gz'
    packed = pack(NODE_VARS, ['spark-alpha', 'spark-beta'], {}, {}, [API_KEY], str(dest), 'b', 0, write=write)
    assert packed['files'] == 6 and packed['unread'] == ['spark-beta: No route to host']
    assert dest.exists() == write and packed['bytes'] == (dest.stat().st_size if write else 0)


def test_a_secret_left_in_a_node_log_writes_no_bundle(tmp_path):
    leaky = dict(NODE_VARS, **{'spark-alpha': dict(NODE_VARS['spark-alpha'], diagnose_node={
        'sections': {'logs/dgxspark-vllm.log': 'Authorization %s\n' % RAY_TOKEN}})})
    refusal = r'a secret was found in spark-alpha/logs/dgxspark-vllm.log: the bundle was not written'
    with pytest.raises(diagnostics_bundle.SecretInBundle, match=refusal):
        pack(leaky, ['spark-alpha', 'spark-beta'], {}, {}, [API_KEY, RAY_TOKEN + '\n'], str(tmp_path / 'b.tar.gz'), 'b', 0)
    assert not list(tmp_path.iterdir())


def test_the_controller_knows_its_secret_files_and_the_named_values_but_not_public_halves(tmp_path):
    (tmp_path / 'vllm_api_key').write_text(API_KEY + '\n')
    (tmp_path / 'distribute_ed25519').write_text('-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n')
    (tmp_path / 'distribute_ed25519.pub').write_text('ssh-ed25519 AAAAC3Nz public')
    # The generated TLS files (plugin_utils/api_tls.py) are in a folder: its keys are secrets, its certificates not.
    (tmp_path / 'api_tls').mkdir()
    (tmp_path / 'api_tls' / 'ca.key').write_text('-----BEGIN PRIVATE KEY-----\nca\n')
    (tmp_path / 'api_tls' / 'ca.crt').write_text('-----BEGIN CERTIFICATE-----\nca\n')
    assert controller_secrets(str(tmp_path), [HF_TOKEN, '', None]) == [
        '-----BEGIN PRIVATE KEY-----\nca\n', '-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n', API_KEY + '\n', HF_TOKEN]
    assert controller_secrets(str(tmp_path / 'missing'), []) == []


PLAYBOOK = '''
- hosts: localhost
  gather_facts: false
  tasks:
    - dgxspark.cluster.diagnostics_bundle:
        nodes: [spark-alpha, spark-beta]
        plan: {head: spark-alpha}
        secrets_dir: "{{ secrets }}"
        secret_vars: [vllm_container_api_key]
        dest: "{{ dest }}"
        top: b
      register: bundle
    - ansible.builtin.debug:
        msg: "BUNDLE {{ bundle.files }} {{ bundle.unread | join(';') }}"
'''


@pytest.mark.parametrize('log, check, expected', [
    ('served\n', False, 'BUNDLE 6 spark-beta: No route to host'),
    ('served\n', True, 'BUNDLE 6 spark-beta: No route to host'),
    ('key %s\n' % API_KEY, False, 'diagnostics_bundle: a secret was found in spark-alpha/logs/dgxspark-vllm.log'),
])
def test_the_action_reads_every_node_registered_and_the_controller_secrets(tmp_path, log, check, expected):
    """Through ansible-playbook: the nodes' variables come from hostvars (no node is contacted), the API key from the
    first node's vaulted variable."""
    playbook = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '.venv', 'bin', 'ansible-playbook')
    inventory = tmp_path / 'hosts.yml'
    inventory.write_text(json.dumps({'all': {'hosts': {
        'localhost': {'ansible_connection': 'local'},
        'spark-alpha': {'vllm_container_api_key': API_KEY, 'diagnose_node': {'sections': {'logs/dgxspark-vllm.log': log}},
                        'diagnose_cx7': {'devices': []}, 'diagnose_image': {'image_id': 'sha256:1'}},
        'spark-beta': {'diagnose_node': {'unreachable': True, 'msg': 'No route to host'}}}}}))
    (tmp_path / 'play.yml').write_text(PLAYBOOK)
    (tmp_path / 'secrets').mkdir()
    dest = tmp_path / 'out' / 'b.tar.gz'
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_PATH, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    proc = subprocess.run([playbook, '-i', str(inventory), str(tmp_path / 'play.yml'), '-e', 'secrets=%s' % (tmp_path / 'secrets'),
                           '-e', 'dest=%s' % dest] + (['--check'] if check else []),
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300, check=False)
    assert expected in proc.stdout, proc.stdout + proc.stderr
    assert (proc.returncode == 0) == expected.startswith('BUNDLE')
    assert dest.exists() == (expected.startswith('BUNDLE') and not check)
    assert API_KEY not in proc.stdout + proc.stderr
