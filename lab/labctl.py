#!/usr/bin/env python
"""labctl: the virtual DGX Spark lab of dgxspark.cluster.

    labctl.py up [--nodes N] [--rate 1gbit|none] [--model-profile NAME] [--serving]
                                                 build (if needed) and start N nodes (2..8); --serving: see `serving`
    labctl.py down [--purge]                     remove nodes, fabric, network (--purge: images, state too)
    labctl.py status [--json]
    labctl.py rail NODE RAIL down|up             pull / plug a rail's cable (RAIL: 1, 2, rail1, rail2)
    labctl.py detach NODE | attach NODE          take a node's rails off the fabric switch / put them back
    labctl.py restart NODE                       restart a node (fabric re-plumbed, faults re-applied)
    labctl.py reset NODE...                      recreate nodes from the image (undo changes made inside them)
    labctl.py driver NODE VERSION                driver version the node's nvidia-smi stand-in reports
    labctl.py load-image IMAGE [NODE...]         copy a host image into the nodes' Docker (docker save | load)
    labctl.py serving [NODE...]                  build the serving image (if needed), load it + the lab model dir into nodes
    labctl.py build                              build the node image only
    labctl.py inventory [--nodes N]              print the hosts.yml for N nodes

See lab/README.md. Needs root and Docker (lab/ensure-docker.sh installs and starts it).
The pure functions at the top (naming, addressing, rendering, hashing) are unit tested without Docker.
"""

import argparse
import contextlib
import fcntl
import hashlib
import io
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time

LAB_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(LAB_DIR)
NODE_DIR = os.path.join(LAB_DIR, "node")
SERVING_DIR = os.path.join(LAB_DIR, "serving")
STATE_DIR = os.environ.get("DGXSPARK_LAB_STATE", os.path.join(LAB_DIR, "state"))
CACHE_DIR = os.environ.get("DGXSPARK_LAB_CACHE", os.path.join(REPO_DIR, ".cache", "lab"))
STATIC_INVENTORY_DIR = os.path.join(REPO_DIR, "inventories", "lab")

NODE_NAMES = ("spark-alpha", "spark-beta", "spark-gamma", "spark-delta",
              "spark-epsilon", "spark-zeta", "spark-eta", "spark-theta")
MIN_NODES, MAX_NODES, DEFAULT_NODES = 2, 8, 4

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_REPO = "dgxspark-lab/node-base"
NODE_REPO = "dgxspark-lab/node"
BUILD_FORMAT = "2"  # bump to force a rebuild when the build procedure itself changes

# Serving image (LAB STAND-IN for vLLM on real Ray, lab/serving/README.md): its own debootstrap rootfs.
SERVING_REPO = "dgxspark-lab/serving"
SERVING_BUILD_FORMAT = "3"
SERVING_PACKAGES = ("python3", "python3-venv", "iproute2", "procps", "ca-certificates", "python-is-python3")
SERVING_MODELS_DIR = "/var/lib/dgxspark-lab/models"  # in each node; containers mount it (e.g. at /models)
SERVING_MODEL_NAME = "qwen3-standin"
SERVING_MODEL_SHARDS, SERVING_MODEL_SHARD_MIB = 4, 1.0
SERVING_MODEL_MARKER = ".dgxspark-lab-model"  # holds the model's content hash

LABEL = "dgxspark.lab"
CONTAINER_PREFIX = "dgxspark-lab-"
MGMT_NETWORK = "dgxspark-lab-mgmt"
MGMT_SUBNET = "172.31.240.0/24"
MGMT_GATEWAY = "172.31.240.1"
MGMT_FIRST_OFFSET = 10  # spark-alpha = .10, spark-beta = .11, ...

# The fabric: two isolated Linux bridges, one per rail; per node four veths named like GB10's CX-7.
# (kind, node-side netdev, rail number or None for the unplugged port-0 twins)
FABRIC = (
    ("r1", "enp1s0f1np1", 1),
    ("r2", "enP2p1s0f1np1", 2),
    ("p0a", "enp1s0f0np0", None),
    ("p0b", "enP2p1s0f0np0", None),
)
BRIDGES = {1: "dsl-rail1", 2: "dsl-rail2"}
RAIL_SUBNETS = {1: "192.168.100.0/24", 2: "192.168.101.0/24"}
RAIL_ADDRESS_OFFSET = 10
HOST_MTU = 9000
NODE_START_MTU = 1500

CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", "NET_RAW", "MKNOD", "SYS_PTRACE", "IPC_LOCK", "SYS_CHROOT",
                "SETFCAP", "AUDIT_WRITE", "AUDIT_CONTROL", "SYS_NICE", "CHOWN", "DAC_OVERRIDE", "FOWNER",
                "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE", "IPC_OWNER",
                "DAC_READ_SEARCH", "LEASE")
# Not granted: SYS_TIME (the host clock), SYS_MODULE, SYS_RAWIO, SYS_BOOT, SYSLOG, MAC_*; never --privileged
# (and --cap-add ALL fails here: CAP_SYS_RESOURCE is not in the bounding set).

DRIVER_RE = re.compile(r"^\d{3}\.\d{1,3}(\.\d{1,3})?$")
RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$")


class LabError(Exception):
    """An error with a message that says what to do."""


# =========================================================================== pure logic

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


def host_veth(node, kind):
    """Host-side end of a node's fabric veth, e.g. dsl-alpha-r1 (at most 15 characters)."""
    name = "dsl-%s-%s" % (short_name(node), kind)
    if len(name) > 15:
        raise LabError("interface name %s is longer than 15 characters" % name)
    return name


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
    """Inputs of the serving image: build format, mirror, suite, packages, every file of lab/serving/ but tests."""
    parts = [("format", False, SERVING_BUILD_FORMAT.encode()), ("mirror", False, mirror.encode()),
             ("suite", False, SUITE.encode()), ("packages", False, ",".join(SERVING_PACKAGES).encode())]
    parts += [("serving/" + rel, x, data) for rel, x, data in tree_entries(serving_dir)
              if not is_serving_test_path(rel)]
    return parts


