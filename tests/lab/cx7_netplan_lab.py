"""Helpers of the cx7_netplan lab tests: run playbooks/network.yml on the lab, snapshot the files the role owns."""

import time

import pytest

from ansible_lab import REPO, inventory, run_playbook  # noqa: F401  (re-exported for the cx7_netplan tests)

NETPLAN_FILE = "/etc/netplan/40-cx7.yaml"
SYSCTL_FILE = "/etc/sysctl.d/90-dgxspark-cx7-ipv6.conf"
RAILS = {"rail1": "enp1s0f1np1", "rail2": "enP2p1s0f1np1"}
SUBNETS = {"rail1": "192.168.100.", "rail2": "192.168.101."}
# The MTU labctl gives a rail when it plumbs a node (a fresh Spark's default).
START_MTU = 1500


def run_network(lab, *extra, on_line=None, timeout=900):
    """Run playbooks/network.yml on every lab node; returns (rc, output). on_line(line) sees each output line."""
    return run_playbook(lab, "network.yml", *extra, on_line=on_line, timeout=timeout)


def snapshot(lab):
    """Per node: checksums and modes of every netplan file and of the role's sysctl drop-in."""
    result = {}
    for node in lab.nodes:
        host = lab.host(node)
        out = host.run("for f in /etc/netplan/* %s; do [ -e \"$f\" ] && echo \"$(stat -c %%a \"$f\") $(sha256sum \"$f\")\"; done; true"
                       % SYSCTL_FILE)
        result[node] = sorted(out.stdout.splitlines())
    return result


def rail_state(host, interface):
    import json  # pylint: disable=import-outside-toplevel
    link = json.loads(host.check_output("ip -j addr show dev %s" % interface))[0]
    inet = ["%s/%s" % (a["local"], a["prefixlen"]) for a in link.get("addr_info", []) if a["family"] == "inet"]
    return {"mtu": link["mtu"], "inet": inet, "operstate": link["operstate"], "mac": link["address"]}


def wait_for(predicate, timeout=60, interval=2):
    """predicate() until it is true or `timeout` passes; errors (a node still booting: ssh refused) count as false."""
    deadline = time.time() + timeout
    while True:
        try:
            value = predicate()
        except (RuntimeError, AssertionError, ValueError, IndexError):
            value = False
        if value or time.time() > deadline:
            return value
        time.sleep(interval)


def expected_cidr(lab, node, rail):
    return "%s%d/24" % (SUBNETS[rail], 10 + lab.nodes.index(node))


def rails_configured(lab, node, mtu=9000):
    host = lab.host(node)
    for rail, interface in RAILS.items():
        state = rail_state(host, interface)
        if state["mtu"] != mtu or state["inet"] != [expected_cidr(lab, node, rail)]:
            return False
    return True


def unconfigure_rails(lab):
    """Undo what the role did on every node (files, live addresses, MTU), so other lab tests find plain rails."""
    for node in lab.nodes:
        host = lab.host(node)
        host.run("rm -rf %s %s /var/backups/dgxspark-cx7-netplan && netplan apply" % (NETPLAN_FILE, SYSCTL_FILE))
        for interface in RAILS.values():
            host.run("ip addr flush dev %s && ip link set dev %s mtu %d" % (interface, interface, START_MTU))


@pytest.fixture(name="plain_rails", scope="module")
def fixture_plain_rails(lab):
    """Module scope: start from rails the role never touched, and leave them so."""
    unconfigure_rails(lab)
    yield
    unconfigure_rails(lab)
