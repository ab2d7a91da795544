"""The lab's changes to vLLM's CPU build (lab/serving/patches/lab_cpu_engine_sitecustomize.py), through the collection's
sitecustomize loader, on fake vLLM modules that have the attributes the patch touches (no torch, no vLLM here; the lab
tests run it on the real engine)."""
import os
import subprocess
import sys

import pytest

REPO = os.path.join(os.path.dirname(__file__), '..', '..')
LAB_PATCH = os.path.join(REPO, 'lab', 'serving', 'patches', 'lab_cpu_engine_sitecustomize.py')
LOADER = os.path.join(REPO, 'roles', 'ray_cluster', 'files', 'dgxspark-sitecustomize.py')

FAKE = {
    'vllm/__init__.py': '',
    'vllm/platforms/__init__.py': '',
    'vllm/platforms/cpu.py': 'class CpuPlatform:\n    ray_device_key = ""\n',
    'vllm/distributed/__init__.py': '',
    'vllm/distributed/device_communicators/__init__.py': '',
    # torch.distributed.all_gather_object stands in as "every rank reports what this process reports, unless
    # FAKE_OTHER_RANK says what the other rank sees".
    'vllm/distributed/device_communicators/cpu_communicator.py': '''
import os
import types

def _all_gather_object(out, obj, group=None):
    out[0] = obj
    out[1] = os.environ.get("FAKE_OTHER_RANK", obj)

torch = types.SimpleNamespace(distributed=types.SimpleNamespace(all_gather_object=_all_gather_object))

class CpuCommunicator:
    world_size = 2
    device_group = None
    names_agree = True

    def _all_group_ranks_share_shm_group_name(self):
        return self.names_agree
''',
    # vLLM 0.32's constructor: a reader keeps busy_loop_s, a writer has 0.
    'vllm/distributed/device_communicators/shm_broadcast.py': '''
class SpinCondition:
    def __init__(self, is_reader, context, notify_address, busy_loop_s=1):
        self.is_reader = is_reader
        self.busy_loop_s = busy_loop_s if is_reader else 0
''',
    'vllm/model_executor/__init__.py': '',
    'vllm/model_executor/model_loader/__init__.py': '',
    'vllm/model_executor/model_loader/weight_utils.py': 'def safe_open(path, framework=None):\n    return path\n',
}


@pytest.fixture
def env(tmp_path):
    for rel, text in FAKE.items():
        path = tmp_path / 'fake' / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / 'site').mkdir()
    (tmp_path / 'sitecustomize').mkdir()
    with open(LOADER, 'rb') as handle:
        (tmp_path / 'site' / 'sitecustomize.py').write_bytes(handle.read())
    with open(LAB_PATCH, 'rb') as handle:
        (tmp_path / 'sitecustomize' / 'lab.py').write_bytes(handle.read())
    return {'PATH': os.environ['PATH'], 'PYTHONPATH': '%s:%s' % (tmp_path / 'site', tmp_path / 'fake'),
            'DGXSPARK_PATCH_DIR': str(tmp_path), 'DGXSPARK_PATCHES': 'sitecustomize:sitecustomize/lab.py:sha'}


def run(env, code, timeout=60, **extra):
    return subprocess.run([sys.executable, '-c', code], env=dict(env, **extra), capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_the_cpu_platform_offers_ray_the_gpu_slot_once_vllm_imports_it(env):
    done = run(env, 'import vllm.platforms.cpu as cpu; print(cpu.CpuPlatform.ray_device_key)')
    assert done.stdout.strip() == 'GPU', done.stderr
    assert 'dgxspark LAB patch: vllm.platforms.cpu changed' in done.stderr


def test_nothing_is_imported_in_a_process_that_does_not_import_vllm(env):
    done = run(env, 'import sys; print(sorted(m for m in sys.modules if m.startswith("vllm")))')
    assert done.stdout.strip() == '[]' and done.returncode == 0


@pytest.mark.parametrize('other_rank,names_agree,shm', [
    (None, True, True),                      # every rank on this machine, this /dev/shm: vLLM's shared-memory path
    ('other-host:1:2', True, False),         # a rank on another node (its own /dev/shm): gloo
    (None, False, False),                    # vLLM's own check already says no
])
def test_shared_memory_all_reduce_only_for_ranks_that_share_dev_shm(env, other_rank, names_agree, shm):
    code = ('from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator as C\n'
            'c = C(); c.names_agree = %r\nprint(c._all_group_ranks_share_shm_group_name())' % names_agree)
    extra = {'FAKE_OTHER_RANK': other_rank} if other_rank else {}
    done = run(env, code, **extra)
    assert done.stdout.strip() == str(shm), done.stderr


def test_the_hang_hook_is_inert_without_its_variable(env):
    code = 'from vllm.model_executor.model_loader import weight_utils as w\nprint([w.safe_open(p) for p in "abc"])'
    done = run(env, code)
    assert done.stdout.strip() == "['a', 'b', 'c']", done.stderr


def test_the_hang_hook_blocks_when_it_opens_the_shard_after_k(env):
    code = ('import sys\nfrom vllm.model_executor.model_loader import weight_utils as w\n'
            'for p in "abc":\n    w.safe_open(p)\n    print("opened", p, flush=True)\n')
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        run(env, code, timeout=5, DGXSPARK_LAB_HANG_AT_SHARD='2')
    assert (exc.value.stdout or b'').decode().split() == ['opened', 'a', 'opened', 'b']


def test_the_hang_hook_reads_its_variable_when_a_shard_is_opened_not_at_import(env):
    # A Ray worker imports the loader before vLLM's executor gives it the driver's environment.
    code = ('import os, sys\nfrom vllm.model_executor.model_loader import weight_utils as w\n'
            'os.environ["DGXSPARK_LAB_HANG_AT_SHARD"] = "1"\n'
            'for p in "abc":\n    w.safe_open(p)\n    print("opened", p, flush=True)\n')
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        run(env, code, timeout=5)
    assert (exc.value.stdout or b'').decode().split() == ['opened', 'a']


@pytest.mark.parametrize('arguments,busy_loop_s', [
    ('True, None, "ipc://x"', 0.02),                    # a reader with vLLM's 1 s: 20 ms
    ('True, None, "ipc://x", busy_loop_s=5', 0.02),     # any longer spin: 20 ms
    ('True, None, "ipc://x", 0.001', 0.001),            # a shorter one is kept
    ('False, None, "ipc://x"', 0),                      # the writer never spins
])
def test_a_queue_reader_spins_20_ms_after_a_message_not_1_s(env, arguments, busy_loop_s):
    code = ('from vllm.distributed.device_communicators.shm_broadcast import SpinCondition\n'
            'print(SpinCondition(%s).busy_loop_s)' % arguments)
    done = run(env, code)
    assert float(done.stdout.strip()) == busy_loop_s, done.stderr
    assert 'shm_broadcast changed' in done.stderr


@pytest.mark.parametrize('switch,busy_loop_s', [
    ('1', 1),          # bench/shm_spin's "without": vLLM's own 1 s
    ('0.005', 0.005),
    ('fast', 0.02),    # not a number: the lab's 20 ms
])
def test_the_lab_switch_sets_the_readers_spin_for_the_bench(env, switch, busy_loop_s):
    code = ('from vllm.distributed.device_communicators.shm_broadcast import SpinCondition\n'
            'print(SpinCondition(True, None, "ipc://x").busy_loop_s)')
    done = run(env, code, DGXSPARK_LAB_READER_SPIN_S=switch)
    assert float(done.stdout.strip()) == busy_loop_s, done.stderr
