# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of ray_cluster in both serving scenarios. Each node's serving container (Ray's, or with mp the
node's vLLM rank) carries its own rail-1 address as VLLM_HOST_IP and vLLM's cache on the node. With Ray: one Ray
container per node with --node-ip-address, the non-carry-over file, token authentication with the token only in a
0600 file, every planned node alive in Ray with one GPU. With mp: no Ray container, token or port anywhere (--check
--diff of the converged scenario: see test_vllm_container.py)."""

from __future__ import annotations

import json
import os
import shlex

import pytest

from conftest import RAY, node_container


testinfra_hosts = ["ansible://all"]
CONTAINER = RAY
TOKEN = "/etc/dgxspark/secrets/ray_token"
with open(os.path.join(os.environ.get("MOLECULE_PROJECT_DIRECTORY", "."), "roles", "ray_cluster", "files", "ray-nodes.py")) as _handle:
    RAY_NODES = _handle.read()


def inspect(host, name=CONTAINER):
    return json.loads(host.check_output("docker inspect %s" % name))[0]


def env_of(container):
    return dict(item.split("=", 1) for item in container["Config"]["Env"])


def rail1_address(plan, name):
    node = [n for n in plan["nodes"] if n["host"] == name][0]
    return node["rail_addresses"][plan["rails"][0]["name"]]


@pytest.mark.usefixtures("ray_only")
def test_container_runs_with_host_namespaces_and_restart_policy(host):
    container = inspect(host)
    assert container["State"]["Running"] is True
    assert container["HostConfig"]["NetworkMode"] == "host"
    assert container["HostConfig"]["IpcMode"] == "host"
    # Its own PID namespace on every node, never the host's: the head's vLLM container joins it (the driver finds its
    # raylet by process).
    assert container["HostConfig"]["PidMode"] == ""
    # The supervisor alone restarts the group (within its budget): Docker must not loop on its own.
    assert container["HostConfig"]["RestartPolicy"]["Name"] == "no"
    # Docker's default capabilities dropped, IPC_LOCK alone added (RDMA memory registration).
    assert (container["HostConfig"]["CapDrop"], container["HostConfig"]["CapAdd"]) == (["ALL"], ["IPC_LOCK"])
    assert container["HostConfig"]["Privileged"] is False


def test_vllm_host_ip_is_this_nodes_own_rail1_address(host, plan, backend):
    name = host.ansible.get_variables()["inventory_hostname"]
    container = inspect(host, node_container(backend))
    env = env_of(container)
    assert env["VLLM_HOST_IP"] == rail1_address(plan, name)
    others = [rail1_address(plan, n["host"]) for n in plan["nodes"] if n["host"] != name]
    assert env["VLLM_HOST_IP"] not in others
    assert env["NCCL_SOCKET_IFNAME"] == "=" + plan["rails"][0]["interface"]
    # Gloo: vLLM's process groups with mp, Ray's collective setup with Ray (no `=` prefix there).
    assert env["GLOO_SOCKET_IFNAME"] == plan["rails"][0]["interface"]
    if backend == "ray":
        assert "--node-ip-address=%s" % rail1_address(plan, name) in container["Args"]
        assert env["RAY_memory_monitor_refresh_ms"] == "0"
    else:
        assert not [key for key in env if key.startswith("RAY_")], env


def test_vllm_cache_is_the_nodes_own_directory_kept_across_restarts(host, backend):
    container = inspect(host, node_container(backend))
    cache = "/var/cache/dgxspark/vllm"
    assert env_of(container)["VLLM_CACHE_ROOT"] == cache
    mounts = {m["Destination"]: m for m in container["Mounts"]}
    assert mounts[cache]["Source"] == cache and mounts[cache]["RW"] is True
    directory = host.file(cache)
    assert directory.is_directory and directory.user == "root" and directory.mode == 0o700


@pytest.mark.usefixtures("ray_only")
def test_token_only_in_a_0600_file(host):
    token = host.file(TOKEN)
    assert token.mode == 0o600 and token.user == "root"
    assert host.file("/etc/dgxspark/secrets").mode == 0o700
    secret = token.content_string.strip()
    assert len(secret) >= 32
    env = env_of(inspect(host))
    assert env["RAY_AUTH_MODE"] == "token"
    assert "RAY_AUTH_TOKEN" not in env
    assert secret not in host.check_output("docker inspect %s" % CONTAINER)
    assert secret not in host.check_output("ps -eo args")
    assert secret not in host.run("docker logs %s 2>&1" % CONTAINER).stdout


@pytest.mark.usefixtures("ray_only")
def test_non_carry_over_list_names_the_per_host_keys(host):
    # The vLLM container writes it to $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json at start (test_vllm_container.py).
    env = env_of(inspect(host))
    names = json.loads(env["DGXSPARK_RAY_NON_CARRY_OVER"])
    for key in ("VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "VLLM_API_KEY", "PYTHONPATH"):
        assert key in names
    assert env["VLLM_CONFIG_ROOT"] == "/run/dgxspark/vllm-config"


@pytest.mark.usefixtures("ray_only")
def test_every_planned_node_is_alive_in_ray_with_one_gpu(host, plan):
    if host.ansible.get_variables()["inventory_hostname"] != plan["head"]:
        pytest.skip("asked on the head")
    nodes = json.loads(host.check_output("docker exec %s python3 -c %s" % (CONTAINER, shlex.quote(RAY_NODES))))
    alive = sorted((n["NodeManagerAddress"], n["Resources"].get("GPU")) for n in nodes if n["Alive"])
    assert alive == sorted((rail1_address(plan, n["host"]), 1.0) for n in plan["nodes"])


@pytest.mark.usefixtures("ray_only")
def test_no_dashboard_and_fixed_ports(host, plan):
    listening = host.check_output("ss -ltnH")
    assert ":8265 " not in listening
    if host.ansible.get_variables()["inventory_hostname"] == plan["head"]:
        assert ":6379 " in listening
    assert ":6380 " in listening and ":6381 " in listening



@pytest.mark.usefixtures("mp_only")
def test_mp_leaves_no_ray_container_token_or_port(host):
    assert host.run("docker inspect %s" % CONTAINER).rc != 0
    assert not host.file(TOKEN).exists
    listening = host.check_output("ss -ltnH")
    for port in (6379, 6380, 6381, 8265):
        assert ":%d " % port not in listening, listening
