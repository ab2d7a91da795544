"""cx7_netplan refuses bad inputs with a clear error and changes no file on any node (needs the lab)."""

import json

import pytest

from cx7_netplan_lab import fixture_plain_rails, run_network, snapshot  # noqa: F401  (fixture)

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("plain_rails")]

# Every run also asks for MTU 8000: accepted, it would rewrite the netplan file on every node, so an
# unchanged snapshot proves the refusal came before any write.
WOULD_CHANGE = ("-e", "cx7_netplan_mtu=8000")


def assert_refused(lab, before, rc, output, *fragments):
    assert rc != 0, output
    for fragment in fragments:
        assert fragment in output, (fragment, output[-6000:])
    assert "Write the rail netplan file" not in output, output[-6000:]
    assert snapshot(lab) == before


def test_rail_interface_missing_on_one_node(lab):
    node = lab.nodes[1]
    host = lab.host(node)
    before = snapshot(lab)
    host.run_expect([0], "ip link set dev enP2p1s0f1np1 down && ip link set dev enP2p1s0f1np1 name cx7gone0 && ip link set dev cx7gone0 up")
    try:
        rc, output = run_network(lab, *WOULD_CHANGE)
    finally:
        host.run("ip link set dev cx7gone0 down && ip link set dev cx7gone0 name enP2p1s0f1np1 && ip link set dev enP2p1s0f1np1 up")
        host.run("networkctl reconfigure enP2p1s0f1np1")
    assert_refused(lab, before, rc, output, "%s rail rail2 (enP2p1s0f1np1): interface enP2p1s0f1np1 does not exist" % node,
                   "nothing was changed on any node")


def test_rail_interface_down(lab):
    node = lab.nodes[-1]
    before = snapshot(lab)
    lab.labctl("rail", node, "2", "down")
    try:
        rc, output = run_network(lab, *WOULD_CHANGE)
    finally:
        lab.labctl("rail", node, "2", "up")
    assert_refused(lab, before, rc, output, "%s rail rail2 (enP2p1s0f1np1): the link is Down" % node, "nothing was changed on any node")


def test_address_already_used_by_another_host(lab):
    head, victim = lab.nodes[0], lab.nodes[1]
    host = lab.host(head)
    before = snapshot(lab)
    # spark-beta's planned rail-1 address, put on spark-alpha's management interface.
    host.run_expect([0], "ip addr add 192.168.100.11/32 dev eth0")
    try:
        rc, output = run_network(lab, *WOULD_CHANGE)
    finally:
        host.run("ip addr del 192.168.100.11/32 dev eth0")
    assert_refused(lab, before, rc, output,
                   "%s rail rail1 (enp1s0f1np1): the planned address 192.168.100.11 is already in use on %s interface eth0" % (victim, head))


def test_renderer_that_does_not_exist(lab):
    before = snapshot(lab)
    rc, output = run_network(lab, "-e", "cx7_netplan_renderer=systemd-networkd", *WOULD_CHANGE)
    assert_refused(lab, before, rc, output, "cx7_netplan_renderer", "systemd-networkd", "networkd, NetworkManager")


def test_subnet_given_as_a_bare_address(lab):
    rails = [{"name": "rail1", "interface": "enp1s0f1np1", "subnet": "192.168.100.0", "address_offset": 10},
             {"name": "rail2", "interface": "enP2p1s0f1np1", "subnet": "192.168.101.0/24", "address_offset": 10}]
    before = snapshot(lab)
    rc, output = run_network(lab, "-e", json.dumps({"dgxspark_rails": rails}), *WOULD_CHANGE)
    assert_refused(lab, before, rc, output, "'192.168.100.0', a bare address", "192.168.100.0/24")
