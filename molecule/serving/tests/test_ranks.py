# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of where vLLM's ranks run, in both serving scenarios. With Ray, vLLM runs on the head only and Ray
places the ranks (no vLLM container on a worker). With mp, every node runs its own rank: rank 0 on the head with the API
and the key, every other node `--headless` with rank 0's rendezvous (the head's rail-1 address and the plan's port), no
key, and a watch that ends it when rank 0 is gone (vLLM #32136)."""

from __future__ import annotations

import json

import pytest

from conftest import VLLM

testinfra_hosts = ["ansible://all"]
KEY_IN_CONTAINER = "/run/secrets/dgxspark/vllm_api_key"


def option(args, name):
    """The value of --NAME in an argv, or None when it is absent."""
    return args[args.index(name) + 1] if name in args else None


def vllm_container(host):
    result = host.run("docker inspect %s" % VLLM)
    return json.loads(result.stdout)[0] if result.rc == 0 else None


def is_head(host, plan):
    return host.ansible.get_variables()["inventory_hostname"] == plan["head"]


@pytest.mark.usefixtures("ray_only")
def test_with_ray_vllm_runs_on_the_head_only_and_ray_places_the_ranks(host, plan):
    container = vllm_container(host)
    if not is_head(host, plan):
        assert container is None
        return
    assert option(container["Config"]["Cmd"], "--distributed-executor-backend") == "ray"
    assert "--nnodes" not in container["Config"]["Cmd"]


@pytest.mark.usefixtures("mp_only")
def test_with_mp_every_node_runs_its_own_rank_of_one_group(host, plan):
    name = host.ansible.get_variables()["inventory_hostname"]
    container = vllm_container(host)
    assert container is not None and container["State"]["Running"] is True
    args = container["Config"]["Cmd"]
    rank = [node["rank"] for node in plan["nodes"] if node["host"] == name][0]
    assert option(args, "--distributed-executor-backend") == "mp"
    assert (option(args, "--nnodes"), option(args, "--node-rank")) == (str(len(plan["nodes"])), str(rank))
    head_rail1 = plan["nodes"][0]["rail_addresses"][plan["rails"][0]["name"]]
    assert plan["mp_master"]["address"] == head_rail1
    assert (option(args, "--master-addr"), option(args, "--master-port")) == (head_rail1, str(plan["mp_master"]["port"]))
    assert ("--headless" in args) is (rank != 0)


@pytest.mark.usefixtures("mp_only")
def test_with_mp_each_rank_has_its_nodes_rdma_access_and_nothing_more(host):
    # NCCL over RoCE runs in the rank's container: the RDMA devices (none on a lab node: dgxspark_serving_rdma_devices),
    # the memlock limit and IPC_LOCK, exactly as Ray's container has them with Ray; nothing else, in its own PID namespace.
    config = vllm_container(host)["HostConfig"]
    variables = host.ansible.get_variables()
    devices = [device["PathOnHost"] for device in config["Devices"] or []]
    assert devices == list(variables.get("dgxspark_serving_rdma_devices", ["/dev/infiniband"]))
    # Rank 0 opens the API key's file (CAP_DAC_READ_SEARCH) and drops that and CAP_SETPCAP before vLLM starts.
    key_reader = ["DAC_READ_SEARCH", "SETPCAP"] if "DGXSPARK_API_KEY_FILE" in str(vllm_container(host)["Config"]["Env"]) else []
    assert (config["CapDrop"], config["CapAdd"]) == (["ALL"], key_reader + ["IPC_LOCK"])
    assert config["PidMode"] == "" and "no-new-privileges" in config["SecurityOpt"]


@pytest.mark.usefixtures("mp_only")
def test_with_mp_the_key_and_the_api_are_the_heads_only(host, plan):
    container = vllm_container(host)
    env = dict(item.split("=", 1) for item in container["Config"]["Env"])
    mounts = [mount["Destination"] for mount in container["Mounts"]]
    listening = host.check_output("ss -ltnH")
    if is_head(host, plan):
        assert KEY_IN_CONTAINER in mounts and env["DGXSPARK_API_KEY_FILE"] == KEY_IN_CONTAINER
        assert ":8000 " in listening
        # Rank 0's rendezvous (vLLM's TCPStore listens on every interface: the firewall keeps it to the rails).
        assert ":%d " % plan["mp_master"]["port"] in listening
        assert "DGXSPARK_RANK_WATCH" not in env
    else:
        assert KEY_IN_CONTAINER not in mounts and "DGXSPARK_API_KEY_FILE" not in env
        assert not host.file("/etc/dgxspark/secrets/vllm_api_key").exists
        assert ":8000 " not in listening
        assert env["DGXSPARK_RANK_WATCH"] == "%(address)s:%(port)d" % plan["mp_master"]
