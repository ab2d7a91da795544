"""The subcommands (cmd_*): what `labctl.py up`, `down`, `status`, `rail`, ... do."""

import json
import os
import shutil
import sys
import time

from .constants import (
    BASE_REPO, BRIDGES, DRIVER_RE, FABRIC, GPU_LOAD_FILE, LABEL, MEMINFO_PATH, MGMT_NETWORK, MGMT_SUBNET, NODE_NAMES, NODE_REPO, SERVING_REPO,
    STATE_DIR, LabError,
)
from .logic import (
    container_name, default_state, host_veth, memory_kib, mgmt_ip, node_faults, node_index, node_names, parse_rail,
    parse_rate, render_hosts_yml, serving_model_hash,
)
from .host import (
    docker, docker_available, ensure_docker, ip_cmd, link_exists, load_state, log, out, save_state, state_lock,
    state_path,
)
from .images import ensure_images, image_exists, prune_images, remove_stale_images
from .serving import (
    copy_image_into_node, ensure_serving_image, node_has_image, node_has_model, provide_serving, record_serving_image,
    serving_model_path,
)
from .ssh import MGMT_NETPLAN_PATH, ensure_ssh_keys, mgmt_netplan_tar, ssh_dir, write_inventory, write_ssh_files
from .network import ensure_bridges, ensure_iptables, ensure_mgmt_network, remove_iptables
from .nodes import (
    apply_node_network, connect_mgmt, container_pid, create_node, cut_mgmt, ensure_meminfo, fabric_ok, in_node_netns,
    inspect_container, lab_containers, outdated_node, mgmt_connected, node_keys_id, pin_fabric_macs, plumb_fabric, remove_node,
    system_state, wait_nodes, wait_ssh, write_meminfo,
)


def cmd_build(_args):
    ensure_docker()
    image = ensure_images()
    print(image)


def cmd_up(args):
    count = node_names(args.nodes) and args.nodes
    started = time.time()
    ensure_docker()
    with state_lock():
        previous = load_state() or {}
        rate = parse_rate(args.rate) if args.rate is not None else previous.get("rate")
        state = default_state(count, rate)  # `up` heals faults: every rail plugged, every node attached
        state["model_profile"] = args.model_profile or previous.get("model_profile")
        state["mgmt_subnet"] = MGMT_SUBNET  # the inventory's API allow-list names it (a second lab has its own)
        if previous.get("serving_image"):
            state["serving_image"] = previous["serving_image"]
        image = ensure_images()
        state["image"] = image
        nodes = node_names(count)
        ensure_ssh_keys(nodes)
        ensure_mgmt_network()
        ensure_bridges()
        ensure_iptables()
        existing = lab_containers()
        for node in existing:
            if node not in nodes:
                log("removing %s (not part of a %d-node lab)" % (node, count))
                remove_node(node)
        for index, node in enumerate(nodes):
            info = inspect_container(node)
            if info and (info["Config"]["Image"] != image
                         or info["NetworkSettings"]["Networks"].get(MGMT_NETWORK, {}).get("IPAddress") not in
                         (mgmt_ip(index), None, "")):
                log("recreating %s (image or address changed)" % node)
                remove_node(node)
                info = None
            elif info and outdated_node(info):
                log("recreating %s (%s)" % (node, outdated_node(info)))
                remove_node(node)
                info = None
            elif info and (info["Config"].get("Labels") or {}).get(LABEL + ".keys") != node_keys_id(node):
                log("recreating %s (seeded with the SSH keys of another lab state dir)" % node)
                remove_node(node)
                info = None
            if info and not mgmt_connected(info):
                log("restoring the management network of %s (%s)" % (node, mgmt_ip(index)))
                connect_mgmt(node, index)
            if info is None:
                log("creating %s (%s)" % (node, mgmt_ip(index)))
                create_node(node, index, image)
                docker("start", container_name(node))
                plumb_fabric(node, state)
            elif not info["State"]["Running"]:
                log("starting %s" % node)
                docker("start", container_name(node))
                plumb_fabric(node, state)
            elif not fabric_ok(node):
                log("re-plumbing the fabric of %s" % node)
                plumb_fabric(node, state)
            else:
                pin_fabric_macs(node)
                apply_node_network(node, state)
            if docker("exec", container_name(node), "test", "-e", "/" + MGMT_NETPLAN_PATH, check=False).returncode != 0:
                docker("cp", "-", container_name(node) + ":/", input_data=mgmt_netplan_tar(index))
            if ensure_meminfo(node):
                log("%s: wrote the default stand-in %s" % (node, MEMINFO_PATH))
        save_state(state)
        write_ssh_files(count)
        write_inventory(count, state.get("model_profile"))
        prune_images(image)
    results = wait_nodes(nodes)
    bad = False
    for node in nodes:
        sysstate, ssh_ok, failed = results[node]
        if sysstate != "running" or not ssh_ok:
            # degraded = booted with failed units (something changed inside the node): warn, it is usable;
            # `labctl.py reset NODE` gives a fresh node.
            bad = bad or not ssh_ok or sysstate not in ("running", "degraded")
            log("%s: system %s, ssh %s; failed units: %s" % (
                node, sysstate, "ok" if ssh_ok else "NOT reachable", failed.replace("\n", "; ") or "none"))
    if args.serving and not bad:
        tag = ensure_serving_image()
        record_serving_image(tag)
        provide_serving(nodes, tag)
    log("lab up: %d nodes in %.1f s; inventory %s; ssh -F %s spark-alpha" % (
        count, time.time() - started, os.path.join(STATE_DIR, "inventory"), os.path.join(ssh_dir(), "config")))
    return 1 if bad else 0


