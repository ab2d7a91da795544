#!/usr/bin/env bash
# dgxspark.cluster ray_cluster: the main process of a node's serving container (entrypoint).
#   ray-node.sh head   <ray start arguments>
#   ray-node.sh worker <ray start arguments, --address=HEAD:PORT among them>
# Every setting comes from the container's environment (set at creation, so Ray workers see it) and
# from the arguments Ansible rendered; the token is read by Ray itself from RAY_AUTH_TOKEN_PATH.
set -u
role=${1:?usage: ray-node.sh head|worker RAY_START_ARGS...}
shift

if [ ! -s "${RAY_AUTH_TOKEN_PATH:-/nonexistent}" ]; then
    echo "ray-node.sh: the Ray token file ${RAY_AUTH_TOKEN_PATH:-(RAY_AUTH_TOKEN_PATH unset)} is missing or empty" >&2
    exit 1
fi

# The cluster's Python hash seed, from its mounted 0600 file: the same on every rank and after every restart.
if [ -n "${DGXSPARK_HASH_SEED_FILE:-}" ]; then
    seed=$(cat "$DGXSPARK_HASH_SEED_FILE" 2>/dev/null) || seed=""
    case $seed in
        '' | *[!0-9]*) echo "ray-node.sh: the hash seed file $DGXSPARK_HASH_SEED_FILE is missing or not a number" >&2; exit 1 ;;
    esac
    export PYTHONHASHSEED=$seed
fi

# The model profile's patches (checked, then applied), before Ray starts any worker process.
if [ -n "${DGXSPARK_PATCHES:-}" ]; then
    bash "${DGXSPARK_PATCH_DIR:?}/dgxspark-apply-patches.sh" || exit 1
fi

if [ "$role" = worker ]; then
    head=""
    for arg in "$@"; do
        case $arg in --address=*) head=${arg#--address=} ;; esac
    done
    # Wait for the head's GCS port, so that any start order (and a reboot of any node) converges
    # without Ansible: Docker's restart policy brings this container back, and it waits here.
    waited=0
    until timeout 5 bash -c "exec 3<>/dev/tcp/${head%:*}/${head##*:}" 2>/dev/null; do
        if [ $((waited % 30)) -eq 0 ]; then
            echo "ray-node.sh: waiting for the Ray head at $head (${waited}s)"
        fi
        sleep 5
        waited=$((waited + 5))
    done
    echo "ray-node.sh: the Ray head at $head answers; joining"
fi

# Ray gives a starting node 30 s (a constant of its node.py) to register with the GCS. A head or a machine too busy to
# answer in time makes `ray start` fail at once ("The current node timed out during startup"; seen on a worker of the
# 2-core lab while the first deploy ran beside the checks), and the container would stop for good. A start that fails
# within DGXSPARK_RAY_START_WINDOW_S (120) is tried again, up to DGXSPARK_RAY_START_ATTEMPTS times (3) in all, once
# `ray stop --force` has removed what it left; a node that ran longer, or a stop (TERM, forwarded to Ray, which drains),
# ends the container with Ray's own status, for the supervisor to see.
attempts=${DGXSPARK_RAY_START_ATTEMPTS:-3}
window=${DGXSPARK_RAY_START_WINDOW_S:-120}
child=""
stopping=""
trap 'stopping=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null' TERM INT
attempt=1
while :; do
    started=$SECONDS
    ray start "$@" &
    child=$!
    # wait returns early when a trapped signal arrives: wait again until Ray itself has exited.
    rc=0
    wait "$child" || rc=$?
    while kill -0 "$child" 2>/dev/null; do
        rc=0
        wait "$child" || rc=$?
    done
    child=""
    ran=$((SECONDS - started))
    if [ "$rc" -eq 0 ] || [ -n "$stopping" ] || [ "$ran" -ge "$window" ] || [ "$attempt" -ge "$attempts" ]; then
        exit "$rc"
    fi
    echo "ray-node.sh: ray start failed after ${ran}s (exit code $rc, attempt $attempt of $attempts): trying again" >&2
    ray stop --force >/dev/null 2>&1 || true
    attempt=$((attempt + 1))
done
