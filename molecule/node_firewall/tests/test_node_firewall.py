# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of the node_firewall scenario: the table inet dgxspark is loaded with the plan's rail subnets and
dgxspark_api_allowed_cidrs, the boot unit is enabled and active, the file is 0600 root, and traffic behaves (deny by
default): a Ray port (a stand-in listener on 6379) and a port opened by hand (3000) answer over loopback (and the rail)
but not from the controller on the management network, SSH does, and --check --diff on the converged node changes nothing. Fails closed and watched: rail traffic
only on the rail interfaces, the loaded table recorded (a rule added by hand is reported), Docker requires the unit
(stopping it stops Docker; starting Docker loads the table first; a ruleset that cannot be loaded keeps Docker down)."""

from __future__ import annotations

import json
import shlex
import socket
import time

import pytest

from conftest import recap_line

testinfra_hosts = ["ansible://all"]
RULESET_FILE = "/etc/dgxspark/nftables-dgxspark.nft"
UNIT = "dgxspark-firewall"
WATCH_TIMER = "dgxspark-firewall-watch.timer"
PROBE_PORT = 6379  # Ray's GCS (ray_cluster_ports.gcs)


@pytest.fixture(name="plan", scope="module")
def fixture_plan(host):
    return host.ansible("dgxspark.cluster.cluster_plan", "", check=False)["plan"]


@pytest.fixture(name="watch_held")
def fixture_watch_held(host):
    """The watch timer stopped while a test stops the firewall unit on purpose: within its interval the watch would
    load the table again (its job when the table disappears), racing the test's own checks of a node without it."""
    host.check_output("systemctl stop %s" % WATCH_TIMER)
    yield
    host.check_output("systemctl start %s" % WATCH_TIMER)


@pytest.fixture(name="table")
def fixture_table(host):
    """The loaded table as nft's JSON objects."""
    return json.loads(host.check_output("nft -j list table inet dgxspark"))["nftables"]


def set_elements(table, name):
    """Elements of a set as 'address/len' strings."""
    sets = [item["set"] for item in table if "set" in item and item["set"]["name"] == name]
    assert sets, name
    out = []
    for element in sets[0].get("elem", []):
        prefix = element["prefix"]
        out.append("%s/%d" % (prefix["addr"], prefix["len"]))
    return sorted(out)


def test_the_table_holds_the_rail_subnets_and_the_api_networks(host, plan, table):
    assert set_elements(table, "rail_nets") == sorted(rail["subnet"] for rail in plan["rails"])
    wanted = host.ansible("ansible.builtin.debug", "var=dgxspark_api_allowed_cidrs", check=False)["dgxspark_api_allowed_cidrs"]
    assert set_elements(table, "api_nets") == sorted(wanted)


def test_the_input_chain_denies_by_default_and_accepts_ssh(host):
    rules = host.check_output("nft list chain inet dgxspark input").splitlines()
    assert [line.strip() for line in rules if line.strip().startswith("type filter hook")] == [
        "type filter hook input priority filter - 10; policy drop;"], rules
    # Only invalid packets are dropped before SSH is accepted (no port or address rule can lock the controller out).
    assert [line.strip() for line in rules if "tcp dport 22 accept" in line] == ["tcp dport 22 accept"], rules
    ssh = [i for i, line in enumerate(rules) if "tcp dport 22 accept" in line][0]
    assert [line.strip() for line in rules[:ssh] if "drop" in line and "policy drop;" not in line] == ["ct state invalid drop"]


def test_the_file_is_root_0600_and_the_unit_loads_it_at_boot(host):
    ruleset = host.file(RULESET_FILE)
    assert (ruleset.user, ruleset.group, ruleset.mode) == ("root", "root", 0o600)
    assert host.service(UNIT).is_enabled
    assert host.check_output("systemctl is-active %s" % UNIT) == "active"
    assert host.run("nft -c -f %s" % RULESET_FILE).rc == 0


def test_other_tables_are_left_alone(host):
    # Docker's iptables-nft tables stay (the role replaces only its own table).
    tables = host.check_output("nft list tables")
    assert "table ip filter" in tables and "table ip nat" in tables


