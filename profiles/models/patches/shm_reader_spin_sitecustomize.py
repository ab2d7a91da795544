# Opt-in: a shorter spin for the readers of vLLM's shared-memory message queue (shm_broadcast.SpinCondition).
# Why: after each message a reader (the ranks that read the engine's calls) spins on sched_yield for busy_loop_s, 1 s
# in vLLM 0.32, before it waits on its zmq socket; vLLM has no setting for it (envs.py of 0.32 has none). Every request,
# health probe or readiness check thus costs about a second of a busy core per reader rank: 3-4 cores pinned on a
# cluster that answers regular probes, and on a GB10 the heat of it (MiaAI #79: the SoC near 95 C).
# Trade-off: with a short spin, the first message after a pause longer than the spin wakes the reader through its
# socket, a few microseconds later than a spinning reader would see it; messages closer together than the spin (a busy
# engine's steps) are read by spinning as before. Nothing is missed: the writer notifies the socket on every message.
# DGXSPARK_SHM_READER_SPIN_S (seconds, in the serving containers' environment) sets the spin; default 0.02. The
# patch never lengthens vLLM's spin, and changes nothing, saying why on stderr, when SpinCondition does not take
# busy_loop_s as this vLLM's does (docs/profiles.md, "The shared-memory busy loop").
import importlib.abc
import importlib.machinery
import inspect
import os
import sys

MODULE = 'vllm.distributed.device_communicators.shm_broadcast'
SPIN_ENV = 'DGXSPARK_SHM_READER_SPIN_S'
DEFAULT_SPIN_S = 0.02


def _say(message):
    sys.stderr.write('dgxspark patch shm_reader_spin_sitecustomize: %s\n' % message)


def reader_spin_s(environ):
    """The spin asked for in ``environ``; ValueError with a clear message when it is not a number of seconds >= 0."""
    text = environ.get(SPIN_ENV, '')
    if text == '':
        return DEFAULT_SPIN_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float('inf'):
        raise ValueError('%s=%r is not a number of seconds >= 0' % (SPIN_ENV, text))
    return value


def shorten_reader_spin(module, environ):
    """Make every reader SpinCondition of ``module`` spin at most the asked seconds; False (and why, on stderr) when
    the module is not the code this patch knows."""
    spin_condition = getattr(module, 'SpinCondition', None)
    if spin_condition is None:
        _say('%s has no SpinCondition: this vLLM is not the one the patch knows, nothing changed' % MODULE)
        return False
    init = spin_condition.__init__
    if 'busy_loop_s' not in inspect.signature(init).parameters:
        _say('SpinCondition takes no busy_loop_s: this vLLM is not the one the patch knows, nothing changed')
        return False
    try:
        spin_s = reader_spin_s(environ)
    except ValueError as exc:
        _say('%s; nothing changed' % exc)
        return False

    def init_with_short_spin(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if getattr(self, 'is_reader', False) and hasattr(self, 'busy_loop_s'):
            self.busy_loop_s = min(self.busy_loop_s, spin_s)

    spin_condition.__init__ = init_with_short_spin
    _say('readers spin %g s after a message' % spin_s)
    return True


class _AfterShmBroadcastImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of shm_broadcast so that it is changed once vLLM loads it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_change(module):
            exec_module(module)
            shorten_reader_spin(module, os.environ)

        spec.loader.exec_module = exec_then_change
        return spec


if __name__.startswith('dgxspark_site_'):  # run by the collection's sitecustomize loader, not imported by a test
    if MODULE in sys.modules:
        shorten_reader_spin(sys.modules[MODULE], os.environ)
    else:
        sys.meta_path.insert(0, _AfterShmBroadcastImport())
