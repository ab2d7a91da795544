# LAB STAND-IN -- virtual Spark lab only. Never installed on a real DGX Spark.
#
# Generators behind the lab's hardware stand-ins: `ibdev2netdev`, the sysfs-shaped RDMA tree that
# `dgxspark-lab-sysfs` writes for the collection's cx7_facts module (option sysfs_root), and
# `nvidia-smi`. Every output is generated from the node's *live* CX-7-named interfaces (operstate,
# addresses, IPv6 setting), never canned text. The pure functions take plain dicts so the lab's unit
# tests (tests/lab/test_labctl_unit.py) can feed them fake interface states.
"""LAB STAND-IN generators for ibdev2netdev, the RDMA sysfs tree and nvidia-smi."""

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time

# GB10's ConnectX-7: two physical ports, each two PCIe x4 "twins" -> four netdevs, four RoCE devices.
# (rdma device, netdev, PCI address, physical port)
CX7_PORTS = (
    ("rocep1s0f0", "enp1s0f0np0", "0000:01:00.0", 0),
    ("rocep1s0f1", "enp1s0f1np1", "0000:01:00.1", 1),
    ("roceP2p1s0f0", "enP2p1s0f0np0", "0002:01:00.0", 0),
    ("roceP2p1s0f1", "enP2p1s0f1np1", "0002:01:00.1", 1),
)
HCA_TYPE = "MT4129"
HCA_DESC = "NVIDIA ConnectX-7 integrated in DGX Spark GB10 [LAB STAND-IN]"
BOARD_ID = "NVD0000000087"
FW_VERSION = "28.45.1020"

SYSFS_ROOT = "/run/dgxspark-lab/sysfs"
DRIVER_VERSION_FILE = "/etc/dgxspark-lab/driver-version"
GPU_MEMORY_FILE = "/etc/dgxspark-lab/gpu-memory-total-mib"
# `labctl gpu NODE --load PERCENT --sm-mhz MHZ`: a busy GPU's utilisation and SM clock (a GB10 stuck at low clocks).
GPU_LOAD_FILE = "/etc/dgxspark-lab/gpu-load"
# `nvidia-smi -lgc MIN,MAX`: the locked range, gone at the next boot as on a Spark (/run is a tmpfs).
GPU_CLOCK_LOCK_FILE = "/run/dgxspark-lab/gpu-clock-lock"
DEFAULT_DRIVER_VERSION = "580.95.05"
# MemTotal of a Spark is about 121.7 GiB; GB10's GPU addresses the unified memory.
DEFAULT_GPU_MEMORY_MIB = 124620


# --------------------------------------------------------------------------- interface state

def read_netdev_state(netdev, sys_class_net="/sys/class/net", proc_ipv6="/proc/sys/net/ipv6/conf"):
    """Live state of one netdev as a plain dict (None if the netdev does not exist)."""
    base = os.path.join(sys_class_net, netdev)
    if not os.path.exists(base):
        return None

    def _read(name, default=None):
        try:
            with open(os.path.join(base, name)) as handle:
                return handle.read().strip()
        except OSError:
            return default

    try:
        with open(os.path.join(proc_ipv6, netdev, "disable_ipv6")) as handle:
            ipv6_enabled = handle.read().strip() == "0"
    except OSError:
        ipv6_enabled = False
    ipv4, ipv6 = [], []
    try:
        out = subprocess.run(["ip", "-j", "addr", "show", "dev", netdev], check=True,
                             capture_output=True, text=True).stdout
        for link in json.loads(out or "[]"):
            for addr in link.get("addr_info", []):
                cidr = "%s/%s" % (addr["local"], addr["prefixlen"])
                if addr.get("family") == "inet":
                    ipv4.append(cidr)
                elif addr.get("family") == "inet6":
                    ipv6.append({"cidr": cidr, "scope": addr.get("scope", "global")})
    except (OSError, subprocess.CalledProcessError, ValueError):
        pass
    mtu = _read("mtu")
    speed = _read("speed")
    # "IPv6 on" = IPv6 enabled on the netdev *and* a link-local address present (netplan's
    # `link-local: []` or disable_ipv6=1 turn it off): then the default fe80 GIDs exist.
    ipv6_enabled = ipv6_enabled and any(a["scope"] == "link" for a in ipv6)
    return {
        "netdev": netdev,
        "operstate": _read("operstate", "unknown"),
        "mac": _read("address", "00:00:00:00:00:00"),
        "mtu": int(mtu) if mtu and mtu.isdigit() else None,
        "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None,
        "ipv4": ipv4,
        "ipv6": ipv6,
        "ipv6_enabled": ipv6_enabled,
    }