def reachable(address, port):
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(name="listener")
def fixture_listener(host):
    """A stand-in Ray GCS: a TCP listener on 6379 of every address, in a transient unit."""
    host.run("systemctl stop dgxspark-fw-probe 2>/dev/null; systemctl reset-failed dgxspark-fw-probe 2>/dev/null")
    code = ("import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            "s.bind(('0.0.0.0',%d));s.listen(16);[s.accept()[0].close() for _ in iter(int,1)]" % PROBE_PORT)
    host.check_output("systemd-run --unit=dgxspark-fw-probe /usr/bin/python3 -c %s" % shlex.quote(code))
    for _ in range(50):
        if host.run("ss -Htln 'sport = :%d'" % PROBE_PORT).stdout.strip():
            break
        time.sleep(0.1)
    yield PROBE_PORT
    host.run("systemctl stop dgxspark-fw-probe")


def test_a_ray_port_answers_on_loopback_and_the_rail_but_not_from_the_management_network(host, plan, listener):
    name = host.backend.get_hostname()
    node = [n for n in plan["nodes"] if n["host"] == name][0]
    mgmt = host.ansible("ansible.builtin.debug", "var=ansible_host", check=False)["ansible_host"]
    assert host.run("timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'" % listener).rc == 0
    # Traffic from the node's own rail address to itself arrives over loopback; the peer's path is the lab test's.
    rail_ip = node["rail_addresses"][plan["rails"][0]["name"]]
    assert host.run("timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%d'" % (rail_ip, listener)).rc == 0
    assert not reachable(mgmt, listener), "Ray's port %d answers from the management network" % listener
    assert reachable(mgmt, 22)


def test_check_diff_changes_nothing(host, check_diff_run):
    name = host.backend.get_hostname()
    line = recap_line(check_diff_run, name)
    assert line is not None, check_diff_run.stdout[-3000:]
    assert "changed=0" in line and "failed=0" in line, line


@pytest.fixture(name="unknown_listener")
def fixture_unknown_listener(host):
    """A listener the collection does not know (a Grafana a user starts by hand on 3000), in a transient unit."""
    host.run("systemctl stop dgxspark-fw-other 2>/dev/null; systemctl reset-failed dgxspark-fw-other 2>/dev/null")
    code = ("import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            "s.bind(('0.0.0.0',3000));s.listen(16);[s.accept()[0].close() for _ in iter(int,1)]")
    host.check_output("systemd-run --unit=dgxspark-fw-other /usr/bin/python3 -c %s" % shlex.quote(code))
    for _ in range(50):
        if host.run("ss -Htln 'sport = :3000'").stdout.strip():
            break
        time.sleep(0.1)
    yield 3000
    host.run("systemctl stop dgxspark-fw-other")


def test_a_port_opened_by_hand_answers_on_loopback_but_not_from_the_management_network(host, unknown_listener):
    """Deny by default: no list of ports has to be complete (a policy accept let this one through)."""
    mgmt = host.ansible("ansible.builtin.debug", "var=ansible_host", check=False)["ansible_host"]
    assert host.run("timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'" % unknown_listener).rc == 0
    assert not reachable(mgmt, unknown_listener), "a port opened by hand answers from the management network"
    assert reachable(mgmt, 22)


def test_rail_traffic_is_accepted_only_on_the_rail_interfaces(host, plan):
    rules = host.check_output("nft list chain inet dgxspark input")
    names = ", ".join('"%s"' % rail["interface"] for rail in plan["rails"])
    assert ("iifname { %s } ip saddr @rail_nets accept" % names) in rules or (
        len(plan["rails"]) == 1 and 'iifname %s ip saddr @rail_nets accept' % names in rules), rules


def test_the_loaded_table_is_recorded_and_matches(host):
    record = host.file("/var/lib/dgxspark/firewall/table.sha256")
    assert (record.user, record.mode) == ("root", 0o600)
    state = host.ansible("dgxspark.cluster.nft_table", "", check=False)
    assert state["loaded"] and state["matches"] and state["problem"] is None, state
    assert state["sha256"] == record.content_string.strip()


def test_a_rule_added_by_hand_is_reported(host):
    host.check_output("nft add rule inet dgxspark input tcp dport 4242 accept")
    try:
        state = host.ansible("dgxspark.cluster.nft_table", "", check=False)
        assert not state["matches"] and "differs from the one the firewall phase loaded" in state["problem"], state
    finally:
        host.check_output("systemctl reload %s" % UNIT)
    assert host.ansible("dgxspark.cluster.nft_table", "", check=False)["matches"]


@pytest.mark.usefixtures("watch_held")
def test_docker_requires_the_firewall_and_fails_closed(host):
    """Stopping the firewall unit stops Docker (no published port without the table); starting Docker brings the table
    back first."""
    assert "%s.service" % UNIT in host.check_output("systemctl show -p Requires --value docker.service").split()
    host.check_output("systemctl stop %s" % UNIT)
    try:
        assert host.run("nft list table inet dgxspark").rc != 0
        assert host.run("systemctl is-active docker.service").stdout.strip() != "active"
        state = host.ansible("dgxspark.cluster.nft_table", "", check=False)
        assert not state["loaded"] and "is not loaded" in state["problem"], state
    finally:
        host.check_output("systemctl start docker.service")
    assert host.check_output("systemctl is-active %s" % UNIT) == "active"
    assert host.ansible("dgxspark.cluster.nft_table", "", check=False)["matches"]


@pytest.mark.usefixtures("watch_held")
def test_prometheus_requires_the_firewall_and_stops_with_it(host):
    """Prometheus republishes the engine's metrics: it runs only with the table, as Docker does (issue 49)."""
    assert "%s.service" % UNIT in host.check_output("systemctl show -p Requires --value prometheus.service").split()
    assert "%s.service" % UNIT in host.check_output("systemctl show -p After --value prometheus.service").split()
    host.check_output("systemctl start prometheus.service")
    try:
        host.check_output("systemctl stop %s" % UNIT)
        assert host.run("systemctl is-active prometheus.service").stdout.strip() != "active"
    finally:
        host.check_output("systemctl stop prometheus.service; systemctl start docker.service")
    assert host.check_output("systemctl is-active %s" % UNIT) == "active"


@pytest.mark.usefixtures("watch_held")
def test_docker_does_not_start_when_the_ruleset_cannot_be_loaded(host):
    """As at boot with a broken ruleset file: the unit's load fails, and Docker, which requires it, stays down."""
    saved = host.check_output("cat %s" % RULESET_FILE) + "\n"
    host.check_output("systemctl stop %s" % UNIT)
    host.check_output("echo 'this is not nftables' >> %s" % RULESET_FILE)
    try:
        assert host.run("systemctl start docker.service").rc != 0
        assert host.run("systemctl is-active docker.service").stdout.strip() != "active"
        assert host.run("nft list table inet dgxspark").rc != 0
    finally:
        host.check_output("cat > %s <<'RULESET'\n%sRULESET" % (RULESET_FILE, saved))
        host.check_output("systemctl reset-failed %s docker.service" % UNIT)
        host.check_output("systemctl start docker.service")
    assert host.check_output("systemctl is-active docker.service") == "active"
    assert host.ansible("dgxspark.cluster.nft_table", "", check=False)["matches"]


def test_prometheus_is_open_to_its_networks_only_and_the_node_exporter_to_the_rails_only(host, table):
    """monitoring's ports: Prometheus (9090) accepted from monitoring_nets (dgxspark_monitoring_allowed_cidrs: the lab
    names its management network; none by default); the node exporter (9100) named by no rule: the rails are accepted
    whole, and the policy drops it elsewhere."""
    wanted = host.ansible("ansible.builtin.debug", "var=dgxspark_monitoring_allowed_cidrs",
                          check=False)["dgxspark_monitoring_allowed_cidrs"]
    assert set_elements(table, "monitoring_nets") == sorted(wanted)
    rules = host.check_output("nft list chain inet dgxspark input").splitlines()
    assert [line.strip() for line in rules if "9090" in line] == ["tcp dport 9090 ip saddr @monitoring_nets accept"], rules
    assert [line for line in rules if "9100" in line] == [], rules
