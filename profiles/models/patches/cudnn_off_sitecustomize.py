# Seed 003 (Qwen3-VL-235B AWQ on GB10): disable cuDNN in every Python process of the serving containers.
# Where it comes from: seed 003's GB10 workaround (cuDNN has no conv3d kernels for sm_121, which the vision encoder
# needs), applied there by hand as a mounted sitecustomize. Python loads this file at start because the collection
# puts its read-only mounted directory on PYTHONPATH (the Ray workers inherit it).
# It imports nothing heavy: torch is touched only in a process that imports torch itself, right after that import,
# so `ray`, its agents and every short-lived helper start as fast as before.
import importlib.abc
import sys


def _disable_cudnn(torch):
    torch.backends.cudnn.enabled = False
    sys.stderr.write('dgxspark patch cudnn_off_sitecustomize: torch.backends.cudnn.enabled=False\n')


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of the top-level module torch so that cuDNN is off once it is loaded."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != 'torch':
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util
            spec = importlib.util.find_spec('torch')
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_disable(module):
            exec_module(module)
            _disable_cudnn(module)

        spec.loader.exec_module = exec_then_disable
        return spec


if 'torch' in sys.modules:
    _disable_cudnn(sys.modules['torch'])
else:
    sys.meta_path.insert(0, _AfterTorchImport())
