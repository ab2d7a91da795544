"""Nodes: create, plumb the fabric (veths named like GB10's CX-7), apply faults and rate limits, remove, wait
for systemd and sshd.
"""

import contextlib
import hashlib
import json
import os
import socket
import threading
import time

from .constants import (
    BRIDGES, CAPABILITIES, CONTAINER_PREFIX, CPU_SHARES, LABEL_VALUE, ENGINE_ROOT, FABRIC, NODE_SHM_BYTES, HOST_MTU, LABEL, MEMINFO_PATH, MGMT_GATEWAY, MGMT_NETWORK,
    NODE_START_MTU, LabError,
)
from .logic import (container_name, fabric_mac, host_veth, memory_kib, mgmt_ip, node_faults, node_index, rail_hosts,
                    render_meminfo, tbf_args)
from .host import docker, ip_cmd, link_exists, out, run
from .ssh import node_seed_tar, ssh_dir


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


def outdated_node(info):
    """Why a node container made by an older labctl must be made again (None when it is current): the host's engines
    must be mounted, and /dev/shm sized like a machine's (vLLM's engine core puts its 160 MiB rings there)."""
    if not any(m.get("Destination") == ENGINE_ROOT for m in info.get("Mounts") or []):
        return "made without the engine mount %s" % ENGINE_ROOT
    if (info.get("HostConfig") or {}).get("ShmSize") != NODE_SHM_BYTES:
        return "its /dev/shm is not %d MiB" % (NODE_SHM_BYTES // 2 ** 20)
    if sorted((info.get("HostConfig") or {}).get("ExtraHosts") or []) != sorted(rail_hosts()):
        return "its /etc/hosts lacks the rail addresses"
    return None


def create_node(node, index, image):
    name = container_name(node)
    os.makedirs(ENGINE_ROOT, exist_ok=True)
    args = ["create", "--name", name, "--hostname", node,
            "--label", "%s=%s" % (LABEL, LABEL_VALUE), "--label", "%s.node=%s" % (LABEL, node),
            "--label", "%s.index=%d" % (LABEL, index), "--label", "%s.keys=%s" % (LABEL, node_keys_id(node)),
            "--network", MGMT_NETWORK, "--ip", mgmt_ip(index), "--network-alias", node,
            "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
            "--cap-drop", "ALL"]
    for cap in CAPABILITIES:
        args += ["--cap-add", cap]
    args += ["--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
             "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
             "-v", "%sdocker-%s:/var/lib/docker" % (CONTAINER_PREFIX, node),
             # vLLM's CPU build (lab/serving/build-engine.sh), one read-only copy for every node and container
             "-v", "%s:%s:ro" % (ENGINE_ROOT, ENGINE_ROOT),
             "--shm-size", str(NODE_SHM_BYTES),
             "--stop-signal", "SIGRTMIN+3", "--stop-timeout", "10",
             # A lab that runs beside another one yields the CPU to it when both want it (the default weight is 1024).
             "--cpu-shares", str(CPU_SHARES),
             "-e", "container=docker"]
    for entry in rail_hosts():
        args += ["--add-host", entry]
    args.append(image)
    docker(*args)
    docker("cp", "-", name + ":/", input_data=node_seed_tar(node))


@contextlib.contextmanager
def ipv6_on_for_new_links(pid):
    """Links made in the node's netns meanwhile are born with IPv6 on, as a Spark's NICs are. Docker turns IPv6 off in
    containers, and a link takes its namespace's default at creation; /proc/sys is read-only inside the node, so the
    default is set from the host in the node's netns, and put back afterwards."""
    default = "/proc/sys/net/ipv6/conf/default/disable_ipv6"
    read = in_node_netns(pid, "cat", default, check=False)
    if read.returncode != 0:  # a kernel without IPv6
        yield
        return
    in_node_netns(pid, "sh", "-c", "echo 0 > %s" % default)
    try:
        yield
    finally:
        in_node_netns(pid, "sh", "-c", "echo %s > %s" % (read.stdout.decode().strip(), default))


def plumb_fabric(node, state):
    """(Re)create the node's four CX-7-named veths in its current network namespace.

    The node end is born as a fresh Spark's NIC is at boot (its MAC, MTU 1500, IPv6 on): the node's systemd-networkd
    may already run (a restarted node boots while this plumbs), and it configures a link the moment it appears. A
    change made after that (an MTU set back to 1500) would undo the node's own configuration."""
    pid = container_pid(node)
    with ipv6_on_for_new_links(pid):
        for kind, netdev, rail in FABRIC:
            host = host_veth(node, kind)
            if link_exists(host):
                ip_cmd("link", "del", host)
            # A stale node end (if the host end vanished) would block the rename.
            in_node_netns(pid, "ip", "link", "del", netdev, check=False)
            ip_cmd("link", "add", host, "mtu", str(HOST_MTU), "type", "veth", "peer", "name", netdev,
                   "mtu", str(NODE_START_MTU), "address", fabric_mac(node, kind), "netns", str(pid))
            sysctl = "/proc/sys/net/ipv6/conf/%s/disable_ipv6" % host
            if os.path.exists(sysctl):
                with open(sysctl, "w") as handle:
                    handle.write("1")
            if rail is not None:
                in_node_netns(pid, "ip", "link", "set", netdev, "up")
            # port-0 twins: no cable -> both ends stay down, host end attached to nothing.
    apply_node_network(node, state)


def pin_fabric_macs(node):
    """Give a running node's fabric ports their fixed MACs (a lab plumbed by an older labctl had random ones)."""
    pid = container_pid(node)
    for kind, netdev, _rail in FABRIC:
        in_node_netns(pid, "ip", "link", "set", netdev, "address", fabric_mac(node, kind))


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


def write_meminfo(node, total_kib, available_kib, swap_kib):
    """Write the node's stand-in meminfo (atomically: a preflight check may be reading it)."""
    docker("exec", "-i", container_name(node), "sh", "-c",
           "mkdir -p %s && cat > %s.tmp && mv %s.tmp %s" % (os.path.dirname(MEMINFO_PATH), MEMINFO_PATH,
                                                         MEMINFO_PATH, MEMINFO_PATH),
           input_data=render_meminfo(total_kib, available_kib, swap_kib).encode())


def ensure_meminfo(node):
    """The default stand-in meminfo where the node has none (never overwrites one). True if written."""
    if docker("exec", container_name(node), "test", "-e", MEMINFO_PATH, check=False).returncode == 0:
        return False
    write_meminfo(node, *memory_kib())
    return True


def mgmt_connected(info):
    """True if the container (docker inspect) is attached to the management network."""
    return bool(((info or {}).get("NetworkSettings") or {}).get("Networks", {}).get(MGMT_NETWORK))


def mgmt_links(node, index):
    """(pid, [names of the node's interfaces carrying its management address]); (None, []) if it is not running."""
    info = inspect_container(node)
    if not info or not info["State"]["Running"]:
        return None, []
    pid = info["State"]["Pid"]
    links = json.loads(in_node_netns(pid, "ip", "-j", "addr", "show").stdout or b"[]")
    return pid, [link["ifname"] for link in links
                 if any(a.get("local") == mgmt_ip(index) for a in link.get("addr_info", []))]


def drop_stale_mgmt_links(node, index):
    """Delete interfaces with the management address that Docker no longer tracks (call when disconnected).

    Docker removes an endpoint's interface by the name it gave it: one `connect_mgmt` renamed stays behind,
    still wired to the network, and would block the next connect. Deleting a veth end deletes its peer.
    """
    pid, names = mgmt_links(node, index)
    for name in names:
        in_node_netns(pid, "ip", "link", "del", name, check=False)
    return names


def cut_mgmt(node, index):
    docker("network", "disconnect", MGMT_NETWORK, container_name(node))
    drop_stale_mgmt_links(node, index)


def connect_mgmt(node, index):
    """Reattach the node to the management network at its fixed address (inventory, known_hosts stay valid).

    Docker names the new interface eth1 in a running node (its counter does not go back); rename it eth0,
    the name a fresh node has and its netplan (networkd) manages, and put the default route back.
    """
    drop_stale_mgmt_links(node, index)
    docker("network", "connect", "--ip", mgmt_ip(index), "--alias", node, MGMT_NETWORK, container_name(node))
    pid, names = mgmt_links(node, index)
    if pid is None or not names or names[0] == "eth0":
        return  # a stopped node gets eth0 at its next start
    if in_node_netns(pid, "ip", "link", "show", "eth0", check=False).returncode == 0:
        return
    in_node_netns(pid, "ip", "link", "set", names[0], "down")
    in_node_netns(pid, "ip", "link", "set", names[0], "name", "eth0")
    in_node_netns(pid, "ip", "link", "set", "eth0", "up")
    # networkd (the node's mgmt netplan) adds the same route once it sees eth0: same proto, no duplicate.
    in_node_netns(pid, "ip", "route", "replace", "default", "via", MGMT_GATEWAY, "dev", "eth0", "proto", "static")


def lab_containers():
    """{node: container name} of every lab container that exists."""
    proc = docker("ps", "-a", "--filter", "label=%s=%s" % (LABEL, LABEL_VALUE), "--format",
                  '{{.Names}}\t{{.Label "%s.node"}}' % LABEL, check=False)
    result = {}
    for line in out(proc).splitlines():
        name, _sep, node = line.partition("\t")
        if node:
            result[node] = name
    return result


def system_state(node, wait=False, timeout=90):
    """systemd's state in the node; with ``wait``, once it booted. A node started a moment ago may not answer yet
    (its systemd has no bus: systemctl prints nothing, or "offline"): then ask again, until ``timeout``."""
    deadline = time.time() + timeout
    while True:
        left = max(1, int(deadline - time.time()))
        cmd = ["exec", container_name(node), "systemctl", "is-system-running"]
        if wait:
            cmd = ["exec", container_name(node), "timeout", str(left), "systemctl", "is-system-running", "--wait"]
        state = out(docker(*cmd, check=False, timeout=left + 10)) or "unknown"
        if not wait or state not in ("unknown", "offline") or time.time() >= deadline:
            return state
        time.sleep(0.5)


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
    """{node: (systemd state, SSH answers, failed units)} once each node booted; ``nodes`` may be any of the lab's."""
    results = {}

    def worker(node):
        state = system_state(node, wait=True)
        # The node's own address: `restart spark-gamma` once waited for spark-alpha's SSH (the index in this list).
        ssh_ok = wait_ssh(mgmt_ip(node_index(node)))
        failed = ""
        if state != "running":
            failed = out(docker("exec", container_name(node), "systemctl", "--failed", "--no-legend", "--plain",
                                check=False))
        results[node] = (state, ssh_ok, failed)

    threads = [threading.Thread(target=worker, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
