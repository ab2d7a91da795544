# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/vllm_container/files/dgxspark_rank_watch.py: a headless rank ends when rank 0's rendezvous is gone (vLLM
#32136), and only then. The decisions as a table; the watch itself run with a real child process and a real TCP
listener standing in for rank 0's TCPStore, at a fast pace. Waits are for outcomes (bounded generously), never for a
time: a loaded machine only makes the watch slower."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'roles', 'vllm_container', 'files', 'dgxspark_rank_watch.py')
_SPEC = importlib.util.spec_from_file_location('dgxspark_rank_watch', SCRIPT)
rank_watch = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rank_watch)

FAST = {'DGXSPARK_RANK_WATCH_S': '0.1', 'DGXSPARK_RANK_WATCH_MISSES': '3', 'DGXSPARK_RANK_WATCH_STOP_S': '2'}
# The child stands in for `vllm serve --headless`: it makes its setup (a signal handler), writes its pid only then (a
# test that signals it must not come before its handler), then waits (or does what a case asks).
CHILD = [sys.executable, '-c', 'import os, signal, sys, time; {setup}; open(sys.argv[1], "w").write(str(os.getpid())); {body}',
         '{pidfile}']


@pytest.mark.parametrize('seen, gone_at', [
    ([True, False, False, False], 3),           # answered, then three misses: gone at the third
    ([False] * 10, None),                       # never answered: rank 0 may still be starting, nothing counted
    ([False, False, True, False, False, True, False, False, False], 8),  # an answer resets the count
    ([True, False, False, True, False, False], None),
    ([True] * 5, None),
])
def test_rank_0_is_gone_only_after_it_answered_and_then_missed_three_times(seen, gone_at):
    watch = rank_watch.Watch(3)
    decisions = [watch.seen(answered) for answered in seen]
    first = decisions.index(True) if True in decisions else None
    assert first == gone_at, decisions
    if gone_at is not None:
        assert all(decisions[gone_at:]) and not any(decisions[:gone_at])


@pytest.mark.parametrize('code, status', [(0, 0), (1, 1), (-signal.SIGTERM, 143), (-signal.SIGKILL, 137)])
def test_a_child_s_end_is_reported_as_a_shell_does(code, status):
    assert rank_watch.exit_status(code) == status


def listener():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(('127.0.0.1', 0))
    server.listen(64)
    return server


def start(tmp_path, port, body='time.sleep(600)', setup='pass', **env):
    pidfile = tmp_path / 'child.pid'
    command = [part.format(setup=setup, body=body, pidfile=pidfile) for part in CHILD]
    watch = subprocess.Popen([sys.executable, SCRIPT, '127.0.0.1', str(port), '--'] + command,
                             env=dict(os.environ, **dict(FAST, **env)), stderr=subprocess.PIPE, text=True)
    child = None
    for _attempt in range(600):
        if pidfile.exists() and pidfile.read_text():
            child = int(pidfile.read_text())
            break
        time.sleep(0.1)
    assert child, 'the child never started'
    return watch, child


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of the watch's child is gone for this purpose (the watch reaped it or will).
    with open('/proc/%d/stat' % pid, encoding='utf-8') as handle:
        return handle.read().split(')')[-1].split()[0] != 'Z'


def wait_answered(server, count=2, timeout=120):
    """Accept ``count`` connects of the watch (it connects and closes)."""
    server.settimeout(timeout)
    for _connect in range(count):
        connection, _address = server.accept()
        connection.close()


def test_rank_0_gone_ends_the_headless_rank_with_the_reason(tmp_path):
    server = listener()
    port = server.getsockname()[1]
    watch, child = start(tmp_path, port)
    wait_answered(server)
    server.close()  # rank 0 dies: its rendezvous refuses from now on
    _out, err = watch.communicate(timeout=120)
    assert watch.returncode == 1, err
    assert "rank 0's rendezvous 127.0.0.1:%d failed 3 connects in a row after it had answered: rank 0 is gone" % port in err, err
    assert 'vLLM #32136' in err
    assert not alive(child)


def test_a_rank_0_that_never_answered_is_waited_for(tmp_path):
    # Nothing listens on the port: the head is still starting. The rank is left to wait (vLLM waits in its init).
    server = listener()
    port = server.getsockname()[1]
    server.close()
    watch, child = start(tmp_path, port)
    try:
        time.sleep(3)  # 30 intervals at the fast pace; fewer on a loaded machine, the outcome is the same
        assert watch.poll() is None and alive(child)
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=60)
    assert not alive(child)


@pytest.mark.parametrize('body, status', [
    ('sys.exit(7)', 7),                                     # vLLM's own exit is the rank's
    ('os.kill(os.getpid(), 9)', 137),                       # killed (the OOM killer): as a shell reports it
])
def test_the_child_s_own_end_is_the_watch_s_end(tmp_path, body, status):
    server = listener()
    try:
        watch, _child = start(tmp_path, server.getsockname()[1], body=body)
        watch.communicate(timeout=120)
        assert watch.returncode == status
    finally:
        server.close()


@pytest.mark.parametrize('setup, status', [
    ('pass', 143),                                                     # docker stop: SIGTERM reaches vLLM, which ends by it
    ('signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))', 0),
    ('signal.signal(signal.SIGTERM, signal.SIG_IGN)', 137),            # killed after the grace
])
def test_docker_stop_reaches_the_rank(tmp_path, setup, status):
    server = listener()
    try:
        watch, child = start(tmp_path, server.getsockname()[1], setup=setup)
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=120)
        assert watch.returncode == status
        assert not alive(child)
    finally:
        server.close()


def test_a_command_line_without_its_command_is_refused():
    result = subprocess.run([sys.executable, SCRIPT, '127.0.0.1', '29501', 'vllm'], capture_output=True, text=True,
                            check=False, timeout=60)
    assert result.returncode == 2 and 'usage: dgxspark_rank_watch.py MASTER_ADDR MASTER_PORT -- COMMAND' in result.stderr
