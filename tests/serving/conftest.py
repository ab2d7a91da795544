"""Tests of the serving image content (lab/serving): the `vllm serve` LAB STAND-IN."""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVING = os.path.join(REPO, "lab", "serving")
SERVING_VENV = os.path.join(REPO, ".build", "serving-venv")
if SERVING not in sys.path:
    sys.path.insert(0, SERVING)


def pytest_configure(config):
    config.addinivalue_line("markers", "serving: starts a local Ray cluster from .build/serving-venv (pinned ray)")


@pytest.fixture(scope="session")
def spec():
    from dgxspark_vllm_standin import flags
    return flags.load_spec()


@pytest.fixture
def model_dir(tmp_path):
    import make_model_dir
    return make_model_dir.make(str(tmp_path / "model"), shards=4, shard_mib=0.25, layers=8)
