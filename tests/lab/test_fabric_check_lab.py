# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fault tests of the fabric_check role on the virtual Spark lab (marked `lab`, need root and Docker).

The rails are configured by hand from the cluster plan's addressing (subnet network + 10 + rank, MTU 9000), the
role runs against the lab's live inventory (lab/state/inventory, or the second lab's), and each test injects one fault:
  - a rail cable pulled on one node (`labctl.py rail NODE rail1 down`) -> the check fails naming that node, rail,
    interface and "cabling / link down";
  - MTU 1500 set by hand on one node's rail -> DF jumbo pings fail, diagnosed as "MTU" on that node and rail.
Every fault is removed afterwards, and the addresses this module added are deleted again.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess

import pytest

from ansible_lab import inventory

pytestmark = pytest.mark.lab

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAILS = (("rail1", "enp1s0f1np1", "192.168.100.0/24"), ("rail2", "enP2p1s0f1np1", "192.168.101.0/24"))
PLAYBOOK = """---
- name: Plan the cluster, as every playbook does
  ansible.builtin.import_playbook: %s/playbooks/plan.yml

- name: Fabric check (lab fault test)
  hosts: head:workers
  gather_facts: false
  roles:
    - role: dgxspark.cluster.fabric_check
""" % REPO


def rail_address(subnet, rank):
    return str(ipaddress.ip_network(subnet).network_address + 10 + rank)


@pytest.fixture(scope="module", name="fabric")
def fixture_fabric(lab):
    """Every node's rails addressed and at MTU 9000, as the network role would leave them."""
    added = []
    old_mtu = {}
    for rank, node in enumerate(lab.nodes):
        host = lab.host(node)
        for _name, netdev, subnet in RAILS:
            old_mtu[(node, netdev)] = host.check_output("cat /sys/class/net/%s/mtu" % netdev)
            host.run_expect([0], "ip link set %s mtu 9000 up" % netdev)
            cidr = "%s/24" % rail_address(subnet, rank)
            if cidr not in host.check_output("ip -o -4 addr show dev %s" % netdev):
                host.run_expect([0], "ip addr add %s dev %s" % (cidr, netdev))
                added.append((node, netdev, cidr))
    yield lab
    for node, netdev, cidr in added:
        lab.host(node).run("ip addr del %s dev %s" % (cidr, netdev))
    for (node, netdev), mtu in old_mtu.items():
        lab.host(node).run("ip link set %s mtu %s" % (netdev, mtu))


def run_check(lab, tmp_path):
    playbook = tmp_path / "fabric_check.yml"
    playbook.write_text(PLAYBOOK)
    proc = subprocess.run(
        [os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i", inventory(lab), str(playbook)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
    return proc.returncode, proc.stdout


def test_healthy_fabric_passes(fabric, tmp_path):
    rc, out = run_check(fabric, tmp_path)
    assert rc == 0, out
    assert "no failures" in out
    peers = "%d/%d" % (len(fabric.nodes) - 1, len(fabric.nodes) - 1)
    # A table line, as the YAML or the default result format prints it: `- spark-alpha  rail1 ...` or `"spark-alpha  rail1 ...",`.
    rows = [line.strip().lstrip("-").strip().strip('",').split() for line in out.splitlines()]
    for node in fabric.nodes:
        for name, netdev, _subnet in RAILS:
            assert any(row[:3] == [node, name, netdev] and row[4:6] == ["up", "9000"] and peers in row for row in rows), out
    assert "RDMA bandwidth not measured (skipped)" in out
    assert "NCCL bandwidth not measured (skipped)" in out


def test_rail_down_names_node_rail_and_cabling(fabric, tmp_path):
    node = fabric.nodes[1]
    fabric.labctl("rail", node, "rail1", "down")
    try:
        rc, out = run_check(fabric, tmp_path)
    finally:
        fabric.labctl("rail", node, "rail1", "up")
    assert rc != 0, out
    assert "%s rail1 (enp1s0f1np1): [cabling / link down]" % node in out, out
    assert "%s rail2" % node not in out.split("failures:")[-1], out


def test_mtu_mismatch_is_diagnosed_as_mtu(fabric, tmp_path):
    node = fabric.nodes[-1]
    host = fabric.host(node)
    host.run_expect([0], "ip link set enP2p1s0f1np1 mtu 1500")
    try:
        rc, out = run_check(fabric, tmp_path)
    finally:
        host.run_expect([0], "ip link set enP2p1s0f1np1 mtu 9000")
    assert rc != 0, out
    assert "%s rail2 (enP2p1s0f1np1): [MTU] MTU of enP2p1s0f1np1 on %s is 1500, expected 9000" % (node, node) in out, out
    assert "[switch MTU]" not in out, out
