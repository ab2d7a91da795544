"""Pure logic: node naming, addressing, rate and apt-source parsing, content hashes (the image tags), rendering
of the inventory and ssh files, the state's defaults. No Docker, no root: unit tested by tests/lab/test_labctl_unit.py.
"""

import hashlib
import ipaddress
import json
import math
import os
import re

from .constants import (
    BUILD_FORMAT, CONTAINER_PREFIX, HOST_IF_PREFIX, DEFAULT_MIRROR, DEFAULT_NODES, MAX_NODES, MGMT_FIRST_OFFSET, MGMT_SUBNET,
    FABRIC, MIN_NODES, NODE_DIR, NODE_NAMES, RAIL_ADDRESS_OFFSET, RAIL_SUBNETS, RATE_RE, SERVING_BUILD_FORMAT, SERVING_DIR,
    SERVING_MODEL_NAME, SERVING_MODEL_SHARDS, SERVING_PACKAGES, SERVING_REPO, ENGINE_FORMAT, ENGINE_ROOT,
    SPARK_MEMAVAILABLE_KIB, SPARK_MEMTOTAL_KIB, SPARK_SWAP_KIB, SUITE, LabError,
)


def node_names(count):
    """Node names for a lab of `count` nodes (head first)."""
    if not isinstance(count, int) or isinstance(count, bool) or not MIN_NODES <= count <= MAX_NODES:
        raise LabError("node count must be an integer from %d to %d, got %r" % (MIN_NODES, MAX_NODES, count))
    return list(NODE_NAMES[:count])


def node_index(name):
    if name not in NODE_NAMES:
        raise LabError("unknown node %r; lab nodes are %s" % (name, ", ".join(NODE_NAMES)))
    return NODE_NAMES.index(name)


def short_name(node):
    return node[len("spark-"):] if node.startswith("spark-") else node


def container_name(node):
    return CONTAINER_PREFIX + node


def mgmt_ip(index):
    net = ipaddress.ip_network(MGMT_SUBNET)
    return str(net.network_address + MGMT_FIRST_OFFSET + index)


def rail_address(rail, rank):
    """The address the collection computes for a node (subnet.network + offset + rank)."""
    net = ipaddress.ip_network(RAIL_SUBNETS[rail])
    return str(net.network_address + RAIL_ADDRESS_OFFSET + rank)


def rail_hosts():
    """`NAME:ADDRESS` of every possible node's rail addresses, as IPv4 and as IPv4-mapped IPv6 (docker's --add-host), so
    that a reverse lookup of a rail address is answered from /etc/hosts at once: without them, c10d's lookup of each
    peer's address (its sockets are IPv6, the address v4-mapped) waits 10 s for the lab's DNS (Docker's resolver
    forwarding to the host's) at every engine start. A Spark cluster's own DNS answers it at once too."""
    return ["%s-rail%d:%s%s" % (node, rail, prefix, rail_address(rail, index)) for prefix in ("", "::ffff:")
            for rail in sorted(RAIL_SUBNETS) for index, node in enumerate(NODE_NAMES)]


def host_veth(node, kind):
    """Host-side end of a node's fabric veth, e.g. dsl-alpha-r1 (at most 15 characters)."""
    name = "%s%s-%s" % (HOST_IF_PREFIX, short_name(node), kind)
    if len(name) > 15:
        raise LabError("interface name %s is longer than 15 characters" % name)
    return name


def fabric_mac(node, kind):
    """The node-side MAC of a fabric port: fixed per node and port, like a NIC's burned-in address, so a node
    restart does not leave its peers' ARP caches pointing at a vanished veth."""
    ports = [each[0] for each in FABRIC]
    if kind not in ports:
        raise LabError("unknown fabric port %r; ports are %s" % (kind, ", ".join(ports)))
    # 02: locally administered, unicast; then "ds", the node's index and the port's.
    return "02:64:73:%02x:%02x:01" % (node_index(node), ports.index(kind))


def parse_rail(value):
    text = str(value).strip().lower()
    if text in ("1", "rail1", "r1"):
        return 1
    if text in ("2", "rail2", "r2"):
        return 2
    raise LabError("rail must be 1 or 2 (or rail1/rail2), got %r" % value)


