"""The distribute relay's model stream, run as a process as on a node: a GNU tar stream on stdin, the files this node
lacks written (hashed as they arrive, put in place only when size and sha256 match), the progress file, and the end of
the chain; a truncated stream or a wrong file is a clear failure; a next node that does not answer yet is tried again."""

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import types

import pytest

RELAY = os.path.join(os.path.dirname(__file__), '..', '..', 'roles', 'distribute', 'files', 'distribute_relay.py')
MTIME_NS = 1700000000123456789


def make_source(tmp_path, files):
    source = tmp_path / 'source'
    for rel, data in files.items():
        path = source / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return source


def entry(rel, data, **override):
    value = {'path': rel, 'size': len(data), 'mtime_ns': MTIME_NS, 'sha256': hashlib.sha256(data).hexdigest()}
    value.update(override)
    return value


def relay_module():
    sys.path.insert(0, os.path.dirname(RELAY))
    try:
        import distribute_relay  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    return distribute_relay


def tar_stream(source, paths):
    """The head's own tar of a lane (distribute_relay.tar_argv)."""
    return subprocess.run(relay_module().tar_argv(str(source)),
                          input=b''.join(p.encode() + b'\0' for p in paths), stdout=subprocess.PIPE, check=True).stdout


def receive(tmp_path, stream, wanted, total=None):
    dest = tmp_path / 'dest'
    entries = tmp_path / 'entries.json'
    entries.write_text(json.dumps(wanted))
    progress = tmp_path / 'progress.json'
    proc = subprocess.run(
        [sys.executable, RELAY, 'model-recv', '--dir', str(dest), '--entries', str(entries), '--progress', str(progress),
         '--lane', '0', '--lanes', '1', '--total', str(total if total is not None else len(stream)),
         '--upstream', '192.168.100.10', '--here', '192.168.100.11',
         '--ssh-key', '/nonexistent', '--known-hosts', '/nonexistent'],
        input=stream, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    return proc, dest, json.loads(progress.read_text())


FILES = {
    'config.json': b'{"model_type": "qwen3"}',
    'model-00001-of-00002.safetensors': os.urandom(3 * 1024 * 1024 + 17),
    'model-00002-of-00002.safetensors': os.urandom(1024 * 1024),
    'sub/dir/tokenizer.json': b'{}' * 1000,
}


@pytest.mark.parametrize('wanted', [
    sorted(FILES),
    ['model-00001-of-00002.safetensors'],
    ['sub/dir/tokenizer.json', 'config.json'],
    [],
], ids=['every-file', 'one-shard', 'nested-and-small', 'nothing-only-forwards'])
def test_a_node_keeps_exactly_the_files_it_lacks_with_the_source_mtime(tmp_path, wanted):
    source = make_source(tmp_path, FILES)
    stream = tar_stream(source, sorted(FILES))
    proc, dest, progress = receive(tmp_path, stream, [entry(rel, FILES[rel]) for rel in wanted])
    assert proc.returncode == 0, proc.stderr
    kept = sorted(str(p.relative_to(dest)) for p in dest.rglob('*') if p.is_file()) if dest.exists() else []
    assert kept == sorted(wanted)
    for rel in wanted:
        assert (dest / rel).read_bytes() == FILES[rel]
        assert os.stat(dest / rel).st_mtime_ns == MTIME_NS
    assert progress['status'] == 'done' and progress['bytes'] == progress['total'] == len(stream)
    assert not (dest / '.dgxspark-partial').exists() or not any((dest / '.dgxspark-partial').rglob('*.safetensors'))


def test_a_snapshot_of_links_into_a_blob_store_arrives_as_its_files(tmp_path):
    """huggingface_hub 1.32 and later keeps a snapshot's files as links into blobs/ beside it (sparkrun #299/#300): a
    copy that keeps the links would give the nodes dangling links; the head's tar sends what they point to."""
    blobs = tmp_path / 'hub' / 'blobs'
    snapshot = tmp_path / 'hub' / 'snapshots' / 'rev'
    for rel, data in FILES.items():
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(str(blob), str((snapshot / rel).parent)), str(snapshot / rel))
    proc, dest, progress = receive(tmp_path, tar_stream(snapshot, sorted(FILES)), [entry(rel, FILES[rel]) for rel in sorted(FILES)])
    assert proc.returncode == 0, proc.stderr
    assert progress['status'] == 'done'
    for rel, data in FILES.items():
        assert not os.path.islink(str(dest / rel)) and (dest / rel).read_bytes() == data


