"""The opt-in patch profiles/models/patches/shm_reader_spin_sitecustomize.py (issue 50 item 10) on the recorded
SpinCondition of the lab engine's vLLM (0.32.0+cpu, tests/unit/fixtures/vllm_shm_broadcast/), with a fake zmq; and its
clean refusal of code it does not know."""
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import time
import types

import pytest

REPO = os.path.join(os.path.dirname(__file__), '..', '..')
PATCH = os.path.join(REPO, 'profiles', 'models', 'patches', 'shm_reader_spin_sitecustomize.py')
LOADER = os.path.join(REPO, 'roles', 'ray_cluster', 'files', 'dgxspark-sitecustomize.py')
RECORDED = os.path.join(os.path.dirname(__file__), 'fixtures', 'vllm_shm_broadcast', 'vllm_0_32_0_cpu_spin_condition.py.txt')
DOCS = os.path.join(REPO, 'docs', 'profiles.md')

# Just what SpinCondition touches; the poller records its polls, sched_yield its calls.
FAKE_ZMQ = '''
SUB, PUB, SUBSCRIBE, CONFLATE, PAIR, POLLIN, SNDHWM, NOBLOCK = range(8)
Socket = object

class _Socket:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None

class Context:
    def socket(self, kind):
        return _Socket()

class Poller:
    polls = []
    def register(self, socket, flags):
        pass
    def poll(self, timeout=None):
        Poller.polls.append(timeout)
        return []
'''
FAKE_HELPERS = '''
import logging
logger = logging.getLogger("fake_vllm")
yields = []
def sched_yield():
    yields.append(1)
def get_open_zmq_inproc_path():
    return "inproc://fake"
'''


def load(name, path):
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


def fake_module(name, source):
    module = types.ModuleType(name)
    exec(compile(source, name, 'exec'), module.__dict__)  # pylint: disable=exec-used
    return module


@pytest.fixture
def patch():
    return load('shm_reader_spin_patch', PATCH)


@pytest.fixture
def recorded(monkeypatch):
    """vLLM 0.32's shm_broadcast as far as SpinCondition goes, imported with the fake zmq and helpers."""
    monkeypatch.setitem(sys.modules, 'zmq', fake_module('zmq', FAKE_ZMQ))
    monkeypatch.setitem(sys.modules, 'fake_vllm_helpers', fake_module('fake_vllm_helpers', FAKE_HELPERS))
    return load('recorded_shm_broadcast', RECORDED)


def reader(module):
    return module.SpinCondition(is_reader=True, context=sys.modules['zmq'].Context(), notify_address='ipc://x')


@pytest.mark.parametrize('environ, spin_s', [
    ({}, 0.02),
    ({'DGXSPARK_SHM_READER_SPIN_S': ''}, 0.02),
    ({'DGXSPARK_SHM_READER_SPIN_S': '0.005'}, 0.005),
    ({'DGXSPARK_SHM_READER_SPIN_S': '0'}, 0.0),
    ({'DGXSPARK_SHM_READER_SPIN_S': '5'}, 1),  # never longer than vLLM's own
])
def test_a_reader_of_the_recorded_vllm_spins_the_asked_seconds(patch, recorded, environ, spin_s):
    assert reader(recorded).busy_loop_s == 1  # the recorded vLLM's own
    assert patch.shorten_reader_spin(recorded, environ) is True
    assert reader(recorded).busy_loop_s == spin_s
    writer = recorded.SpinCondition(is_reader=False, context=sys.modules['zmq'].Context(), notify_address='ipc://x')
    assert writer.busy_loop_s == 0


def test_a_reader_waits_on_its_socket_once_the_short_spin_is_over(patch, recorded):
    helpers, zmq = sys.modules['fake_vllm_helpers'], sys.modules['zmq']
    before = reader(recorded)
    patch.shorten_reader_spin(recorded, {})
    after = reader(recorded)
    for condition in (before, after):
        condition.last_read = time.monotonic() - 0.1  # a message read 100 ms ago
    before.wait()
    assert (len(helpers.yields), len(zmq.Poller.polls)) == (1, 0)  # vLLM's 1 s: still spinning
    after.wait()
    assert (len(helpers.yields), len(zmq.Poller.polls)) == (1, 1)  # 20 ms: waits on the socket


@pytest.mark.parametrize('source, why', [
    ('X = 1\n', 'has no SpinCondition'),
    ('class SpinCondition:\n    def __init__(self, is_reader, context, notify_address):\n        self.is_reader = is_reader\n',
     'SpinCondition takes no busy_loop_s'),
])
def test_code_it_does_not_know_is_left_alone_with_the_reason(patch, capsys, source, why):
    module = fake_module('other_vllm_shm_broadcast', source)

    def own_init():
        return vars(getattr(module, 'SpinCondition', object)).get('__init__')

    init = own_init()
    assert patch.shorten_reader_spin(module, {}) is False
    assert own_init() is init
    assert why in capsys.readouterr().err


@pytest.mark.parametrize('value', ['abc', '-1', 'nan', 'inf', '20ms'])
def test_a_bad_spin_is_refused_with_the_variable_named(patch, recorded, capsys, value):
    assert patch.shorten_reader_spin(recorded, {'DGXSPARK_SHM_READER_SPIN_S': value}) is False
    assert "DGXSPARK_SHM_READER_SPIN_S=%r is not a number of seconds >= 0" % value in capsys.readouterr().err
    assert reader(recorded).busy_loop_s == 1


def test_the_sitecustomize_loader_changes_shm_broadcast_when_vllm_imports_it(tmp_path):
    package = tmp_path / 'fake' / 'vllm' / 'distributed' / 'device_communicators'
    package.mkdir(parents=True)
    for directory in (package, package.parent, package.parent.parent):
        (directory / '__init__.py').write_text('')
    with open(RECORDED, encoding='utf-8') as handle:
        (package / 'shm_broadcast.py').write_text(handle.read())
    (tmp_path / 'fake' / 'zmq.py').write_text(FAKE_ZMQ)
    (tmp_path / 'fake' / 'fake_vllm_helpers.py').write_text(FAKE_HELPERS)
    (tmp_path / 'site').mkdir()
    with open(LOADER, 'rb') as handle:
        (tmp_path / 'site' / 'sitecustomize.py').write_bytes(handle.read())
    with open(PATCH, 'rb') as handle:
        (tmp_path / 'shm_reader_spin_sitecustomize.py').write_bytes(handle.read())
    env = {'PATH': os.environ['PATH'], 'PYTHONPATH': '%s:%s' % (tmp_path / 'site', tmp_path / 'fake'),
           'DGXSPARK_PATCH_DIR': str(tmp_path), 'DGXSPARK_PATCHES': 'sitecustomize:shm_reader_spin_sitecustomize.py:sha',
           'DGXSPARK_SHM_READER_SPIN_S': '0.01'}
    code = ('import sys, zmq; print("shm_broadcast" in str(sys.modules)); '
            'import vllm.distributed.device_communicators.shm_broadcast as m; '
            'print(m.SpinCondition(True, zmq.Context(), "x").busy_loop_s)')
    done = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ['False', '0.01'], done.stderr
    assert 'readers spin 0.01 s after a message' in done.stderr


def test_the_docs_give_the_patch_file_sha256():
    with open(PATCH, 'rb') as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    with open(DOCS, encoding='utf-8') as handle:
        assert 'sha256: %s' % digest in handle.read()
