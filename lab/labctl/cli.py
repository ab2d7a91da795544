"""The command line: argument parsing, the root check, LabError -> `labctl: error: ...` and exit code 1."""

import argparse
import os
import sys

from .constants import DEFAULT_NODES, REBOOT_DOWN_S, LabError
from .commands import (
    cmd_attach, cmd_build, cmd_down, cmd_driver, cmd_gpu, cmd_inventory, cmd_load_image, cmd_memory, cmd_mgmt, cmd_rail,
    cmd_reset, cmd_restart, cmd_serving, cmd_status, cmd_up,
)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="labctl.py", description="virtual DGX Spark lab")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="build images if needed and bring N nodes up (idempotent; heals faults)")
    p.add_argument("-n", "--nodes", type=int, default=int(os.environ.get("DGXSPARK_LAB_NODES", DEFAULT_NODES)))
    p.add_argument("--rate", default=None, help="per-port rate limit (tc tbf), e.g. 1gbit; 'none' removes it")
    p.add_argument("--model-profile", default=None, help="dgxspark_model_profile for the live inventory")
    p.add_argument("--serving", action="store_true",
                   help="also build (if needed) and load the serving image + lab model directory into every node")
    p.set_defaults(func=cmd_up)
    p = sub.add_parser("down", help="remove nodes, fabric, network")
    p.add_argument("--purge", action="store_true", help="also remove images and lab/state (keys)")
    p.set_defaults(func=cmd_down)
    p = sub.add_parser("status")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("rail", help="pull (down) or plug (up) a node's rail cable")
    p.add_argument("node")
    p.add_argument("rail")
    p.add_argument("action", choices=("down", "up"))
    p.set_defaults(func=cmd_rail)
    p = sub.add_parser("detach", help="take both rails of a node off the fabric (links stay up)")
    p.add_argument("node")
    p.set_defaults(func=lambda a: cmd_attach(a, True))
    p = sub.add_parser("attach")
    p.add_argument("node")
    p.set_defaults(func=lambda a: cmd_attach(a, False))
    p = sub.add_parser("restart", help="reboot nodes: down for --down-s seconds, like machines, then up (several at "
                                       "once: a power cut)")
    p.add_argument("node", nargs="+")
    p.add_argument("--down-s", type=float, default=REBOOT_DOWN_S,
                   help="seconds the node stays down (default %(default)s: a DGX Spark's reboot takes minutes)")
    p.set_defaults(func=cmd_restart)
    p = sub.add_parser("reset", help="recreate nodes from the image (fresh filesystem, same keys and address)")
    p.add_argument("node", nargs="+")
    p.set_defaults(func=cmd_reset)
    p = sub.add_parser("driver", help="set the driver version nvidia-smi reports on a node")
    p.add_argument("node")
    p.add_argument("version")
    p.set_defaults(func=cmd_driver)
    p = sub.add_parser("gpu", help="the utilisation and SM clock nvidia-smi reports on a node (a GPU stuck at low clocks)")
    p.add_argument("node")
    p.add_argument("--load", type=int, default=None, help="utilization.gpu in percent")
    p.add_argument("--sm-mhz", type=int, default=None, help="clocks.sm in MHz")
    p.add_argument("--reset", action="store_true", help="back to an idle GPU")
    p.set_defaults(func=cmd_gpu)
    p = sub.add_parser("memory", help="the node's stand-in /proc/meminfo (/etc/dgxspark-lab/meminfo); "
                                      "no option: show it")
    p.add_argument("node")
    p.add_argument("--total-gib", default=None, help="MemTotal in GiB (default 121.7, a Spark's)")
    p.add_argument("--available-gib", default=None,
                   help="MemAvailable in GiB (default 117, or a Spark's share of --total-gib)")
    p.add_argument("--swap-gib", default=None, help="SwapTotal = SwapFree in GiB (default 0)")
    p.add_argument("--reset", action="store_true", help="write the defaults")
    p.set_defaults(func=cmd_memory)
    p = sub.add_parser("mgmt", help="cut / restore a node's management network (ssh to it times out)")
    p.add_argument("node")
    p.add_argument("action", choices=("cut", "restore"))
    p.set_defaults(func=cmd_mgmt)
    p = sub.add_parser("load-image", help="copy a host image into the nodes' Docker daemons (no registry)")
    p.add_argument("image")
    p.add_argument("node", nargs="*", help="nodes (default: all)")
    p.set_defaults(func=cmd_load_image)
    p = sub.add_parser("serving", help="build the serving image if needed; load it and the lab model dir into nodes")
    p.add_argument("node", nargs="*", help="nodes (default: all)")
    p.set_defaults(func=cmd_serving)
    p = sub.add_parser("build")
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("inventory")
    p.add_argument("-n", "--nodes", type=int, default=DEFAULT_NODES)
    p.set_defaults(func=cmd_inventory)
    args = parser.parse_args(argv)
    if args.command not in ("inventory",) and os.geteuid() != 0:
        sys.stderr.write("labctl: must run as root (Docker, veths, iptables)\n")
        return 1
    try:
        return args.func(args) or 0
    except LabError as exc:
        sys.stderr.write("labctl: error: %s\n" % exc)
        return 1