def cmd_down(args):
    if not docker_available():
        log("docker is not running; cleaning host links only")
    else:
        with state_lock():
            for node in lab_containers():
                log("removing %s" % node)
                remove_node(node)
            docker("network", "rm", MGMT_NETWORK, check=False)
    for node in NODE_NAMES:
        for kind, _netdev, _rail in FABRIC:
            if link_exists(host_veth(node, kind)):
                ip_cmd("link", "del", host_veth(node, kind), check=False)
    for bridge in BRIDGES.values():
        if link_exists(bridge):
            ip_cmd("link", "del", bridge, check=False)
    remove_iptables()
    for path in (state_path(), ):
        if os.path.exists(path):
            os.unlink(path)
    shutil.rmtree(os.path.join(STATE_DIR, "inventory"), ignore_errors=True)
    if args.purge:
        if docker_available():
            remove_stale_images(NODE_REPO, None)
            remove_stale_images(BASE_REPO, None)
            remove_stale_images(SERVING_REPO, None)
        shutil.rmtree(STATE_DIR, ignore_errors=True)
    log("lab down")
    return 0


def node_status(node, index, state):
    info = inspect_container(node)
    row = {"node": node, "mgmt_ip": mgmt_ip(index), "container": "absent"}
    if not info:
        return row
    row["container"] = info["State"]["Status"]
    row["mgmt"] = "connected" if mgmt_connected(info) else "cut"
    if not info["State"]["Running"]:
        return row
    row["system"] = system_state(node)
    pid = info["State"]["Pid"]
    links = {}
    proc = in_node_netns(pid, "ip", "-j", "addr", "show", check=False)
    for link in json.loads(proc.stdout or b"[]"):
        links[link["ifname"]] = link
    faults = node_faults(state, node) if state else {}
    row["fabric"] = {}
    for kind, netdev, rail in FABRIC:
        link = links.get(netdev)
        host = host_veth(node, kind)
        entry = {"present": link is not None}
        if link:
            entry.update({"operstate": link.get("operstate"), "mtu": link.get("mtu"),
                          "ipv4": ["%s/%s" % (a["local"], a["prefixlen"]) for a in link.get("addr_info", [])
                                   if a.get("family") == "inet"]})
        entry["host_end"] = host if link_exists(host) else None
        if rail:
            entry["rail"] = rail
            entry["fault"] = "detached" if faults.get("detached") else ("cable pulled" if faults.get("rail%d" % rail) == "down" else None)
        row["fabric"][netdev] = entry
    row["driver"] = out(docker("exec", container_name(node), "cat", "/etc/dgxspark-lab/driver-version", check=False))
    if state and state.get("serving_image"):
        row["serving"] = {"image": node_has_image(node, state["serving_image"]),
                          "model": serving_model_path() if node_has_model(node, serving_model_hash()) else None}
    return row


