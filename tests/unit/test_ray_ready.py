"""When vllm-serve.sh lets the engine ask Ray for its placement group (roles/vllm_container/files/dgxspark_ray_ready.py):
only when the same ready nodes offer the GPUs at two polls. Node entries have the fields and values of `ray.nodes()` of
Ray 2.60 read in the lab (a worker rebooted: its old incarnation listed dead, or still alive, at the same address)."""
import importlib.util
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, '..', '..', 'roles', 'vllm_container', 'files', 'dgxspark_ray_ready.py')
_SPEC = importlib.util.spec_from_file_location(
    'dgxspark_ray_ready', os.path.join(HERE, '..', '..', 'roles', 'vllm_container', 'files', 'dgxspark_ray_ready.py'))
ready_mod = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ready_mod)

HEAD, GAMMA, DELTA = 'be34344744b7', '38b3a0b2f610', 'be81fc7fbd69'
BETA_OLD, BETA_NEW = '7bd676fbe8ac', '2d9a03851e2a'
ADDRESS = {HEAD: '192.168.100.10', BETA_OLD: '192.168.100.11', BETA_NEW: '192.168.100.11', GAMMA: '192.168.100.12',
           DELTA: '192.168.100.13'}


def node(node_id, alive=True):
    return {'NodeID': node_id, 'Alive': alive, 'alive': alive, 'NodeManagerAddress': ADDRESS[node_id],
            'NodeManagerPort': 6380, 'Resources': {'CPU': 2.0, 'GPU': 1.0} if alive else {},
            'DeathReason': 0 if alive else 3,
            'DeathReasonMessage': '' if alive else 'Node received SIGTERM; draining before shutdown.'}


FOUR = [HEAD, BETA_NEW, GAMMA, DELTA]
ALL_FREE = dict((n, {'CPU': 2.0, 'GPU': 1.0}) for n in FOUR + [BETA_OLD])

# id, nodes (ids; 'dead:' prefix = listed dead), draining, available, not answering, previous poll, settle over,
# ready, words in the message
CASES = [
    ('the same four ready nodes at two polls', FOUR, set(), ALL_FREE, set(), frozenset(FOUR), False,
     True, ['4 free GPU(s) on 4 ready node(s)']),
    ('first poll: checked again before the engine starts', FOUR, set(), ALL_FREE, set(), None, False,
     False, ['checking that they stay']),
    ('a node came since the previous poll', FOUR, set(), ALL_FREE, set(), frozenset([HEAD, GAMMA, DELTA]), False,
     False, ['checking that they stay']),
    ('the rebooted worker has not joined yet', [HEAD, 'dead:' + BETA_OLD, GAMMA, DELTA], set(), ALL_FREE, set(),
     frozenset([HEAD, GAMMA, DELTA]), True, False, ['3 free GPU(s) on 3 ready node(s); the engine needs 4']),
    ('the old incarnation drains (SIGTERM) and still answers', [HEAD, BETA_OLD, GAMMA, DELTA], {BETA_OLD}, ALL_FREE,
     set(), frozenset([HEAD, GAMMA, DELTA]), False, False, ['192.168.100.11 (7bd676fb) is draining', 'needs 4']),
    ('the old incarnation is killed and not yet marked dead', [HEAD, BETA_OLD, GAMMA, DELTA], set(), ALL_FREE,
     {BETA_OLD}, frozenset(FOUR), False, False, ['its raylet does not answer', '3 free GPU(s)']),
    ('old and new incarnation both listed alive: wait for Ray', [HEAD, BETA_OLD, BETA_NEW, GAMMA, DELTA], set(),
     ALL_FREE, set(), frozenset([HEAD, BETA_OLD, BETA_NEW, GAMMA, DELTA]), False,
     False, ['192.168.100.11 is listed 2 times', 'waiting for Ray to settle']),
    ('listed twice past the settle time: enough GPUs, start', [HEAD, BETA_OLD, BETA_NEW, GAMMA, DELTA], set(),
     ALL_FREE, set(), frozenset([HEAD, BETA_OLD, BETA_NEW, GAMMA, DELTA]), True, True, ['5 free GPU(s)']),
    ('a node listed alive that does not answer is not counted, past the settle time too', [HEAD, BETA_NEW, GAMMA, DELTA], set(), ALL_FREE,
     {DELTA}, frozenset([HEAD, BETA_NEW, GAMMA]), True, False, ['3 free GPU(s)']),
    ('a GPU Ray lists but does not count as free (the lost one) is named',
     FOUR, set(), dict(ALL_FREE, **{BETA_NEW: {'CPU': 2.0}}), set(), frozenset(FOUR), True,
     False, ['3 free GPU(s) on 4 ready node(s)', '192.168.100.11 lists 1 GPU(s), 0 free']),
    ('GPUs still held by the previous engine\'s group', FOUR, set(),
     dict(ALL_FREE, **{HEAD: {'CPU': 2.0, 'GPU': 0.0}, GAMMA: {'CPU': 2.0, 'GPU': 0.0}}), set(), frozenset(FOUR), False,
     False, ['2 free GPU(s)', '192.168.100.10 lists 1 GPU(s), 0 free']),
]


@pytest.mark.parametrize('nodes, draining, available, silent, previous, settle_over, ready, words',
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_when_the_engine_may_ask_for_its_placement_group(
        nodes, draining, available, silent, previous, settle_over, ready, words):
    listed = [node(n[5:], alive=False) if n.startswith('dead:') else node(n) for n in nodes]
    answering = dict((n['NodeID'], n['NodeID'] not in silent) for n in listed if n['Alive'])
    got_ready, counted, why = ready_mod.assess(listed, draining, available, answering, previous, 4, settle_over)
    assert got_ready is ready, why
    for word in words:
        assert word in why
    assert counted == frozenset(n['NodeID'] for n in listed
                                if n['Alive'] and n['NodeID'] not in draining and n['NodeID'] not in silent)


def test_a_raylet_port_that_refuses_does_not_answer():
    assert ready_mod.raylet_answers({'NodeManagerAddress': '127.0.0.1', 'NodeManagerPort': 1}, timeout=1) is False
    assert ready_mod.raylet_answers({'NodeManagerAddress': '127.0.0.1'}) is False


def test_the_wait_makes_itself_non_dumpable_before_it_asks_ray(tmp_path):
    """It runs in vLLM's container before the guard's main (no capability left): /proc/PID/root of it would open the
    container's files to root in the Ray container. A stand-in `ray` module reports PR_GET_DUMPABLE when imported."""
    (tmp_path / 'ray').mkdir()
    (tmp_path / 'ray' / '__init__.py').write_text(
        'import ctypes, sys\nsys.stdout.write("dumpable=%d\\n" % ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n'
        'raise SystemExit(7)\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run([sys.executable, SCRIPT, '1', '0'], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert (result.returncode, result.stdout) == (7, 'dumpable=0\n'), result.stderr
