"""ray-node.sh (roles/ray_cluster/files), the Ray container's main process, run with a stand-in `ray` on PATH: a start
that Ray gives up within the window (its node.py waits 30 s for the node to register with the GCS) is tried again after
`ray stop --force`; a node that ran past the window, the last attempt and a stop end the script with Ray's status; a
TERM reaches Ray."""

import os
import signal
import subprocess
import time

import pytest

from stand_ins import path_first, stand_in

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "ray_cluster", "files", "ray-node.sh")

# The stand-in: `ray start` takes the next code of STUB_CODES (one per start, the last repeats), or sleeps until TERM when
# the code is "run"; every call is logged.
STUB = r"""#!/usr/bin/env bash
echo "$*" >> "$STUB_LOG"
[ -n "${STUB_ENV_LOG:-}" ] && echo "${PYTHONHASHSEED:-}" > "$STUB_ENV_LOG"
[ "$1" = start ] || exit 0
n=$(grep -c '^start' "$STUB_LOG")
codes=($STUB_CODES)
code=${codes[$((n - 1))]:-${codes[-1]}}
if [ "$code" = run ]; then
    trap 'echo TERM >> "$STUB_LOG"; exit 143' TERM
    while :; do sleep 0.1; done
fi
echo "Exception: The current node timed out during startup." >&2
exit "$code"
"""


def start(tmp_path, codes, **env):
    bindir = tmp_path / "bin"
    stand_in(bindir, "ray", STUB)
    token = tmp_path / "token"
    token.write_text("secret\n")
    log = tmp_path / "calls.log"
    log.write_text("")
    full_env = dict(os.environ, PATH=path_first(bindir), STUB_LOG=str(log), STUB_CODES=codes,
                    RAY_AUTH_TOKEN_PATH=str(token))
    full_env.update(env)
    full_env.pop("DGXSPARK_PATCHES", None)
    proc = subprocess.Popen(["bash", SCRIPT, "head", "--head", "--block"], env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, log


@pytest.mark.parametrize("codes, env, rc, calls, says", [
    # Ray gave up on the node's registration once: stopped and started again, then it ran and ended well.
    ("1 0", {}, 0, ["start --head --block", "stop --force", "start --head --block"], "attempt 1 of 3): trying again"),
    # It gives up every time: three starts, then Ray's status.
    ("1", {}, 1, ["start --head --block", "stop --force", "start --head --block", "stop --force", "start --head --block"],
     "attempt 2 of 3): trying again"),
    # One attempt asked for: none again.
    ("1 0", {"DGXSPARK_RAY_START_ATTEMPTS": "1"}, 1, ["start --head --block"], ""),
    # A node that ran past the window failed at run time, not at start: the container ends, for the supervisor.
    ("7 0", {"DGXSPARK_RAY_START_WINDOW_S": "0"}, 7, ["start --head --block"], ""),
])
def test_a_start_that_ray_gives_up_is_tried_again_within_bounds(tmp_path, codes, env, rc, calls, says):
    proc, log = start(tmp_path, codes, **env)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == rc, err
    assert log.read_text().splitlines() == calls
    assert (says in err) if says else ("trying again" not in err), err


def test_a_stop_reaches_ray_and_is_not_retried(tmp_path):
    proc, log = start(tmp_path, "run")
    deadline = time.time() + 10
    while "start" not in log.read_text() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert log.read_text().splitlines() == ["start --head --block", "TERM"]


def test_a_missing_token_fails_before_ray_starts(tmp_path):
    proc, log = start(tmp_path, "0", RAY_AUTH_TOKEN_PATH=str(tmp_path / "absent"))
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "is missing or empty" in err
    assert log.read_text() == ""


@pytest.mark.parametrize("seed, rc, exported", [
    ("123456789", 0, "123456789"),
    ("", 1, None),
    ("12ab", 1, None),
    (None, 1, None),  # the file is missing
])
def test_the_clusters_hash_seed_is_exported_from_its_file(tmp_path, seed, rc, exported):
    """Issue 50, item 8: Ray and every process it starts get PYTHONHASHSEED from the mounted file; a missing or broken
    file stops the container with a message instead of starting with a random seed."""
    seed_file = tmp_path / "hash_seed"
    if seed is not None:
        seed_file.write_text(seed)
    proc, log = start(tmp_path, "0", DGXSPARK_HASH_SEED_FILE=str(seed_file),
                      STUB_ENV_LOG=str(tmp_path / "env.log"))
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == rc, err
    if exported is None:
        assert "the hash seed file %s is missing or not a number" % seed_file in err and log.read_text() == ""
    else:
        assert (tmp_path / "env.log").read_text().strip() == exported
