#!/usr/bin/env bash
# dgxspark.cluster vllm_container: the main process of the vLLM container on the head (entrypoint).
#   vllm-serve.sh serve MODEL --distributed-executor-backend ray ...   (the vllm command line, no secret in it)
# 1. writes $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json from DGXSPARK_RAY_NON_CARRY_OVER: the names vLLM's Ray
#    executor must not copy from this driver to the workers (per-host values, secrets);
# 2. waits until the Ray cluster offers the GPUs the engine needs (workers may still be joining), and, for up to
#    DGXSPARK_SETTLE_S (60 s), until it offers no more: a node that restarted fast is listed twice until Ray marks its
#    old incarnation dead, and a placement group made then can keep a bundle on the dead one (seen in the lab: the
#    engine waited for its placement group for over 5 minutes after a worker's reboot);
# 3. reads the API key (and nothing else secret) from the mounted 0600 file, so it never appears in argv,
#    `docker inspect` or the log;
# 4. puts the API guard on PYTHONPATH (vLLM imports it for --middleware) and becomes vllm. Before all this it checks and applies the model profile's patches, when it has any. Docker's restart policy starts it again when it exits.
set -u
# The model profile's patches (checked, then applied to this container's vLLM), mounted by ray_cluster.
if [ -n "${DGXSPARK_PATCHES:-}" ]; then
    bash "${DGXSPARK_PATCH_DIR:?}/dgxspark-apply-patches.sh" || exit 1
fi
mkdir -p "${VLLM_CONFIG_ROOT:?VLLM_CONFIG_ROOT is not set}"
printf '%s\n' "${DGXSPARK_RAY_NON_CARRY_OVER:-[]}" > "$VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json"
need=${DGXSPARK_VLLM_GPUS:?DGXSPARK_VLLM_GPUS (GPUs the engine needs) is not set}

waited=0
until python3 - "$need" "$waited" "${DGXSPARK_SETTLE_S:-60}" <<'PY'
import os, sys
import ray
need, waited, settle = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ray.init(address=os.environ["DGXSPARK_RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
have = ray.cluster_resources().get("GPU", 0)
alive = sum(1 for n in ray.nodes() if n.get("Alive"))
ray.shutdown()
print("vllm-serve.sh: Ray offers %g GPU(s) on %d node(s); the engine needs %g" % (have, alive, need), flush=True)
if have > need and waited < settle:
    print("vllm-serve.sh: more than needed: a restarted node may be listed twice until Ray marks its old incarnation "
          "dead; waiting up to %d s for it" % settle, flush=True)
    sys.exit(1)
sys.exit(0 if have >= need else 1)
PY
do
    echo "vllm-serve.sh: waiting for the cluster's GPUs (${waited}s)"
    sleep 10
    waited=$((waited + 10))
done

if [ -n "${DGXSPARK_API_KEY_FILE:-}" ]; then
    if [ ! -s "$DGXSPARK_API_KEY_FILE" ]; then
        echo "vllm-serve.sh: the API key file $DGXSPARK_API_KEY_FILE is missing or empty" >&2
        exit 1
    fi
    VLLM_API_KEY=$(cat "$DGXSPARK_API_KEY_FILE")
    export VLLM_API_KEY
fi
# The API guard (--middleware dgxspark_api_guard.KeyOnEveryRoute: the key on every route, not only /v1).
if [ -n "${DGXSPARK_PYTHON_DIR:-}" ]; then
    export PYTHONPATH="$DGXSPARK_PYTHON_DIR${PYTHONPATH:+:$PYTHONPATH}"
fi
exec vllm "$@"
