"""Host side helpers: logging, subprocess, Docker and `ip` wrappers, the state file (lab.json) and its lock."""

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

from .constants import LAB_DIR, STATE_DIR, LabError


def log(msg):
    sys.stderr.write("[labctl %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def run(cmd, check=True, input_data=None, timeout=None):
    proc = subprocess.run(cmd, input=input_data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                          check=False)
    if check and proc.returncode != 0:
        raise LabError("command failed (%d): %s\n%s" % (
            proc.returncode, " ".join(cmd), proc.stderr.decode(errors="replace").strip()))
    return proc


def docker_bin():
    return "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else (shutil.which("docker") or "docker")


def docker(*args, check=True, input_data=None, timeout=None):
    return run([docker_bin()] + list(args), check=check, input_data=input_data, timeout=timeout)


def out(proc):
    return proc.stdout.decode(errors="replace").strip()


def ip_cmd(*args, check=True):
    return run(["ip"] + list(args), check=check)


def link_exists(name):
    return os.path.exists("/sys/class/net/%s" % name)


def ensure_docker():
    script = os.path.join(LAB_DIR, "ensure-docker.sh")
    proc = subprocess.run(["bash", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise LabError("lab/ensure-docker.sh failed:\n" + proc.stdout.decode(errors="replace"))


def docker_available():
    return os.path.exists("/var/run/docker.sock") and docker("info", check=False, timeout=20).returncode == 0


@contextlib.contextmanager
def state_lock():
    os.makedirs(STATE_DIR, exist_ok=True)
    with open(os.path.join(STATE_DIR, ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def state_path():
    return os.path.join(STATE_DIR, "lab.json")


def load_state():
    try:
        with open(state_path()) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def save_state(state):
    os.makedirs(STATE_DIR, exist_ok=True)
    tmp = state_path() + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, state_path())


def write_file(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
