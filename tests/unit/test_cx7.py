# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for CX-7 discovery: ibdev2netdev parsing, sysfs reading, merging, the filter and the cx7_facts module."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.cx7 import (
    Ibdev2netdevParseError,
    IpAddrJsonError,
    build_device_records,
    gb10_port_and_twin,
    parse_ibdev2netdev,
    parse_ip_addr_json,
    read_sysfs,
    roce_v2_ipv4_gid_indexes,
)

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "cx7"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
COLLECTIONS_PATH = REPO_ROOT / ".build" / "collections"

CX7_DESCRIPTION = (
    "(MT4129 - NVIDIA ConnectX-7 HHHL adapter card, 200GbE / NDR200 IB (default mode), "
    "Single-port QSFP112, PCIe 5.0 x16, Crypto Disabled, Secure Boot Enabled)"
)


def fixture_text(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


def plain(rdma_device, netdev, state, port=1):
    return {"rdma_device": rdma_device, "port": port, "netdev": netdev, "state": state}


GB10_PLAIN = [
    plain("rocep1s0f0", "enp1s0f0np0", "Down"),
    plain("rocep1s0f1", "enp1s0f1np1", "Up"),
    plain("roceP2p1s0f0", "enP2p1s0f0np0", "Down"),
    plain("roceP2p1s0f1", "enP2p1s0f1np1", "Up"),
]


# ---------------------------------------------------------------- parse_ibdev2netdev: whole files

@pytest.mark.parametrize(
    "fixture, expected",
    [
        pytest.param("gb10_ibdev2netdev.txt", GB10_PLAIN, id="gb10-field-notes-order"),
        pytest.param(
            "gb10_ibdev2netdev_nvidia_order.txt",
            [GB10_PLAIN[2], GB10_PLAIN[3], GB10_PLAIN[0], GB10_PLAIN[1]],
            id="gb10-nvidia-docs-order",
        ),
        pytest.param(
            "mixed_hca.txt",
            [
                plain("mlx5_0", "ens4f0", "Down"),
                plain("mlx5_1", "ens4f1", "Down"),
                plain("mlx5_2", "ens6", "Up"),
                plain("mlx5_3", "ens14f0", "Up"),
                plain("mlx5_4", "ens14f1", "Down"),
                plain("mlx5_5", "ib0", "Up"),
                plain("mlx5_6", "ens6f1", "Down"),
                plain("mlx5_7", "ens6f2", "Down"),
            ],
            id="mlx5-ens-ib",
        ),
        pytest.param(
            "weka_ib.txt",
            [plain("mlx5_%d" % i, "ib%d" % i, "Down" if i in (4, 5) else "Up") for i in range(10)],
            id="mlx5-ten-ib-ports",
        ),
    ],
)
def test_parse_plain_fixtures(fixture, expected):
    assert parse_ibdev2netdev(fixture_text(fixture)) == expected


def verbose(pci_address, rdma_device, description, firmware, port_state, netdev, state, port=1):
    record = plain(rdma_device, netdev, state, port)
    record.update(pci_address=pci_address, description=description, firmware=firmware, port_state=port_state)
    return record


@pytest.mark.parametrize(
    "fixture, expected",
    [
        pytest.param(
            "gb10_ibdev2netdev_v.txt",
            [
                verbose("0002:01:00.1", "roceP2p1s0f1", CX7_DESCRIPTION, "28.45.1200", "ACTIVE", "enP2p1s0f1np1", "Up"),
                verbose("0000:01:00.0", "rocep1s0f0", CX7_DESCRIPTION, "28.45.1200", "DOWN", "enp1s0f0np0", "Down"),
                verbose("0000:01:00.1", "rocep1s0f1", CX7_DESCRIPTION, "28.45.1200", "ACTIVE", "enp1s0f1np1", "Up"),
                verbose("0002:01:00.0", "roceP2p1s0f0", CX7_DESCRIPTION, "28.45.1200", "DOWN", "enP2p1s0f0np0", "Down"),
            ],
            id="gb10-v-long-description-blank-line",
        ),
        pytest.param(
            "connectx4_sriov_v.txt",
            [
                verbose("0000:02:00.0", "mlx5_0", "(MT4115 - MT1523X04353) CX456A - ConnectX-4 QSFP", "12.23.1020", "ACTIVE", "enp2s0f0", "Up"),
                verbose("0000:02:00.1", "mlx5_1", "(MT4115 - MT1523X04353) CX456A - ConnectX-4 QSFP", "12.23.1020", "ACTIVE", "enp2s0f1", "Up"),
                verbose("0000:02:00.5", "mlx5_2", "(MT4116 - NA)", "12.23.1020", "DOWN", "enp2s0f2", "Down"),
                verbose("0000:02:00.6", "mlx5_3", "(MT4116 - NA)", "12.23.1020", "DOWN", "enp2s0f3", "Down"),
                verbose("0000:02:00.7", "mlx5_4", "(MT4116 - NA)", "12.23.1020", "DOWN", "enp2s0f4", "Down"),
                verbose("0000:02:00.2", "mlx5_5", "(MT4116 - NA)", "12.23.1020", "DOWN", "enp2s0f5", "Down"),
            ],
            id="connectx4-sriov-empty-vf-description",
        ),
        pytest.param(
            "lustre_o2ib_v.txt",
            [
                verbose(
                    "0000:b8:00.1", "mlx5_13",
                    "(MT4123 - MCX653106A-ECAT) ConnectX-6 VPI adapter card, 100Gb/s (HDR100, EDR IB and 100GbE), dual-port QSFP56",
                    "20.26.4012", "ACTIVE", "ib4", "Up",
                ),
                verbose(
                    "0000:bd:00.1", "mlx5_15",
                    "(MT4123 - MCX653106A-ECAT) ConnectX-6 VPI adapter card, 100Gb/s (HDR100, EDR IB and 100GbE), dual-port QSFP56",
                    "20.26.4012", "ACTIVE", "ib5", "Up",
                ),
            ],
            id="lustre-o2ib-annotation",
        ),
        pytest.param(
            "igx_connectx7_v.txt",
            [
                verbose(
                    "0005:03:00.0", "mlx5_0",
                    "(MT4129 - P3740-0002 ) NVIDIA IGX, P3740-0002, 2-port QSFP up to 400G, InfiniBand and Ethernet, PCIe5",
                    "28.37.0190", "DOWN", "eth2", "Down",
                ),
                verbose(
                    "0005:03:00.1", "mlx5_1",
                    "(MT4129 - P3740-0002 ) NVIDIA IGX, P3740-0002, 2-port QSFP up to 400G, InfiniBand and Ethernet, PCIe5",
                    "28.37.0190", "ACTIVE", "eth3", "Up",
                ),
            ],
            id="igx-connectx7-vpd-padding",
        ),
        pytest.param(
            "connectx7_blank_part_v.txt",
            [
                verbose("0005:03:00.0", "mlx5_0", "(MT4129 - )", "28.39.3004", "ACTIVE", "cx7_0", "Up"),
                verbose("0005:03:00.1", "mlx5_1", "(MT4129 - )", "28.39.3004", "ACTIVE", "cx7_1", "Up"),
            ],
            id="connectx7-blank-part-number",
        ),
        pytest.param(
            "mlx4_no_pci_v.txt",
            [verbose(None, "mlx4_0", "(mt26428 - MT1037X01146) KESTREL QDR", "2.9.1000", "ACTIVE", "ib0", "Up")],
            id="mlx4-without-pci-address",
        ),
    ],
)
def test_parse_verbose_fixtures(fixture, expected):
    assert parse_ibdev2netdev(fixture_text(fixture)) == expected


def test_parse_mixed_hca_verbose_matches_plain_mapping():
    """-v and plain output of the same host map the same devices to the same netdevs and states."""
    verbose_records = parse_ibdev2netdev(fixture_text("mixed_hca_v.txt"))
    plain_records = parse_ibdev2netdev(fixture_text("mixed_hca.txt"))
    assert [plain(r["rdma_device"], r["netdev"], r["state"], r["port"]) for r in verbose_records] == [
        plain_records[i] for i in (0, 1, 2, 3, 4, 5, 6, 7)
    ]
    socket_direct = verbose_records[5]
    assert socket_direct["description"] == (
        "(MT4123 - MCX654105A-HCAT) ConnectX-6 VPI adapter card, HDR IB (200Gb/s) and 200GbE, single-port QSFP56, Socket Direct"
    )
    assert socket_direct["firmware"] == "20.30.1004"
    assert [r["port_state"] for r in verbose_records] == ["DOWN", "DOWN", "ACTIVE", "ACTIVE", "DOWN", "ACTIVE", "DOWN", "DOWN"]


# ---------------------------------------------------------------- parse_ibdev2netdev: single lines

@pytest.mark.parametrize(
    "line, expected",
    [
        pytest.param("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)", plain("rocep1s0f1", "enp1s0f1np1", "Up"), id="gb10"),
        pytest.param("mlx5_0 port 1 ==> ibp12s0 (Up)", plain("mlx5_0", "ibp12s0", "Up"), id="ibp12s0"),
        pytest.param("mlx4_0 port 2 ==> ib1 (Down)", plain("mlx4_0", "ib1", "Down", port=2), id="second-port"),
        pytest.param("mlx5_3 port 1 ==> ib3 (Up) (o2ib)", plain("mlx5_3", "ib3", "Up"), id="o2ib-suffix"),
        pytest.param("mlx5_3 port 1 ==> ib3 (Up) (o2ib1)  ", plain("mlx5_3", "ib3", "Up"), id="o2ib1-suffix-trailing-space"),
        pytest.param("mlx5_0 port 1 ==> ens6 (NA)", plain("mlx5_0", "ens6", "NA"), id="carrier-unknown-NA"),
        pytest.param("  rocep1s0f1   port  1  ==>  enp1s0f1np1  (Up)", plain("rocep1s0f1", "enp1s0f1np1", "Up"), id="extra-spaces"),
        pytest.param(
            "0002:01:00.1 roceP2p1s0f1 (MT4129 - NA)  fw 28.45.1200 port 1 (DOWN  ) ==> enP2p1s0f1np1 (Down) (o2ib)",
            verbose("0002:01:00.1", "roceP2p1s0f1", "(MT4129 - NA)", "28.45.1200", "DOWN", "enP2p1s0f1np1", "Down"),
            id="verbose-padded-state-and-annotation",
        ),
        pytest.param(
            "0000:01:00.1 rocep1s0f1 (MT4129 - NA)  fw NA port 1 (NA) ==> enp1s0f1np1 (NA)",
            verbose("0000:01:00.1", "rocep1s0f1", "(MT4129 - NA)", "NA", "NA", "enp1s0f1np1", "NA"),
            id="verbose-all-NA",
        ),
        pytest.param(
            "0000:01:00.1 rocep1s0f1 (MT4129 - NA)  fw 28.45.1200 port 1 (      ) ==> enp1s0f1np1 (Down)",
            verbose("0000:01:00.1", "rocep1s0f1", "(MT4129 - NA)", "28.45.1200", None, "enp1s0f1np1", "Down"),
            id="verbose-unreadable-port-state",
        ),
        pytest.param(
            "0000:01:00.0 mlx5_0 (MT4129 - MCX75310AAS-NEAT) ConnectX-7 fw-capable card fw 28.39.1002 port 1 (POLLING) ==> ibp1s0 (Down)",
            verbose("0000:01:00.0", "mlx5_0", "(MT4129 - MCX75310AAS-NEAT) ConnectX-7 fw-capable card", "28.39.1002", "POLLING", "ibp1s0", "Down"),
            id="verbose-description-containing-fw",
        ),
    ],
)
def test_parse_single_line(line, expected):
    assert parse_ibdev2netdev(line) == [expected]


@pytest.mark.parametrize("text", ["", "\n", "  \n\t\n"], ids=["empty", "newline", "whitespace"])
def test_parse_no_devices(text):
    assert parse_ibdev2netdev(text) == []


@pytest.mark.parametrize(
    "text, line_number, quoted, reason",
    [
        pytest.param("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\nbogus line\n", 2, "'bogus line'", "not of the form", id="garbage"),
        pytest.param("\n\nrocep1s0f1 port x ==> enp1s0f1np1 (Up)", 3, "'rocep1s0f1 port x ==> enp1s0f1np1 (Up)'", "port number 'x'", id="port-not-int"),
        pytest.param("rocep1s0f1 port 0 ==> enp1s0f1np1 (Up)", 1, "'rocep1s0f1 port 0 ==> enp1s0f1np1 (Up)'", "port number '0'", id="port-zero"),
        pytest.param("rocep1s0f1 port -1 ==> enp1s0f1np1 (Up)", 1, "'rocep1s0f1 port -1 ==> enp1s0f1np1 (Up)'", "port number '-1'", id="port-negative"),
        pytest.param(
            "0000:01:00.1 rocep1s0f1 (MT4129 - NA) fw 28.45.1200 port one (ACTIVE) ==> enp1s0f1np1 (Up)", 1,
            "'0000:01:00.1 rocep1s0f1 (MT4129 - NA) fw 28.45.1200 port one (ACTIVE) ==> enp1s0f1np1 (Up)'", "port number 'one'",
            id="verbose-port-not-int",
        ),
        pytest.param("rocep1s0f1 port 1 ==> enp1s0f1np1 (up)", 1, "'rocep1s0f1 port 1 ==> enp1s0f1np1 (up)'", "netdev state 'up'", id="state-lowercase"),
        pytest.param("rocep1s0f1 port 1 ==> enp1s0f1np1 ()", 1, "'rocep1s0f1 port 1 ==> enp1s0f1np1 ()'", "netdev state ''", id="state-empty"),
        pytest.param("rocep1s0f1 port 1 ==> enp1s0f1np1", 1, "'rocep1s0f1 port 1 ==> enp1s0f1np1'", "not of the form", id="state-missing"),
        pytest.param("rocep1s0f1 port 1 ==> (Up)", 1, "'rocep1s0f1 port 1 ==> (Up)'", "not of the form", id="netdev-missing"),
        pytest.param("rocep1s0f1 port 1 => enp1s0f1np1 (Up)", 1, "'rocep1s0f1 port 1 => enp1s0f1np1 (Up)'", "not of the form", id="wrong-arrow"),
        pytest.param("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up) junk", 1, "'rocep1s0f1 port 1 ==> enp1s0f1np1 (Up) junk'", "not of the form", id="trailing-junk"),
        pytest.param(
            "0000:01:00.1 rocep1s0f1 (MT4129 - NA) port 1 (ACTIVE) ==> enp1s0f1np1 (Up)", 1,
            "'0000:01:00.1 rocep1s0f1 (MT4129 - NA) port 1 (ACTIVE) ==> enp1s0f1np1 (Up)'", "not of the form",
            id="verbose-without-fw",
        ),
        pytest.param(
            "mlx5_0 (MT4129 - x) fw 28.1 port 1 ==> ib0 (Up)", 1, "'mlx5_0 (MT4129 - x) fw 28.1 port 1 ==> ib0 (Up)'", "not of the form",
            id="verbose-without-port-state",
        ),
        pytest.param("mlx5_0 port 1 ==> ib0 (Up)\n\tgarbage with tab", 2, "'\\tgarbage with tab'", "not of the form", id="quotes-tab"),
    ],
)
def test_parse_errors_quote_line_and_number(text, line_number, quoted, reason):
    with pytest.raises(Ibdev2netdevParseError) as excinfo:
        parse_ibdev2netdev(text)
    message = str(excinfo.value)
    assert "line %d: %s" % (line_number, quoted) in message
    assert reason in message
    assert isinstance(excinfo.value, ValueError)


@pytest.mark.parametrize("value", [None, b"mlx5_0 port 1 ==> ib0 (Up)", ["mlx5_0 port 1 ==> ib0 (Up)"]], ids=["none", "bytes", "list"])
def test_parse_rejects_non_text(value):
    with pytest.raises(Ibdev2netdevParseError, match="must be text, got %s" % type(value).__name__):
        parse_ibdev2netdev(value)


# ---------------------------------------------------------------- GB10 naming

@pytest.mark.parametrize(
    "netdev, expected",
    [
        ("enp1s0f1np1", (1, "a")),
        ("enP2p1s0f1np1", (1, "b")),
        ("enp1s0f0np0", (0, "a")),
        ("enP2p1s0f0np0", (0, "b")),
        ("enp1s0f0np1", (None, None)),
        ("enp1s0f1np0", (None, None)),
        ("enp1s0f2np2", (None, None)),
        ("enP3p1s0f1np1", (None, None)),
        ("enp1s0f1np1.100", (None, None)),
        ("xenp1s0f1np1", (None, None)),
        ("ibp12s0", (None, None)),
        ("ens6", (None, None)),
        ("ib0", (None, None)),
        ("", (None, None)),
    ],
)
def test_gb10_port_and_twin(netdev, expected):
    assert gb10_port_and_twin(netdev) == expected


# ---------------------------------------------------------------- GID table

@pytest.mark.parametrize(
    "gids, expected",
    [
        pytest.param(
            [
                {"index": 0, "gid": "fe80:0000:0000:0000:4ebb:47ff:fe01:0203", "type": "IB/RoCE v1"},
                {"index": 1, "gid": "fe80:0000:0000:0000:4ebb:47ff:fe01:0203", "type": "RoCE v2"},
                {"index": 2, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:640a", "type": "IB/RoCE v1"},
                {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:640a", "type": "RoCE v2"},
            ],
            [3],
            id="gb10-one-ipv4",
        ),
        pytest.param(
            [
                {"index": 7, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:656e", "type": "RoCE v2"},
                {"index": 5, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:650a", "type": "RoCE v2"},
                {"index": 6, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:656e", "type": "IB/RoCE v1"},
            ],
            [5, 7],
            id="two-ipv4-sorted",
        ),
        pytest.param([{"index": 0, "gid": "0000:0000:0000:0000:0000:0000:0000:0000", "type": "RoCE v2"}], [], id="all-zero"),
        pytest.param([{"index": 0, "gid": "0000:0000:0000:0000:0000:ffff:0000:0000", "type": "RoCE v2"}], [], id="mapped-0.0.0.0"),
        pytest.param([{"index": 4, "gid": "2001:0db8:0000:0000:0000:0000:0000:0001", "type": "RoCE v2"}], [], id="global-ipv6"),
        pytest.param([{"index": 4, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:640a", "type": None}], [], id="type-unreadable"),
        pytest.param([{"index": 4, "gid": "not a gid", "type": "RoCE v2"}], [], id="garbage-gid"),
        pytest.param([{"index": "3", "gid": "0000:0000:0000:0000:0000:ffff:c0a8:640a", "type": "RoCE v2\n"}], [3], id="string-index-newline"),
        pytest.param([], [], id="empty"),
    ],
)
def test_roce_v2_ipv4_gid_indexes(gids, expected):
    assert roce_v2_ipv4_gid_indexes(gids) == expected


# ---------------------------------------------------------------- sysfs trees

def ipv4_gid(address):
    octets = [int(part) for part in address.split(".")]
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % tuple(octets)


def link_local_gid(suffix):
    return "fe80:0000:0000:0000:%s" % suffix


ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def add_port(root, rdma_device, netdev, port_state="4: ACTIVE", operstate="up", mtu="9000", speed="200000",
             gids=None, port=1, link_layer="Ethernet", firmware="28.45.1200"):
    """One RDMA device with one port and one netdev, in the layout the kernel uses.

    gids: list of (gid, type) by index; a type of None makes gid_attrs/types/<i> a directory, so
    reading it fails the way the kernel's EINVAL does. speed None makes the speed file unreadable.
    """
    device_dir = root / "class" / "infiniband" / rdma_device
    port_dir = device_dir / "ports" / str(port)
    write(port_dir / "state", port_state + "\n")
    write(port_dir / "link_layer", link_layer + "\n")
    (device_dir / "device" / "net" / netdev).mkdir(parents=True)
    if firmware is not None:
        write(device_dir / "fw_ver", firmware + "\n")
    for index, (gid, gid_type) in enumerate(gids or [(ZERO_GID, None)]):
        write(port_dir / "gids" / str(index), gid + "\n")
        if gid_type is None:
            (port_dir / "gid_attrs" / "types" / str(index)).mkdir(parents=True)
        else:
            write(port_dir / "gid_attrs" / "types" / str(index), gid_type + "\n")
    net_dir = root / "class" / "net" / netdev
    write(net_dir / "operstate", operstate + "\n")
    write(net_dir / "mtu", mtu + "\n")
    if speed is None:
        (net_dir / "speed").mkdir(parents=True)
    else:
        write(net_dir / "speed", speed + "\n")


def make_gb10_sysfs(root):
    """A DGX Spark with port 1 cabled (both twins up, rails 192.168.100.10 and 192.168.101.10) and port 0 empty."""
    add_port(root, "rocep1s0f1", "enp1s0f1np1", gids=[
        (link_local_gid("4ebb:47ff:fe01:0203"), "IB/RoCE v1"),
        (link_local_gid("4ebb:47ff:fe01:0203"), "RoCE v2"),
        (ipv4_gid("192.168.100.10"), "IB/RoCE v1"),
        (ipv4_gid("192.168.100.10"), "RoCE v2"),
        (ZERO_GID, None),
        (ZERO_GID, None),
    ])
    add_port(root, "roceP2p1s0f1", "enP2p1s0f1np1", gids=[
        (link_local_gid("4ebb:47ff:fe01:0205"), "IB/RoCE v1"),
        (link_local_gid("4ebb:47ff:fe01:0205"), "RoCE v2"),
        (ipv4_gid("192.168.101.10"), "IB/RoCE v1"),
        (ipv4_gid("192.168.101.10"), "RoCE v2"),
    ])
    for rdma_device, netdev, suffix in (("rocep1s0f0", "enp1s0f0np0", "0202"), ("roceP2p1s0f0", "enP2p1s0f0np0", "0204")):
        add_port(root, rdma_device, netdev, port_state="1: DOWN", operstate="down", mtu="1500", speed="-1", gids=[
            (link_local_gid("4ebb:47ff:fe01:%s" % suffix), "IB/RoCE v1"),
            (link_local_gid("4ebb:47ff:fe01:%s" % suffix), "RoCE v2"),
            (ZERO_GID, None),
        ])
    # A real sysfs also lists netdevs without an RDMA device; they must not show up.
    write(root / "class" / "net" / "enP7s7" / "operstate", "up\n")
    write(root / "class" / "net" / "lo" / "operstate", "unknown\n")
    return root


def gid(index, value, gid_type):
    return {"index": index, "gid": value, "type": gid_type}


def sysfs_record(rdma_device, netdev, state, port_state, operstate, mtu, speed_mbps, gids, port=1, link_layer="Ethernet", firmware="28.45.1200"):
    return {
        "rdma_device": rdma_device, "port": port, "netdev": netdev, "state": state, "port_state": port_state,
        "link_layer": link_layer, "operstate": operstate, "mtu": mtu, "speed_mbps": speed_mbps, "gids": gids,
        "pci_address": None, "firmware": firmware,
    }


def test_read_sysfs_gb10(tmp_path):
    records = read_sysfs(str(make_gb10_sysfs(tmp_path)))
    assert records == [
        sysfs_record("roceP2p1s0f0", "enP2p1s0f0np0", "Down", "DOWN", "down", 1500, None, [
            gid(0, link_local_gid("4ebb:47ff:fe01:0204"), "IB/RoCE v1"), gid(1, link_local_gid("4ebb:47ff:fe01:0204"), "RoCE v2"),
        ]),
        sysfs_record("roceP2p1s0f1", "enP2p1s0f1np1", "Up", "ACTIVE", "up", 9000, 200000, [
            gid(0, link_local_gid("4ebb:47ff:fe01:0205"), "IB/RoCE v1"), gid(1, link_local_gid("4ebb:47ff:fe01:0205"), "RoCE v2"),
            gid(2, ipv4_gid("192.168.101.10"), "IB/RoCE v1"), gid(3, ipv4_gid("192.168.101.10"), "RoCE v2"),
        ]),
        sysfs_record("rocep1s0f0", "enp1s0f0np0", "Down", "DOWN", "down", 1500, None, [
            gid(0, link_local_gid("4ebb:47ff:fe01:0202"), "IB/RoCE v1"), gid(1, link_local_gid("4ebb:47ff:fe01:0202"), "RoCE v2"),
        ]),
        sysfs_record("rocep1s0f1", "enp1s0f1np1", "Up", "ACTIVE", "up", 9000, 200000, [
            gid(0, link_local_gid("4ebb:47ff:fe01:0203"), "IB/RoCE v1"), gid(1, link_local_gid("4ebb:47ff:fe01:0203"), "RoCE v2"),
            gid(2, ipv4_gid("192.168.100.10"), "IB/RoCE v1"), gid(3, ipv4_gid("192.168.100.10"), "RoCE v2"),
        ]),
    ]


@pytest.mark.parametrize("layout", ["no-class-dir", "no-infiniband-dir", "empty-infiniband-dir"])
def test_read_sysfs_without_rdma_devices(tmp_path, layout):
    if layout != "no-class-dir":
        write(tmp_path / "class" / "net" / "eth0" / "operstate", "up\n")
    if layout == "empty-infiniband-dir":
        (tmp_path / "class" / "infiniband").mkdir()
    assert read_sysfs(str(tmp_path)) == []


@pytest.mark.parametrize(
    "overrides, expected",
    [
        pytest.param({"speed": None}, {"speed_mbps": None}, id="speed-unreadable"),
        pytest.param({"speed": "-1"}, {"speed_mbps": None}, id="speed-minus-one"),
        pytest.param({"speed": "4294967295"}, {"speed_mbps": None}, id="speed-unknown-unsigned"),
        pytest.param({"speed": "100000"}, {"speed_mbps": 100000}, id="speed-100g-negotiated"),
        pytest.param({"operstate": "down", "port_state": "1: DOWN"}, {"state": "Down", "operstate": "down", "port_state": "DOWN"}, id="down"),
        pytest.param({"operstate": "dormant"}, {"state": "Down", "operstate": "dormant"}, id="operstate-not-up"),
        pytest.param({"port_state": "2: INIT"}, {"port_state": "INIT"}, id="port-init"),
        pytest.param({"port_state": "3: ARMED"}, {"port_state": "ARMED"}, id="port-armed"),
        pytest.param({"link_layer": "InfiniBand"}, {"link_layer": "InfiniBand"}, id="infiniband-link-layer"),
        pytest.param({"mtu": "garbage"}, {"mtu": None}, id="mtu-unparsable"),
        pytest.param({"firmware": None}, {"firmware": None}, id="no-fw_ver"),
    ],
)
def test_read_sysfs_attribute_variants(tmp_path, overrides, expected):
    add_port(tmp_path, "mlx5_0", "ens6", **overrides)
    (record,) = read_sysfs(str(tmp_path))
    for key, value in expected.items():
        assert record[key] == value, key


def test_read_sysfs_netdev_without_class_net_entry(tmp_path):
    """The RDMA device names a netdev that /sys/class/net lacks: attributes are null and the state is Down."""
    add_port(tmp_path, "mlx5_0", "ens6")
    (tmp_path / "class" / "net" / "ens6" / "operstate").unlink()
    (tmp_path / "class" / "net" / "ens6" / "mtu").unlink()
    (record,) = read_sysfs(str(tmp_path))
    assert (record["state"], record["operstate"], record["mtu"], record["speed_mbps"]) == ("Down", None, None, 200000)


def test_read_sysfs_device_without_netdev_is_skipped(tmp_path):
    add_port(tmp_path, "mlx5_0", "ib0", link_layer="InfiniBand")
    write(tmp_path / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "state", "4: ACTIVE\n")
    assert [record["rdma_device"] for record in read_sysfs(str(tmp_path))] == ["mlx5_0"]


def test_read_sysfs_two_port_device_maps_netdevs_by_dev_port(tmp_path):
    """mlx4-style: one RDMA device, two ports, the netdev's dev_port/dev_id says which port it is."""
    add_port(tmp_path, "mlx4_0", "ib0", port=1, link_layer="InfiniBand")
    add_port(tmp_path, "mlx4_0", "ib1", port=2, port_state="1: DOWN", link_layer="InfiniBand")
    write(tmp_path / "class" / "net" / "ib0" / "dev_id", "0x0\n")
    write(tmp_path / "class" / "net" / "ib1" / "dev_id", "0x0\n")
    write(tmp_path / "class" / "net" / "ib1" / "dev_port", "1\n")
    records = read_sysfs(str(tmp_path))
    assert [(r["netdev"], r["port"], r["port_state"]) for r in records] == [("ib0", 1, "ACTIVE"), ("ib1", 2, "DOWN")]


def test_read_sysfs_pci_address_from_device_link(tmp_path):
    add_port(tmp_path, "rocep1s0f1", "enp1s0f1np1")
    device_dir = tmp_path / "class" / "infiniband" / "rocep1s0f1" / "device"
    pci_dir = tmp_path / "devices" / "pci0000:00" / "0000:01:00.1"
    pci_dir.parent.mkdir(parents=True)
    device_dir.rename(pci_dir)
    device_dir.symlink_to(pci_dir)
    (record,) = read_sysfs(str(tmp_path))
    assert (record["pci_address"], record["netdev"]) == ("0000:01:00.1", "enp1s0f1np1")


# ---------------------------------------------------------------- ip -j -4 addr show

def test_parse_ip_addr_json_fixture():
    assert parse_ip_addr_json(fixture_text("ip_addr_gb10.json")) == {
        "lo": ["127.0.0.1/8"],
        "enP7s7": ["10.0.0.21/24"],
        "enp1s0f1np1": ["192.168.100.10/24", "192.168.100.110/24"],
        "enP2p1s0f1np1": ["192.168.101.10/24"],
    }


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param("", {}, id="empty-output"),
        pytest.param("[]", {}, id="empty-list"),
        pytest.param('[{}, {"ifname": "eth0", "addr_info": []}]', {"eth0": []}, id="no-addresses"),
        pytest.param(
            '[{"ifname": "eth0", "addr_info": [{"family": "inet6", "local": "fe80::1", "prefixlen": 64},'
            ' {"family": "inet", "local": "192.168.100.10", "prefixlen": 24}]}]',
            {"eth0": ["192.168.100.10/24"]},
            id="ipv6-skipped",
        ),
    ],
)
def test_parse_ip_addr_json_variants(text, expected):
    assert parse_ip_addr_json(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param("Option \"-j\" is unknown, try \"ip -help\".", "not JSON", id="old-iproute2"),
        pytest.param('{"ifname": "eth0"}', "not a list of interfaces", id="object-not-list"),
    ],
)
def test_parse_ip_addr_json_errors(text, message):
    with pytest.raises(IpAddrJsonError, match=message):
        parse_ip_addr_json(text)


# ---------------------------------------------------------------- merge

# What ip_addr_gb10.json holds for the CX-7 netdevs (rail 1 carries a secondary address).
GB10_IPV4 = {"enp1s0f1np1": ["192.168.100.10/24", "192.168.100.110/24"], "enP2p1s0f1np1": ["192.168.101.10/24"]}


def full_record(**fields):
    record = {
        "rdma_device": None, "port": 1, "netdev": None, "state": None, "port_state": None, "link_layer": None,
        "operstate": None, "mtu": None, "ipv4": [], "speed_mbps": None, "roce_v2_ipv4_gid_indexes": [],
        "physical_port": None, "twin": None, "pci_address": None, "description": None, "firmware": None,
    }
    assert set(fields) <= set(record), set(fields) - set(record)
    record.update(fields)
    return record


GB10_EXPECTED_FROM_VERBOSE = [
    full_record(
        rdma_device="roceP2p1s0f0", netdev="enP2p1s0f0np0", state="Down", port_state="DOWN", link_layer="Ethernet", operstate="down",
        mtu=1500, physical_port=0, twin="b", pci_address="0002:01:00.0", description=CX7_DESCRIPTION, firmware="28.45.1200",
    ),
    full_record(
        rdma_device="roceP2p1s0f1", netdev="enP2p1s0f1np1", state="Up", port_state="ACTIVE", link_layer="Ethernet", operstate="up",
        mtu=9000, ipv4=["192.168.101.10/24"], speed_mbps=200000, roce_v2_ipv4_gid_indexes=[3], physical_port=1, twin="b",
        pci_address="0002:01:00.1", description=CX7_DESCRIPTION, firmware="28.45.1200",
    ),
    full_record(
        rdma_device="rocep1s0f0", netdev="enp1s0f0np0", state="Down", port_state="DOWN", link_layer="Ethernet", operstate="down",
        mtu=1500, physical_port=0, twin="a", pci_address="0000:01:00.0", description=CX7_DESCRIPTION, firmware="28.45.1200",
    ),
    full_record(
        rdma_device="rocep1s0f1", netdev="enp1s0f1np1", state="Up", port_state="ACTIVE", link_layer="Ethernet", operstate="up",
        mtu=9000, ipv4=["192.168.100.10/24", "192.168.100.110/24"], speed_mbps=200000, roce_v2_ipv4_gid_indexes=[3], physical_port=1, twin="a",
        pci_address="0000:01:00.1", description=CX7_DESCRIPTION, firmware="28.45.1200",
    ),
]


def without_verbose_only_fields(record):
    return dict(record, pci_address=None, description=None)


def test_build_from_verbose_ibdev2netdev_and_sysfs(tmp_path):
    result = build_device_records(fixture_text("gb10_ibdev2netdev_v.txt"), read_sysfs(str(make_gb10_sysfs(tmp_path))), GB10_IPV4)
    assert result == {"source": "ibdev2netdev", "devices": GB10_EXPECTED_FROM_VERBOSE}


@pytest.mark.parametrize("fixture", ["gb10_ibdev2netdev.txt", "gb10_ibdev2netdev_nvidia_order.txt"])
def test_build_from_plain_ibdev2netdev_takes_port_state_from_sysfs(tmp_path, fixture):
    result = build_device_records(fixture_text(fixture), read_sysfs(str(make_gb10_sysfs(tmp_path))), GB10_IPV4)
    assert result == {"source": "ibdev2netdev", "devices": [without_verbose_only_fields(r) for r in GB10_EXPECTED_FROM_VERBOSE]}


def test_build_from_sysfs_only(tmp_path):
    result = build_device_records(None, read_sysfs(str(make_gb10_sysfs(tmp_path))), GB10_IPV4)
    assert result == {"source": "sysfs", "devices": [without_verbose_only_fields(r) for r in GB10_EXPECTED_FROM_VERBOSE]}


def test_build_ibdev2netdev_state_wins_over_sysfs(tmp_path):
    """The tool's Up/Down (carrier) is reported as printed even when sysfs operstate disagrees."""
    add_port(tmp_path, "rocep1s0f1", "enp1s0f1np1", operstate="down")
    (device,) = build_device_records("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)", read_sysfs(str(tmp_path)))["devices"]
    assert (device["state"], device["operstate"]) == ("Up", "down")


def test_build_netdev_unknown_to_sysfs_has_null_attributes():
    result = build_device_records("mlx5_0 port 1 ==> ibp12s0 (Up)", [], {"ibp12s0": ["10.1.0.5/16"]})
    assert result == {
        "source": "ibdev2netdev",
        "devices": [full_record(rdma_device="mlx5_0", netdev="ibp12s0", state="Up", ipv4=["10.1.0.5/16"])],
    }


@pytest.mark.parametrize(
    "text, sysfs, expected_source",
    [
        pytest.param(None, [], "none", id="no-tool-no-sysfs"),
        pytest.param("", [], "ibdev2netdev", id="tool-printed-nothing"),
    ],
)
def test_build_without_devices(text, sysfs, expected_source):
    assert build_device_records(text, sysfs) == {"source": expected_source, "devices": []}


def test_build_sorts_by_netdev():
    text = fixture_text("weka_ib.txt")
    netdevs = [device["netdev"] for device in build_device_records(text, [])["devices"]]
    assert netdevs == sorted("ib%d" % i for i in range(10))


def test_build_propagates_parse_errors():
    with pytest.raises(Ibdev2netdevParseError, match="line 1: 'nonsense'"):
        build_device_records("nonsense", [])


# ---------------------------------------------------------------- the parser's own error

def test_the_parse_error_names_the_line():
    assert parse_ibdev2netdev(fixture_text("gb10_ibdev2netdev.txt")) == GB10_PLAIN
    with pytest.raises(Ibdev2netdevParseError, match=r"ibdev2netdev output line 2: 'oops'"):
        parse_ibdev2netdev("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\noops")


# ---------------------------------------------------------------- cx7_facts module, run as Ansible runs it

def write_program(path, stdout_file, expected_args, rc=0, stderr=""):
    """A stand-in program that prints stdout_file when called with expected_args, and fails loudly otherwise."""
    path.write_text(
        "#!%s\n"
        "import sys\n"
        "if sys.argv[1:] != %r:\n"
        "    sys.stderr.write('unexpected arguments %%r\\n' %% (sys.argv[1:],))\n"
        "    sys.exit(99)\n"
        "sys.stdout.write(open(%r).read())\n"
        "sys.stderr.write(%r)\n"
        "sys.exit(%d)\n" % (sys.executable, list(expected_args), str(stdout_file), stderr, rc),
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path


def run_cx7_facts(tmp_path, module_args, path_env=None):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(COLLECTIONS_PATH)] + sys.path))
    if path_env is not None:
        env["PATH"] = path_env
    completed = subprocess.run(
        [sys.executable, "-m", "ansible_collections.dgxspark.cluster.plugins.modules.cx7_facts", str(args_file)],
        capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120, check=False,
    )
    try:
        return json.loads(completed.stdout)
    except ValueError:
        pytest.fail("module printed no JSON (rc %d)\nstdout: %s\nstderr: %s" % (completed.returncode, completed.stdout, completed.stderr))


@pytest.fixture(name="gb10_host")
def gb10_host_fixture(tmp_path):
    """Paths of a fake GB10 host: sysfs tree, ibdev2netdev and ip stand-ins."""
    sysfs_root = make_gb10_sysfs(tmp_path / "sys")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ibdev2netdev = write_program(bin_dir / "ibdev2netdev", FIXTURES / "gb10_ibdev2netdev_v.txt", ["-v"])
    ip = write_program(tmp_path / "ip", FIXTURES / "ip_addr_gb10.json", ["-j", "-4", "addr", "show"])
    return {"tmp_path": tmp_path, "sysfs_root": str(sysfs_root), "bin_dir": bin_dir, "ibdev2netdev": str(ibdev2netdev), "ip": str(ip)}


def test_module_ibdev2netdev_source(gb10_host):
    result = run_cx7_facts(gb10_host["tmp_path"], {
        "sysfs_root": gb10_host["sysfs_root"], "ibdev2netdev_path": gb10_host["ibdev2netdev"], "ip_path": gb10_host["ip"],
    })
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert result["ansible_facts"] == {"cx7": {"source": "ibdev2netdev", "devices": GB10_EXPECTED_FROM_VERBOSE}}


def test_module_finds_ibdev2netdev_on_path(gb10_host):
    result = run_cx7_facts(
        gb10_host["tmp_path"], {"sysfs_root": gb10_host["sysfs_root"], "ip_path": gb10_host["ip"]}, path_env=str(gb10_host["bin_dir"]),
    )
    assert result["ansible_facts"]["cx7"] == {"source": "ibdev2netdev", "devices": GB10_EXPECTED_FROM_VERBOSE}


def test_module_sysfs_source_when_disabled(gb10_host):
    result = run_cx7_facts(gb10_host["tmp_path"], {
        "sysfs_root": gb10_host["sysfs_root"], "use_ibdev2netdev": False, "ibdev2netdev_path": gb10_host["ibdev2netdev"],
        "ip_path": gb10_host["ip"],
    })
    assert result["ansible_facts"]["cx7"] == {
        "source": "sysfs", "devices": [without_verbose_only_fields(r) for r in GB10_EXPECTED_FROM_VERBOSE],
    }


def test_module_check_mode_reports_the_same(gb10_host):
    result = run_cx7_facts(gb10_host["tmp_path"], {
        "sysfs_root": gb10_host["sysfs_root"], "ibdev2netdev_path": gb10_host["ibdev2netdev"], "ip_path": gb10_host["ip"],
        "_ansible_check_mode": True,
    })
    assert result["changed"] is False
    assert result["ansible_facts"]["cx7"]["devices"] == GB10_EXPECTED_FROM_VERBOSE


def test_module_host_without_rdma_devices(gb10_host):
    empty_root = gb10_host["tmp_path"] / "empty-sys"
    write(empty_root / "class" / "net" / "eth0" / "operstate", "up\n")
    result = run_cx7_facts(gb10_host["tmp_path"], {"sysfs_root": str(empty_root), "use_ibdev2netdev": False, "ip_path": gb10_host["ip"]})
    assert result.get("failed") is not True, result
    assert result["ansible_facts"] == {"cx7": {"source": "none", "devices": []}}


def test_module_fails_on_unparsable_ibdev2netdev_output(gb10_host):
    bad_output = gb10_host["tmp_path"] / "bad.txt"
    bad_output.write_text("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\nsomething unexpected\n", encoding="utf-8")
    program = write_program(gb10_host["tmp_path"] / "bad-ibdev2netdev", bad_output, ["-v"])
    result = run_cx7_facts(gb10_host["tmp_path"], {"sysfs_root": gb10_host["sysfs_root"], "ibdev2netdev_path": str(program), "ip_path": gb10_host["ip"]})
    assert result["failed"] is True
    assert "line 2: 'something unexpected'" in result["msg"]
    assert "use_ibdev2netdev: false" in result["msg"]


def test_module_fails_when_ibdev2netdev_fails(gb10_host):
    program = write_program(gb10_host["tmp_path"] / "broken", FIXTURES / "gb10_ibdev2netdev.txt", ["-v"], rc=3, stderr="cannot read vpd")
    result = run_cx7_facts(gb10_host["tmp_path"], {"sysfs_root": gb10_host["sysfs_root"], "ibdev2netdev_path": str(program), "ip_path": gb10_host["ip"]})
    assert result["failed"] is True
    assert "exited with status 3: cannot read vpd" in result["msg"]


@pytest.mark.parametrize("option", ["ibdev2netdev_path", "ip_path"])
def test_module_fails_on_missing_explicit_program(gb10_host, option):
    module_args = {"sysfs_root": gb10_host["sysfs_root"], "ibdev2netdev_path": gb10_host["ibdev2netdev"], "ip_path": gb10_host["ip"]}
    module_args[option] = str(gb10_host["tmp_path"] / "does-not-exist")
    result = run_cx7_facts(gb10_host["tmp_path"], module_args)
    assert result["failed"] is True
    assert "does-not-exist is not an executable file" in result["msg"]


def test_module_fails_on_ip_output_that_is_not_json(gb10_host):
    not_json = gb10_host["tmp_path"] / "not-json.txt"
    not_json.write_text('Option "-j" is unknown, try "ip -help".\n', encoding="utf-8")
    ip = write_program(gb10_host["tmp_path"] / "old-ip", not_json, ["-j", "-4", "addr", "show"])
    result = run_cx7_facts(gb10_host["tmp_path"], {"sysfs_root": gb10_host["sysfs_root"], "use_ibdev2netdev": False, "ip_path": str(ip)})
    assert result["failed"] is True
    assert "not JSON" in result["msg"]


def test_module_rejects_unknown_option(gb10_host):
    result = run_cx7_facts(gb10_host["tmp_path"], {"sysfs_root": gb10_host["sysfs_root"], "bogus": 1})
    assert result["failed"] is True
    assert "bogus" in result["msg"]
