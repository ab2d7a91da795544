"""The netplan files the collection renders pass the real `netplan generate` (netplan.io of a lab node, as on a Spark).

Rendering is pure Python (plugins/plugin_utils/netplan.py); this feeds its output, in several shapes, to netplan
itself in a scratch root inside a lab node, so a document netplan would reject cannot pass the unit tables.
"""

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.netplan import node_config

pytestmark = pytest.mark.lab

PLAN = {
    "mtu": 9000,
    "rails": [
        {"name": "rail1", "interface": "enp1s0f1np1", "subnet": "192.168.100.0/24", "prefixlen": 24, "address_offset": 10},
        {"name": "rail2", "interface": "enP2p1s0f1np1", "subnet": "192.168.101.0/24", "prefixlen": 24, "address_offset": 10},
    ],
    "nodes": [{"host": h, "rank": i, "rail_addresses": {"rail1": "192.168.100.%d" % (10 + i), "rail2": "192.168.101.%d" % (10 + i)}}
              for i, h in enumerate(["spark-alpha", "spark-beta"])],
}
ROUTES = [{"rail": "rail1", "to": "10.20.0.0/16", "via": "192.168.100.1", "metric": 100}]

CASES = [
    ("inherit-renderer", {}, "systemd/network/10-netplan-enp1s0f1np1.network"),
    ("networkd-with-routes", {"renderer": "networkd", "routes": ROUTES}, "systemd/network/10-netplan-enp1s0f1np1.network"),
    ("networkmanager", {"renderer": "NetworkManager"}, "NetworkManager/system-connections/netplan-enp1s0f1np1.nmconnection"),
    ("mtu-1500-not-optional", {"mtu": 1500, "optional": False}, "systemd/network/10-netplan-enp1s0f1np1.network"),
]


@pytest.mark.parametrize("kwargs,generated", [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_rendered_file_passes_netplan_generate(lab, kwargs, generated):
    host = lab.host(lab.nodes[0])
    content = node_config(PLAN, "spark-alpha", **kwargs)["content"]
    root = host.check_output("mktemp -d /tmp/netplan-generate.XXXXXX")
    try:
        host.run_expect([0], "mkdir -p %s/etc/netplan && cat > %s/etc/netplan/40-cx7.yaml <<'DGXSPARK_EOF'\n%sDGXSPARK_EOF\n"
                        "chmod 600 %s/etc/netplan/40-cx7.yaml" % (root, root, content, root))
        result = host.run("netplan generate --root-dir %s", root)
        assert result.rc == 0, result.stderr
        unit = host.file("%s/run/%s" % (root, generated))
        assert unit.exists, host.check_output("find %s/run -type f" % root)
        text = unit.content_string
        assert "192.168.100.10/24" in text
        if kwargs.get("routes"):
            assert "10.20.0.0/16" in text and "192.168.100.1" in text
    finally:
        host.run("rm -rf %s", root)


def test_netplan_rejects_what_the_role_must_never_write(lab):
    """The check is real: netplan generate fails on a broken document (an address without prefix length)."""
    host = lab.host(lab.nodes[0])
    content = node_config(PLAN, "spark-alpha")["content"].replace("192.168.100.10/24", "192.168.100.10")
    root = host.check_output("mktemp -d /tmp/netplan-generate.XXXXXX")
    try:
        host.run_expect([0], "mkdir -p %s/etc/netplan && cat > %s/etc/netplan/40-cx7.yaml <<'DGXSPARK_EOF'\n%sDGXSPARK_EOF\n"
                        "chmod 600 %s/etc/netplan/40-cx7.yaml" % (root, root, content, root))
        result = host.run("netplan generate --root-dir %s", root)
        assert result.rc != 0 and "192.168.100.10" in result.stderr, (result.rc, result.stderr)
    finally:
        host.run("rm -rf %s", root)
