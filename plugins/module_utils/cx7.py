# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ConnectX-7 / RDMA device discovery: ibdev2netdev output, sysfs, GID tables, GB10 port naming.

Pure logic, no Ansible objects: the cx7_facts module and the ibdev2netdev filter are thin
wrappers around the functions here. The record format is the "CX-7 device record" of
docs/design.md.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import typing as t

if t.TYPE_CHECKING:  # pragma: no cover - typing only, never imported at run time on targets
    from collections.abc import Iterable, Mapping


class Ibdev2netdevParseError(ValueError):
    """A line of ibdev2netdev output does not have any known shape."""


class IpAddrJsonError(ValueError):
    """The output of `ip -j -4 addr show` is not the JSON iproute2 prints."""


# Text the tool prints after the netdev state on some hosts, e.g. the Lustre network name
# "(o2ib)" or "(o2ib1)". It carries nothing this collection uses, so it is accepted and dropped.
_ANNOTATIONS = r"(?:\s+\([^()]*\))*"

# `ibdev2netdev`: "<rdma device> port <n> ==> <netdev> (<Up|Down>)"
_PLAIN_LINE = re.compile(
    r"^(?P<rdma_device>\S+)\s+port\s+(?P<port>\S+)\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>[^()]*)\)"
    + _ANNOTATIONS + r"\s*$"
)

# `ibdev2netdev -v`:
# "<pci> <rdma device> (<MTxxxx - part>) <vpd description> fw <firmware> port <n> (<PORT_STATE>) ==> <netdev> (<Up|Down>)"
# The PCI address is missing when the tool cannot map the device to a PCI function (old mlx4
# hosts print the line starting with the device name), and the description is free text with
# spaces, commas, parentheses and long runs of padding, so it is everything up to " fw ".
_VERBOSE_LINE = re.compile(
    r"^(?:(?P<pci_address>[0-9A-Fa-f]{4,}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]+)\s+)?"
    r"(?P<rdma_device>\S+)\s+(?P<description>.*?)\s*\bfw\s+(?P<firmware>\S+)\s+"
    r"port\s+(?P<port>\S+)\s+\((?P<port_state>[^()]*)\)\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>[^()]*)\)"
    + _ANNOTATIONS + r"\s*$"
)

# "NA" is what the Mellanox script prints when /sys/class/net/<netdev>/carrier is missing.
_NETDEV_STATES = ("Up", "Down", "NA")

_GB10_NETDEV = re.compile(r"^(?P<twin_prefix>enp1s0f|enP2p1s0f)(?P<function>[01])np(?P<port>[01])$")
_GB10_TWIN_BY_PREFIX = {"enp1s0f": "a", "enP2p1s0f": "b"}

_PCI_ADDRESS = re.compile(r"^[0-9A-Fa-f]{4,}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]+$")

ROCE_V2_GID_TYPE = "RoCE v2"


def _quote_line(line_number: int, line: str) -> str:
    return "line %d: %r" % (line_number, line)


def _parse_port_number(raw_port: str, line_number: int, line: str) -> int:
    if not raw_port.isdigit() or int(raw_port) < 1:
        raise Ibdev2netdevParseError(
            "ibdev2netdev output %s: port number %r is not a positive integer. "
            "Check that the output comes from Mellanox/NVIDIA ibdev2netdev unmodified." % (_quote_line(line_number, line), raw_port)
        )
    return int(raw_port)


def _parse_netdev_state(raw_state: str, line_number: int, line: str) -> str:
    state = raw_state.strip()
    if state not in _NETDEV_STATES:
        raise Ibdev2netdevParseError(
            "ibdev2netdev output %s: netdev state %r is not one of %s. "
            "Check that the output comes from Mellanox/NVIDIA ibdev2netdev unmodified."
            % (_quote_line(line_number, line), raw_state, ", ".join(_NETDEV_STATES))
        )
    return state


