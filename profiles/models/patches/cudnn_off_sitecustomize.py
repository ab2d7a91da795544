# Seed 003 (Qwen3-VL-235B AWQ on GB10): disable cuDNN in every Python process of the serving container.
# Where it comes from: seed 003's GB10 workaround (cuDNN kernels of the vision encoder fail on GB10, sm_121),
# applied there by hand as a mounted sitecustomize. Loaded by Python at start because the collection puts its
# read-only mounted directory on PYTHONPATH; it changes nothing but torch.backends.cudnn.enabled.
import sys

try:
    import torch

    torch.backends.cudnn.enabled = False
    sys.stderr.write('dgxspark patch cudnn_off_sitecustomize: torch.backends.cudnn.enabled=False\n')
except ImportError:  # the lab stand-in has no torch: say so, do not fail the interpreter
    sys.stderr.write('dgxspark patch cudnn_off_sitecustomize: torch not importable, nothing to disable\n')