def cmd_status(args):
    state = load_state()
    if not docker_available():
        rows, count = [], (state or {}).get("nodes", 0)
    else:
        existing = lab_containers()
        count = (state or {}).get("nodes") or len(existing)
        rows = [node_status(n, i, state or {}) for i, n in enumerate(NODE_NAMES)
                if i < count or n in existing]
    if args.json:
        print(json.dumps({"state": state, "serving_image": (state or {}).get("serving_image"), "nodes": rows},
                         indent=2))
        return 0
    if not rows:
        print("lab is down (no nodes); `python3 lab/labctl.py up` starts it")
        return 0
    print("lab: %d nodes, image %s, rate %s, serving image %s" % (
        count, (state or {}).get("image"), (state or {}).get("rate") or "unlimited",
        (state or {}).get("serving_image") or "none (`labctl.py serving`)"))
    for row in rows:
        fabric = " ".join("%s=%s%s" % (netdev, e.get("operstate", "absent"), "(%s)" % e["fault"] if e.get("fault") else "")
                          for netdev, e in row.get("fabric", {}).items())
        serving = ""
        if "serving" in row:
            serving = " serving=%s" % ("+".join(k for k in ("image", "model") if row["serving"][k]) or "missing")
        print("%-14s %-15s%s %-8s %-9s driver=%-10s %s%s" % (
            row["node"], row["mgmt_ip"], "(CUT)" if row.get("mgmt") == "cut" else "", row["container"],
            row.get("system", "-"), row.get("driver", "-"), fabric, serving))
    return 0


def require_state(node):
    state = load_state()
    if not state:
        raise LabError("the lab is not up; run `labctl.py up` first")
    if node_index(node) >= state["nodes"]:
        raise LabError("%s is not part of the running %d-node lab" % (node, state["nodes"]))
    return state


def cmd_rail(args):
    rail = parse_rail(args.rail)
    with state_lock():
        state = require_state(args.node)
        node_faults(state, args.node)["rail%d" % rail] = args.action
        apply_node_network(args.node, state)
        save_state(state)
    log("%s rail %d (%s) cable %s" % (args.node, rail, FABRIC[rail - 1][1], "plugged" if args.action == "up" else "pulled"))
    return 0


def cmd_attach(args, detached):
    with state_lock():
        state = require_state(args.node)
        node_faults(state, args.node)["detached"] = detached
        apply_node_network(args.node, state)
        save_state(state)
    log("%s %s the fabric" % (args.node, "detached from" if detached else "attached to"))
    return 0


def cmd_restart(args):
    """Reboot the nodes together (one node: a reboot; several: a power cut), each down --down-s seconds."""
    with state_lock():
        for node in args.node:
            state = require_state(node)
        for node in args.node:
            docker("stop", "-t", "10", container_name(node))
        # Down as long as a machine's reboot at least: a node back within seconds meets its own old incarnation in
        # Ray (not yet marked dead), which no hardware does.
        time.sleep(max(0.0, args.down_s))
        for node in args.node:
            docker("start", container_name(node))
            plumb_fabric(node, state)
    results = wait_nodes(args.node)
    ok = True
    for node in args.node:
        sysstate, ssh_ok, failed = results[node]
        ok = ok and ssh_ok
        log("%s restarted: system %s, ssh %s %s" % (node, sysstate, "ok" if ssh_ok else "NOT reachable", failed))
    return 0 if ok else 1


def cmd_reset(args):
    """Recreate nodes from the image: whatever was changed inside them is gone (keys and faults stay)."""
    with state_lock():
        state = load_state()
        if not state:
            raise LabError("the lab is not up; run `labctl.py up` first")
        for node in args.node:
            require_state(node)
        # The serving image and model directory are lab-provided (like keys and faults): a node that had
        # them gets them back after the reset (the node's Docker volume is recreated empty).
        serving = state.get("serving_image")
        reload_serving = [n for n in args.node if serving and inspect_container(n) and node_has_image(n, serving)]
        for node in args.node:
            log("resetting %s" % node)
            remove_node(node)
            create_node(node, node_index(node), state["image"])
            docker("start", container_name(node))
            plumb_fabric(node, state)
            ensure_meminfo(node)
    results = wait_nodes(args.node)
    ok = True
    for node in args.node:
        sysstate, ssh_ok, failed = results[node]
        ok = ok and ssh_ok and sysstate == "running"
        log("%s reset: system %s, ssh %s %s" % (node, sysstate, "ok" if ssh_ok else "NOT reachable", failed))
    if reload_serving and image_exists(serving):
        provide_serving(reload_serving, serving)
    return 0 if ok else 1


def cmd_driver(args):
    if not DRIVER_RE.match(args.version):
        raise LabError("driver version %r does not look like 580.95.05" % args.version)
    require_state(args.node)
    docker("exec", container_name(args.node), "sh", "-c",
           "printf '%s\\n' > /etc/dgxspark-lab/driver-version" % args.version)
    log("%s: nvidia-smi now reports driver %s" % (args.node, args.version))
    return 0


