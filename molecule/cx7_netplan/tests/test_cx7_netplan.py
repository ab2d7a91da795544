"""Testinfra checks for the cx7_netplan scenario (lab nodes after converge + idempotence).

Expected addresses follow the cluster plan of the lab inventory: rank = position of the node (head first),
address = subnet network + 10 + rank on each rail (seed 000: spark-alpha .10, spark-beta .11, ...).
"""

import ipaddress
import json

import pytest
import yaml
from conftest import recap_line

testinfra_hosts = ["ansible://all"]

NETPLAN_FILE_DEFAULT = "/etc/netplan/40-cx7.yaml"
SYSCTL_FILE_DEFAULT = "/etc/sysctl.d/90-dgxspark-cx7-ipv6.conf"
RAILS_DEFAULT = [
    {"name": "rail1", "interface": "enp1s0f1np1", "subnet": "192.168.100.0/24", "address_offset": 10},
    {"name": "rail2", "interface": "enP2p1s0f1np1", "subnet": "192.168.101.0/24", "address_offset": 10},
]
MANAGEMENT = "eth0"


@pytest.fixture(name="hvars")
def fixture_hvars(host):
    variables = host.ansible.get_variables()
    groups = variables.get("groups", {})
    order = list(groups.get("head", [])) + [h for h in groups.get("workers", []) if h not in groups.get("head", [])]
    name = variables["inventory_hostname"]
    rails = variables.get("dgxspark_rails", RAILS_DEFAULT)
    given = variables.get("dgxspark_rail_addresses") or {}
    expected = {}
    for rail in rails:
        net = ipaddress.ip_network(rail["subnet"])
        address = given.get(rail["name"]) or str(net.network_address + rail["address_offset"] + order.index(name))
        expected[rail["interface"]] = "%s/%d" % (address, net.prefixlen)
    return {
        "name": name,
        "order": order,
        "expected": expected,
        "mtu": variables.get("dgxspark_mtu", 9000),
        "netplan_file": "%s/%s" % (variables.get("cx7_netplan_dir", "/etc/netplan"), variables.get("cx7_netplan_file_name", "40-cx7.yaml")),
        "sysctl_file": variables.get("cx7_netplan_sysctl_file", SYSCTL_FILE_DEFAULT),
    }


def links(host):
    return {link["ifname"]: link for link in json.loads(host.check_output("ip -j addr show"))}


def test_netplan_file_content_and_mode(host, hvars):
    netplan = host.file(hvars["netplan_file"])
    assert netplan.exists and netplan.user == "root" and netplan.mode == 0o600
    content = netplan.content_string
    assert content.startswith("# Managed by Ansible")
    ethernets = yaml.safe_load(content)["network"]["ethernets"]
    assert set(ethernets) == set(hvars["expected"])
    for interface, cidr in hvars["expected"].items():
        entry = ethernets[interface]
        assert entry["addresses"] == [cidr]
        assert entry["mtu"] == hvars["mtu"]
        assert entry["dhcp4"] is False and entry["dhcp6"] is False
        assert entry["link-local"] == [] and entry["accept-ra"] is False
    assert "renderer" not in yaml.safe_load(content)["network"]
    assert MANAGEMENT not in ethernets


def test_no_other_netplan_file_touched(host, hvars):
    others = host.run("grep -ls -e enp1s0f1np1 -e enP2p1s0f1np1 /etc/netplan/*.yaml").stdout.split()
    assert others == [hvars["netplan_file"]]


def test_addresses_and_mtu_live_on_both_rails(host, hvars):
    live = links(host)
    for interface, cidr in hvars["expected"].items():
        link = live[interface]
        assert link["operstate"] == "UP"
        assert link["mtu"] == hvars["mtu"], (interface, link["mtu"])
        inet = ["%s/%s" % (a["local"], a["prefixlen"]) for a in link.get("addr_info", []) if a["family"] == "inet"]
        assert inet == [cidr], (interface, inet)


def test_ipv6_off_on_cx7_rails_only(host, hvars):
    live = links(host)
    for interface in hvars["expected"]:
        inet6 = [a["local"] for a in live[interface].get("addr_info", []) if a["family"] == "inet6"]
        assert inet6 == [], (interface, inet6)
    sysctl = host.file(hvars["sysctl_file"])
    assert sysctl.exists and sysctl.mode == 0o644
    keys = [line.split("=")[0].strip() for line in sysctl.content_string.splitlines() if line.strip() and not line.startswith("#")]
    assert sorted(keys) == sorted("net.ipv6.conf.%s.disable_ipv6" % i for i in hvars["expected"])
    assert MANAGEMENT not in sysctl.content_string


def test_management_interface_untouched(host, hvars):
    link = links(host)[MANAGEMENT]
    assert link["operstate"] == "UP" and link["mtu"] == 1500
    inet = [a["local"] for a in link.get("addr_info", []) if a["family"] == "inet"]
    assert inet == [host.ansible.get_variables()["ansible_host"]]
    assert host.check_output("ip -4 route show default").split()[4] == MANAGEMENT


def test_jumbo_ping_across_the_fabric(host, hvars):
    payload = hvars["mtu"] - 28
    mine = hvars["order"].index(hvars["name"])
    first = None
    for rank, peer in enumerate(hvars["order"]):
        if peer == hvars["name"]:
            continue
        for interface, cidr in hvars["expected"].items():
            # Peers of the lab inventory use the computed addresses (same offset, their rank).
            address = str(ipaddress.ip_interface(cidr).ip - mine + rank)
            first = first or (interface, address)
            result = host.run("ping -c 2 -W 2 -M do -s %s -I %s %s", str(payload), interface, address)
            assert result.rc == 0, (peer, interface, address, result.stdout, result.stderr)
    # One byte more than the MTU does not pass unfragmented: the MTU is enforced.
    assert first is not None
    assert host.run("ping -c 1 -W 1 -M do -s %s -I %s %s", str(payload + 1), first[0], first[1]).rc != 0


def test_check_diff_on_converged_nodes_changes_nothing(host, check_diff_run):
    assert check_diff_run.returncode == 0, check_diff_run.stdout + check_diff_run.stderr
    recap = recap_line(check_diff_run, host.backend.get_hostname())
    assert recap and "changed=0" in recap and "failed=0" in recap, check_diff_run.stdout
