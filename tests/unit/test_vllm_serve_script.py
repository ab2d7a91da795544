"""vllm-serve.sh (roles/vllm_container/files), the vLLM container's main process, run with a stand-in `vllm` on PATH:
the cluster's hash seed from its mounted file becomes vLLM's PYTHONHASHSEED (issue 50, item 8); a missing or broken file
stops the container with a message instead of a start with a random seed. On the head, vLLM starts with the API key
taken from fd 3 and fd 3 closed (issue 49, item 4). The container's interpreter loses its read bits, so that every Python
the container starts without a capability that reads past them is non-dumpable from its exec (issue 49): here a
stand-in `python3` that runs the test's own interpreter, so that the script changes no file of this machine."""

import os
import shutil
import stat
import subprocess
import sys

import pytest

from stand_ins import path_first, stand_in

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "vllm_container", "files", "vllm-serve.sh")
STUB = '#!/usr/bin/env bash\necho "vllm $* PYTHONHASHSEED=${PYTHONHASHSEED:-unset}"\n'


def python3_stand_in(bindir):
    """`python3` as the script finds it on PATH: a file of its own, which the script may make unreadable."""
    return stand_in(bindir, "python3", '#!/bin/sh\nexec %s "$@"\n' % sys.executable)


def unreadable(path):
    return not os.stat(path).st_mode & (stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


@pytest.mark.parametrize("seed, rc, says", [
    ("004271193", 0, "vllm serve m PYTHONHASHSEED=004271193"),
    ("", 1, "is missing or not a number"),
    ("-1", 1, "is missing or not a number"),
    (None, 1, "is missing or not a number"),
])
def test_vllm_starts_with_the_clusters_hash_seed(tmp_path, seed, rc, says):
    bindir = tmp_path / "bin"
    stand_in(bindir, "vllm", STUB)
    python3 = python3_stand_in(bindir)
    seed_file = tmp_path / "hash_seed"
    if seed is not None:
        seed_file.write_text(seed)
    env = dict(os.environ, PATH=path_first(bindir), DGXSPARK_EXECUTOR="mp",
               VLLM_CONFIG_ROOT=str(tmp_path / "config"), DGXSPARK_PYTHON_DIR=str(tmp_path),
               DGXSPARK_HASH_SEED_FILE=str(seed_file))
    for name in ("DGXSPARK_PATCHES", "DGXSPARK_API_KEY_FILE", "DGXSPARK_RANK_WATCH", "PYTHONHASHSEED"):
        env.pop(name, None)
    proc = subprocess.run(["bash", SCRIPT, "serve", "m"], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == rc, proc.stderr
    assert says in (proc.stdout if rc == 0 else proc.stderr), (proc.stdout, proc.stderr)
    assert unreadable(python3), oct(os.stat(python3).st_mode)


# Stands for vLLM's console script: what it finds when it starts, in the process the guard's main runs it in.
PYTHON_STUB = '''import os, sys
import dgxspark_api_guard
try:
    os.fstat(3)
    held = "held"
except OSError:
    held = "closed"
print("vllm", " ".join(sys.argv[1:]), "fd3", held, "taken", bool(dgxspark_api_guard._TAKEN.get("digest")),
      "variable", os.environ.get("DGXSPARK_API_KEY_FD"))
'''


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="drops capabilities: root and setpriv")
def test_the_heads_vllm_starts_with_the_key_taken_and_its_descriptor_closed(tmp_path):
    """On the head the script opens the key's file as fd 3 and starts vLLM through the guard's main, which takes the key
    and closes fd 3 before vLLM runs (and forks its engine core, issue 49 item 4)."""
    bindir = tmp_path / "bin"
    stand_in(bindir, "vllm", PYTHON_STUB)
    python3 = python3_stand_in(bindir)
    key_file = tmp_path / "vllm_api_key"
    key_file.write_text("k3y-of-the-lab")
    env = dict(os.environ, PATH=path_first(bindir), DGXSPARK_EXECUTOR="mp",
               VLLM_CONFIG_ROOT=str(tmp_path / "config"), DGXSPARK_PYTHON_DIR=os.path.dirname(SCRIPT),
               DGXSPARK_API_KEY_FILE=str(key_file))
    for name in ("DGXSPARK_PATCHES", "DGXSPARK_RANK_WATCH", "DGXSPARK_HASH_SEED_FILE", "PYTHONPATH"):
        env.pop(name, None)
    proc = subprocess.run(["bash", SCRIPT, "serve", "m"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "vllm serve m fd3 closed taken True variable None", proc.stdout
    assert unreadable(python3) and os.access(python3, os.X_OK), oct(os.stat(python3).st_mode)