@pytest.mark.parametrize('override, message', [
    ({'sha256': '0' * 64}, 'arrived with 1048576 bytes and sha256'),
    ({'size': 7}, 'the source has 7 and'),
], ids=['other-content', 'other-size'])
def test_a_file_that_does_not_match_the_manifest_is_not_put_in_place(tmp_path, override, message):
    rel = 'model-00002-of-00002.safetensors'
    source = make_source(tmp_path, FILES)
    proc, dest, progress = receive(tmp_path, tar_stream(source, sorted(FILES)), [entry(rel, FILES[rel], **override)])
    assert proc.returncode == 0  # the stream itself arrived whole: the node before this one reports no failure
    assert message in proc.stderr.decode() and rel in progress['error']
    assert progress['status'] == 'failed'
    assert not (dest / rel).exists()


@pytest.mark.parametrize('cut', [0, 700, 2 * 1024 * 1024], ids=['no-data', 'inside-a-header', 'inside-a-file'])
def test_a_stream_that_ends_early_names_the_node_it_came_from(tmp_path, cut):
    source = make_source(tmp_path, FILES)
    stream = tar_stream(source, sorted(FILES))[:cut]
    wanted = [entry(rel, FILES[rel]) for rel in sorted(FILES)]
    proc, dest, progress = receive(tmp_path, stream, wanted, total=5 * 1024 * 1024)
    assert proc.returncode == 1
    assert '192.168.100.10' in progress['error'] and progress['status'] == 'failed'
    assert not (dest / 'model-00002-of-00002.safetensors').exists()


def test_the_progress_file_sums_the_lanes_and_is_done_only_when_every_lane_is(tmp_path):
    sys.path.insert(0, os.path.dirname(RELAY))
    try:
        import distribute_relay
    finally:
        sys.path.pop(0)
    path = str(tmp_path / 'model.json')
    lane0, lane1 = distribute_relay.LaneProgress(path, 0, 2), distribute_relay.LaneProgress(path, 1, 2)
    lane0.update(force=True, bytes=10, total=100, status='done')
    state = json.loads(open(path).read())
    assert (state['status'], state['bytes'], state['total']) == ('running', 10, 100)
    lane1.update(force=True, bytes=5, total=50, status='running')
    lane1.update(force=True, bytes=50, total=50, status='done')
    state = json.loads(open(path).read())
    assert (state['status'], state['bytes'], state['total']) == ('done', 60, 150)
    lane1.update(force=True, status='failed', error='the stream from 192.168.101.10 ended early')
    state = json.loads(open(path).read())
    assert state['status'] == 'failed' and '192.168.101.10' in state['error']


def test_a_lane_that_ends_leaves_the_partial_folders_to_a_lane_of_the_node_still_writing(tmp_path):
    """Two lanes write into one node's partial dir; the first to end once removed the folder the other had just made."""
    source = make_source(tmp_path, FILES)
    stream = tar_stream(source, ['sub/dir/tokenizer.json'])
    dest = tmp_path / 'dest'
    (dest / '.dgxspark-partial' / 'blobs').mkdir(parents=True)  # the other lane's folder for its next file
    other_lane = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(other_lane, fcntl.LOCK_SH)
    try:
        proc, dest, progress = receive(tmp_path, stream, [entry('sub/dir/tokenizer.json', FILES['sub/dir/tokenizer.json'])])
        assert proc.returncode == 0, proc.stderr
        assert progress['status'] == 'done'
        assert (dest / 'sub/dir/tokenizer.json').read_bytes() == FILES['sub/dir/tokenizer.json']
        assert (dest / '.dgxspark-partial' / 'blobs').is_dir()
    finally:
        os.close(other_lane)
    relay = relay_module()
    last = relay.enter_partial_dir(str(dest))
    relay.leave_partial_dir(str(dest), last)
    assert not (dest / '.dgxspark-partial').exists()


