"""vllm-serve.sh (roles/vllm_container/files), the vLLM container's main process, run with a stand-in `vllm` on PATH:
the cluster's hash seed from its mounted file becomes vLLM's PYTHONHASHSEED (issue 50, item 8); a missing or broken file
stops the container with a message instead of a start with a random seed. On the head, vLLM starts with the API key
taken from fd 3 and fd 3 closed (issue 49, item 4). The container's interpreter loses its read bits, so that every Python
the container starts without a capability that reads past them is non-dumpable from its exec (issue 49): here a
stand-in `python3` that runs the test's own interpreter, so that the script changes no file of this machine."""

import hashlib
import os
import shutil
import stat
import subprocess
import sys

import pytest

from stand_ins import path_first, stand_in

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "vllm_container", "files", "vllm-serve.sh")
APPLY_PATCHES = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "ray_cluster", "files", "dgxspark-apply-patches.sh")
STUB = '#!/usr/bin/env bash\necho "vllm $* PYTHONHASHSEED=${PYTHONHASHSEED:-unset}"\n'


def interpreter_stand_ins(bindir):
    """`python3` and `bash` as the script finds them on PATH: files of their own, which the script makes unreadable
    (never this machine's own); returns both paths."""
    return (stand_in(bindir, "python3", '#!/bin/sh\nexec %s "$@"\n' % sys.executable),
            stand_in(bindir, "bash", '#!/bin/sh\nexec %s "$@"\n' % shutil.which("bash")))


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
    programs = interpreter_stand_ins(bindir)
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
    assert all(unreadable(program) for program in programs), [oct(os.stat(program).st_mode) for program in programs]


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
    programs = interpreter_stand_ins(bindir)
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
    assert all(unreadable(program) and os.access(program, os.X_OK) for program in programs), programs


# A profile's python patch: the capabilities of the process that applies it, then of the patches' shell (its parent).
PATCH = '''import os
def key_capabilities(pid):
    with open("/proc/%s/status" % pid) as status:
        sets = dict(line.split(":") for line in status if line.startswith("Cap"))
    return any(int(sets[name], 16) & ((1 << 2) | (1 << 8)) for name in ("CapEff", "CapPrm", "CapBnd", "CapInh"))
print("patch applied; the key's capabilities held by the patch:", key_capabilities("self"),
      "by its shell:", key_capabilities(os.getppid()))
'''


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="drops capabilities: root and setpriv")
@pytest.mark.parametrize("key, expected", [
    # the head: the patches' shell starts through the guard's --exec, without the two capabilities
    (True, "patch applied; the key's capabilities held by the patch: False by its shell: False"),
    # a rank (no key): the shell starts as it is; the test runs as root, so the capabilities are there (the check can fail)
    (False, "patch applied; the key's capabilities held by the patch: True by its shell: True"),
])
def test_the_heads_patches_apply_without_the_capabilities_that_open_the_key(tmp_path, key, expected):
    bindir = tmp_path / "bin"
    stand_in(bindir, "vllm", STUB)
    interpreter_stand_ins(bindir)
    patch_dir = tmp_path / "patches"
    patch_dir.mkdir()
    shutil.copy(APPLY_PATCHES, patch_dir / "dgxspark-apply-patches.sh")
    (patch_dir / "fix.py").write_text(PATCH)
    env = dict(os.environ, PATH=path_first(bindir), DGXSPARK_EXECUTOR="mp", VLLM_CONFIG_ROOT=str(tmp_path / "config"),
               DGXSPARK_PYTHON_DIR=os.path.dirname(SCRIPT), DGXSPARK_PATCH_DIR=str(patch_dir),
               DGXSPARK_PATCHES="python:fix.py:%s" % hashlib.sha256(PATCH.encode()).hexdigest())
    for name in ("DGXSPARK_RANK_WATCH", "DGXSPARK_HASH_SEED_FILE", "PYTHONPATH", "DGXSPARK_API_KEY_FILE"):
        env.pop(name, None)
    if key:
        key_file = tmp_path / "vllm_api_key"
        key_file.write_text("k3y-of-the-lab")
        env["DGXSPARK_API_KEY_FILE"] = str(key_file)
        stand_in(bindir, "vllm", PYTHON_STUB)
    proc = subprocess.run(["bash", SCRIPT, "serve", "m"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout, proc.stdout
    assert "dgxspark patches: fix.py (python) verified and applied" in proc.stdout, proc.stdout
