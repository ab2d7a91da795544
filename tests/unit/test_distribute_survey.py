"""distribute_survey: what a node has for the distribution, read from Docker's recorded answers and the file system."""
import collections
import json
import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.distribute_survey import (
    SurveyError, docker_root, host_key, image_of, image_room, mismatch, relay_key_left)
from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import MANIFEST_NAME, build

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures', 'distribute_survey')


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


INSPECT = fixture('docker_28_image_inspect.json')
NO_SUCH = fixture('docker_28_no_such_image.stderr')
DAEMON_DOWN = 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n'
NODE_BASE = {'id': 'sha256:ed9869bf73645724de861707ad1d4700342a2e2a3b8d57b2832d2b7f79bfbada', 'size': 870855000}


def answers(rc, out, err):
    calls = []

    def run_command(argv):
        calls.append(argv)
        return rc, out, err
    return run_command, calls


@pytest.mark.parametrize('rc, out, err, expected', [
    (0, INSPECT, '', NODE_BASE),
    # Docker 28 prints [] and the daemon's words on stderr; older clients said "Error: No such image: ...".
    (1, '[]\n', NO_SUCH, None),
    (1, '[]\n', 'Error: No such image: vllm/vllm-openai:v0.33.0\n', None),
    (0, '[]\n', '', None),
], ids=['present', 'missing (docker 28)', 'missing (older client)', 'empty answer'])
def test_image_of(rc, out, err, expected):
    run_command, calls = answers(rc, out, err)
    assert image_of(run_command, 'docker', 'dgxspark-lab/node-base:06c5220f9f78') == expected
    assert calls == [['docker', 'image', 'inspect', 'dgxspark-lab/node-base:06c5220f9f78']]


@pytest.mark.parametrize('rc, out, err, message', [
    (1, '', DAEMON_DOWN, r'^docker image inspect x failed \(rc 1\): Cannot connect to the Docker daemon'),
    (0, 'not json', '', r'^docker image inspect x printed no image record'),
    (0, '[{"RepoTags": []}]', '', r'^docker image inspect x printed no image record'),
])
def test_image_of_says_when_docker_cannot_answer(rc, out, err, message):
    with pytest.raises(SurveyError, match=message):
        image_of(answers(rc, out, err)[0], 'docker', 'x')


@pytest.mark.parametrize('rc, out, err, expected', [
    (0, fixture('docker_28_info_root.out'), '', '/var/lib/docker'),
    (0, '"/srv/docker"\n', '', '/srv/docker'),
    (1, '', DAEMON_DOWN, SurveyError),
    (0, 'null\n', '', SurveyError),
])
def test_docker_root(rc, out, err, expected):
    run_command, calls = answers(rc, out, err)
    if expected is SurveyError:
        with pytest.raises(SurveyError, match='^docker info gave no DockerRootDir'):
            docker_root(run_command, 'docker')
    else:
        assert docker_root(run_command, 'docker') == expected
    assert calls == [['docker', 'info', '--format', '{{json .DockerRootDir}}']]