def serving_tag(mirror, serving_dir=SERVING_DIR):
    return "%s:%s" % (SERVING_REPO, content_hash(serving_hash_parts(mirror, serving_dir)))


def serving_model_hash(serving_dir=SERVING_DIR, name=SERVING_MODEL_NAME, shards=SERVING_MODEL_SHARDS,
                       shard_mib=SERVING_MODEL_SHARD_MIB):
    """Content hash of the lab-made model directory: its generator, the safetensors writer, the parameters."""
    parts = [("params", False, json.dumps([name, shards, shard_mib]).encode())]
    for rel in ("make_model_dir.py", os.path.join("dgxspark_vllm_standin", "safetensors_io.py")):
        with open(os.path.join(serving_dir, rel), "rb") as handle:
            parts.append((rel, False, handle.read()))
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


def render_group_vars(template_text, state_dir_expr, model_profile=None):
    """The live inventory's group_vars/all.yml: the static one with the state-dir line (and profile) replaced."""
    # The key's line and its indented continuation lines (a folded scalar) are replaced as one.
    out = re.sub(r"(?m)^dgxspark_lab_state_dir:.*(?:\n[ \t]+\S.*)*$",
                 lambda _match: "dgxspark_lab_state_dir: %s" % json.dumps(state_dir_expr), template_text)
    if model_profile:
        out = re.sub(r"(?m)^dgxspark_model_profile:.*$", "dgxspark_model_profile: %s" % model_profile, out)
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


# =========================================================================== host side helpers