def parse_rate(value):
    """tc rate string or None ('none', '', 'off' -> None)."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("", "none", "off", "0"):
        return None
    if not RATE_RE.match(text):
        raise LabError("rate %r is not a tc rate such as 1gbit, 500mbit, 100mbit (or none)" % value)
    return text


def rate_to_bps(rate):
    match = re.match(r"^(\d+(?:\.\d+)?)(\w+)$", rate)
    number, unit = float(match.group(1)), match.group(2)
    factor = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
              "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}[unit]
    return int(number * factor)


def tbf_args(rate):
    """`tc qdisc replace ... tbf` arguments: burst big enough for the rate at HZ=1000 and for 9000-byte frames."""
    burst = max(rate_to_bps(rate) // 8 // 250, 64 * 1024)
    return ["tbf", "rate", rate, "burst", str(burst), "latency", "50ms"]


def parse_apt_sources(files):
    """The Debian mirror apt uses, from {path: text} of sources.list / *.list / *.sources.

    The first `deb` entry for the main archive (a URI not ending in -security, carrying suite
    bookworm) wins. Returns None if there is none.
    """
    candidates = []
    for path in sorted(files, key=lambda p: (not p.endswith("sources.list"), p)):
        text = files[path]
        if path.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line[:1].isspace():
                        continue
                    key, _sep, val = line.partition(":")
                    fields[key.strip().lower()] = val.strip()
                if fields.get("enabled", "yes").lower() == "no":
                    continue
                if "deb" not in fields.get("types", "").split():
                    continue
                for uri in fields.get("uris", "").split():
                    candidates.append((uri, fields.get("suites", "").split()))
        elif path.endswith(".list"):
            for line in text.splitlines():
                line = line.split("#", 1)[0].strip()
                if not line.startswith("deb "):
                    continue
                line = re.sub(r"\[[^\]]*\]", " ", line[4:])
                parts = line.split()
                if len(parts) >= 2:
                    candidates.append((parts[0], [parts[1]]))
    for uri, suites in candidates:
        if SUITE in suites and "security" not in uri.rstrip("/").rsplit("/", 1)[-1]:
            return uri.rstrip("/")
    return None


def detect_mirror():
    env = os.environ.get("DGXSPARK_LAB_MIRROR")
    if env:
        return env.rstrip("/")
    files = {}
    for path in ["/etc/apt/sources.list"] + sorted(
            os.path.join("/etc/apt/sources.list.d", f) for f in (os.listdir("/etc/apt/sources.list.d")
                                                                 if os.path.isdir("/etc/apt/sources.list.d") else [])):
        if path.endswith((".list", ".sources")) and os.path.isfile(path):
            with open(path) as handle:
                files[path] = handle.read()
    return parse_apt_sources(files) or DEFAULT_MIRROR


def tree_entries(root):
    """[(relative path, executable, bytes)] of every file under root, sorted (symlinks by target)."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if "__pycache__" in rel.split(os.sep) or name.endswith(".pyc"):
                continue
            if os.path.islink(full):
                entries.append((rel, False, ("symlink:" + os.readlink(full)).encode()))
            else:
                with open(full, "rb") as handle:
                    entries.append((rel, os.access(full, os.X_OK), handle.read()))
    return sorted(entries)


def content_hash(parts, length=12):
    """Hex digest over (name, executable, bytes) parts: the image tags."""
    digest = hashlib.sha256()
    for name, executable, data in parts:
        digest.update(name.encode() + b"\0" + (b"x" if executable else b"-") + b"\0")
        digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()[:length]


def base_packages(text):
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def base_hash_parts(mirror, node_dir=NODE_DIR):
    parts = [("format", False, BUILD_FORMAT.encode()), ("mirror", False, mirror.encode()),
             ("suite", False, SUITE.encode())]
    for name in ("packages.txt", "customize.sh"):
        path = os.path.join(node_dir, name)
        with open(path, "rb") as handle:
            parts.append((name, False, handle.read()))
    return parts


def node_hash_parts(base_tag, node_dir=NODE_DIR):
    parts = [("base", False, base_tag.encode())]
    with open(os.path.join(node_dir, "Dockerfile"), "rb") as handle:
        parts.append(("Dockerfile", False, handle.read()))
    parts += [("rootfs/" + rel, x, data) for rel, x, data in tree_entries(os.path.join(node_dir, "rootfs"))]
    return parts


