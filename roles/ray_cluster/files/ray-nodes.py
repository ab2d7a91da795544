"""dgxspark.cluster ray_cluster: print `ray.nodes()` of the running cluster as JSON (run in the head's container).

Always prints a JSON list and exits 0 ([] when the cluster cannot be reached, the reason on stderr), so that
the readiness check can poll it. Ray reads its address and token from the container's environment.
"""
import json
import os
import sys

KEYS = ("NodeID", "Alive", "NodeManagerAddress", "NodeManagerHostname", "NodeName", "Resources")


def main():
    try:
        import ray
        ray.init(address=os.environ.get("DGXSPARK_RAY_ADDRESS", "auto"), logging_level="ERROR", log_to_driver=False)
        nodes = [dict((k, n.get(k)) for k in KEYS) for n in ray.nodes()]
        ray.shutdown()
    except Exception as err:  # pylint: disable=broad-except
        sys.stderr.write("ray-nodes.py: %s: %s\n" % (type(err).__name__, err))
        nodes = []
    print(json.dumps(nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
