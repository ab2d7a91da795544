"""SSH material (controller key, per-node host keys, known_hosts, ssh config), the live inventory, and the files
seeded into a node when it is created (host key, authorized_keys, machine-id, management netplan).
"""

import hashlib
import io
import ipaddress
import os
import tarfile
import time

from .constants import MGMT_GATEWAY, MGMT_SUBNET, SERVING_DIR, STATE_DIR, STATIC_INVENTORY_DIR
from .logic import (
    mgmt_ip, node_index, node_names, render_group_vars, render_hosts_yml, render_known_hosts, render_ssh_config,
)
from .host import run, write_file


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
LIVE_STATE_DIR_EXPR = "{{ (inventory_dir | default(ansible_inventory_sources | first, true) ~ '/..') | ansible.builtin.realpath }}"


def write_inventory(count, model_profile=None):
    inv = os.path.join(STATE_DIR, "inventory")
    write_file(os.path.join(inv, "hosts.yml"), render_hosts_yml(count))
    template = read_text(os.path.join(STATIC_INVENTORY_DIR, "group_vars", "all.yml"))
    write_file(os.path.join(inv, "group_vars", "all.yml"),
               render_group_vars(template, LIVE_STATE_DIR_EXPR, model_profile, os.path.join(SERVING_DIR, "patches")))


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
