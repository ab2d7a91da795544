#!/usr/bin/env bash
# Build the serving image (LAB STAND-IN for vLLM on real Ray) from a lab-made rootfs.
#
#   lab/serving/build_image.sh ROOTFS_DIR IMAGE_TAG
#
# Installs the serving content into ROOTFS_DIR (build-rootfs.sh, in place) and imports it:
#   tar -C ROOTFS_DIR -c . | docker import - IMAGE_TAG
# Docker must be running (lab/ensure-docker.sh starts it). PATH starts with the venv, so `python3` in a
# container imports ray (as `python3 -c 'import vllm'` works in a real vLLM image).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
rootfs=${1:?usage: build_image.sh ROOTFS_DIR IMAGE_TAG}
tag=${2:?usage: build_image.sh ROOTFS_DIR IMAGE_TAG}

"$here/build-rootfs.sh" "$rootfs"
if ! docker info >/dev/null 2>&1; then
    if [ -x "$here/../ensure-docker.sh" ]; then
        "$here/../ensure-docker.sh"
    else
        echo "build_image.sh: docker is not running" >&2
        exit 1
    fi
fi
tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/opt/vllm-standin/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'LABEL org.dgxspark.lab.role=serving-standin' \
    --message "dgxspark lab serving image (LAB STAND-IN for vLLM)" - "$tag"
echo "build_image.sh: imported $tag"
