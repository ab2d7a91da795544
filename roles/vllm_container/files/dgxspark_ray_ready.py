"""dgxspark.cluster vllm_container: wait, before vLLM starts, until the Ray cluster can place the engine at once.

    python3 dgxspark_ray_ready.py GPUS_NEEDED [SETTLE_S]

vLLM asks Ray for one placement group of all its GPUs and waits for it. Made while the cluster is in flux (a worker
restarting), that group stays pending, and Ray 2.60's GCS can lose a GPU of its own count for good when it tries a
pending group on a node that registered a moment before ("Failed to lease resource ... Connection refused", then that
node shows its GPU in total but never as available: seen in the lab after a worker's reboot, the engine waited for 15
minutes). So the engine starts only when, at two polls in a row, the same nodes offer the GPUs it needs: alive, not
draining, their raylet answering, listed once per address, their GPUs free in Ray's own count. For up to SETTLE_S
(60 s) it also waits out a node that is listed alive but does not answer or is draining (an old incarnation Ray has
not yet marked dead). Run in the head's vLLM container (Ray's address and token come from its environment); exits 0
when ready, and waits as long as it takes otherwise, saying why.
"""

import os
import socket
import sys
import time

POLL_S = 5


def assess(nodes, draining, available, answering, previous, need, settle_over):
    """Whether the engine may start now. nodes: `ray.nodes()` entries; draining: ids of draining nodes; available:
    {node id: {resource: amount}} (the GCS's own count); answering: {node id: whether its raylet port answers};
    previous: the node ids counted at the previous poll (None at the first); need: GPUs; settle_over: whether the
    settle time has passed. Returns (ready, counted node ids, why not ready or what is counted)."""
    alive = [n for n in nodes if n.get("Alive")]
    counted, doubtful = [], []
    for node in alive:
        node_id, address = node["NodeID"], node.get("NodeManagerAddress")
        if node_id in draining:
            doubtful.append("%s (%s) is draining" % (address, node_id[:8]))
        elif not answering.get(node_id):
            doubtful.append("%s (%s) is listed alive but its raylet does not answer" % (address, node_id[:8]))
        else:
            counted.append(node)
    addresses = [n.get("NodeManagerAddress") for n in alive]
    doubtful += ["%s is listed %d times (a restarted node's old incarnation)" % (a, addresses.count(a))
                 for a in sorted(set(addresses)) if addresses.count(a) > 1]

    def free(node):
        return available.get(node["NodeID"], {}).get("GPU", 0)

    def listed(node):
        return node.get("Resources", {}).get("GPU", 0)

    gpus = sum(free(n) for n in counted)
    ids = frozenset(n["NodeID"] for n in counted)
    if gpus < need:
        idle = ["%s lists %g GPU(s), %g free" % (n.get("NodeManagerAddress"), listed(n), free(n))
                for n in counted if free(n) < listed(n)]
        return False, ids, "Ray offers %g free GPU(s) on %d ready node(s); the engine needs %g%s%s" % (
            gpus, len(counted), need, "; " + "; ".join(idle) if idle else "",
            "; " + "; ".join(doubtful) if doubtful else "")
    if doubtful and not settle_over:
        return False, ids, "enough GPUs, but %s: waiting for Ray to settle" % "; ".join(doubtful)
    if previous != ids:
        return False, ids, "Ray offers %g free GPU(s) on %d ready node(s); the engine needs %g: checking that they " \
                           "stay" % (gpus, len(counted), need)
    return True, ids, "Ray offers %g free GPU(s) on %d ready node(s); the engine needs %g" % (gpus, len(counted), need)


def raylet_answers(node, timeout=2.0):
    try:
        with socket.create_connection((node["NodeManagerAddress"], int(node["NodeManagerPort"])), timeout=timeout):
            return True
    except (OSError, KeyError, TypeError, ValueError):
        return False


def poll(ray, state, previous, need, settle_over):
    nodes = ray.nodes()
    answering = dict((n["NodeID"], raylet_answers(n)) for n in nodes if n.get("Alive"))
    return assess(nodes, set(state.get_draining_nodes()), state.available_resources_per_node(), answering, previous,
                  need, settle_over)


def main(argv):
    import ray  # pylint: disable=import-outside-toplevel,import-error
    from ray._private.state import state  # pylint: disable=import-outside-toplevel,import-error

    need = float(argv[1])
    settle = int(argv[2]) if len(argv) > 2 else 60
    started, previous, said = time.time(), None, None
    while True:
        try:
            if not ray.is_initialized():
                ray.init(address=os.environ["DGXSPARK_RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
            ready, previous, why = poll(ray, state, previous, need, time.time() - started >= settle)
        except Exception as err:  # pylint: disable=broad-except  # the head's Ray is (re)starting: ask again
            ready, previous, why = False, None, "Ray at %s does not answer yet (%s)" % (
                os.environ.get("DGXSPARK_RAY_ADDRESS"), type(err).__name__)
            if ray.is_initialized():
                ray.shutdown()
        if why != said or ready:
            print("dgxspark_ray_ready: %s (%d s)" % (why, time.time() - started), flush=True)
            said = why
        if ready:
            ray.shutdown()
            return 0
        time.sleep(POLL_S)


if __name__ == "__main__":
    # Non-dumpable first, then without the start script's capabilities (it starts with them: until then they keep it out
    # of reach): this process of vLLM's container runs for seconds to minutes before the guard's main, and its
    # /proc/PID/root would open the container's files (the TLS key) to root in the Ray container, which shares its PID
    # namespace (dgxspark_api_guard.py, beside this file).
    import dgxspark_api_guard  # pylint: disable=import-error
    dgxspark_api_guard.hide_this_process()
    dgxspark_api_guard.drop_key_capabilities()
    sys.exit(main(sys.argv))
