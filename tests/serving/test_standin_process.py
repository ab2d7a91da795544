"""The `vllm` stand-in as a process: hang knob, exit codes (no Ray needed: TP=1 runs without Ray)."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import SERVING


def run_standin(args, env_extra=None, **kwargs):
    env = dict(os.environ, PYTHONPATH=SERVING, PYTHONUNBUFFERED="1")
    env.update(env_extra or {})
    return subprocess.Popen([sys.executable, "-m", "dgxspark_vllm_standin"] + args, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, **kwargs)


def progress_lines(text):
    return [l for l in text.splitlines() if l.startswith("Loading safetensors checkpoint shards:")]


@pytest.mark.parametrize("k", [0, 2])
def test_hang_at_shard_stops_progress_at_k(model_dir, k):
    proc = run_standin(["serve", model_dir, "--port", "0"], {"DGXSPARK_LAB_HANG_AT_SHARD": str(k)})
    try:
        out, _ = proc.communicate(timeout=6)
        pytest.fail("the stand-in exited (%s) instead of hanging:\n%s" % (proc.returncode, out))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    lines = progress_lines(out)
    assert lines[-1].startswith("Loading safetensors checkpoint shards: %3.0f%% Completed | %d/4 [" % (25 * k, k))
    assert len(lines) == k + 1
    assert "Uvicorn running" not in out


def test_unknown_flag_exit_2(model_dir):
    proc = run_standin(["serve", model_dir, "--bogus"])
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert out.strip().splitlines()[-1] == "vllm: error: unrecognized arguments: --bogus"


def test_quantization_nvfp4_exit_1(model_dir):
    proc = run_standin(["serve", model_dir, "--quantization", "nvfp4"])
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "ValueError: Unknown quantization method: nvfp4." in out


def test_tp4_without_ray_backend_fails_like_vllm_033(model_dir):
    # seed 000's command has no --distributed-executor-backend: vLLM 0.33 defaults to mp and a Spark has 1 GPU
    proc = run_standin(["serve", model_dir, "--tensor-parallel-size", "4"])
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "ValueError: World size (4) is larger than the number of available GPUs (1) in this node." in out
    assert "set '--distributed-executor-backend ray'" in out


def test_heads_not_divisible_by_tp(model_dir):
    proc = run_standin(["serve", model_dir, "-tp", "3", "--distributed-executor-backend", "ray"])
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "Total number of attention heads (16) must be divisible by tensor parallel size (3)." in out


def test_single_rank_serves_without_ray(model_dir, tmp_path):
    import json
    import socket
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_standin(["serve", model_dir, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "lab"])
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as resp:
                    assert resp.status == 200 and resp.read() == b""
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("no /health")
        models = json.load(urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port))
        assert [m["id"] for m in models["data"]] == ["lab"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "Uvicorn running on http://127.0.0.1:%d" % port in out