def parse_ibdev2netdev(text: str) -> list[dict[str, t.Any]]:
    """Parse `ibdev2netdev` or `ibdev2netdev -v` output into one dict per line, in input order.

    Every record has rdma_device, port (int), netdev and state (as printed: Up, Down, or NA).
    Lines of the -v form also carry pci_address (None when the tool printed none), description
    (the text between the device name and "fw", runs of whitespace collapsed to one space),
    firmware and port_state (ACTIVE, DOWN, ... with the padding stripped; None when empty).
    Blank lines are skipped; any other line that matches neither form raises
    Ibdev2netdevParseError naming the line number and quoting the line.
    """
    if not isinstance(text, str):
        raise Ibdev2netdevParseError(
            "ibdev2netdev output must be text, got %s. Pass the command's stdout, e.g. result.stdout." % type(text).__name__
        )
    records = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        # The plain form is tried first: a verbose line never matches it, because "port" is
        # preceded by the firmware there, not by the device name alone.
        plain = _PLAIN_LINE.match(line.strip())
        if plain:
            records.append({
                "rdma_device": plain.group("rdma_device"),
                "port": _parse_port_number(plain.group("port"), line_number, line),
                "netdev": plain.group("netdev"),
                "state": _parse_netdev_state(plain.group("state"), line_number, line),
            })
            continue
        verbose = _VERBOSE_LINE.match(line.strip())
        if verbose:
            port_state = verbose.group("port_state").strip()
            records.append({
                "rdma_device": verbose.group("rdma_device"),
                "port": _parse_port_number(verbose.group("port"), line_number, line),
                "netdev": verbose.group("netdev"),
                "state": _parse_netdev_state(verbose.group("state"), line_number, line),
                "pci_address": verbose.group("pci_address"),
                "description": " ".join(verbose.group("description").split()),
                "firmware": verbose.group("firmware"),
                "port_state": port_state or None,
            })
            continue
        raise Ibdev2netdevParseError(
            "ibdev2netdev output %s: not of the form '<rdma device> port <n> ==> <netdev> (Up|Down)' nor the -v form "
            "'<pci> <rdma device> (<description>) fw <firmware> port <n> (<PORT_STATE>) ==> <netdev> (Up|Down)'. "
            "Pass the unmodified stdout of ibdev2netdev or ibdev2netdev -v." % _quote_line(line_number, line)
        )
    return records


def gb10_port_and_twin(netdev: str) -> tuple[int | None, str | None]:
    """Return (physical QSFP port, twin) for a DGX Spark (GB10) CX-7 netdev name, else (None, None).

    Each physical port is two PCIe x4 links: enp1s0f<N>np<N> is twin "a", enP2p1s0f<N>np<N> twin "b".
    """
    match = _GB10_NETDEV.match(netdev or "")
    if not match or match.group("function") != match.group("port"):
        return None, None
    return int(match.group("port")), _GB10_TWIN_BY_PREFIX[match.group("twin_prefix")]


def is_roce_v2_ipv4_gid(gid: str, gid_type: str | None) -> bool:
    """True for a RoCE v2 GID that encodes an IPv4 address (::ffff:a.b.c.d), the kind NCCL_IB_GID_INDEX needs."""
    if gid_type is None or gid_type.strip().lower() != ROCE_V2_GID_TYPE.lower():
        return False
    try:
        mapped = ipaddress.IPv6Address(gid.strip()).ipv4_mapped
    except ValueError:
        return False
    return mapped is not None and not mapped.is_unspecified


def roce_v2_ipv4_gid_indexes(gids: Iterable[Mapping[str, t.Any]]) -> list[int]:
    """Sorted indexes of the GID table entries ({index, gid, type}) that are RoCE v2 and IPv4-mapped."""
    return sorted(int(entry["index"]) for entry in gids if is_roce_v2_ipv4_gid(entry.get("gid") or "", entry.get("type")))