def load_relay():
    spec = importlib.util.spec_from_file_location('distribute_relay', RELAY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A stand-in for ssh: called as `ssh ... user@host 'remote command'`; refuses the first `fail` connections the way
# OpenSSH does when the next node's rail is not up yet, then runs a relay that answers `ready` (or never answers).
FAKE_SSH = '''
if [ "$1" -le "$FAIL" ]; then echo "ssh: connect to host ${2#*@} port 22: No route to host" >&2; exit 255; fi
if [ "$ANSWER" = silent ]; then exec sleep 30; fi
echo ready; exec cat > /dev/null
'''


class VirtualClock:
    """The relay's time, select and sleep, with time advanced only by its own waits: connect_wait counts attempts
    and pauses, whatever the machine's load (a starved test machine once took a whole second to start `sh`)."""

    def __init__(self, relay, silent):
        self.silent = silent
        self.now, self.commands, self._select, self._popen = 1000.0, [], relay.select.select, relay.subprocess.Popen
        self.time = types.SimpleNamespace(time=lambda: self.now, sleep=self.sleep)
        self.select = types.SimpleNamespace(select=self.wait)
        self.subprocess = types.SimpleNamespace(Popen=self.popen, PIPE=subprocess.PIPE)

    def sleep(self, seconds):
        self.now += seconds

    def wait(self, readers, writers, errors, timeout):
        """A refused or ready relay is waited for however long `sh` takes to start; a silent one for the timeout."""
        answered = self._select(readers, writers, errors, timeout if self.silent else 30)
        if not answered[0]:
            self.now += timeout
        return answered

    def popen(self, command, **kwargs):
        self.commands.append(command[-1])
        return self._popen(['sh', '-c', FAKE_SSH, 'ssh', str(len(self.commands))] + command[-2:], **kwargs)


@pytest.mark.parametrize('kind, fail, answer, wait, attempts, error', [
    ('image', 0, 'ready', 30, 1, ''),
    ('image', 2, 'ready', 30, 3, ''),
    ('model-recv', 3, 'ready', 30, 4, ''),
    ('image', 1000, 'ready', 1, None, 'could not reach 192.168.100.12 for 1 s: ssh: connect to host 192.168.100.12 '
                                      'port 22: No route to host'),
    ('model-recv', 0, 'silent', 1, 1, 'could not reach 192.168.100.12 for 1 s: no answer'),
], ids=['answers-at-once', 'image-rail-late', 'model-rail-late', 'never-reachable', 'connects-but-never-ready'])
def test_a_node_keeps_trying_the_next_one_until_it_answers_or_the_wait_ends(
        monkeypatch, kind, fail, answer, wait, attempts, error):
    relay = load_relay()
    clock = VirtualClock(relay, answer == 'silent')
    monkeypatch.setenv('FAIL', str(fail))
    monkeypatch.setenv('ANSWER', answer)
    for name in ('time', 'select', 'subprocess'):
        monkeypatch.setattr(relay, name, getattr(clock, name))
    monkeypatch.setattr(relay, 'RETRY_INTERVAL', 0.05)
    args = argparse.Namespace(
        chain=['192.168.100.12', '192.168.100.13'], connect_wait=wait, user='root', ssh_key='/k', known_hosts='/h',
        cipher='aes128-gcm@openssh.com', ssh_port=22)
    proc, why = relay.connect_next(args, kind, ['--progress', '/run/p.json'])
    assert why == error
    if attempts is not None:
        assert len(clock.commands) == attempts
    if error:
        assert proc is None
        return
    proc.stdin.close()
    assert proc.wait() == 0
    expected = 'python3 %s %s --progress /run/p.json --connect-wait %d --chain 192.168.100.13 ' % (
        os.path.abspath(RELAY), kind, wait)
    assert clock.commands[-1].startswith(expected)
