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

exec ray start "$@"
