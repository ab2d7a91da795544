# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of the fabric_check scenario: after converge, every node reaches every peer on every rail,
with small and DF jumbo pings, and the rail interfaces have the expected MTU and addresses.

The probe is the role's own module, run through Ansible against the scenario's inventory; the report is built
with the collection's module_utils, so this checks the same summary the role prints.
"""

from __future__ import annotations

import json

import pytest

testinfra_hosts = ["ansible://all"]


@pytest.fixture(name="plan_and_probe", scope="module")
def fixture_plan_and_probe(host):
    plan = host.ansible("dgxspark.cluster.cluster_plan", "", check=False)["plan"]
    variables = host.ansible.get_variables()
    # testinfra hands module arguments to `ansible -a` as one string: JSON keeps the lists and dicts intact.
    probe = host.ansible("dgxspark.cluster.fabric_probe", json.dumps({
        "mtu": int(variables.get("dgxspark_mtu", 9000)),
        "rails": plan["rails"],
        "peers": plan["nodes"],
        "host": variables["inventory_hostname"],
    }), check=False)
    return plan, probe, variables


def test_every_peer_reached_on_every_rail(plan_and_probe):
    plan, probe, variables = plan_and_probe
    me = variables["inventory_hostname"]
    peers = sorted(n["host"] for n in plan["nodes"] if n["host"] != me)
    for rail in plan["rails"]:
        result = probe["rails"][rail["name"]]
        reached = sorted({p["peer"] for p in result["pings"] if p["parsed"]["received"] > 0 and p["kind"] == "jumbo"})
        assert reached == peers, "%s %s: DF jumbo pings reached %s of %s" % (me, rail["name"], reached, peers)


def test_rail_interfaces_have_mtu_and_address(plan_and_probe):
    plan, probe, variables = plan_and_probe
    node = [n for n in plan["nodes"] if n["host"] == variables["inventory_hostname"]][0]
    for rail in plan["rails"]:
        link = probe["rails"][rail["name"]]["link"]
        assert link["mtu"] == int(variables.get("dgxspark_mtu", 9000))
        assert "%s/%s" % (node["rail_addresses"][rail["name"]], rail["prefixlen"]) in link["ipv4"]


def test_fabric_probe_changes_nothing(plan_and_probe):
    _plan, probe, _variables = plan_and_probe
    assert probe["changed"] is False
