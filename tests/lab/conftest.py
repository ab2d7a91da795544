"""Fixtures for the virtual Spark lab's own tests (tests/lab/).

The tests marked `lab` need the lab: the session fixture `lab` runs `lab/labctl.py up` (idempotent,
a few seconds when the lab is already up; it keeps the current node count) unless
DGXSPARK_LAB_SKIP_UP=1, in which case the lab must already be up. They need root (Docker, veths).

Hooks for other lab tests (e.g. a 2-node Ray test in the serving image):
  - `lab`               -> LabInfo: node names, mgmt IPs, ssh config path, labctl runner
  - `lab_host(name)`    -> a testinfra host (ssh backend, the lab's key and known_hosts)
  - `fabric_addresses`  -> temporary rail addresses + MTU 9000 on two nodes, removed afterwards
  - `serving_nodes`     -> the two nodes of the serving tests, head first (the cluster layout: the
                           inventory's head and first worker; DGXSPARK_LAB_SERVING_NODES=a,b overrides)
  - `serving_image`     -> `labctl serving` on those nodes (builds if needed, loads where missing): the tag
  - `cluster_rail1`     -> context manager factory: the collection's rail-1 address of each node
                           (192.168.100.10 + node index) + MTU 9000 by hand, undone afterwards
"""

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LABCTL = os.path.join(REPO, "lab", "labctl.py")
sys.path.insert(0, os.path.join(REPO, "lab"))
import labctl  # noqa: E402  pylint: disable=wrong-import-position


class LabInfo:
    def __init__(self, count):
        self._follow(count)
        self.state_dir = labctl.STATE_DIR
        self.ssh_config = os.path.join(labctl.STATE_DIR, "ssh", "config")
        self._hosts = {}

    def labctl(self, *args, check=True):
        proc = subprocess.run([sys.executable, LABCTL] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
        if check and proc.returncode != 0:
            raise AssertionError("labctl %s failed (%d):\n%s" % (" ".join(args), proc.returncode, proc.stdout))
        return proc

    def _follow(self, count):
        """This view of the lab: COUNT nodes, their names and management addresses."""
        self.count = count
        self.nodes = labctl.node_names(count)
        self.mgmt_ip = {n: labctl.mgmt_ip(i) for i, n in enumerate(self.nodes)}

    def resize(self, count):
        """`labctl up --nodes COUNT`, and this view of the lab follows."""
        self.labctl("up", "--nodes", str(count))
        self._follow(count)

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


@pytest.fixture(scope="session")
def serving_nodes(lab):
    """(head, worker) for the serving tests: the inventory's head and first worker unless overridden."""
    names = [n.strip() for n in os.environ.get("DGXSPARK_LAB_SERVING_NODES", "").split(",") if n.strip()]
    names = names or lab.nodes[:2]
    if len(names) != 2 or len(set(names)) != 2 or any(n not in lab.nodes for n in names):
        pytest.fail("DGXSPARK_LAB_SERVING_NODES must name two different nodes of the running lab %s, got %r"
                    % (lab.nodes, names))
    return tuple(names)


@pytest.fixture(scope="session")
def serving_image(lab, serving_nodes):
    """`labctl serving NODE NODE`: the serving image (built if lab/serving/ changed) and the lab model dir
    in both nodes' Docker; returns {"tag": ..., "seconds": ..., "log": ...}."""
    started = time.time()
    proc = lab.labctl("serving", *serving_nodes)
    lines = proc.stdout.strip().splitlines()
    tags = [line for line in lines if line.startswith(labctl.SERVING_REPO + ":")]
    assert tags, proc.stdout
    return {"tag": tags[-1], "seconds": round(time.time() - started, 1), "log": proc.stdout}


@pytest.fixture(scope="session")
def cluster_rail1(lab):
    """Factory: `with cluster_rail1(nodes) as addrs:` -> {node: rail-1 IPv4} with MTU 9000.

    The address is the one the collection computes for the node in the lab's inventory (subnet + offset +
    node index), so it never clashes with a network role run on the same node; an address already
    present is used as is and left in place. The MTU is restored on exit."""

    @contextlib.contextmanager
    def factory(nodes, mtu=9000):
        netdev = labctl.FABRIC[0][1]
        addrs = {n: labctl.rail_address(1, labctl.node_index(n)) for n in nodes}
        with contextlib.ExitStack() as stack:
            for node, ip in addrs.items():
                host = lab.host(node)
                have = host.check_output("ip -4 -o addr show dev %s" % netdev)
                if (" %s/" % ip) in have:
                    old_mtu = host.check_output("cat /sys/class/net/%s/mtu" % netdev)
                    host.run_expect([0], "ip link set %s mtu %d" % (netdev, mtu))
                    stack.callback(host.run, "ip link set %s mtu %s" % (netdev, old_mtu))
                else:
                    stack.enter_context(temporary_address(host, netdev, ip + "/24", mtu=mtu))
            yield addrs

    return factory


# ---------------------------------------------------------------- durations by module (make test's table)
_MODULE_SECONDS = {}
_MODULE_FAILED = set()


def pytest_runtest_logreport(report):
    """Add each phase (setup, call, teardown: module fixtures included) to its module's wall time."""
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration
    if report.failed:
        _MODULE_FAILED.add(module)


def pytest_sessionfinish(session):
    """One row per lab module in DGXSPARK_TEST_DURATIONS (tools/test-suite.sh prints the table): lab/MODULE, or
    lab1/MODULE for a module that ran on the second lab (DGXSPARK_LAB_INSTANCE=1)."""
    del session
    path = os.environ.get("DGXSPARK_TEST_DURATIONS")
    if not path or not _MODULE_SECONDS:
        return
    prefix = "lab" if labctl.INSTANCE == 0 else "lab%d" % labctl.INSTANCE
    with open(path, "a", encoding="utf-8") as handle:
        for module, seconds in sorted(_MODULE_SECONDS.items()):
            handle.write("%s/%s\t%d\t%s\n" % (prefix, os.path.basename(module), round(seconds),
                                               "FAILED" if module in _MODULE_FAILED else "ok"))


# ---------------------------------------------------------------- module order
# The modules that deploy and serve run last, in this order, each leaving the cluster serving for the next
# (ansible_lab.serving_cluster): one start for the run instead of a start and a stop per module (the last one leaves its
# engine starting again by itself). The modules before them take rails down or stop serving (preflight), and would
# break a served cluster.
# The fleet comes first: it deploys two serving groups, and ends with the users' default layout serving again.
# The backend switch comes last: it leaves a release that failed its gate.
# TLS (test_api_tls_lab.py) follows the deploy: with the lab's TLS on, as make test's first lab, its deploy is a no-op.
SERVING_MODULES = ("test_fleet_lab.py", "test_deploy_lab.py", "test_api_tls_lab.py", "test_init_lab.py", "test_openai_client_lab.py",
                   "test_healing_lab.py", "test_supervisor_lab.py",
                   "test_deadlock_lab.py", "test_benchmark_lab.py",
                   "test_monitoring_lab.py", "test_diagnose_lab.py", "test_security_lab.py", "test_profile_patches_lab.py",
                   "test_backend_switch_lab.py")


def pytest_collection_modifyitems(items):
    """Stable order: every other module as collected, then SERVING_MODULES in their order."""
    def rank(item):
        name = os.path.basename(item.nodeid.split("::", 1)[0])
        return SERVING_MODULES.index(name) + 1 if name in SERVING_MODULES else 0
    items.sort(key=rank)
