"""The virtual Spark lab itself (needs the lab: see conftest.py; `make test` runs these after `labctl up`).

Names and addresses are the tested lab's (labctl's constants follow DGXSPARK_LAB_INSTANCE): `make test` runs this
module on its second lab.
"""

import json
import os
import subprocess

import labctl
import pytest

from ansible_lab import init_draft, run_playbook
from conftest import temporary_address

pytestmark = pytest.mark.lab

RAILS = ("enp1s0f1np1", "enP2p1s0f1np1")
PORT0 = ("enp1s0f0np0", "enP2p1s0f0np0")


def spare_node(lab):
    """A node the other lab tests leave alone (gamma in a lab of 3+)."""
    return lab.nodes[2] if lab.count > 2 else lab.nodes[-1]


def links(host):
    return {link["ifname"]: link for link in json.loads(host.check_output("ip -j addr show"))}


def test_nodes_boot_systemd_running(lab):
    for node in lab.nodes:
        host = lab.host(node)
        state = host.run("systemctl is-system-running").stdout.strip()
        failed = host.run("systemctl --failed --no-legend --plain").stdout.strip()
        assert state == "running", "%s: systemd %s; failed units: %s" % (node, state, failed)


def test_ssh_with_lab_key_and_known_hosts(lab):
    for node in lab.nodes:
        host = lab.host(node)
        assert host.check_output("hostname") == node
        assert host.user().name == "root"
    # Strict host key checking is on: the lab's known_hosts holds every node's key.
    with open(lab.ssh_config) as handle:
        assert "StrictHostKeyChecking yes" in handle.read()


def test_fabric_interfaces_named_like_gb10(lab):
    for node in lab.nodes:
        ifs = links(lab.host(node))
        for netdev in RAILS:
            assert netdev in ifs, "%s lacks %s" % (node, netdev)
            assert ifs[netdev]["operstate"] == "UP", (node, netdev, ifs[netdev]["operstate"])
        for netdev in PORT0:
            assert netdev in ifs, "%s lacks %s" % (node, netdev)
            assert ifs[netdev]["operstate"] == "DOWN", (node, netdev, ifs[netdev]["operstate"])


def test_fresh_node_fabric_starts_unconfigured(lab):
    """A node as labctl creates it (`reset`): no IPv4, MTU 1500, IPv6 link-local on, rails Up, port 0 Down."""
    node = spare_node(lab)
    lab.labctl("reset", node)
    host = lab.host(node)
    host.run_expect([0], "systemctl is-system-running --wait")
    ifs = links(host)
    for netdev in RAILS + PORT0:
        assert ifs[netdev]["mtu"] == 1500, (node, netdev)
        assert not [a for a in ifs[netdev].get("addr_info", []) if a["family"] == "inet"], (node, netdev)
    for netdev in RAILS:
        assert ifs[netdev]["operstate"] == "UP"
        assert [a for a in ifs[netdev].get("addr_info", []) if a.get("scope") == "link"], (node, netdev)
    for netdev in PORT0:
        assert ifs[netdev]["operstate"] == "DOWN"
    assert host.check_output("ls /etc/netplan") == "01-dgxspark-lab-mgmt.yaml"


def test_jumbo_frames_cross_rail1(lab, fabric_addresses):
    a, b = list(fabric_addresses)
    res = lab.host(a).run("ping -c 3 -W 2 -M do -s 8972 %s" % fabric_addresses[b])
    assert res.rc == 0, res.stdout + res.stderr
    # 9001 bytes of payload + headers do not fit: MTU is enforced, not ignored.
    assert lab.host(a).run("ping -c 1 -W 1 -M do -s 8973 %s" % fabric_addresses[b]).rc != 0