def log(msg):
    sys.stderr.write("[labctl %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def run(cmd, check=True, input_data=None, timeout=None):
    proc = subprocess.run(cmd, input=input_data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                          check=False)
    if check and proc.returncode != 0:
        raise LabError("command failed (%d): %s\n%s" % (
            proc.returncode, " ".join(cmd), proc.stderr.decode(errors="replace").strip()))
    return proc


def docker_bin():
    return "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else (shutil.which("docker") or "docker")


def docker(*args, check=True, input_data=None, timeout=None):
    return run([docker_bin()] + list(args), check=check, input_data=input_data, timeout=timeout)


def out(proc):
    return proc.stdout.decode(errors="replace").strip()


def ip_cmd(*args, check=True):
    return run(["ip"] + list(args), check=check)


def link_exists(name):
    return os.path.exists("/sys/class/net/%s" % name)


def ensure_docker():
    script = os.path.join(LAB_DIR, "ensure-docker.sh")
    proc = subprocess.run(["bash", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise LabError("lab/ensure-docker.sh failed:\n" + proc.stdout.decode(errors="replace"))


def docker_available():
    return os.path.exists("/var/run/docker.sock") and docker("info", check=False, timeout=20).returncode == 0


@contextlib.contextmanager
def state_lock():
    os.makedirs(STATE_DIR, exist_ok=True)
    with open(os.path.join(STATE_DIR, ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def state_path():
    return os.path.join(STATE_DIR, "lab.json")


def load_state():
    try:
        with open(state_path()) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def save_state(state):
    os.makedirs(STATE_DIR, exist_ok=True)
    tmp = state_path() + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, state_path())


def write_file(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


# =========================================================================== images

def image_exists(tag):
    return docker("image", "inspect", tag, check=False).returncode == 0


def image_tags():
    mirror = detect_mirror()
    base = "%s:%s" % (BASE_REPO, content_hash(base_hash_parts(mirror)))
    node = "%s:%s" % (NODE_REPO, content_hash(node_hash_parts(base)))
    return mirror, base, node


def build_base(mirror, tag):
    with open(os.path.join(NODE_DIR, "packages.txt")) as handle:
        packages = base_packages(handle.read())
    rootfs = os.path.join(CACHE_DIR, "rootfs-" + tag.split(":")[1])
    started = time.time()
    log("debootstrap %s from %s (cache %s)" % (SUITE, mirror, os.path.join(CACHE_DIR, "debs")))
    try:
        debootstrap_rootfs(rootfs, packages, mirror)
        log("debootstrap done in %.0f s; customizing" % (time.time() - started))
        shutil.copy(os.path.join(NODE_DIR, "customize.sh"), os.path.join(rootfs, "customize.sh"))
        run(["chroot", rootfs, "/bin/sh", "/customize.sh", mirror, SUITE])
        os.unlink(os.path.join(rootfs, "customize.sh"))
        log("importing %s" % tag)
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run([docker_bin(), "import", "--change", "ENV container=docker",
                              "--change", 'CMD ["/lib/systemd/systemd"]', "-", tag],
                             stdin=tar.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise LabError("docker import failed: %s" % imp.stderr.decode(errors="replace"))
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    log("base image %s built in %.0f s" % (tag, time.time() - started))


def build_node(base, tag):
    started = time.time()
    docker("build", "--network", "none", "-q", "--build-arg", "BASE=" + base, "-t", tag,
           "-f", os.path.join(NODE_DIR, "Dockerfile"), NODE_DIR)
    log("node image %s built in %.1f s" % (tag, time.time() - started))


def remove_stale_images(repo, keep):
    for line in out(docker("images", "--format", "{{.Repository}}:{{.Tag}}", repo, check=False)).splitlines():
        if line and line != keep:
            docker("rmi", line, check=False)


def ensure_images():
    mirror, base, node = image_tags()
    if image_exists(node):
        return node
    if not image_exists(base):
        build_base(mirror, base)
    build_node(base, node)
    return node


def prune_images(node_tag):
    """Drop lab images other than the current ones (those still used by a container stay)."""
    remove_stale_images(NODE_REPO, node_tag)
    _mirror, base, _node = image_tags()
    remove_stale_images(BASE_REPO, base)


# =========================================================================== serving image

def debootstrap_rootfs(rootfs, packages, mirror):
    """debootstrap --variant=minbase of SUITE into rootfs with the lab's .deb cache (one retry)."""
    os.makedirs(os.path.join(CACHE_DIR, "debs"), exist_ok=True)
    if os.path.exists(rootfs):
        shutil.rmtree(rootfs)
    for attempt in (1, 2):  # a mirror hiccup ("Couldn't find these debs") gets one retry
        proc = subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ",".join(packages),
                               "--cache-dir=" + os.path.join(CACHE_DIR, "debs"), SUITE, rootfs, mirror],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if proc.returncode == 0:
            return
        tail = "\n".join(proc.stdout.decode(errors="replace").splitlines()[-25:])
        if attempt == 2:
            raise LabError("debootstrap of %s from %s failed twice:\n%s" % (SUITE, mirror, tail))
        log("debootstrap failed, retrying once:\n%s" % tail[-2000:])
        shutil.rmtree(rootfs, ignore_errors=True)


def serving_rootfs_key(mirror):
    """Cache key of the serving image's debootstrap rootfs (mirror, suite, packages, build format)."""
    return content_hash([("format", False, SERVING_BUILD_FORMAT.encode()), ("mirror", False, mirror.encode()),
                         ("suite", False, SUITE.encode()), ("packages", False, ",".join(SERVING_PACKAGES).encode())])


def slim_rootfs(rootfs):
    """As container images are: no apt lists/caches, docs, man pages, locales (about 150 MB less to copy
    into every node's vfs Docker)."""
    for rel in ("var/lib/apt/lists", "var/cache/apt", "usr/share/doc", "usr/share/man", "usr/share/locale",
                "usr/share/info", "var/log"):
        path = os.path.join(rootfs, rel)
        if not os.path.isdir(path):
            continue
        for entry in os.listdir(path):
            full = os.path.join(path, entry)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)


def serving_rootfs(mirror, rootfs):
    """Fill `rootfs` with the slimmed debootstrap (minbase + SERVING_PACKAGES), kept as a tarball in the
    cache so that a change under lab/serving/ only re-runs build_image.sh."""
    cached = os.path.join(CACHE_DIR, "serving-rootfs-%s.tar" % serving_rootfs_key(mirror))
    if not os.path.exists(cached):
        started = time.time()
        log("debootstrap %s from %s for the serving image (cache %s)" % (SUITE, mirror, os.path.join(CACHE_DIR, "debs")))
        debootstrap_rootfs(rootfs, SERVING_PACKAGES, mirror)
        slim_rootfs(rootfs)
        for old in os.listdir(CACHE_DIR):
            if old.startswith("serving-rootfs-") and old.endswith(".tar"):
                os.unlink(os.path.join(CACHE_DIR, old))
        run(["tar", "--numeric-owner", "-C", rootfs, "-cf", cached + ".tmp", "."])
        os.replace(cached + ".tmp", cached)
        log("serving rootfs debootstrapped in %.0f s (kept as %s)" % (time.time() - started, cached))
        return
    if os.path.exists(rootfs):
        shutil.rmtree(rootfs)
    os.makedirs(rootfs)
    run(["tar", "--numeric-owner", "-C", rootfs, "-xf", cached])


def build_serving(mirror, tag):
    """Serving rootfs (bookworm minbase + python3...) -> lab/serving/build_image.sh -> docker import."""
    rootfs = os.path.join(CACHE_DIR, "serving-build-" + tag.split(":")[1])
    started = time.time()
    log("building the serving image %s" % tag)
    try:
        serving_rootfs(mirror, rootfs)
        log("installing the stand-in (lab/serving/build_image.sh)")
        proc = subprocess.run(["bash", os.path.join(SERVING_DIR, "build_image.sh"), rootfs, tag],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            raise LabError("lab/serving/build_image.sh failed:\n%s" % "\n".join(
                proc.stdout.decode(errors="replace").splitlines()[-30:]))
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    log("serving image %s built in %.0f s" % (tag, time.time() - started))


def ensure_serving_image():
    """The serving image's tag; built (never pulled) only when lab/serving/ changed."""
    mirror = detect_mirror()
    tag = serving_tag(mirror)
    if not image_exists(tag):
        build_serving(mirror, tag)
        remove_stale_images(SERVING_REPO, tag)
    return tag


def node_exec(node, *args, check=False, input_data=None, timeout=None):
    flags = ["-i"] if input_data is not None else []
    return docker("exec", *flags, container_name(node), *args, check=check, input_data=input_data, timeout=timeout)


def node_has_image(node, tag):
    return node_exec(node, "docker", "image", "inspect", "-f", "{{.Id}}", tag).returncode == 0


def serving_model_path():
    return "%s/%s" % (SERVING_MODELS_DIR, SERVING_MODEL_NAME)


def node_has_model(node, model_hash):
    proc = node_exec(node, "cat", "%s/%s" % (serving_model_path(), SERVING_MODEL_MARKER))
    return proc.returncode == 0 and out(proc) == model_hash


# provide_serving fills nodes in parallel threads: one of them builds the cached model tar, the others wait
# (two builders would delete each other's scratch dir and tar).
_MODEL_TAR_LOCK = threading.Lock()


def serving_model_tar(model_hash):
    """tar of <name>/ (made by lab/serving/make_model_dir.py on the host, cached by content hash)."""
    with _MODEL_TAR_LOCK:
        return _serving_model_tar_locked(model_hash)


def _serving_model_tar_locked(model_hash):
    cached = os.path.join(CACHE_DIR, "serving-model-%s.tar" % model_hash)
    if not os.path.exists(cached):
        tmp = os.path.join(CACHE_DIR, "serving-model-%s.tmp" % model_hash)
        shutil.rmtree(tmp, ignore_errors=True)
        target = os.path.join(tmp, SERVING_MODEL_NAME)
        run([sys.executable, os.path.join(SERVING_DIR, "make_model_dir.py"), target, "--shards",
             str(SERVING_MODEL_SHARDS), "--shard-mib", str(SERVING_MODEL_SHARD_MIB)])
        with open(os.path.join(target, SERVING_MODEL_MARKER), "w") as handle:
            handle.write(model_hash + "\n")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(target, arcname=SERVING_MODEL_NAME,
                    filter=lambda info: setattr(info, "uid", 0) or setattr(info, "gid", 0)
                    or setattr(info, "uname", "root") or setattr(info, "gname", "root") or info)
        shutil.rmtree(tmp, ignore_errors=True)
        for old in os.listdir(CACHE_DIR):
            if old.startswith("serving-model-") and old.endswith(".tar"):
                os.unlink(os.path.join(CACHE_DIR, old))
        with open(cached + ".tmp", "wb") as handle:
            handle.write(buf.getvalue())
        os.replace(cached + ".tmp", cached)
    with open(cached, "rb") as handle:
        return handle.read()


def install_serving_model(node, model_hash):
    if node_has_model(node, model_hash):
        return False
    path = serving_model_path()
    node_exec(node, "sh", "-c", "rm -rf '%s' && mkdir -p '%s'" % (path, SERVING_MODELS_DIR), check=True)
    docker("cp", "-", "%s:%s" % (container_name(node), SERVING_MODELS_DIR), input_data=serving_model_tar(model_hash))
    return True


def copy_image_into_node(node, image):
    """`docker save IMAGE | docker load` from the host's Docker into the node's; returns the seconds it took."""
    started = time.time()
    save = subprocess.Popen([docker_bin(), "save", image], stdout=subprocess.PIPE)
    load = subprocess.run([docker_bin(), "exec", "-i", container_name(node), "docker", "load", "-q"],
                          stdin=save.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    save.stdout.close()
    save.wait()
    if load.returncode != 0 or save.returncode != 0:
        raise LabError("loading %s into %s failed: %s" % (image, node, load.stderr.decode(errors="replace")))
    return round(time.time() - started, 1)


def load_serving_into_node(node, tag):
    """docker save | docker load into the node's (vfs) Docker where the tag is missing; older serving tags removed."""
    result = {"node": node, "image": "present", "model": "present", "load_s": None}
    if not node_has_image(node, tag):
        result["image"], result["load_s"] = "loaded", copy_image_into_node(node, tag)
        for line in out(node_exec(node, "docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
                                  SERVING_REPO)).splitlines():
            if line and line != tag:
                node_exec(node, "docker", "rmi", line)  # fails (kept) while a container uses it
    if install_serving_model(node, serving_model_hash()):
        result["model"] = "written"
    return result


def provide_serving(nodes, tag):
    """Load the serving image + the lab model directory into `nodes` (in parallel); log what was done."""
    results, errors = {}, {}

    def worker(node):
        try:
            results[node] = load_serving_into_node(node, tag)
        except LabError as exc:
            errors[node] = str(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for node in nodes:
        if node in results:
            r = results[node]
            log("%s: serving image %s%s; model %s %s" % (
                node, r["image"], " in %.1f s" % r["load_s"] if r["load_s"] is not None else "",
                serving_model_path(), r["model"]))
    if errors:
        raise LabError("; ".join("%s: %s" % item for item in sorted(errors.items())))
    return results


def record_serving_image(tag):
    with state_lock():
        state = load_state()
        if state is not None:
            state["serving_image"] = tag
            save_state(state)


# =========================================================================== ssh material

def ssh_dir():
    return os.path.join(STATE_DIR, "ssh")


def ensure_ssh_keys(nodes):
    os.makedirs(ssh_dir(), mode=0o700, exist_ok=True)
    key = os.path.join(ssh_dir(), "id_ed25519")
    if not os.path.exists(key):
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dgxspark-lab-controller", "-f", key])
    for node in nodes:
        hostkey = os.path.join(ssh_dir(), "hostkeys", node, "ssh_host_ed25519_key")
        if not os.path.exists(hostkey):
            os.makedirs(os.path.dirname(hostkey), exist_ok=True)
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "root@" + node, "-f", hostkey])


def read_text(path):
    with open(path) as handle:
        return handle.read()


def write_ssh_files(count):
    nodes = node_names(count)
    entries = [(n, mgmt_ip(i), read_text(os.path.join(ssh_dir(), "hostkeys", n, "ssh_host_ed25519_key.pub")))
               for i, n in enumerate(nodes)]
    write_file(os.path.join(ssh_dir(), "known_hosts"), render_known_hosts(entries))
    write_file(os.path.join(ssh_dir(), "config"), render_ssh_config(count, STATE_DIR))


# The live inventory sits in <state>/inventory; the implicit localhost (plan.yml) has no inventory_dir.
LIVE_STATE_DIR_EXPR = "{{ inventory_dir | default(ansible_inventory_sources | first, true) }}/.."


def write_inventory(count, model_profile=None):
    inv = os.path.join(STATE_DIR, "inventory")
    write_file(os.path.join(inv, "hosts.yml"), render_hosts_yml(count))
    template = read_text(os.path.join(STATIC_INVENTORY_DIR, "group_vars", "all.yml"))
    write_file(os.path.join(inv, "group_vars", "all.yml"),
               render_group_vars(template, LIVE_STATE_DIR_EXPR, model_profile))


MGMT_NETPLAN_PATH = "etc/netplan/01-dgxspark-lab-mgmt.yaml"


def render_mgmt_netplan(index):
    """netplan of the node's management interface, as a Spark's installer leaves one for its management NIC.

    Docker gives eth0 the same address; networkd managing it (critical: keep it, never drop it) is what
    lets systemd-networkd-wait-online succeed at boot once the rails are configured `optional: true`.
    """
    return "\n".join([
        "# Virtual Spark lab (lab/labctl.py): the node's management interface on the lab's internal network,",
        "# standing in for the management NIC a Spark's installer configures. Not managed by the collection.",
        "network:",
        "  version: 2",
        "  renderer: networkd",
        "  ethernets:",
        "    eth0:",
        "      dhcp4: false",
        "      dhcp6: false",
        "      link-local: []",
        "      accept-ra: false",
        "      addresses: [%s/%d]" % (mgmt_ip(index), ipaddress.ip_network(MGMT_SUBNET).prefixlen),
        "      routes: [{to: default, via: %s}]" % MGMT_GATEWAY,
        "      critical: true",
    ]) + "\n"


def mgmt_netplan_tar(index):
    buf = io.BytesIO()
    data = render_mgmt_netplan(index).encode()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(MGMT_NETPLAN_PATH)
        info.size = len(data)
        info.mode = 0o600
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def node_seed_tar(node):
    """Files copied into a created (not yet started) node: host key, authorized_keys, machine-id."""
    buf = io.BytesIO()
    hostkey_dir = os.path.join(ssh_dir(), "hostkeys", node)

    def add(path, data, mode):
        info = tarfile.TarInfo(path)
        info.size = len(data)
        info.mode = mode
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dname in ("root/.ssh",):
            info = tarfile.TarInfo(dname)
            info.type = tarfile.DIRTYPE
            info.mode = 0o700
            tar.addfile(info)
        with open(os.path.join(hostkey_dir, "ssh_host_ed25519_key"), "rb") as h:
            add("etc/ssh/ssh_host_ed25519_key", h.read(), 0o600)
        with open(os.path.join(hostkey_dir, "ssh_host_ed25519_key.pub"), "rb") as h:
            add("etc/ssh/ssh_host_ed25519_key.pub", h.read(), 0o644)
        with open(os.path.join(ssh_dir(), "id_ed25519.pub"), "rb") as h:
            add("root/.ssh/authorized_keys", h.read(), 0o600)
        add("etc/machine-id", (hashlib.md5(("dgxspark-lab " + node).encode()).hexdigest() + "\n").encode(), 0o444)
        add(MGMT_NETPLAN_PATH, render_mgmt_netplan(node_index(node)).encode(), 0o600)
    return buf.getvalue()


# =========================================================================== host network

def ensure_mgmt_network():
    if docker("network", "inspect", MGMT_NETWORK, check=False).returncode == 0:
        return
    log("creating internal management network %s (%s)" % (MGMT_NETWORK, MGMT_SUBNET))
    docker("network", "create", "--internal", "--driver", "bridge", "--subnet", MGMT_SUBNET,
           "--gateway", MGMT_GATEWAY, "--label", LABEL + "=1",
           "-o", "com.docker.network.bridge.name=dsl-mgmt", MGMT_NETWORK)


def ensure_bridges():
    for rail, bridge in BRIDGES.items():
        if not link_exists(bridge):
            log("creating rail %d bridge %s" % (rail, bridge))
            ip_cmd("link", "add", bridge, "type", "bridge")
        ip_cmd("link", "set", bridge, "mtu", str(HOST_MTU))
        # No address, no IPv6 on the host side: the host must have no route into a rail.
        ip_cmd("addr", "flush", "dev", bridge, check=False)
        sysctl = "/proc/sys/net/ipv6/conf/%s/disable_ipv6" % bridge
        if os.path.exists(sysctl):
            with open(sysctl, "w") as handle:
                handle.write("1")
        ip_cmd("link", "set", bridge, "up")


def iptables_rules():
    return [["-i", b, "-o", b, "-j", "ACCEPT"] for b in BRIDGES.values()]


def ensure_iptables():
    """Docker's FORWARD policy drops bridged traffic of bridges it does not own: allow exactly the rails."""
    if run(["iptables", "-n", "-L", "DOCKER-USER"], check=False).returncode != 0:
        run(["iptables", "-N", "DOCKER-USER"], check=False)
    for rule in iptables_rules():
        if run(["iptables", "-C", "DOCKER-USER"] + rule, check=False).returncode != 0:
            run(["iptables", "-I", "DOCKER-USER", "1"] + rule)


def remove_iptables():
    for rule in iptables_rules():
        while run(["iptables", "-C", "DOCKER-USER"] + rule, check=False).returncode == 0:
            run(["iptables", "-D", "DOCKER-USER"] + rule, check=False)


# =========================================================================== nodes

def inspect_container(node):
    proc = docker("inspect", container_name(node), check=False)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)[0]


def container_pid(node):
    info = inspect_container(node)
    if not info or not info["State"]["Running"]:
        raise LabError("node %s is not running; run `labctl.py up`" % node)
    return info["State"]["Pid"]


def in_node_netns(pid, *args, check=True):
    return run(["nsenter", "-t", str(pid), "-n"] + list(args), check=check)


def node_keys_id(node):
    """Fingerprint of the SSH keys this state dir seeds into the node (its host key and our client key).

    A container seeded from another state dir (another checkout's lab) cannot be reached with ours: `up`
    recreates it instead of starting it.
    """
    digest = hashlib.sha256()
    for path in (os.path.join(ssh_dir(), "hostkeys", node, "ssh_host_ed25519_key.pub"),
                 os.path.join(ssh_dir(), "id_ed25519.pub")):
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()[:16]


def create_node(node, index, image):
    name = container_name(node)
    args = ["create", "--name", name, "--hostname", node,
            "--label", "%s=1" % LABEL, "--label", "%s.node=%s" % (LABEL, node),
            "--label", "%s.index=%d" % (LABEL, index), "--label", "%s.keys=%s" % (LABEL, node_keys_id(node)),
            "--network", MGMT_NETWORK, "--ip", mgmt_ip(index), "--network-alias", node,
            "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
            "--cap-drop", "ALL"]
    for cap in CAPABILITIES:
        args += ["--cap-add", cap]
    args += ["--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
             "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
             "-v", "%sdocker-%s:/var/lib/docker" % (CONTAINER_PREFIX, node),
             "--stop-signal", "SIGRTMIN+3", "--stop-timeout", "10",
             "-e", "container=docker", image]
    docker(*args)
    docker("cp", "-", name + ":/", input_data=node_seed_tar(node))


def plumb_fabric(node, state):
    """(Re)create the node's four CX-7-named veths in its current network namespace."""
    pid = container_pid(node)
    for kind, netdev, rail in FABRIC:
        host = host_veth(node, kind)
        if link_exists(host):
            ip_cmd("link", "del", host)
        # A stale node end (if the host end vanished) would block the rename.
        in_node_netns(pid, "ip", "link", "del", netdev, check=False)
        ip_cmd("link", "add", host, "type", "veth", "peer", "name", netdev, "netns", str(pid))
        ip_cmd("link", "set", host, "mtu", str(HOST_MTU))
        in_node_netns(pid, "ip", "link", "set", netdev, "mtu", str(NODE_START_MTU))
        sysctl = "/proc/sys/net/ipv6/conf/%s/disable_ipv6" % host
        if os.path.exists(sysctl):
            with open(sysctl, "w") as handle:
                handle.write("1")
        # Like a fresh Spark, IPv6 is on for the CX-7 netdevs (Docker turns it off in containers);
        # /proc/sys is read-only inside the node, so set it from the host in the node's netns.
        in_node_netns(pid, "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/%s/disable_ipv6" % netdev, check=False)
        if rail is not None:
            in_node_netns(pid, "ip", "link", "set", netdev, "up")
        # port-0 twins: no cable -> both ends stay down, host end attached to nothing.
    apply_node_network(node, state)


def apply_node_network(node, state):
    """Faults (rail down, detached) and rate limit on the node's host-side rail ends."""
    faults = node_faults(state, node)
    rate = state.get("rate")
    for kind, _netdev, rail in FABRIC:
        if rail is None:
            continue
        host = host_veth(node, kind)
        if faults["detached"]:
            ip_cmd("link", "set", host, "nomaster")
        else:
            ip_cmd("link", "set", host, "master", BRIDGES[rail])
        ip_cmd("link", "set", host, faults["rail%d" % rail])
        if rate:
            run(["tc", "qdisc", "replace", "dev", host, "root"] + tbf_args(rate))
        else:
            run(["tc", "qdisc", "del", "dev", host, "root"], check=False)


def fabric_ok(node):
    """True if the node's veths exist in its current namespace."""
    try:
        pid = container_pid(node)
    except LabError:
        return False
    for kind, netdev, _rail in FABRIC:
        if not link_exists(host_veth(node, kind)):
            return False
        if in_node_netns(pid, "ip", "link", "show", netdev, check=False).returncode != 0:
            return False
    return True


def remove_node(node):
    docker("rm", "-f", "-v", container_name(node), check=False)
    docker("volume", "rm", "%sdocker-%s" % (CONTAINER_PREFIX, node), check=False)
    for kind, _netdev, _rail in FABRIC:
        if link_exists(host_veth(node, kind)):
            ip_cmd("link", "del", host_veth(node, kind), check=False)


def lab_containers():
    """{node: container name} of every lab container that exists."""
    proc = docker("ps", "-a", "--filter", "label=%s=1" % LABEL, "--format",
                  '{{.Names}}\t{{.Label "%s.node"}}' % LABEL, check=False)
    result = {}
    for line in out(proc).splitlines():
        name, _sep, node = line.partition("\t")
        if node:
            result[node] = name
    return result


def system_state(node, wait=False, timeout=90):
    cmd = ["exec", container_name(node), "systemctl", "is-system-running"]
    if wait:
        cmd = ["exec", container_name(node), "timeout", str(timeout), "systemctl", "is-system-running", "--wait"]
    proc = docker(*cmd, check=False, timeout=timeout + 10)
    return out(proc) or "unknown"


def wait_ssh(ip, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection((ip, 22), timeout=2) as sock:
                if sock.recv(4).startswith(b"SSH"):
                    return True
        except OSError:
            time.sleep(0.3)
    return False


def wait_nodes(nodes):
    results = {}

    def worker(i, node):
        state = system_state(node, wait=True)
        ssh_ok = wait_ssh(mgmt_ip(i))
        failed = ""
        if state != "running":
            failed = out(docker("exec", container_name(node), "systemctl", "--failed", "--no-legend", "--plain",
                                check=False))
        results[node] = (state, ssh_ok, failed)

    threads = [threading.Thread(target=worker, args=(i, n)) for i, n in enumerate(nodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# =========================================================================== commands

def cmd_build(_args):
    ensure_docker()
    image = ensure_images()
    print(image)


def cmd_up(args):
    count = node_names(args.nodes) and args.nodes
    started = time.time()
    ensure_docker()
    with state_lock():
        previous = load_state() or {}
        rate = parse_rate(args.rate) if args.rate is not None else previous.get("rate")
        state = default_state(count, rate)  # `up` heals faults: every rail plugged, every node attached
        state["model_profile"] = args.model_profile or previous.get("model_profile")
        if previous.get("serving_image"):
            state["serving_image"] = previous["serving_image"]
        image = ensure_images()
        state["image"] = image
        nodes = node_names(count)
        ensure_ssh_keys(nodes)
        ensure_mgmt_network()
        ensure_bridges()
        ensure_iptables()
        existing = lab_containers()
        for node in existing:
            if node not in nodes:
                log("removing %s (not part of a %d-node lab)" % (node, count))
                remove_node(node)
        for index, node in enumerate(nodes):
            info = inspect_container(node)
            if info and (info["Config"]["Image"] != image
                         or info["NetworkSettings"]["Networks"].get(MGMT_NETWORK, {}).get("IPAddress") not in
                         (mgmt_ip(index), None, "")):
                log("recreating %s (image or address changed)" % node)
                remove_node(node)
                info = None
            elif info and (info["Config"].get("Labels") or {}).get(LABEL + ".keys") != node_keys_id(node):
                log("recreating %s (seeded with the SSH keys of another lab state dir)" % node)
                remove_node(node)
                info = None
            if info is None:
                log("creating %s (%s)" % (node, mgmt_ip(index)))
                create_node(node, index, image)
                docker("start", container_name(node))
                plumb_fabric(node, state)
            elif not info["State"]["Running"]:
                log("starting %s" % node)
                docker("start", container_name(node))
                plumb_fabric(node, state)
            elif not fabric_ok(node):
                log("re-plumbing the fabric of %s" % node)
                plumb_fabric(node, state)
            else:
                apply_node_network(node, state)
            if docker("exec", container_name(node), "test", "-e", "/" + MGMT_NETPLAN_PATH, check=False).returncode != 0:
                docker("cp", "-", container_name(node) + ":/", input_data=mgmt_netplan_tar(index))
        save_state(state)
        write_ssh_files(count)
        write_inventory(count, state.get("model_profile"))
        prune_images(image)
    results = wait_nodes(nodes)
    bad = False
    for node in nodes:
        sysstate, ssh_ok, failed = results[node]
        if sysstate != "running" or not ssh_ok:
            # degraded = booted with failed units (something changed inside the node): warn, it is usable;
            # `labctl.py reset NODE` gives a fresh node.
            bad = bad or not ssh_ok or sysstate not in ("running", "degraded")
            log("%s: system %s, ssh %s; failed units: %s" % (
                node, sysstate, "ok" if ssh_ok else "NOT reachable", failed.replace("\n", "; ") or "none"))
    if args.serving and not bad:
        tag = ensure_serving_image()
        record_serving_image(tag)
        provide_serving(nodes, tag)
    log("lab up: %d nodes in %.1f s; inventory %s; ssh -F %s spark-alpha" % (
        count, time.time() - started, os.path.join(STATE_DIR, "inventory"), os.path.join(ssh_dir(), "config")))
    return 1 if bad else 0


def cmd_down(args):
    if not docker_available():
        log("docker is not running; cleaning host links only")
    else:
        with state_lock():
            for node in lab_containers():
                log("removing %s" % node)
                remove_node(node)
            docker("network", "rm", MGMT_NETWORK, check=False)
    for node in NODE_NAMES:
        for kind, _netdev, _rail in FABRIC:
            if link_exists(host_veth(node, kind)):
                ip_cmd("link", "del", host_veth(node, kind), check=False)
    for bridge in BRIDGES.values():
        if link_exists(bridge):
            ip_cmd("link", "del", bridge, check=False)
    remove_iptables()
    for path in (state_path(), ):
        if os.path.exists(path):
            os.unlink(path)
    shutil.rmtree(os.path.join(STATE_DIR, "inventory"), ignore_errors=True)
    if args.purge:
        if docker_available():
            remove_stale_images(NODE_REPO, None)
            remove_stale_images(BASE_REPO, None)
            remove_stale_images(SERVING_REPO, None)
        shutil.rmtree(STATE_DIR, ignore_errors=True)
    log("lab down")
    return 0


def node_status(node, index, state):
    info = inspect_container(node)
    row = {"node": node, "mgmt_ip": mgmt_ip(index), "container": "absent"}
    if not info:
        return row
    row["container"] = info["State"]["Status"]
    if not info["State"]["Running"]:
        return row
    row["system"] = system_state(node)
    pid = info["State"]["Pid"]
    links = {}
    proc = in_node_netns(pid, "ip", "-j", "addr", "show", check=False)
    for link in json.loads(proc.stdout or b"[]"):
        links[link["ifname"]] = link
    faults = node_faults(state, node) if state else {}
    row["fabric"] = {}
    for kind, netdev, rail in FABRIC:
        link = links.get(netdev)
        host = host_veth(node, kind)
        entry = {"present": link is not None}
        if link:
            entry.update({"operstate": link.get("operstate"), "mtu": link.get("mtu"),
                          "ipv4": ["%s/%s" % (a["local"], a["prefixlen"]) for a in link.get("addr_info", [])
                                   if a.get("family") == "inet"]})
        entry["host_end"] = host if link_exists(host) else None
        if rail:
            entry["rail"] = rail
            entry["fault"] = "detached" if faults.get("detached") else ("cable pulled" if faults.get("rail%d" % rail) == "down" else None)
        row["fabric"][netdev] = entry
    row["driver"] = out(docker("exec", container_name(node), "cat", "/etc/dgxspark-lab/driver-version", check=False))
    if state and state.get("serving_image"):
        row["serving"] = {"image": node_has_image(node, state["serving_image"]),
                          "model": serving_model_path() if node_has_model(node, serving_model_hash()) else None}
    return row


def cmd_status(args):
    state = load_state()
    if not docker_available():
        rows, count = [], (state or {}).get("nodes", 0)
    else:
        existing = lab_containers()
        count = (state or {}).get("nodes") or len(existing)
        rows = [node_status(n, i, state or {}) for i, n in enumerate(NODE_NAMES)
                if i < count or n in existing]
    if args.json:
        print(json.dumps({"state": state, "serving_image": (state or {}).get("serving_image"), "nodes": rows},
                         indent=2))
        return 0
    if not rows:
        print("lab is down (no nodes); `python3 lab/labctl.py up` starts it")
        return 0
    print("lab: %d nodes, image %s, rate %s, serving image %s" % (
        count, (state or {}).get("image"), (state or {}).get("rate") or "unlimited",
        (state or {}).get("serving_image") or "none (`labctl.py serving`)"))
    for row in rows:
        fabric = " ".join("%s=%s%s" % (netdev, e.get("operstate", "absent"), "(%s)" % e["fault"] if e.get("fault") else "")
                          for netdev, e in row.get("fabric", {}).items())
        serving = ""
        if "serving" in row:
            serving = " serving=%s" % ("+".join(k for k in ("image", "model") if row["serving"][k]) or "missing")
        print("%-14s %-15s %-8s %-9s driver=%-10s %s%s" % (
            row["node"], row["mgmt_ip"], row["container"], row.get("system", "-"), row.get("driver", "-"), fabric,
            serving))
    return 0


def require_state(node):
    state = load_state()
    if not state:
        raise LabError("the lab is not up; run `labctl.py up` first")
    if node_index(node) >= state["nodes"]:
        raise LabError("%s is not part of the running %d-node lab" % (node, state["nodes"]))
    return state


def cmd_rail(args):
    rail = parse_rail(args.rail)
    with state_lock():
        state = require_state(args.node)
        node_faults(state, args.node)["rail%d" % rail] = args.action
        apply_node_network(args.node, state)
        save_state(state)
    log("%s rail %d (%s) cable %s" % (args.node, rail, FABRIC[rail - 1][1], "plugged" if args.action == "up" else "pulled"))
    return 0


def cmd_attach(args, detached):
    with state_lock():
        state = require_state(args.node)
        node_faults(state, args.node)["detached"] = detached
        apply_node_network(args.node, state)
        save_state(state)
    log("%s %s the fabric" % (args.node, "detached from" if detached else "attached to"))
    return 0


def cmd_restart(args):
    with state_lock():
        state = require_state(args.node)
        docker("restart", "-t", "10", container_name(args.node))
        plumb_fabric(args.node, state)
    results = wait_nodes([args.node])
    sysstate, ssh_ok, failed = results[args.node]
    log("%s restarted: system %s, ssh %s %s" % (args.node, sysstate, "ok" if ssh_ok else "NOT reachable", failed))
    return 0 if ssh_ok else 1


def cmd_reset(args):
    """Recreate nodes from the image: whatever was changed inside them is gone (keys and faults stay)."""
    with state_lock():
        state = load_state()
        if not state:
            raise LabError("the lab is not up; run `labctl.py up` first")
        for node in args.node:
            require_state(node)
        # The serving image and model directory are lab-provided (like keys and faults): a node that had
        # them gets them back after the reset (the node's Docker volume is recreated empty).
        serving = state.get("serving_image")
        reload_serving = [n for n in args.node if serving and inspect_container(n) and node_has_image(n, serving)]
        for node in args.node:
            log("resetting %s" % node)
            remove_node(node)
            create_node(node, node_index(node), state["image"])
            docker("start", container_name(node))
            plumb_fabric(node, state)
    results = wait_nodes(args.node)
    ok = True
    for node in args.node:
        sysstate, ssh_ok, failed = results[node]
        ok = ok and ssh_ok and sysstate == "running"
        log("%s reset: system %s, ssh %s %s" % (node, sysstate, "ok" if ssh_ok else "NOT reachable", failed))
    if reload_serving and image_exists(serving):
        provide_serving(reload_serving, serving)
    return 0 if ok else 1


def cmd_driver(args):
    if not DRIVER_RE.match(args.version):
        raise LabError("driver version %r does not look like 580.95.05" % args.version)
    require_state(args.node)
    docker("exec", container_name(args.node), "sh", "-c",
           "printf '%s\\n' > /etc/dgxspark-lab/driver-version" % args.version)
    log("%s: nvidia-smi now reports driver %s" % (args.node, args.version))
    return 0


def cmd_load_image(args):
    """Copy an image from the host's Docker into the Docker daemon of lab nodes (skipped where present)."""
    state = load_state()
    if not state:
        raise LabError("the lab is not up; run `labctl.py up` first")
    nodes = args.node or node_names(state["nodes"])
    for node in nodes:
        require_state(node)
    proc = docker("image", "inspect", "-f", "{{.Id}}", args.image, check=False)
    if proc.returncode != 0:
        raise LabError("image %s is not in the host's Docker (build it first; nothing is pulled)" % args.image)
    image_id = out(proc)
    for node in nodes:
        have = out(docker("exec", container_name(node), "docker", "image", "inspect", "-f", "{{.Id}}", args.image,
                          check=False))
        if have == image_id:
            log("%s: %s already loaded" % (node, args.image))
            continue
        log("%s: loaded %s in %.1f s" % (node, args.image, copy_image_into_node(node, args.image)))
    return 0


def cmd_serving(args):
    """Build the serving image if its inputs changed, load it (and the lab model directory) into nodes."""
    state = load_state()
    if not state:
        raise LabError("the lab is not up; run `labctl.py up` first")
    nodes = args.node or node_names(state["nodes"])
    for node in nodes:
        require_state(node)
        container_pid(node)
    ensure_docker()
    tag = ensure_serving_image()
    record_serving_image(tag)
    provide_serving(nodes, tag)
    print(tag)
    return 0


def cmd_inventory(args):
    sys.stdout.write(render_hosts_yml(args.nodes))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="labctl.py", description="virtual DGX Spark lab")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="build images if needed and bring N nodes up (idempotent; heals faults)")
    p.add_argument("-n", "--nodes", type=int, default=int(os.environ.get("DGXSPARK_LAB_NODES", DEFAULT_NODES)))
    p.add_argument("--rate", default=None, help="per-port rate limit (tc tbf), e.g. 1gbit; 'none' removes it")
    p.add_argument("--model-profile", default=None, help="dgxspark_model_profile for the live inventory")
    p.add_argument("--serving", action="store_true",
                   help="also build (if needed) and load the serving image + lab model directory into every node")
    p.set_defaults(func=cmd_up)
    p = sub.add_parser("down", help="remove nodes, fabric, network")
    p.add_argument("--purge", action="store_true", help="also remove images and lab/state (keys)")
    p.set_defaults(func=cmd_down)
    p = sub.add_parser("status")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("rail", help="pull (down) or plug (up) a node's rail cable")
    p.add_argument("node")
    p.add_argument("rail")
    p.add_argument("action", choices=("down", "up"))
    p.set_defaults(func=cmd_rail)
    p = sub.add_parser("detach", help="take both rails of a node off the fabric (links stay up)")
    p.add_argument("node")
    p.set_defaults(func=lambda a: cmd_attach(a, True))
    p = sub.add_parser("attach")
    p.add_argument("node")
    p.set_defaults(func=lambda a: cmd_attach(a, False))
    p = sub.add_parser("restart")
    p.add_argument("node")
    p.set_defaults(func=cmd_restart)
    p = sub.add_parser("reset", help="recreate nodes from the image (fresh filesystem, same keys and address)")
    p.add_argument("node", nargs="+")
    p.set_defaults(func=cmd_reset)
    p = sub.add_parser("driver", help="set the driver version nvidia-smi reports on a node")
    p.add_argument("node")
    p.add_argument("version")
    p.set_defaults(func=cmd_driver)
    p = sub.add_parser("load-image", help="copy a host image into the nodes' Docker daemons (no registry)")
    p.add_argument("image")
    p.add_argument("node", nargs="*", help="nodes (default: all)")
    p.set_defaults(func=cmd_load_image)
    p = sub.add_parser("serving", help="build the serving image if needed; load it and the lab model dir into nodes")
    p.add_argument("node", nargs="*", help="nodes (default: all)")
    p.set_defaults(func=cmd_serving)
    p = sub.add_parser("build")
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("inventory")
    p.add_argument("-n", "--nodes", type=int, default=DEFAULT_NODES)
    p.set_defaults(func=cmd_inventory)
    args = parser.parse_args(argv)
    if args.command not in ("inventory",) and os.geteuid() != 0:
        sys.stderr.write("labctl: must run as root (Docker, veths, iptables)\n")
        return 1
    try:
        return args.func(args) or 0
    except LabError as exc:
        sys.stderr.write("labctl: error: %s\n" % exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