def cmd_gpu(args):
    """The stand-in GPU's load: utilisation and SM clock (a GB10 stuck at low clocks under load), or --reset to idle."""
    if not args.reset and (args.load is None or args.sm_mhz is None):
        raise LabError("give --load PERCENT and --sm-mhz MHZ, or --reset")
    if not args.reset and not (0 <= args.load <= 100 and 0 < args.sm_mhz <= 5000):
        raise LabError("--load is a percentage and --sm-mhz a clock in MHz (got %s and %s)" % (args.load, args.sm_mhz))
    require_state(args.node)
    script = "rm -f %s" % GPU_LOAD_FILE if args.reset else "printf '%d %d\\n' > %s" % (args.load, args.sm_mhz, GPU_LOAD_FILE)
    docker("exec", container_name(args.node), "sh", "-c", script)
    log("%s: nvidia-smi now reports %s" % (args.node, "an idle GPU" if args.reset else "%d%% utilisation at %d MHz" % (
        args.load, args.sm_mhz)))
    return 0


def cmd_memory(args):
    """The node's stand-in meminfo (MEMINFO_PATH): set figures, --reset to a Spark's, or show it."""
    given = (args.total_gib, args.available_gib, args.swap_gib)
    figures = memory_kib(*given, reset=args.reset)  # validates before touching the lab
    require_state(args.node)
    container_pid(args.node)
    if not args.reset and all(v is None for v in given):
        proc = docker("exec", container_name(args.node), "cat", MEMINFO_PATH, check=False)
        if proc.returncode != 0:
            raise LabError("%s has no %s yet (`labctl.py up` or `memory %s --reset` writes the default)" % (
                args.node, MEMINFO_PATH, args.node))
        sys.stdout.write(out(proc) + "\n")
        return 0
    write_meminfo(args.node, *figures)
    log("%s: %s now says MemTotal %d kB, MemAvailable %d kB, SwapTotal %d kB%s" % (
        args.node, MEMINFO_PATH, figures[0], figures[1], figures[2], " (the defaults)" if args.reset else ""))
    return 0


def cmd_mgmt(args):
    """Cut / restore a node's management network (Docker network disconnect / connect at its fixed address)."""
    with state_lock():
        require_state(args.node)
        index = node_index(args.node)
        info = inspect_container(args.node)
        if not info:
            raise LabError("node %s does not exist; run `labctl.py up`" % args.node)
        connected = mgmt_connected(info)
        if args.action == "cut":
            if not connected:
                log("%s: management network already cut (nothing to do)" % args.node)
                return 0
            cut_mgmt(args.node, index)
            log("%s: management network cut (%s unreachable; rails and containers keep running)" % (
                args.node, mgmt_ip(index)))
            return 0
        if connected:
            log("%s: management network already connected (nothing to do)" % args.node)
            return 0
        connect_mgmt(args.node, index)
    ok = not info["State"]["Running"] or wait_ssh(mgmt_ip(index), timeout=30)
    log("%s: management network restored at %s%s" % (
        args.node, mgmt_ip(index), "" if ok else "; ssh NOT reachable"))
    return 0 if ok else 1


def cmd_load_image(args):
    """Copy an image from the host's Docker into the Docker daemon of lab nodes (skipped where present)."""
    state = load_state()
    if not state:
        raise LabError("the lab is not up; run `labctl.py up` first")
    nodes = args.node or node_names(state["nodes"])
    for node in nodes:
        require_state(node)
    proc = docker("image", "inspect", "-f", "{{.Id}}", args.image, check=False)
    if proc.returncode != 0:
        raise LabError("image %s is not in the host's Docker (build it first; nothing is pulled)" % args.image)
    image_id = out(proc)
    for node in nodes:
        have = out(docker("exec", container_name(node), "docker", "image", "inspect", "-f", "{{.Id}}", args.image,
                          check=False))
        if have == image_id:
            log("%s: %s already loaded" % (node, args.image))
            continue
        log("%s: loaded %s in %.1f s" % (node, args.image, copy_image_into_node(node, args.image)))
    return 0


def cmd_serving(args):
    """Build the serving image if its inputs changed, load it (and the lab model directory) into nodes."""
    state = load_state()
    if not state:
        raise LabError("the lab is not up; run `labctl.py up` first")
    nodes = args.node or node_names(state["nodes"])
    for node in nodes:
        require_state(node)
        container_pid(node)
    ensure_docker()
    tag = ensure_serving_image()
    record_serving_image(tag)
    provide_serving(nodes, tag)
    print(tag)
    return 0


def cmd_inventory(args):
    sys.stdout.write(render_hosts_yml(args.nodes))
    return 0