def _read_text(path: str) -> str | None:
    """Content of a sysfs attribute, stripped, or None when it is missing or the kernel refuses the read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as attribute:
            return attribute.read().strip()
    except OSError:
        # sysfs answers some reads with EINVAL (gid_attrs of unused GIDs, speed of a down link).
        return None


def _read_int(path: str) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def _list_dir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _numeric_entries(path: str) -> list[int]:
    return sorted(int(name) for name in _list_dir(path) if name.isdigit())


def _speed_mbps(path: str) -> int | None:
    speed = _read_int(path)
    # The kernel reports SPEED_UNKNOWN as -1 (or as 4294967295 on old kernels) while a link is down.
    if speed is None or speed <= 0 or speed >= 0xFFFFFFFF:
        return None
    return speed


def _port_state(path: str) -> str | None:
    # sysfs prints "4: ACTIVE"; ibdev2netdev shows the part after the colon.
    text = _read_text(path)
    if not text:
        return None
    return text.split(":", 1)[-1].strip() or None


def _read_gid_table(port_dir: str) -> list[dict[str, t.Any]]:
    table = []
    for index in _numeric_entries(os.path.join(port_dir, "gids")):
        gid = _read_text(os.path.join(port_dir, "gids", str(index)))
        if gid is None or set(gid.replace(":", "")) <= {"0"}:
            continue  # unused slot; its gid_attrs cannot be read anyway
        gid_type = _read_text(os.path.join(port_dir, "gid_attrs", "types", str(index)))
        table.append({"index": index, "gid": gid, "type": gid_type})
    return table


def _netdev_port_number(sysfs_root: str, netdev: str, port_numbers: list[int]) -> int:
    """The RDMA port a netdev belongs to, computed the way ibdev2netdev does (max(dev_id, dev_port) + 1)."""
    if len(port_numbers) == 1:
        return port_numbers[0]
    dev_id = _read_int(os.path.join(sysfs_root, "class", "net", netdev, "dev_id"))
    dev_port = _read_int(os.path.join(sysfs_root, "class", "net", netdev, "dev_port"))
    known = [value for value in (dev_id, dev_port) if value is not None]
    return (max(known) if known else 0) + 1


def _pci_address(device_link: str) -> str | None:
    name = os.path.basename(os.path.realpath(device_link))
    return name if _PCI_ADDRESS.match(name) else None


def read_sysfs(root: str = "/sys") -> list[dict[str, t.Any]]:
    """Device records for every RDMA device port that has a netdev, read from the sysfs tree under root.

    Each record has rdma_device, port, netdev, state (Up when operstate is "up", else Down),
    port_state, link_layer, operstate, mtu, speed_mbps, gids ([{index, gid, type}], unused
    entries left out), pci_address and firmware. Unreadable attributes are None. A host without
    /sys/class/infiniband has no RDMA devices: the result is an empty list.
    """
    infiniband_dir = os.path.join(root, "class", "infiniband")
    records = []
    for rdma_device in _list_dir(infiniband_dir):
        device_dir = os.path.join(infiniband_dir, rdma_device)
        port_numbers = _numeric_entries(os.path.join(device_dir, "ports"))
        for netdev in _list_dir(os.path.join(device_dir, "device", "net")):
            port = _netdev_port_number(root, netdev, port_numbers)
            port_dir = os.path.join(device_dir, "ports", str(port))
            net_dir = os.path.join(root, "class", "net", netdev)
            operstate = _read_text(os.path.join(net_dir, "operstate"))
            records.append({
                "rdma_device": rdma_device,
                "port": port,
                "netdev": netdev,
                "state": "Up" if operstate == "up" else "Down",
                "port_state": _port_state(os.path.join(port_dir, "state")),
                "link_layer": _read_text(os.path.join(port_dir, "link_layer")) or None,
                "operstate": operstate or None,
                "mtu": _read_int(os.path.join(net_dir, "mtu")),
                "speed_mbps": _speed_mbps(os.path.join(net_dir, "speed")),
                "gids": _read_gid_table(port_dir),
                "pci_address": _pci_address(os.path.join(device_dir, "device")),
                "firmware": _read_text(os.path.join(device_dir, "fw_ver")) or None,
            })
    return records


def parse_ip_addr_json(text: str) -> dict[str, list[str]]:
    """Map netdev -> ["a.b.c.d/prefix", ...] (in the order ip prints them) from `ip -j -4 addr show` output."""
    try:
        interfaces = json.loads(text) if text.strip() else []
    except ValueError as exc:
        raise IpAddrJsonError(
            "`ip -j -4 addr show` printed text that is not JSON (%s): %r. "
            "iproute2 4.14 or newer is needed for -j." % (exc, text[:200])
        ) from exc
    if not isinstance(interfaces, list):
        raise IpAddrJsonError("`ip -j -4 addr show` printed JSON that is not a list of interfaces: %r." % (text[:200],))
    addresses: dict[str, list[str]] = {}
    for interface in interfaces:
        # iproute2 prints an empty object for each interface that has no IPv4 address.
        if not isinstance(interface, dict) or not interface.get("ifname"):
            continue
        cidrs = addresses.setdefault(interface["ifname"], [])
        for address in interface.get("addr_info") or []:
            if address.get("family", "inet") == "inet" and address.get("local") is not None:
                cidrs.append("%s/%s" % (address["local"], address.get("prefixlen", 32)))
    return addresses


def build_device_records(
    ibdev2netdev_text: str | None,
    sysfs_devices: list[dict[str, t.Any]],
    ipv4_by_netdev: Mapping[str, list[str]] | None = None,
) -> dict[str, t.Any]:
    """The value of ansible_facts.cx7: {source, devices}, devices sorted by netdev.

    ibdev2netdev_text is the tool's stdout, or None when the tool was not run; then the
    devices come from sysfs_devices (read_sysfs output) alone. Otherwise the tool decides which
    devices exist and sysfs adds link_layer, operstate, mtu, speed and the GID indexes.
    """
    ipv4_by_netdev = ipv4_by_netdev or {}
    sysfs_by_netdev = {device["netdev"]: device for device in sysfs_devices}
    if ibdev2netdev_text is not None:
        source = "ibdev2netdev"
        listed = parse_ibdev2netdev(ibdev2netdev_text)
    else:
        source = "sysfs" if sysfs_devices else "none"
        listed = [{key: device[key] for key in ("rdma_device", "port", "netdev", "state")} for device in sysfs_devices]

    devices = []
    for entry in listed:
        sysfs = sysfs_by_netdev.get(entry["netdev"], {})
        physical_port, twin = gb10_port_and_twin(entry["netdev"])
        record = {
            "rdma_device": entry["rdma_device"],
            "port": entry["port"],
            "netdev": entry["netdev"],
            "state": entry["state"],
            # the -v port state is what the operator saw; sysfs fills in for plain output
            "port_state": entry.get("port_state") or sysfs.get("port_state"),
            "link_layer": sysfs.get("link_layer"),
            "operstate": sysfs.get("operstate"),
            "mtu": sysfs.get("mtu"),
            "ipv4": list(ipv4_by_netdev.get(entry["netdev"], [])),
            "speed_mbps": sysfs.get("speed_mbps"),
            "roce_v2_ipv4_gid_indexes": roce_v2_ipv4_gid_indexes(sysfs.get("gids") or []),
            "physical_port": physical_port,
            "twin": twin,
            "pci_address": entry.get("pci_address") or sysfs.get("pci_address"),
            "description": entry.get("description"),
            "firmware": entry.get("firmware") or sysfs.get("firmware"),
        }
        devices.append(record)
    devices.sort(key=lambda device: (device["netdev"], device["rdma_device"], device["port"]))
    return {"source": source, "devices": devices}