@pytest.mark.parametrize('text, expected', [
    ('ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHx root@spark-alpha\n', 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHx'),
    ('ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHx\n', 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHx'),
    ('', ''),
])
def test_host_key_leaves_the_comment_out(text, expected):
    assert host_key(text) == expected


StatVfs = collections.namedtuple('StatVfs', 'f_bavail f_frsize')


@pytest.mark.parametrize('devices, expected', [
    # One root file system: both places on it, counted together on the controller.
    ({'/': 1}, [{'device': 1, 'paths': ['/var/lib/dgxspark/distribute', '/var/lib/docker'], 'free': 4096000}]),
    # Docker's store on a disk of its own.
    ({'/': 1, '/var/lib/docker': 2}, [{'device': 1, 'paths': ['/var/lib/dgxspark/distribute'], 'free': 4096000},
                                      {'device': 2, 'paths': ['/var/lib/docker'], 'free': 8192000}]),
])
def test_image_room_says_where_a_received_image_goes_and_what_is_free_there(devices, expected):
    def device(path):
        return devices[max((prefix for prefix in devices if path.startswith(prefix)), key=len)]
    room = image_room('/var/lib/dgxspark/distribute', '/var/lib/docker',
                      stat=lambda path: StatVfs(1000 * device(path), 4096), device=device)
    assert room == {'needs': [{'path': '/var/lib/dgxspark/distribute', 'role': 'spooled'},
                              {'path': '/var/lib/docker', 'role': 'loaded into Docker'}], 'filesystems': expected}


@pytest.mark.parametrize('found, expected', [
    (NODE_BASE, None),
    ({'id': 'sha256:0', 'size': 1},
     "spark-beta: after the copy the image x has ID sha256:0, the head's is %s: re-run the distribute phase." % NODE_BASE['id']),
    (None, "spark-beta: after the copy the image x has ID none, the head's is %s: re-run the distribute phase." % NODE_BASE['id']),
])
def test_mismatch(found, expected):
    assert mismatch('spark-beta', 'x', found, NODE_BASE['id']) == expected


# What distribute_access authorizes for the role: the forced command's options, the key, its comment.
AUTHORIZED = ('command="/usr/bin/python3 /usr/local/lib/dgxspark/distribute_relay.py --forced /etc/dgxspark/distribute_forced.json",'
              'from="192.168.100.0/24,192.168.101.0/24",restrict,expiry-time="202612061111Z" ssh-ed25519 '
              'AAAAC3NzaC1lZDI1NTE5AAAAIFq dgxspark-distribute\n')
OPERATOR = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOp admin@laptop\n'


@pytest.mark.parametrize('key_file, authorized, expected', [
    (False, OPERATOR, False),  # a clean node: the removal has nothing to do
    (True, OPERATOR, True),  # the key file an older run left
    (False, OPERATOR + AUTHORIZED, True),  # its authorization
    (False, '# dgxspark-distribute\n' + OPERATOR, False),  # a comment line is no authorization
    (False, None, False),  # no authorized_keys at all
    (False, 'unknown user', True),  # the removal says the user is unknown
], ids=['clean', 'key file', 'authorized', 'comment line', 'no authorized_keys', 'unknown user'])
def test_relay_key_left(tmp_path, key_file, authorized, expected):
    key = tmp_path / 'distribute_ed25519'
    if key_file:
        key.write_text('-----BEGIN OPENSSH PRIVATE KEY-----\n')
    keys = tmp_path / 'authorized_keys'
    if authorized not in (None, 'unknown user'):
        keys.write_text(authorized)
    assert relay_key_left(str(key), None if authorized == 'unknown user' else str(keys), 'dgxspark-distribute') is expected


def run_survey(tmp_path, args, docker_answers):
    """distribute_survey run as Ansible runs it, with a docker stand-in that gives recorded answers
    (``docker_answers``: first argument -> (rc, stdout, stderr))."""
    docker = tmp_path / 'docker'
    docker.write_text('#!%s\nimport json, sys\nrc, out, err = json.loads(%r)[sys.argv[1]]\nsys.stdout.write(out)\n'
                      'sys.stderr.write(err)\nsys.exit(rc)\n' % (sys.executable, json.dumps(docker_answers)))
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    collections_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), '.build',
                                   'collections')
    args_file = tmp_path / 'args.json'
    args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': dict(args, docker=str(docker))}))
    proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.distribute_survey',
                           str(args_file)], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=collections_dir),
                          timeout=60, check=False)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')][-1]


PRESENT = {'image': [0, INSPECT, ''], 'info': [0, '"/var/lib/docker"\n', '']}
MISSING = {'image': [1, '[]\n', NO_SUCH], 'info': [0, '"/var/lib/docker"\n', '']}


def test_the_survey_of_a_node_that_has_the_image_and_lacks_the_model(tmp_path):
    source = tmp_path / 'source'
    source.mkdir()
    (source / 'config.json').write_text('{}')
    manifest, _hashed = build(str(source))
    key = tmp_path / 'host.pub'
    key.write_text('ssh-ed25519 AAAAkey root@spark-beta\n')
    found = run_survey(tmp_path, {'image': 'dgxspark-lab/node-base:06c5220f9f78', 'model_dir': str(tmp_path / 'model'),
                                  'manifest': manifest, 'node': 'spark-beta', 'host_key': str(key),
                                  'spool_dir': str(tmp_path), 'relay_key': str(tmp_path / 'distribute_ed25519'),
                                  'relay_key_user': 'no-such-user-dgxspark'}, PRESENT)
    assert not found.get('failed') and found['changed'] is False, found
    assert found['image'] == NODE_BASE and found['host_key'] == 'ssh-ed25519 AAAAkey' and found['has_manifest'] is False
    assert [need['role'] for need in found['image_room']['needs']] == ['spooled', 'loaded into Docker']
    assert found['model']['missing'] == ['config.json'] and found['model']['complete'] is False
    assert found['model']['disk_problem'] == ''
    assert found['relay_key_left'] is True  # no key file, but a user unknown here: the removal says so


def test_the_survey_of_the_head_without_the_image_and_with_a_manifest(tmp_path):
    (tmp_path / 'model').mkdir()
    (tmp_path / 'model' / MANIFEST_NAME).write_text('{}')
    found = run_survey(tmp_path, {'image': 'vllm/vllm-openai:v0.33.0', 'model_dir': str(tmp_path / 'model'),
                                  'host_key': str(tmp_path / 'none.pub')}, MISSING)
    assert not found.get('failed'), found
    assert found['image'] is None and found['has_manifest'] is True and found['host_key'] == '' and 'model' not in found
    assert 'relay_key_left' not in found


@pytest.mark.parametrize('docker_answers, message', [
    (MISSING, "spark-beta: after the copy the image x has ID none, the head's is sha256:1: re-run the distribute phase."),
    ({'image': [1, '', DAEMON_DOWN]}, 'spark-beta: docker image inspect x failed (rc 1): Cannot connect to the Docker daemon'),
])
def test_the_survey_fails_naming_the_node(tmp_path, docker_answers, message):
    found = run_survey(tmp_path, {'image': 'x', 'image_id': 'sha256:1', 'node': 'spark-beta'}, docker_answers)
    assert found['failed'] and found['msg'].startswith(message), found
