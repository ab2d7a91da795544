"""labctl: the virtual DGX Spark lab of dgxspark.cluster.

    labctl.py up [--nodes N] [--rate 1gbit|none] [--model-profile NAME] [--serving]
                                                 build (if needed) and start N nodes (2..8); --serving: see `serving`
    labctl.py down [--purge]                     remove nodes, fabric, network (--purge: images, state too)
    labctl.py status [--json]
    labctl.py rail NODE RAIL down|up             pull / plug a rail's cable (RAIL: 1, 2, rail1, rail2)
    labctl.py detach NODE | attach NODE          take a node's rails off the fabric switch / put them back
    labctl.py restart NODE                       restart a node (fabric re-plumbed, faults re-applied)
    labctl.py reset NODE...                      recreate nodes from the image (undo changes made inside them)
    labctl.py driver NODE VERSION                driver version the node's nvidia-smi stand-in reports
    labctl.py memory NODE [--total-gib X] [--available-gib Y] [--swap-gib Z] | --reset
                                                 the node's stand-in meminfo (/etc/dgxspark-lab/meminfo); alone: show it
    labctl.py mgmt NODE cut|restore              cut / restore a node's management network (ssh times out)
    labctl.py load-image IMAGE [NODE...]         copy a host image into the nodes' Docker (docker save | load)
    labctl.py serving [NODE...]                  build the serving image (if needed), load it + the lab model dir into nodes
    labctl.py build                              build the node image only
    labctl.py inventory [--nodes N]              print the hosts.yml for N nodes

See lab/README.md. Needs root and Docker (lab/ensure-docker.sh installs and starts it).
lab/labctl.py is the entry script (`python3 lab/labctl.py ...`); `python3 -m labctl` from lab/ is the same.

The package, one module per concern, each importing only the ones above it in this list:

    constants   paths, names, addresses, image repositories, build formats; LabError
    logic       pure logic: naming, addressing, parsing, content hashes (image tags), rendering (unit tested)
    host        logging, subprocess, Docker and `ip` wrappers, the state file and its lock
    images      the node image (debootstrap, docker import, docker build)
    serving     the serving image and the lab model directory, loaded into the nodes' Docker
    ssh         SSH keys, known_hosts, ssh config, the live inventory, the files seeded into a new node
    network     the management network, the rail bridges, the DOCKER-USER rules
    nodes       create / plumb / fault / remove nodes, wait for them
    commands    the subcommands (cmd_*)
    cli         argument parsing and main()

The pure layer (constants, logic) and the few helpers tests/lab uses are re-exported here (`import labctl` with
lab/ on sys.path). A setting such as STATE_DIR or CACHE_DIR is read by each module from its own import: to point a
function at another directory, patch the module that defines the function (e.g. labctl.ssh.STATE_DIR for
write_inventory), not this package.
"""

# Re-exported: the pure layer (constants, logic) and what tests/lab uses (conftest.py, test_labctl_unit.py).
from .constants import (
    BASE_REPO, BRIDGES, BUILD_FORMAT, CACHE_DIR, CAPABILITIES, CONTAINER_PREFIX, DEFAULT_MIRROR, DEFAULT_NODES,
    CPU_SHARES, DRIVER_RE, FABRIC, HOST_IF_PREFIX, HOST_MTU, INSTANCE, LABEL, LABEL_VALUE, LAB_DIR, MAX_NODES, MEMINFO_PATH, MGMT_BRIDGE, MGMT_FIRST_OFFSET, MGMT_GATEWAY,
    MGMT_NETWORK, MGMT_SUBNET, MIN_NODES, NODE_DIR, NODE_NAMES, NODE_REPO, NODE_START_MTU, RAIL_ADDRESS_OFFSET,
    RAIL_SUBNETS, RATE_RE, REPO_DIR, SERVING_BUILD_FORMAT, SERVING_DIR, SERVING_MODELS_DIR, SERVING_MODEL_MARKER,
    SERVING_MODEL_NAME, SERVING_MODEL_SHARDS, SERVING_PACKAGES, SERVING_REPO, ENGINE_ROOT,
    SPARK_MEMAVAILABLE_KIB, SPARK_MEMTOTAL_KIB, SPARK_SWAP_KIB, STATE_DIR, STATIC_INVENTORY_DIR, SUITE, LabError,
)
from .logic import (
    base_hash_parts, base_packages, container_name, content_hash, default_state, detect_mirror, fabric_mac,
    host_veth, is_serving_test_path, memory_kib, mgmt_ip, node_faults, node_hash_parts, node_index, node_names,
    parse_apt_sources, parse_gib, parse_rail, parse_rate, rail_address, rail_hosts, rate_to_bps, render_group_vars,
    render_hosts_yml, render_known_hosts, render_meminfo, render_ssh_config, serving_hash_parts, serving_model_hash,
    serving_tag, short_name, tbf_args, tree_entries, engine_dir, engine_hash,
)
from .host import load_state
from .serving import serving_model_tar, serving_rootfs_key, slim_rootfs
from .ssh import LIVE_STATE_DIR_EXPR, render_mgmt_netplan, write_inventory
from .cli import main

__all__ = [
    "BASE_REPO", "BRIDGES", "BUILD_FORMAT", "CACHE_DIR", "CAPABILITIES", "CONTAINER_PREFIX", "DEFAULT_MIRROR",
    "CPU_SHARES", "DEFAULT_NODES", "DRIVER_RE", "FABRIC", "HOST_IF_PREFIX", "HOST_MTU", "INSTANCE", "LABEL", "LABEL_VALUE",
    "LAB_DIR", "MAX_NODES", "MEMINFO_PATH",
    "MGMT_BRIDGE", "MGMT_FIRST_OFFSET", "MGMT_GATEWAY", "MGMT_NETWORK", "MGMT_SUBNET", "MIN_NODES", "NODE_DIR", "NODE_NAMES",
    "NODE_REPO", "NODE_START_MTU", "RAIL_ADDRESS_OFFSET", "RAIL_SUBNETS", "RATE_RE", "REPO_DIR",
    "SERVING_BUILD_FORMAT", "SERVING_DIR", "SERVING_MODELS_DIR", "SERVING_MODEL_MARKER", "SERVING_MODEL_NAME",
    "SERVING_MODEL_SHARDS", "ENGINE_ROOT", "SERVING_PACKAGES", "SERVING_REPO", "SPARK_MEMAVAILABLE_KIB",
    "SPARK_MEMTOTAL_KIB", "SPARK_SWAP_KIB", "STATE_DIR", "STATIC_INVENTORY_DIR", "SUITE", "LabError",
    "base_hash_parts", "base_packages", "container_name", "content_hash", "default_state", "detect_mirror",
    "fabric_mac", "host_veth", "is_serving_test_path", "memory_kib", "mgmt_ip", "node_faults", "node_hash_parts", "node_index",
    "node_names", "parse_apt_sources", "parse_gib", "parse_rail", "parse_rate", "rail_address", "rail_hosts", "rate_to_bps",
    "render_group_vars", "render_hosts_yml", "render_known_hosts", "render_meminfo", "render_ssh_config",
    "serving_hash_parts", "serving_model_hash", "serving_tag", "engine_dir", "engine_hash", "short_name", "tbf_args", "tree_entries",
    "load_state", "serving_model_tar", "serving_rootfs_key", "slim_rootfs", "LIVE_STATE_DIR_EXPR",
    "render_mgmt_netplan", "write_inventory", "main",
]
