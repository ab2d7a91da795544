"""Settings of the lab (paths, names, addresses, image repositories, build formats) and LabError.

The bottom of the package: imports nothing from it.
"""

import os
import re

# lab/: this package is lab/labctl/
LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(LAB_DIR)
NODE_DIR = os.path.join(LAB_DIR, "node")
SERVING_DIR = os.path.join(LAB_DIR, "serving")
# A second lab beside the first (molecule's, while the lab tests run): its own containers, networks, bridges and state.
# 0 is the lab of `make run`, inventories/lab and the lab tests; 1 to 9 are further labs of the same images.
INSTANCE = int(os.environ.get("DGXSPARK_LAB_INSTANCE", "0") or "0")
if not 0 <= INSTANCE <= 9:
    raise SystemExit("DGXSPARK_LAB_INSTANCE must be 0 to 9, got %d" % INSTANCE)
STATE_DIR = os.environ.get("DGXSPARK_LAB_STATE", os.path.join(LAB_DIR, "state" if INSTANCE == 0 else "state-%d" % INSTANCE))
CACHE_DIR = os.environ.get("DGXSPARK_LAB_CACHE", os.path.join(REPO_DIR, ".cache", "lab"))
STATIC_INVENTORY_DIR = os.path.join(REPO_DIR, "inventories", "lab")

NODE_NAMES = ("spark-alpha", "spark-beta", "spark-gamma", "spark-delta",
              "spark-epsilon", "spark-zeta", "spark-eta", "spark-theta")
MIN_NODES, MAX_NODES, DEFAULT_NODES = 2, 8, 4

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_REPO = "dgxspark-lab/node-base"
NODE_REPO = "dgxspark-lab/node"
BUILD_FORMAT = "2"  # bump to force a rebuild when the build procedure itself changes

# Serving image (lab/serving/README.md): a small bookworm rootfs whose `vllm` and `ray` are vLLM's CPU build, a
# virtualenv on this host under ENGINE_ROOT, mounted read-only at the same path into every node (and, through the lab
# inventory's dgxspark_serving_extra_volumes, into the serving containers): one copy for every node and container.
SERVING_REPO = "dgxspark-lab/serving"
SERVING_BUILD_FORMAT = "4"
SERVING_PACKAGES = ("python3", "python3-venv", "iproute2", "procps", "ca-certificates", "python-is-python3", "libnuma1")
ENGINE_ROOT = "/opt/dgxspark-lab/engines"
ENGINE_FORMAT = "1"
ENGINE_COMPLETE = ".dgxspark-lab-engine-complete"
SERVING_MODELS_DIR = "/var/lib/dgxspark-lab/models"  # in each node; containers mount it (e.g. at /models)
# The lab's model: a tiny Qwen3-MoE made by lab/serving/make_lab_model.py (random weights, local tokenizer).
SERVING_MODEL_NAME = "qwen3-moe-tiny"
SERVING_MODEL_SHARDS = 4
SERVING_MODEL_MARKER = ".dgxspark-lab-model"  # holds the model's content hash

LABEL = "dgxspark.lab"
# The value of LABEL on this lab's containers and networks ("1": the first lab, as before there were several).
LABEL_VALUE = "1" if INSTANCE == 0 else "instance-%d" % INSTANCE
CONTAINER_PREFIX = "dgxspark-lab-" if INSTANCE == 0 else "dgxspark-lab%d-" % INSTANCE
MGMT_NETWORK = CONTAINER_PREFIX + "mgmt"
MGMT_SUBNET = "172.31.%d.0/24" % (240 + INSTANCE)
MGMT_GATEWAY = "172.31.%d.1" % (240 + INSTANCE)
# Host-side interface names (bridges, veths): at most 15 characters, "dsl-" for the first lab, "ds<N>-" for others.
HOST_IF_PREFIX = "dsl-" if INSTANCE == 0 else "ds%d-" % INSTANCE
MGMT_BRIDGE = HOST_IF_PREFIX + "mgmt"  # the management network's bridge on the host
MGMT_FIRST_OFFSET = 10  # spark-alpha = .10, spark-beta = .11, ...

# The fabric: two isolated Linux bridges, one per rail; per node four veths named like GB10's CX-7.
# (kind, node-side netdev, rail number or None for the unplugged port-0 twins)
FABRIC = (
    ("r1", "enp1s0f1np1", 1),
    ("r2", "enP2p1s0f1np1", 2),
    ("p0a", "enp1s0f0np0", None),
    ("p0b", "enP2p1s0f0np0", None),
)
BRIDGES = {1: HOST_IF_PREFIX + "rail1", 2: HOST_IF_PREFIX + "rail2"}
RAIL_SUBNETS = {1: "192.168.100.0/24", 2: "192.168.101.0/24"}
RAIL_ADDRESS_OFFSET = 10
HOST_MTU = 9000
# How long `restart` keeps a node down: longer than Ray takes to mark a silent node dead (its health checks, about
# 20 s), shorter than a real DGX Spark's reboot (minutes), so that tests stay quick and no node meets its own ghost.
REBOOT_DOWN_S = 45
# A node's /dev/shm (Docker's default is 64 MiB; a machine's is half its memory, and vLLM's engine core needs 160 MiB).
NODE_SHM_BYTES = 2 * 2 ** 30
NODE_START_MTU = 1500
# The nodes' CPU weight (docker --cpu-shares): a lab that runs beside another one can be given less (molecule's: 256).
CPU_SHARES = int(os.environ.get("DGXSPARK_LAB_CPU_SHARES", "1024") or "1024")

CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", "NET_RAW", "MKNOD", "SYS_PTRACE", "IPC_LOCK", "SYS_CHROOT",
                "SETFCAP", "AUDIT_WRITE", "AUDIT_CONTROL", "SYS_NICE", "CHOWN", "DAC_OVERRIDE", "FOWNER",
                "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE", "IPC_OWNER",
                "DAC_READ_SEARCH", "LEASE")
# Not granted: SYS_TIME (the host clock), SYS_MODULE, SYS_RAWIO, SYS_BOOT, SYSLOG, MAC_*; never --privileged
# (and --cap-add ALL fails here: CAP_SYS_RESOURCE is not in the bounding set).

# Stand-in /proc/meminfo for the collection's preflight checks (a node's real one is the host's): `labctl.py memory`.
MEMINFO_PATH = "/etc/dgxspark-lab/meminfo"
# The stand-in nvidia-smi's staged load (dgxspark_lab_standins.GPU_LOAD_FILE): "PERCENT MHZ".
GPU_LOAD_FILE = "/etc/dgxspark-lab/gpu-load"
SPARK_MEMTOTAL_KIB = 127614976          # a DGX Spark's MemTotal (121.7 GiB)
SPARK_MEMAVAILABLE_KIB = 117 * 1024 * 1024  # 117 GiB available, an idle Spark
SPARK_SWAP_KIB = 0                      # Sparks often have 16 GiB of swap; the lab's default is none

DRIVER_RE = re.compile(r"^\d{3}\.\d{1,3}(\.\d{1,3})?$")
RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$")


class LabError(Exception):
    """An error with a message that says what to do."""
