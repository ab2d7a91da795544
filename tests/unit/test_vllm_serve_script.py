"""vllm-serve.sh (roles/vllm_container/files), the vLLM container's main process, run with a stand-in `vllm` on PATH:
the cluster's hash seed from its mounted file becomes vLLM's PYTHONHASHSEED (issue 50, item 8); a missing or broken file
stops the container with a message instead of a start with a random seed."""

import os
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "vllm_container", "files", "vllm-serve.sh")
STUB = '#!/usr/bin/env bash\necho "vllm $* PYTHONHASHSEED=${PYTHONHASHSEED:-unset}"\n'


@pytest.mark.parametrize("seed, rc, says", [
    ("004271193", 0, "vllm serve m PYTHONHASHSEED=004271193"),
    ("", 1, "is missing or not a number"),
    ("-1", 1, "is missing or not a number"),
    (None, 1, "is missing or not a number"),
])
def test_vllm_starts_with_the_clusters_hash_seed(tmp_path, seed, rc, says):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "vllm").write_text(STUB)
    (bindir / "vllm").chmod(0o755)
    seed_file = tmp_path / "hash_seed"
    if seed is not None:
        seed_file.write_text(seed)
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]), DGXSPARK_EXECUTOR="mp",
               VLLM_CONFIG_ROOT=str(tmp_path / "config"), DGXSPARK_PYTHON_DIR=str(tmp_path),
               DGXSPARK_HASH_SEED_FILE=str(seed_file))
    for name in ("DGXSPARK_PATCHES", "DGXSPARK_API_KEY_FILE", "DGXSPARK_RANK_WATCH", "PYTHONHASHSEED"):
        env.pop(name, None)
    proc = subprocess.run(["bash", SCRIPT, "serve", "m"], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == rc, proc.stderr
    assert says in (proc.stdout if rc == 0 else proc.stderr), (proc.stdout, proc.stderr)
