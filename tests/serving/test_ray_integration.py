"""The stand-in on a REAL local single-node Ray cluster (pinned ray from .build/serving-venv).

Ray is started with `ray start --block` in its own session and stopped by killing that process
group: a plain `ray stop` kills every Ray process the host can see, including the lab
containers' ones."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import SERVING, SERVING_VENV

RAY = os.path.join(SERVING_VENV, "bin", "ray")
PYTHON = os.path.join(SERVING_VENV, "bin", "python")

pytestmark = [
    pytest.mark.serving,
    pytest.mark.skipif(not os.path.exists(RAY), reason="%s is absent: create it with `python3 -m venv .build/serving-venv "
                       "&& .build/serving-venv/bin/pip install -r lab/serving/requirements.txt`" % RAY),
]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster():
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's unix socket paths are length-limited
    port = free_port()
    node_env = dict(os.environ, PYTHONPATH=SERVING, RAY_TMPDIR=temp, RAY_USAGE_STATS_ENABLED="0",
                    VLLM_HOST_IP="127.0.0.1", NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo")
    log = open(os.path.join(temp, "ray-start.log"), "w")
    proc = subprocess.Popen([RAY, "start", "--head", "--block", "--num-gpus", "2", "--num-cpus", "2",
                             "--node-ip-address", "127.0.0.1", "--port", str(port), "--temp-dir", temp,
                             "--include-dashboard=false", "--disable-usage-stats"],
                            env=node_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            status = subprocess.run([RAY, "status", "--address", "127.0.0.1:%d" % port], env=node_env,
                                    capture_output=True, text=True)
            if status.returncode == 0 and "GPU" in status.stdout:
                break
            if proc.poll() is not None:
                pytest.fail("ray start exited %s: %s" % (proc.returncode, open(log.name).read()))
            time.sleep(1)
        else:
            pytest.fail("Ray did not come up: %s" % open(log.name).read())
        yield {"address": "127.0.0.1:%d" % port, "temp": temp}
    finally:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()
        _kill_leftovers(temp)
        shutil.rmtree(temp, ignore_errors=True)


def _kill_leftovers(temp):
    """Ray workers live in their own sessions; end those of THIS cluster (RAY_TMPDIR=temp) by pid."""
    marker = ("RAY_TMPDIR=%s" % temp).encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/environ" % pid, "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue


def run_vllm(ray_cluster, args, extra_env=None):
    env = dict(os.environ, PYTHONPATH=SERVING, RAY_ADDRESS=ray_cluster["address"], RAY_TMPDIR=ray_cluster["temp"],
               PYTHONUNBUFFERED="1")
    env.update(extra_env or {})
    return subprocess.Popen([PYTHON, "-m", "dgxspark_vllm_standin", "serve"] + args, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def get(url, data=None):
    req = urllib.request.Request(url, data=json.dumps(data).encode() if data is not None else None,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, resp.read()


def test_tp2_serves_with_two_ranks(ray_cluster, model_dir, tmp_path):
    port = free_port()
    config_root = tmp_path / "vllm-config"
    config_root.mkdir()
    (config_root / "ray_non_carry_over_env_vars.json").write_text(json.dumps(["NCCL_DEBUG"]))
    proc = run_vllm(ray_cluster, [model_dir, "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray",
                                  "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "lab-model"],
                    {"VLLM_HOST_IP": "10.99.99.99", "NCCL_SOCKET_IFNAME": "eth-of-the-driver",
                     "NCCL_IB_HCA": "=rocep1s0f1:1", "NCCL_DEBUG": "INFO", "VLLM_CONFIG_ROOT": str(config_root)})
    lines = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Uvicorn running on http://127.0.0.1:%d" % port in line:
                break
        out = "".join(lines)
        assert "Uvicorn running on" in out, out
        assert "Loading safetensors checkpoint shards: 100% Completed | 4/4 [" in out
        assert get("http://127.0.0.1:%d/health" % port) == (200, b"")
        status, body = get("http://127.0.0.1:%d/v1/models" % port)
        models = json.loads(body)
        assert status == 200 and models["object"] == "list" and [m["id"] for m in models["data"]] == ["lab-model"]
        status, body = get("http://127.0.0.1:%d/v1/chat/completions" % port,
                           {"model": "lab-model", "messages": [{"role": "user", "content": "hello"}]})
        reply = json.loads(body)
        assert status == 200 and reply["object"] == "chat.completion"
        content = reply["choices"][0]["message"]["content"]
        assert "dgxspark lab stand-in" in content and "not a model" in content
        assert "2 rank(s) = TP 2 x PP 1" in content
        world = reply["dgxspark_lab"]["world"]
        assert [r["rank"] for r in world["ranks"]] == [0, 1]
        for rank in world["ranks"]:
            assert rank["vllm_host_ip"] == "127.0.0.1"          # from the node, not the driver's 10.99.99.99
            assert rank["env"]["NCCL_SOCKET_IFNAME"] == "lo"    # vLLM 0.33: node-local value wins (setdefault)
            assert rank["env"]["NCCL_IB_HCA"] == "=rocep1s0f1:1"  # unset on the node: filled from the driver
            assert "NCCL_DEBUG" not in rank["env"]              # listed in ray_non_carry_over_env_vars.json
            assert rank["bootstrap_ip"] == "127.0.0.1"
        assert [(c["from_rank"], c["to_rank"], c["ok"]) for c in world["transport_checks"]] == [(0, 1, True), (1, 0, True)]
        with pytest.raises(urllib.error.HTTPError) as err:
            get("http://127.0.0.1:%d/v1/chat/completions" % port, {"model": "other", "messages": [{"role": "user", "content": "x"}]})
        assert err.value.code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0


def test_tp4_fails_for_lack_of_gpus(ray_cluster, model_dir):
    proc = run_vllm(ray_cluster, [model_dir, "-tp", "4", "--distributed-executor-backend", "ray", "--port", str(free_port())],
                    {"DGXSPARK_LAB_PG_WAIT_TIMEOUT": "5",
                     # The community's SPREAD fix: vLLM 0.33.0 never reads it, and neither does the stand-in.
                     "VLLM_DISTRIBUTED_EXECUTOR_CONFIG": json.dumps({"placement_group_options": {"strategy": "SPREAD"}})})
    try:
        out, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail("TP=4 did not fail in time:\n" + out)
    assert proc.returncode == 1, out
    assert "ValueError: Cannot provide a placement group requiring 4 GPUs" in out
    assert "GPUs available in the Ray cluster: 2 on 1 node(s); required: 4" in out
    assert "VLLM_DISTRIBUTED_EXECUTOR_CONFIG is set but has no effect" in out and "strategy PACK" in out
    assert "Uvicorn running" not in out