def test_rail2_jumbo_frames(lab):
    a, b = lab.nodes[0], lab.nodes[1]
    with temporary_address(lab.host(a), "enP2p1s0f1np1", "192.168.101.250/24", 9000), \
            temporary_address(lab.host(b), "enP2p1s0f1np1", "192.168.101.251/24", 9000):
        res = lab.host(a).run("ping -c 2 -W 2 -M do -s 8972 192.168.101.251")
        assert res.rc == 0, res.stdout + res.stderr


def test_rails_isolated_from_each_other(lab):
    # Structure: each rail bridge holds exactly the nodes' ends of that rail.
    for rail, kind in ((1, "r1"), (2, "r2")):
        ports = json.loads(subprocess.run(["ip", "-j", "link", "show", "master", labctl.BRIDGES[rail]],
                                          capture_output=True, text=True, check=True).stdout)
        assert sorted(p["ifname"] for p in ports) == sorted(labctl.host_veth(n, kind) for n in lab.nodes)
    # Behaviour: a frame sent on rail 1 never reaches rail 2. The target's rail-1 cable is pulled during the
    # check, because Linux answers ARP for any local address on any interface (weak host model), which
    # would make a node that is on both rails answer on rail 1 for its rail-2 address.
    a, b = lab.nodes[0], lab.nodes[1]
    ha, hb = lab.host(a), lab.host(b)
    with temporary_address(ha, "enp1s0f1np1", "192.168.100.252/24"), \
            temporary_address(ha, "enP2p1s0f1np1", "192.168.101.252/24"), \
            temporary_address(hb, "enP2p1s0f1np1", "192.168.101.253/24"):
        lab.labctl("rail", b, "1", "down")
        try:
            res = ha.run("ping -c 2 -W 2 -I enP2p1s0f1np1 192.168.101.253")
            assert res.rc == 0, "rail 2 does not work: " + res.stdout
            ha.run_expect([0], "ip neigh flush dev enp1s0f1np1; ip route add 192.168.101.253/32 dev enp1s0f1np1")
            try:
                res = ha.run("ping -c 2 -W 1 -I enp1s0f1np1 192.168.101.253")
                assert res.rc != 0, "rail 1 reached a rail 2 address:\n" + res.stdout
            finally:
                ha.run("ip route del 192.168.101.253/32 dev enp1s0f1np1")
        finally:
            lab.labctl("rail", b, "1", "up")


def test_host_has_no_route_into_the_rails():
    for subnet in ("192.168.100.0/24", "192.168.101.0/24"):
        routes = subprocess.run(["ip", "-4", "route", "show", "match", subnet], capture_output=True, text=True, check=False).stdout
        assert all(line.startswith("default ") for line in routes.splitlines() if line.strip()), routes
    for bridge in labctl.BRIDGES.values():
        addrs = json.loads(subprocess.run(["ip", "-j", "addr", "show", "dev", bridge], capture_output=True,
                                          text=True, check=True).stdout)[0].get("addr_info", [])
        assert addrs == [], "%s has addresses %s" % (bridge, addrs)
    local = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=False).stdout
    assert "192.168.100." not in local and "192.168.101." not in local


def test_nodes_cannot_leave_the_lab(lab):
    assert subprocess.run(["docker", "network", "inspect", "-f", "{{.Internal}}", labctl.MGMT_NETWORK],
                          capture_output=True, text=True, check=False).stdout.strip() == "true"
    # Docker keeps a default route via the internal network's gateway (the host) -- Ansible's
    # ansible_default_ipv4 stays realistic -- but the host drops whatever would leave that network.
    rules = subprocess.run(["iptables", "-S", "DOCKER-ISOLATION-STAGE-1"], capture_output=True, text=True, check=False).stdout
    assert "! -d %s -i %s -j DROP" % (labctl.MGMT_SUBNET, labctl.MGMT_BRIDGE) in rules, rules
    assert "! -s %s -o %s -j DROP" % (labctl.MGMT_SUBNET, labctl.MGMT_BRIDGE) in rules, rules
    nat = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True, check=False).stdout
    assert labctl.MGMT_SUBNET not in nat, "the lab network must not be masqueraded:\n" + nat
    for node in lab.nodes:
        host = lab.host(node)
        for line in host.check_output("ip -4 route show default").splitlines():
            assert line.split()[:5] == ["default", "via", labctl.MGMT_GATEWAY, "dev", "eth0"], (node, line)
        assert host.check_output("ip -6 route show default") == "", node
        # No rail carries a route out of the lab.
        assert "enp1s0f1np1" not in host.check_output("ip -4 route show default"), node