def read_all_states():
    """{netdev: state-or-None} for the four CX-7 netdevs."""
    return {netdev: read_netdev_state(netdev) for _dev, netdev, _pci, _port in CX7_PORTS}


# --------------------------------------------------------------------------- ibdev2netdev

def link_word(state):
    """ibdev2netdev's right-hand state: (Up) only when operstate is up."""
    return "Up" if state and state.get("operstate") == "up" else "Down"


def port_state(state):
    """RDMA port state (number, name) as mlx5 reports it for a RoCE port."""
    if state and state.get("operstate") == "up":
        return 4, "ACTIVE"
    return 1, "DOWN"


def phys_state(state):
    if state and state.get("operstate") == "up":
        return "5: LinkUp"
    return "3: Disabled"


def render_ibdev2netdev(states, verbose=False):
    """Lines exactly like Mellanox/NVIDIA `ibdev2netdev` [-v] prints them."""
    lines = []
    for dev, netdev, pci, _phys in CX7_PORTS:
        state = states.get(netdev)
        if state is None:
            continue  # no netdev -> the RoCE device does not exist either
        if verbose:
            _num, name = port_state(state)
            lines.append("%s %s (%s - %s) fw %s port 1 (%-6s) ==> %s (%s)" % (
                pci, dev, HCA_TYPE, HCA_DESC, FW_VERSION, name, netdev, link_word(state)))
        else:
            lines.append("%s port 1 ==> %s (%s)" % (dev, netdev, link_word(state)))
    return lines


# --------------------------------------------------------------------------- GID table

def format_gid(raw):
    """16 bytes -> 'xxxx:xxxx:...' (8 groups of 4 hex digits, as sysfs prints GIDs)."""
    hexs = raw.hex()
    return ":".join(hexs[i:i + 4] for i in range(0, 32, 4))


ZERO_GID = format_gid(bytes(16))


def default_gid(mac):
    """fe80::/64 GID from the MAC (modified EUI-64), as the kernel builds the default RoCE GID."""
    octets = bytearray(int(x, 16) for x in mac.split(":"))
    octets[0] ^= 0x02
    eui = bytes(octets[:3]) + b"\xff\xfe" + bytes(octets[3:])
    return format_gid(b"\xfe\x80" + bytes(6) + eui)


def ipv4_mapped_gid(addr):
    return format_gid(ipaddress.IPv6Address("::ffff:" + str(ipaddress.IPv4Interface(addr).ip)).packed)


def ipv6_gid(addr):
    return format_gid(ipaddress.IPv6Interface(addr).ip.packed)


def gid_table(state):
    """[(index, gid, type-or-None)] for one RoCE port, in the kernel's order.

    Indexes 0/1 are the default (fe80, MAC-derived) GIDs, RoCE v1 then v2; they are filled only while
    IPv6 is on for the netdev (state["ipv6_enabled"]; empty -- zero GID, no type -- otherwise). Every IPv4 address then
    adds an IPv4-mapped pair ("IB/RoCE v1", "RoCE v2"), then every non-link-local IPv6 address.
    This is why a pinned NCCL_IB_GID_INDEX drifts when addresses change.
    """
    table = []
    if state.get("ipv6_enabled"):
        gid = default_gid(state.get("mac", "00:00:00:00:00:00"))
        table += [(0, gid, "IB/RoCE v1"), (1, gid, "RoCE v2")]
    else:
        table += [(0, ZERO_GID, None), (1, ZERO_GID, None)]
    index = 2
    entries = [ipv4_mapped_gid(a) for a in state.get("ipv4", [])]
    if state.get("ipv6_enabled"):
        entries += [ipv6_gid(a["cidr"]) for a in state.get("ipv6", []) if a.get("scope") != "link"]
    for gid in entries:
        table.append((index, gid, "IB/RoCE v1"))
        table.append((index + 1, gid, "RoCE v2"))
        index += 2
    return table


# --------------------------------------------------------------------------- sysfs tree

