"""ray start arguments: fixed ports, head/worker, dashboard on loopback only, every bad input refused."""
import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.ray_start import (
    RayStartError,
    ray_ports_in_use,
    ray_start_argv,
)

PORTS = {
    "gcs": 6379, "node_manager": 6380, "object_manager": 6381, "runtime_env_agent": 6382, "dashboard_agent_grpc": 6383,
    "dashboard_agent_listen": 52365, "metrics_export": 6384, "dashboard": 8265, "client_server": 10001,
    "min_worker": 10002, "max_worker": 19999,
}
WORKER_PORTS = ["--node-manager-port=6380", "--object-manager-port=6381", "--runtime-env-agent-port=6382",
                "--dashboard-agent-grpc-port=6383", "--dashboard-agent-listen-port=52365", "--metrics-export-port=6384",
                "--min-worker-port=10002", "--max-worker-port=19999"]


def test_head():
    assert ray_start_argv(PORTS, "head", "192.168.100.10", "192.168.100.10") == [
        "--block", "--node-ip-address=192.168.100.10", "--num-gpus=1", "--disable-usage-stats", "--head",
        "--include-dashboard=false", "--port=6379"] + WORKER_PORTS[:6] + ["--ray-client-server-port=10001"] + WORKER_PORTS[6:]


def test_worker_joins_head_on_gcs_port_and_opens_no_head_ports():
    argv = ray_start_argv(PORTS, "worker", "192.168.100.11", "192.168.100.10")
    assert argv == ["--block", "--node-ip-address=192.168.100.11", "--num-gpus=1", "--disable-usage-stats",
                    "--address=192.168.100.10:6379"] + WORKER_PORTS


@pytest.mark.parametrize("kwargs, present, absent", [
    ({"dashboard": True}, ["--include-dashboard=true", "--dashboard-host=127.0.0.1", "--dashboard-port=8265"], ["--include-dashboard=false"]),
    ({"dashboard": False}, ["--include-dashboard=false"], ["--dashboard-port=8265", "--dashboard-host=127.0.0.1"]),
    ({"client_server": False}, [], ["--ray-client-server-port=10001"]),
    ({"object_store_memory": 100000000}, ["--object-store-memory=100000000"], []),
    ({"num_gpus": 0}, ["--num-gpus=0"], []),
])
def test_head_options(kwargs, present, absent):
    argv = ray_start_argv(PORTS, "head", "192.168.100.10", "192.168.100.10", **kwargs)
    for item in present:
        assert item in argv
    for item in absent:
        assert item not in argv


def test_dashboard_never_on_a_worker():
    argv = ray_start_argv(PORTS, "worker", "192.168.100.11", "192.168.100.10", dashboard=True)
    assert not [a for a in argv if "dashboard-port" in a or "dashboard-host" in a or "include-dashboard" in a]


@pytest.mark.parametrize("change, message", [
    ({"gcs": None}, "ray_cluster_ports.gcs is None: give a TCP port number from 1 to 65535."),
    ({"gcs": "6379"}, "ray_cluster_ports.gcs is '6379'"),
    ({"gcs": True}, "ray_cluster_ports.gcs is True"),
    ({"gcs": 70000}, "ray_cluster_ports.gcs is 70000"),
    ({"node_manager": 6379}, "ray_cluster_ports.gcs and ray_cluster_ports.node_manager are both 6379"),
    ({"metrics_export": 12000}, "ray_cluster_ports.metrics_export (12000) lies in the worker port range 10002-19999"),
    ({"min_worker": 20000}, "ray_cluster_ports.min_worker (20000) must be below max_worker (19999)."),
    ({"grafana": 3000}, "ray_cluster_ports has unknown name(s) grafana"),
])
def test_bad_ports(change, message):
    ports = dict(PORTS, **change)
    with pytest.raises(RayStartError) as err:
        ray_start_argv(ports, "head", "192.168.100.10", "192.168.100.10")
    assert message in str(err.value)


def test_missing_port_names_the_risk():
    ports = dict(PORTS)
    del ports["object_manager"]
    with pytest.raises(RayStartError, match="lacks object_manager: give every port .an unset Ray port is random"):
        ray_start_argv(ports, "head", "192.168.100.10", "192.168.100.10")


@pytest.mark.parametrize("args, message", [
    (("leader", "192.168.100.10", "192.168.100.10"), "role is 'leader': use head or worker."),
    (("worker", "spark-beta", "192.168.100.10"), "the node address is 'spark-beta', not an IPv4 address"),
    (("worker", "192.168.100.11", ""), "the head address is '', not an IPv4 address"),
])
def test_bad_addresses_and_role(args, message):
    with pytest.raises(RayStartError) as err:
        ray_start_argv(PORTS, *args)
    assert message in str(err.value)


@pytest.mark.parametrize("value", [1000, True, "1e9", -5])
def test_bad_object_store_memory(value):
    with pytest.raises(RayStartError, match="ray_cluster_object_store_memory"):
        ray_start_argv(PORTS, "head", "192.168.100.10", "192.168.100.10", object_store_memory=value)


@pytest.mark.parametrize("value", [-1, True, 1.0])
def test_bad_num_gpus(value):
    with pytest.raises(RayStartError, match="ray_cluster_num_gpus"):
        ray_start_argv(PORTS, "head", "192.168.100.10", "192.168.100.10", num_gpus=value)


def test_ports_in_use():
    assert ray_ports_in_use(PORTS) == dict((k, v) for k, v in PORTS.items() if k != "dashboard")
    assert "dashboard" in ray_ports_in_use(PORTS, dashboard=True)
    assert "client_server" not in ray_ports_in_use(PORTS, client_server=False)
