"""Nodes: create, plumb the fabric (veths named like GB10's CX-7), apply faults and rate limits, remove, wait
for systemd and sshd.
"""

import hashlib
import json
import os
import socket
import threading
import time

from .constants import (
    BRIDGES, CAPABILITIES, CONTAINER_PREFIX, FABRIC, HOST_MTU, LABEL, MGMT_NETWORK, NODE_START_MTU, LabError,
)
from .logic import container_name, host_veth, mgmt_ip, node_faults, tbf_args
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
