"""Fixtures for the virtual Spark lab's own tests (tests/lab/).

The tests marked `lab` need the lab: the session fixture `lab` runs `lab/labctl.py up` (idempotent,
a few seconds when the lab is already up; it keeps the current node count) unless
DGXSPARK_LAB_SKIP_UP=1, in which case the lab must already be up. They need root (Docker, veths).

Hooks for other lab tests (e.g. a 2-node Ray test in the serving image):
  - `lab`               -> LabInfo: node names, mgmt IPs, ssh config path, labctl runner
  - `lab_host(name)`    -> a testinfra host (ssh backend, the lab's key and known_hosts)
  - `fabric_addresses`  -> temporary rail addresses + MTU 9000 on two nodes, removed afterwards
"""

import contextlib
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LABCTL = os.path.join(REPO, "lab", "labctl.py")
sys.path.insert(0, os.path.join(REPO, "lab"))
import labctl  # noqa: E402  pylint: disable=wrong-import-position


class LabInfo:
    def __init__(self, count):
        self.count = count
        self.nodes = labctl.node_names(count)
        self.mgmt_ip = {n: labctl.mgmt_ip(i) for i, n in enumerate(self.nodes)}
        self.state_dir = labctl.STATE_DIR
        self.ssh_config = os.path.join(labctl.STATE_DIR, "ssh", "config")
        self._hosts = {}

    def labctl(self, *args, check=True):
        proc = subprocess.run([sys.executable, LABCTL] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
        if check and proc.returncode != 0:
            raise AssertionError("labctl %s failed (%d):\n%s" % (" ".join(args), proc.returncode, proc.stdout))
        return proc

    def host(self, node):
        import testinfra  # pylint: disable=import-outside-toplevel
        if node not in self._hosts:
            self._hosts[node] = testinfra.get_host("ssh://root@%s" % node, ssh_config=self.ssh_config)
        return self._hosts[node]

    def state(self):
        with open(os.path.join(self.state_dir, "lab.json")) as handle:
            return json.load(handle)


@pytest.fixture(scope="session")
def lab():
    if os.geteuid() != 0:
        pytest.skip("the lab tests need root (Docker, veths, iptables)")
    current = labctl.load_state() or {}
    count = int(os.environ.get("DGXSPARK_LAB_NODES", current.get("nodes") or labctl.DEFAULT_NODES))
    info = LabInfo(count)
    if os.environ.get("DGXSPARK_LAB_SKIP_UP") != "1":
        info.labctl("up", "--nodes", str(count))
    elif not current:
        pytest.fail("DGXSPARK_LAB_SKIP_UP=1 but the lab is not up: run `python3 lab/labctl.py up` first")
    return info


@pytest.fixture(scope="session")
def lab_host(lab):
    return lab.host


@contextlib.contextmanager
def temporary_address(host, netdev, cidr, mtu=None):
    """Add an address (and optionally an MTU) by hand with `ip`; restore on exit."""
    old_mtu = host.check_output("cat /sys/class/net/%s/mtu" % netdev)
    host.run_expect([0], "ip addr add %s dev %s" % (cidr, netdev))
    if mtu:
        host.run_expect([0], "ip link set %s mtu %d" % (netdev, mtu))
    try:
        yield
    finally:
        host.run("ip addr del %s dev %s" % (cidr, netdev))
        if mtu:
            host.run("ip link set %s mtu %s" % (netdev, old_mtu))


@pytest.fixture
def fabric_addresses(lab):
    """Temporary rail-1 addresses with MTU 9000 on the first two nodes: {node: ip}."""
    a, b = lab.nodes[0], lab.nodes[1]
    addrs = {a: "192.168.100.250", b: "192.168.100.251"}
    with contextlib.ExitStack() as stack:
        for node, ip in addrs.items():
            stack.enter_context(temporary_address(lab.host(node), "enp1s0f1np1", ip + "/24", mtu=9000))
        yield addrs