def is_serving_test_path(rel):
    """Test files under lab/serving/ are not image inputs (tests/, test_*.py, *_test.py, caches)."""
    parts = rel.replace(os.sep, "/").split("/")
    name = parts[-1]
    return (any(p in ("tests", "test", "__pycache__", ".pytest_cache") for p in parts[:-1])
            or name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py")


def serving_hash_parts(mirror, serving_dir=SERVING_DIR):
    """Inputs of the serving image: build format, mirror, suite, packages, every file of lab/serving/ but tests and the
    lab's vLLM patches (applied at container start from the inventory, not built in)."""
    parts = [("format", False, SERVING_BUILD_FORMAT.encode()), ("mirror", False, mirror.encode()),
             ("suite", False, SUITE.encode()), ("packages", False, ",".join(SERVING_PACKAGES).encode())]
    parts += [("serving/" + rel, x, data) for rel, x, data in tree_entries(serving_dir)
              if not is_serving_test_path(rel) and not rel.replace(os.sep, "/").startswith("patches/")]
    return parts


def serving_tag(mirror, serving_dir=SERVING_DIR):
    return "%s:%s" % (SERVING_REPO, content_hash(serving_hash_parts(mirror, serving_dir)))


ENGINE_INPUTS = ("engine/requirements.lock", "build-engine.sh")


def engine_hash(serving_dir=SERVING_DIR):
    """Content hash of the lab's vLLM engine: its lock and its build script."""
    parts = [("format", False, ENGINE_FORMAT.encode())]
    for rel in ENGINE_INPUTS:
        with open(os.path.join(serving_dir, rel), "rb") as handle:
            parts.append((rel, False, handle.read()))
    return content_hash(parts)


def engine_dir(serving_dir=SERVING_DIR):
    """Where the engine's virtualenv is, on this host and (mounted) in every node and serving container."""
    return "%s/vllm-%s" % (ENGINE_ROOT, engine_hash(serving_dir))


def serving_model_hash(serving_dir=SERVING_DIR, name=SERVING_MODEL_NAME, shards=SERVING_MODEL_SHARDS):
    """Content hash of the lab's model: its generator, its parameters and the engine whose libraries write it."""
    parts = [("params", False, json.dumps([name, shards]).encode()),
             ("engine", False, engine_hash(serving_dir).encode())]
    with open(os.path.join(serving_dir, "make_lab_model.py"), "rb") as handle:
        parts.append(("make_lab_model.py", False, handle.read()))
    return content_hash(parts)


def render_hosts_yml(count, header=None):
    """inventories/lab/hosts.yml for `count` nodes: head spark-alpha, workers the rest."""
    names = node_names(count)
    lines = []
    lines.append("---")
    lines.append(header or ("# Virtual Spark lab, %d nodes (generated by lab/labctl.py; `labctl.py inventory --nodes %d`)."
                            % (count, count)))
    lines.append("# ansible_host is the node's management address on the lab's internal Docker network.")
    lines.append("all:")
    lines.append("  children:")
    lines.append("    head:")
    lines.append("      hosts:")
    lines.append("        %s:" % names[0])
    lines.append("          ansible_host: %s" % mgmt_ip(0))
    lines.append("    workers:")
    if count > 1:
        lines.append("      hosts:")
        for i, name in enumerate(names[1:], start=1):
            lines.append("        %s:" % name)
            lines.append("          ansible_host: %s" % mgmt_ip(i))
    return "\n".join(lines) + "\n"


def render_group_vars(template_text, state_dir_expr, model_profile=None, site_patches_dir=None):
    """The live inventory's group_vars/all.yml: the static one with the state-dir line (and profile, and the lab
    patches' directory, which the static one finds next to itself) replaced."""
    # The key's line and its indented continuation lines (a folded scalar) are replaced as one.
    out = re.sub(r"(?m)^dgxspark_lab_state_dir:.*(?:\n[ \t]+\S.*)*$",
                 lambda _match: "dgxspark_lab_state_dir: %s" % json.dumps(state_dir_expr), template_text)
    if model_profile:
        out = re.sub(r"(?m)^dgxspark_model_profile:.*$", "dgxspark_model_profile: %s" % model_profile, out)
    if site_patches_dir:
        out = re.sub(r"(?m)^dgxspark_site_patches_dir:.*(?:\n[ \t]+\S.*)*$",
                     lambda _match: "dgxspark_site_patches_dir: %s" % json.dumps(site_patches_dir), out)
    return out


def render_ssh_config(count, state_dir):
    ssh_dir = os.path.join(state_dir, "ssh")
    blocks = ["# Virtual Spark lab: ssh -F %s spark-alpha   (generated by lab/labctl.py)" % os.path.join(ssh_dir, "config")]
    for i, name in enumerate(node_names(count)):
        blocks.append("\n".join([
            "Host %s %s" % (name, mgmt_ip(i)),
            "    HostName %s" % mgmt_ip(i),
            "    User root",
            "    IdentityFile %s" % os.path.join(ssh_dir, "id_ed25519"),
            "    IdentitiesOnly yes",
            "    UserKnownHostsFile %s" % os.path.join(ssh_dir, "known_hosts"),
            "    StrictHostKeyChecking yes",
            "    ConnectTimeout 10",
            "    LogLevel ERROR",
        ]))
    return "\n\n".join(blocks) + "\n"


def render_known_hosts(entries):
    """entries: [(node, ip, 'ssh-ed25519 AAAA...')] -> known_hosts text (name and address per line)."""
    lines = []
    for node, ip, pubkey in entries:
        key = " ".join(pubkey.split()[:2])
        lines.append("%s,%s %s" % (node, ip, key))
    return "\n".join(lines) + "\n"


def default_state(count=DEFAULT_NODES, rate=None):
    return {"nodes": count, "rate": rate, "faults": {}}


def node_faults(state, node):
    faults = state.setdefault("faults", {}).setdefault(node, {})
    faults.setdefault("rail1", "up")
    faults.setdefault("rail2", "up")
    faults.setdefault("detached", False)
    return faults


# ----------------------------------------------------------------------------- the meminfo stand-in

def parse_gib(value, what, allow_zero=False):
    """A size in GiB (decimal allowed) -> KiB (int); LabError unless a finite number > 0 (>= 0 with allow_zero)."""
    try:
        number = float(str(value).strip())
    except ValueError:
        number = float("nan")
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise LabError("%s must be a number of GiB %s, got %r" % (what, "of 0 or more" if allow_zero else "above 0",
                                                                  value))
    kib = int(round(number * 1024 * 1024))
    if kib == 0 and not allow_zero:
        raise LabError("%s must be at least 1 KiB, got %r GiB" % (what, value))
    return kib


def memory_kib(total_gib=None, available_gib=None, swap_gib=None, reset=False):
    """`labctl.py memory` arguments -> (total, available, swap) in KiB, defaults filled in.

    Defaults: a Spark's MemTotal (121.7 GiB), 117 GiB available, no swap. With only --total-gib given, the
    available memory keeps a Spark's share of the total (about 96 %).
    """
    given = [v for v in (total_gib, available_gib, swap_gib) if v is not None]
    if reset and given:
        raise LabError("--reset writes the defaults; give it alone (not with --total-gib/--available-gib/--swap-gib)")
    total = parse_gib(total_gib, "--total-gib") if total_gib is not None else SPARK_MEMTOTAL_KIB
    if available_gib is not None:
        available = parse_gib(available_gib, "--available-gib")
    elif total_gib is not None:
        available = total * SPARK_MEMAVAILABLE_KIB // SPARK_MEMTOTAL_KIB or 1
    else:
        available = SPARK_MEMAVAILABLE_KIB
    swap = parse_gib(swap_gib, "--swap-gib", allow_zero=True) if swap_gib is not None else SPARK_SWAP_KIB
    if available > total:
        raise LabError("available memory (%d kB) cannot exceed the total (%d kB)" % (available, total))
    return total, available, swap


def render_meminfo(total_kib, available_kib, swap_kib):
    """A /proc/meminfo with these figures, in the kernel's format: `Name:` padded to 16 columns, the number
    right-aligned in 8 (wider numbers push on), ` kB`. Free, buffers and cache add up to the available memory.
    """
    for name, value in (("total", total_kib), ("available", available_kib), ("swap", swap_kib)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LabError("meminfo %s must be a whole number of KiB >= 0, got %r" % (name, value))
    if available_kib > total_kib:
        raise LabError("meminfo available (%d) exceeds total (%d)" % (available_kib, total_kib))
    buffers = available_kib // 256
    cached = available_kib // 16
    free = available_kib - buffers - cached
    rows = (("MemTotal", total_kib), ("MemFree", free), ("MemAvailable", available_kib), ("Buffers", buffers),
            ("Cached", cached), ("SwapCached", 0), ("Active", total_kib - free - buffers - cached // 2),
            ("Inactive", cached // 2), ("SwapTotal", swap_kib), ("SwapFree", swap_kib), ("Dirty", 0),
            ("Writeback", 0))
    return "".join("%-16s%8d kB\n" % (name + ":", value) for name, value in rows)