def test_docker_runs_inside_a_node(lab):
    host = lab.host(lab.nodes[0])
    assert host.service("docker").is_running
    assert host.check_output("docker info --format '{{.Driver}}'") == "overlay2"


def test_load_image_and_run_it_inside_a_node(lab):
    """labctl load-image copies a host image into a node's Docker (no registry); it runs with host networking."""
    image = "dgxspark-lab/probe:test"
    tar = subprocess.Popen(["tar", "-C", "/", "-c", "lib", "lib64", "usr/lib64", "usr/lib/x86_64-linux-gnu/libc.so.6",
                            "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "usr/bin/echo"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    subprocess.run(["docker", "import", "-", image], stdin=tar.stdout, check=True, capture_output=True)
    tar.wait()
    node = lab.nodes[0]
    host = lab.host(node)
    try:
        lab.labctl("load-image", image, node)
        res = host.run("docker run --rm --network host --ipc host %s /usr/bin/echo nested-ok" % image)
        assert res.rc == 0 and res.stdout.strip() == "nested-ok", res.stderr
        assert "already loaded" in lab.labctl("load-image", image, node).stdout
    finally:
        host.run("docker rmi -f %s" % image)
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True, check=False)


def test_standins_reflect_a_pulled_rail(lab):
    node = lab.nodes[1]
    host = lab.host(node)
    assert "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)" in host.check_output("ibdev2netdev")
    lab.labctl("rail", node, "1", "down")
    try:
        out = host.check_output("ibdev2netdev")
        assert "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)" in out
        assert "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)" in out
        assert "port 1 (DOWN  ) ==> enp1s0f1np1 (Down)" in host.check_output("ibdev2netdev -v")
        root = "/run/dgxspark-lab/sysfs"
        assert host.check_output("cat %s/class/infiniband/rocep1s0f1/ports/1/state" % root) == "1: DOWN"
        assert host.check_output("cat %s/class/net/enp1s0f1np1/operstate" % root) != "up"
    finally:
        lab.labctl("rail", node, "1", "up")
    host.run_expect([0], "for i in $(seq 50); do ip link show enp1s0f1np1 | grep -q 'state UP' && exit 0; sleep 0.1; done; exit 1")
    assert "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)" in host.check_output("ibdev2netdev")
    assert host.check_output("cat /run/dgxspark-lab/sysfs/class/infiniband/rocep1s0f1/ports/1/state") == "4: ACTIVE"


def test_sysfs_gids_follow_addresses(lab):
    host = lab.host(lab.nodes[0])
    port = "/run/dgxspark-lab/sysfs/class/infiniband/roceP2p1s0f1/ports/1"
    with temporary_address(host, "enP2p1s0f1np1", "192.168.101.254/24"):
        host.check_output("dgxspark-lab-sysfs")
        gids = {int(i): host.check_output("cat %s/gids/%s" % (port, i))
                for i in host.check_output("ls %s/gids" % port).split()}
        types = {int(i): host.check_output("cat %s/gid_attrs/types/%s" % (port, i))
                 for i in host.check_output("ls %s/gid_attrs/types" % port).split()}
        mapped = [i for i, g in gids.items() if g.endswith("ffff:c0a8:65fe")]
        assert len(mapped) == 2, gids
        assert sorted(types[i] for i in mapped) == ["IB/RoCE v1", "RoCE v2"]
    host.check_output("dgxspark-lab-sysfs")
    assert not [i for i in host.check_output("ls %s/gids" % port).split()
                if host.check_output("cat %s/gids/%s" % (port, i)).endswith("ffff:c0a8:65fe")]


def test_detach_isolates_a_node_but_keeps_links_up(lab, fabric_addresses):
    a, b = list(fabric_addresses)
    lab.labctl("detach", b)
    try:
        assert lab.host(b).check_output("cat /sys/class/net/enp1s0f1np1/operstate") == "up"
        assert lab.host(a).run("ping -c 2 -W 1 %s" % fabric_addresses[b]).rc != 0
    finally:
        lab.labctl("attach", b)
    assert lab.host(a).run("ping -c 2 -W 2 %s" % fabric_addresses[b]).rc == 0


def test_nvidia_smi_and_driver_knob(lab):
    node = spare_node(lab)
    host = lab.host(node)
    query = "nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader,nounits"
    assert host.check_output(query).startswith("NVIDIA GB10, 580.95.05, ")
    lab.labctl("driver", node, "580.142")
    try:
        assert host.check_output(query).split(", ")[1] == "580.142"
        assert "Driver Version: 580.142" in host.check_output("nvidia-smi")
    finally:
        lab.labctl("driver", node, "580.95.05")
    assert 'DGX_NAME="DGX Spark"' in host.check_output("cat /etc/dgx-release")


def test_netplan_apply_works_in_a_node(lab):
    host = lab.host(lab.nodes[0])
    res = host.run("netplan apply")
    assert res.rc == 0, res.stderr
    assert host.run("udevadm --version").rc == 0


def test_restart_replumbs_the_fabric(lab):
    node = spare_node(lab)
    lab.labctl("restart", node, "--down-s", "2")  # nothing serves here: no peer has to notice the node gone
    host = lab.host(node)
    ifs = links(host)
    assert ifs["enp1s0f1np1"]["operstate"] == "UP" and ifs["enP2p1s0f1np1"]["operstate"] == "UP"
    assert ifs["enp1s0f0np0"]["operstate"] == "DOWN"
    assert host.run("systemctl is-system-running --wait").stdout.strip() == "running"


def test_rate_limit_knob(lab):
    previous = lab.state().get("rate") or "none"
    lab.labctl("up", "--nodes", str(lab.count), "--rate", "1gbit")
    try:
        qdisc = subprocess.run(["tc", "qdisc", "show", "dev", labctl.host_veth(lab.nodes[0], "r1")],
                               capture_output=True, text=True, check=False).stdout
        assert "tbf" in qdisc and "1Gbit" in qdisc, qdisc
    finally:
        lab.labctl("up", "--nodes", str(lab.count), "--rate", previous)


def test_init_drafts_an_inventory_that_plans_from_nodes_only_brought_up(lab, tmp_path):
    """playbooks/init.yml on nodes that `labctl up` just made (no rail configured): the rails are the cabled port's twins
    with the shipped subnets, the shape fits the node count, and the plan accepts the draft."""
    rc, out, draft, extra, env = init_draft(lab, str(tmp_path))
    assert rc == 0, out[-4000:]
    with open(os.path.join(draft, "group_vars", "all", "main.yml"), encoding="utf-8") as handle:
        group_vars = handle.read()
    for text in ("interface: enp1s0f1np1", "interface: enP2p1s0f1np1", "subnet: 192.168.100.0/24", "address_offset: 10",
                 "dgxspark_tensor_parallel_size: %d" % lab.count):
        assert text in group_vars, (text, group_vars)
    assert "the addresses the nodes have kept" not in group_vars
    rc, planned = run_playbook(lab, "plan.yml", *extra, source=draft, env=env, timeout=300)
    assert rc == 0, planned[-4000:]
    assert "TP %d x PP 1 = %d GPUs on %d nodes" % (lab.count, lab.count, lab.count) in planned, planned[-4000:]
    assert "Inventory: %s" % draft in planned