def sysfs_files(states, real_sys_class_net="/sys/class/net"):
    """The tree as {relative path: content} plus {relative path: symlink target}."""
    files, links = {}, {}
    for dev, netdev, pci, _phys in CX7_PORTS:
        state = states.get(netdev)
        if state is None:
            continue
        base = "class/infiniband/%s" % dev
        num, name = port_state(state)
        speed = state.get("speed_mbps")
        files[base + "/node_type"] = "1: CA"
        files[base + "/hca_type"] = HCA_TYPE
        files[base + "/board_id"] = BOARD_ID
        files[base + "/fw_ver"] = FW_VERSION
        files[base + "/node_desc"] = "%s %s" % (os.uname().nodename, dev)
        files[base + "/device/pci_address"] = pci
        files[base + "/device/vendor"] = "0x15b3"
        files[base + "/device/device"] = "0x1021"
        links[base + "/device/net/" + netdev] = os.path.join(real_sys_class_net, netdev)
        port = base + "/ports/1"
        files[port + "/state"] = "%d: %s" % (num, name)
        files[port + "/phys_state"] = phys_state(state)
        files[port + "/link_layer"] = "Ethernet"
        files[port + "/rate"] = "%d Gb/sec (1X)" % (speed // 1000) if speed else "10 Gb/sec (1X)"
        for index, gid, gtype in gid_table(state):
            files["%s/gids/%d" % (port, index)] = gid
            if gtype is not None:
                files["%s/gid_attrs/types/%d" % (port, index)] = gtype
                files["%s/gid_attrs/ndevs/%d" % (port, index)] = netdev
        links["class/net/" + netdev] = os.path.join(real_sys_class_net, netdev)
    return files, links


def write_sysfs_tree(states, root=SYSFS_ROOT, real_sys_class_net="/sys/class/net"):
    """Write the tree under a fresh directory, then atomically point `root` (a symlink) at it."""
    files, links = sysfs_files(states, real_sys_class_net)
    parent = os.path.dirname(root.rstrip("/")) or "/"
    os.makedirs(parent, exist_ok=True)
    gen = "%s.%d.%d" % (root.rstrip("/"), os.getpid(), time.monotonic_ns())
    for rel, content in files.items():
        path = os.path.join(gen, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(content + "\n")
    for rel, target in links.items():
        path = os.path.join(gen, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(target, path)
    os.makedirs(os.path.join(gen, "class", "infiniband"), exist_ok=True)
    old = os.path.realpath(root) if os.path.islink(root) else None
    if os.path.isdir(root) and not os.path.islink(root):
        shutil.rmtree(root)
    tmp_link = gen + ".link"
    os.symlink(os.path.basename(gen), tmp_link)
    os.replace(tmp_link, root)
    if old and old != os.path.realpath(root) and os.path.isdir(old):
        shutil.rmtree(old, ignore_errors=True)
    # Remove generations left behind by interrupted runs.
    prefix = os.path.basename(root.rstrip("/")) + "."
    current = os.path.basename(os.path.realpath(root))
    for entry in os.listdir(parent):
        if entry.startswith(prefix) and entry != current and not entry.endswith(".link"):
            full = os.path.join(parent, entry)
            try:
                age = time.time() - os.lstat(full).st_mtime
            except OSError:
                continue
            if age > 10:
                shutil.rmtree(full, ignore_errors=True)
    return root


def regenerate_sysfs(root=SYSFS_ROOT):
    try:
        write_sysfs_tree(read_all_states(), root)
    except OSError as exc:  # a stand-in must never break the tool that called it
        sys.stderr.write("dgxspark-lab-sysfs: could not write %s: %s\n" % (root, exc))


def watch(root=SYSFS_ROOT):
    """Regenerate on every link/address change (`ip monitor`), debounced."""
    regenerate_sysfs(root)
    while True:
        proc = subprocess.Popen(["ip", "-o", "monitor", "link", "address"], stdout=subprocess.PIPE, text=True)
        for _line in proc.stdout:
            time.sleep(0.05)
            regenerate_sysfs(root)
        proc.wait()
        time.sleep(1)


# --------------------------------------------------------------------------- nvidia-smi

NVSMI_FIELDS = {
    # field: (header, unit)
    "name": ("name", None),
    "gpu_name": ("name", None),
    "driver_version": ("driver_version", None),
    "memory.total": ("memory.total [MiB]", "MiB"),
    "memory.used": ("memory.used [MiB]", "MiB"),
    "memory.free": ("memory.free [MiB]", "MiB"),
    "count": ("count", None),
    "index": ("index", None),
    "uuid": ("uuid", None),
    "gpu_uuid": ("uuid", None),
    "pci.bus_id": ("pci.bus_id", None),
    "compute_cap": ("compute_cap", None),
    "temperature.gpu": ("temperature.gpu", None),
    "utilization.gpu": ("utilization.gpu [%]", "%"),
    "power.draw": ("power.draw [W]", "W"),
    "clocks.sm": ("clocks.current.sm [MHz]", "MHz"),
    "clocks.current.sm": ("clocks.current.sm [MHz]", "MHz"),
    "clocks.mem": ("clocks.current.memory [MHz]", "MHz"),
    "clocks.current.memory": ("clocks.current.memory [MHz]", "MHz"),
    "clocks.max.sm": ("clocks.max.sm [MHz]", "MHz"),
    "clocks.max.mem": ("clocks.max.memory [MHz]", "MHz"),
    "persistence_mode": ("persistence_mode", None),
}


def cuda_version_for(driver):
    major = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else 580
    return "13.0" if major >= 580 else ("12.9" if major >= 575 else "12.8")


def gpu_info(driver_version=DEFAULT_DRIVER_VERSION, memory_total_mib=DEFAULT_GPU_MEMORY_MIB, memory_used_mib=0,
             hostname="spark"):
    import hashlib
    digest = hashlib.sha1(hostname.encode()).hexdigest()
    uuid = "GPU-%s-%s-%s-%s-%s" % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])
    return {
        "name": "NVIDIA GB10",
        "gpu_name": "NVIDIA GB10",
        "driver_version": driver_version,
        "memory.total": memory_total_mib,
        "memory.used": memory_used_mib,
        "memory.free": memory_total_mib - memory_used_mib,
        "count": 1,
        "index": 0,
        "uuid": uuid,
        "gpu_uuid": uuid,
        "pci.bus_id": "0000000F:01:00.0",
        "compute_cap": "12.1",
        "temperature.gpu": 38,
        "utilization.gpu": 0,
        "power.draw": "4.65",
        # An idle GB10's clocks (the stand-in never gets busy); the maximum is what the GPU clock alert compares with.
        "clocks.sm": 850,
        "clocks.current.sm": 850,
        "clocks.mem": 4266,
        "clocks.current.memory": 4266,
        "clocks.max.sm": 3003,
        "clocks.max.mem": 4266,
        "persistence_mode": "Enabled",
    }


class NvsmiUsageError(ValueError):
    pass


def render_query(info, query, fmt):
    """--query-gpu=a,b --format=csv[,noheader][,nounits] -> lines."""
    fields = [f.strip() for f in query.split(",") if f.strip()]
    opts = [o.strip() for o in fmt.split(",") if o.strip()]
    if "csv" not in opts:
        raise NvsmiUsageError("Only CSV format is supported by the lab stand-in (got --format=%s)" % fmt)
    for field in fields:
        if field not in NVSMI_FIELDS:
            raise NvsmiUsageError('Field "%s" is not a valid field to query.' % field)
    lines = []
    if "noheader" not in opts:
        lines.append(", ".join(NVSMI_FIELDS[f][0] if "nounits" not in opts else NVSMI_FIELDS[f][0].split(" [")[0]
                               for f in fields))
    values = []
    for field in fields:
        value = str(info[field])
        unit = NVSMI_FIELDS[field][1]
        if unit and "nounits" not in opts:
            value = "%s %s" % (value, unit)
        values.append(value)
    lines.append(", ".join(values))
    return lines


def render_plain(info, date=None):
    date = date or time.strftime("%a %b %d %H:%M:%S %Y")
    mem = "%5dMiB / %5dMiB" % (info["memory.used"], info["memory.total"])
    cuda = cuda_version_for(info["driver_version"])
    return [
        date,
        "+-----------------------------------------------------------------------------------------+",
        "| NVIDIA-SMI %-10s             Driver Version: %-10s     CUDA Version: %-5s    |" % (
            info["driver_version"], info["driver_version"], cuda),
        "+-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
        "|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |",
        "| N/A   %2dC    P8              4W /  N/A  | %22s |      0%%      Default |" % (
            info["temperature.gpu"], mem),
        "|                                         |                        |                  N/A |",
        "+-----------------------------------------+------------------------+----------------------+",
        "",
        "+-----------------------------------------------------------------------------------------+",
        "| Processes:                                                                              |",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
        "|  No running processes found                                                             |",
        "+-----------------------------------------------------------------------------------------+",
        "[LAB STAND-IN: virtual Spark lab, no GPU present]",
    ]


def read_local_gpu_info():
    def _read(path, default):
        try:
            with open(path) as handle:
                value = handle.read().strip()
                return value or default
        except OSError:
            return default
    driver = _read(DRIVER_VERSION_FILE, DEFAULT_DRIVER_VERSION)
    total = _read(GPU_MEMORY_FILE, str(DEFAULT_GPU_MEMORY_MIB))
    info = gpu_info(driver, int(total) if total.isdigit() else DEFAULT_GPU_MEMORY_MIB, 0, os.uname().nodename)
    return apply_load_and_lock(info, _read(GPU_LOAD_FILE, ""), _read(GPU_CLOCK_LOCK_FILE, ""))


def apply_load_and_lock(info, load, lock):
    """The staged load ('PERCENT MHZ') and the locked clock range ('MIN,MAX'), as the GPU would report them: a lock
    holds the SM clock inside its range."""
    fields = load.split()
    if len(fields) == 2 and all(f.isdigit() for f in fields):
        info["utilization.gpu"], info["clocks.sm"] = int(fields[0]), int(fields[1])
    bounds = lock.split(",")
    if len(bounds) == 2 and all(b.isdigit() for b in bounds):
        info["clocks.sm"] = min(max(info["clocks.sm"], int(bounds[0])), int(bounds[1]))
    info["clocks.current.sm"] = info["clocks.sm"]
    return info


def lock_gpu_clocks(value, info, out, lock_file=GPU_CLOCK_LOCK_FILE):
    """-lgc MIN,MAX: keep the range for the queries; nvidia-smi's own answer."""
    bounds = value.split(",")
    if len(bounds) != 2 or not all(b.isdigit() for b in bounds) or int(bounds[0]) > int(bounds[1]):
        out.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
        return 2
    os.makedirs(os.path.dirname(lock_file), exist_ok=True)
    with open(lock_file, "w") as handle:
        handle.write("%d,%d\n" % (int(bounds[0]), int(bounds[1])))
    out.write('GPU clocks set to "(gpuClkMin %d, gpuClkMax %d)" for GPU %s\nAll done.\n' % (
        int(bounds[0]), int(bounds[1]), info["pci.bus_id"]))
    return 0


def reset_gpu_clocks(info, out, lock_file=GPU_CLOCK_LOCK_FILE):
    if os.path.exists(lock_file):
        os.remove(lock_file)
    out.write("All done.\n")
    return 0


def nvidia_smi_main(argv, info=None, out=sys.stdout):
    """Subset of nvidia-smi's CLI. Returns the exit status."""
    info = info or read_local_gpu_info()
    query, fmt = None, None
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--query-gpu="):
            query = arg.split("=", 1)[1]
        elif arg == "--query-gpu" and i + 1 < len(args):
            i += 1
            query = args[i]
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
        elif arg == "--format" and i + 1 < len(args):
            i += 1
            fmt = args[i]
        elif arg in ("-L", "--list-gpus"):
            out.write("GPU 0: %s (UUID: %s)\n" % (info["name"], info["uuid"]))
            return 0
        elif arg in ("-h", "--help"):
            out.write("nvidia-smi LAB STAND-IN: supports no arguments, -L, --query-gpu=... --format=csv[,noheader][,nounits], "
                      "-lgc MIN,MAX, -rgc\n")
            return 0
        elif arg in ("-i", "--id") and i + 1 < len(args):
            i += 1
            if args[i] not in ("0", info["uuid"], info["pci.bus_id"]):
                out.write("No devices were found\n")
                return 6
        elif arg.startswith("--id="):
            pass
        elif arg in ("-lgc", "--lock-gpu-clocks") and i + 1 < len(args):
            return lock_gpu_clocks(args[i + 1], info, out)
        elif arg.startswith("--lock-gpu-clocks="):
            return lock_gpu_clocks(arg.split("=", 1)[1], info, out)
        elif arg in ("-rgc", "--reset-gpu-clocks"):
            return reset_gpu_clocks(info, out)
        else:
            out.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
            return 2
        i += 1
    if query is not None:
        try:
            lines = render_query(info, query, fmt or "csv")
        except NvsmiUsageError as exc:
            out.write("%s\n" % exc)
            return 2
    else:
        lines = render_plain(info)
    out.write("\n".join(lines) + "\n")
    return 0
