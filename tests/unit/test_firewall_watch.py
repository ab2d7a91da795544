"""dgxspark-firewall-watch.sh (roles/node_firewall/files), run with stand-ins for nft, systemctl, docker and pgrep: a
table that is gone and cannot be loaded again stops serving. Docker kills the running containers; a Docker that does
not answer (a hung dockerd, issue 49) cannot, and the watch kills each container's first process, the child of its
containerd shim, itself. The shims here are stand-in processes of this test, never the machine's own (pgrep's
stand-in names only them)."""

import os
import subprocess
import time

import pytest

from stand_ins import path_first, stand_in

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "node_firewall", "files", "dgxspark-firewall-watch.sh")
LOG = 'echo "$(basename "$0") $*" >> "$WATCH_LOG"\n'
# nft: `list table` says whether the table is there (TABLE_THERE), `-f` whether it loads (TABLE_LOADS).
NFT = "#!/bin/sh\n" + LOG + 'case "$1" in list) [ "$TABLE_THERE" = yes ];; -f) [ "$TABLE_LOADS" = yes ];; esac\n'
SYSTEMCTL = "#!/bin/sh\n" + LOG + "exit 0\n"
DOCKER = {
    "answers": "#!/bin/sh\n" + LOG + 'case "$1" in ps) echo c0ffee;; kill) kill -KILL $FIRST_PROCESSES;; esac\n',
    "hangs": "#!/bin/sh\n" + LOG + "exec sleep 30\n",
    "refuses": "#!/bin/sh\n" + LOG + 'echo "Cannot connect to the Docker daemon" >&2; exit 1\n',
}
# pgrep -x containerd-shim: the test's stand-in shims only; -P: the real pgrep, for their children.
PGREP = '#!/bin/sh\nif [ "$1" = -x ]; then echo "$SHIMS"; else exec /usr/bin/pgrep "$@"; fi\n'
SHIM = "#!/bin/sh\nsleep 300 &\nwait\n"


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as stat:  # a zombie has ended
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def shims(tmp_path):
    """Two stand-in shims, each with its container's first process (a sleep) as child."""
    program = stand_in(tmp_path / "shim", "containerd-shim", SHIM)
    started = [subprocess.Popen([str(program)]), subprocess.Popen([str(program)])]
    children = {}
    deadline = time.time() + 10
    while len(children) < 2 and time.time() < deadline:
        for shim in started:
            found = subprocess.run(["pgrep", "-P", str(shim.pid)], capture_output=True, text=True, check=False).stdout.split()
            if found:
                children[shim.pid] = int(found[0])
        time.sleep(0.05)
    assert len(children) == 2, children
    yield children
    for shim in started:
        shim.kill()
        shim.wait()
    for child in children.values():
        if alive(child):
            os.kill(child, 9)


@pytest.mark.parametrize("table_there, table_loads, docker, rc, killed_by, says", [
    # the table is there: nothing to do
    ("yes", "no", "answers", 0, None, ""),
    # gone, and loaded again from its file
    ("no", "yes", "answers", 0, None, "loading"),
    # gone for good: Docker kills the containers, then the firewall unit stops
    ("no", "no", "answers", 1, "docker", "killing the running containers"),
    # gone for good and Docker hung: the watch kills them without it, within its bound
    ("no", "no", "hangs", 1, "the watch", "Docker did not answer within 2 s; killed 2 containers"),
    # gone for good and dockerd not there to answer
    ("no", "no", "refuses", 1, "the watch", "Docker did not answer within 2 s; killed 2 containers"),
])
def test_a_table_gone_for_good_stops_serving_even_when_docker_hangs(
        tmp_path, shims, table_there, table_loads, docker, rc, killed_by, says):
    bindir = tmp_path / "bin"
    for name, text in (("nft", NFT), ("systemctl", SYSTEMCTL), ("docker", DOCKER[docker]), ("pgrep", PGREP)):
        stand_in(bindir, name, text)
    log = tmp_path / "watch.log"
    env = dict(os.environ, PATH=path_first(bindir), WATCH_LOG=str(log), TABLE_THERE=table_there,
               TABLE_LOADS=table_loads, SHIMS="\n".join(str(pid) for pid in shims),
               FIRST_PROCESSES=" ".join(str(pid) for pid in shims.values()))
    proc = subprocess.run(["sh", SCRIPT, "nft", "/etc/dgxspark/dgxspark.nft", "dgxspark-firewall.service", "docker.service",
                           "2"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    assert says in proc.stdout + proc.stderr, (proc.stdout, proc.stderr)
    calls = log.read_text().splitlines()
    stopped = "systemctl stop dgxspark-firewall.service" in calls
    assert stopped == (rc == 1), calls
    time.sleep(0.2)
    left = [pid for pid in shims.values() if alive(pid)]
    assert left == ([] if killed_by else list(shims.values())), (killed_by, left)
