"""Host network: the internal management Docker network, the two rail bridges, the DOCKER-USER rules."""

import os

from .constants import BRIDGES, HOST_MTU, LABEL, LABEL_VALUE, MGMT_BRIDGE, MGMT_GATEWAY, MGMT_NETWORK, MGMT_SUBNET
from .host import docker, ip_cmd, link_exists, log, run


def ensure_mgmt_network():
    if docker("network", "inspect", MGMT_NETWORK, check=False).returncode == 0:
        return
    log("creating internal management network %s (%s)" % (MGMT_NETWORK, MGMT_SUBNET))
    docker("network", "create", "--internal", "--driver", "bridge", "--subnet", MGMT_SUBNET,
           "--gateway", MGMT_GATEWAY, "--label", "%s=%s" % (LABEL, LABEL_VALUE),
           "-o", "com.docker.network.bridge.name=%s" % MGMT_BRIDGE, MGMT_NETWORK)


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
