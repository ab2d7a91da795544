#!/usr/bin/env bash
# Install the serving image content (LAB STAND-IN for vLLM) into a Debian bookworm rootfs.
#
#   lab/serving/build-rootfs.sh ROOTFS_DIR
#
# ROOTFS_DIR: a rootfs made by the lab's debootstrap (minbase + python3 + python3-venv + iproute2 +
# procps + ca-certificates). Result inside it:
#   /opt/vllm-standin            venv with the pinned ray (requirements.lock) + dgxspark_vllm_standin
#   /usr/local/bin/vllm          the stand-in `vllm` command (LAB STAND-IN header)
#   /usr/local/bin/hf            the stand-in `hf download` (LAB STAND-IN header; the Hub is a local directory)
#   /usr/local/bin/ray           -> /opt/vllm-standin/bin/ray
#   /usr/local/bin/dgxspark-make-model-dir   lab-made model directory generator
# Wheels are downloaded on the host into $DGXSPARK_SERVING_WHEELS (default <repo>/.cache/serving-wheels)
# and installed offline inside the rootfs with chroot (needs root). Idempotent.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rootfs=${1:?usage: build-rootfs.sh ROOTFS_DIR}
rootfs=$(cd "$rootfs" && pwd)
wheels=${DGXSPARK_SERVING_WHEELS:-$repo/.cache/serving-wheels}
venv=/opt/vllm-standin
cabundle=/etc/ssl/certs/ca-certificates.crt

[ "$(id -u)" -eq 0 ] || { echo "build-rootfs.sh: must run as root (chroot)" >&2; exit 1; }
[ -x "$rootfs/usr/bin/python3" ] || { echo "build-rootfs.sh: $rootfs has no /usr/bin/python3 (debootstrap --include=python3,python3-venv)" >&2; exit 1; }
in_root() { chroot "$rootfs" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
pyver=$(in_root /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
arch=$(in_root /usr/bin/python3 -c 'import platform; print(platform.machine())')

# 1. wheels on the host, for the rootfs's python and machine
mkdir -p "$wheels"
pip_cert=()
[ -f "$cabundle" ] && pip_cert=(--cert "$cabundle")
case "$arch" in
    x86_64) platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64) ;;
    aarch64) platforms=(--platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux_2_28_aarch64) ;;
    *) echo "build-rootfs.sh: unsupported machine $arch" >&2; exit 1 ;;
esac
# The cache alone first (no index traffic when every pinned wheel is already there), then the index.
pip_dl=(python3 -m pip download --quiet --disable-pip-version-check --dest "$wheels"
        --only-binary=:all: --python-version "$pyver" --implementation cp "${platforms[@]}"
        -r "$here/requirements.lock")
if ! "${pip_dl[@]}" --no-index --find-links "$wheels" >/dev/null 2>&1; then
    "${pip_dl[@]}" "${pip_cert[@]}"
fi

# 2. venv inside the rootfs, offline install (resolv/proc are not needed)
stage="$rootfs/tmp/serving-wheels"
rm -rf "$stage"
mkdir -p "$stage"
cp "$wheels"/*.whl "$stage/"
cp "$here/requirements.lock" "$stage/requirements.lock"
[ -x "$rootfs$venv/bin/python3" ] || in_root /usr/bin/python3 -m venv "$venv"
in_root "$venv/bin/pip" install --quiet --disable-pip-version-check --no-index \
    --find-links /tmp/serving-wheels -r /tmp/serving-wheels/requirements.lock
rm -rf "$stage"

# 3. the stand-in package, its flag data, the commands
site=$(in_root "$venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pkg="$rootfs$site/dgxspark_vllm_standin"
rm -rf "$pkg"
mkdir -p "$pkg/vllm_flags"
cp "$here"/dgxspark_vllm_standin/*.py "$pkg/"
cp "$here"/vllm_flags/*.json "$pkg/vllm_flags/"
install -m 0755 "$here/bin/vllm" "$rootfs/usr/local/bin/vllm"
install -m 0755 "$here/bin/hf" "$rootfs/usr/local/bin/hf"
sed "1s|.*|#!$venv/bin/python3|" "$here/make_model_dir.py" > "$rootfs/usr/local/bin/dgxspark-make-model-dir"
chmod 0755 "$rootfs/usr/local/bin/dgxspark-make-model-dir"
ln -sfn "$venv/bin/ray" "$rootfs/usr/local/bin/ray"
version=$(python3 -c 'import json,sys,glob,os; fs=sorted(glob.glob(sys.argv[1]+"/*.json")); print(json.load(open(fs[-1]))["vllm_version"])' "$here/vllm_flags")
# The distribution metadata vLLM's own image carries (its Summary says what this is): the collection's version probe
# reads it instead of starting `vllm --version`.
distinfo="$rootfs$site/vllm-$version.dist-info"
rm -rf "$rootfs$site"/vllm-*.dist-info
mkdir -p "$distinfo"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: dgxspark lab stand-in for vLLM %s (NOT vLLM)\n' \
    "$version" "$version" > "$distinfo/METADATA"
printf 'dgxspark-lab\n' > "$distinfo/INSTALLER"
cat > "$rootfs$venv/LAB-STAND-IN" <<INFO
dgxspark.cluster virtual Spark lab: this is NOT vLLM.
vllm command: /usr/local/bin/vllm (stand-in for vLLM $version, flags from the real parser)
ray: $(grep '^ray==' "$here/requirements.lock")
built: $(date -u +%Y-%m-%dT%H:%M:%SZ)
INFO

# 4. smoke test inside the rootfs
in_root /usr/local/bin/vllm --version >/dev/null
in_root /usr/local/bin/ray --version
in_root "$venv/bin/python3" -c 'import importlib.metadata as m; assert m.version("vllm") == "'"$version"'"'
echo "build-rootfs.sh: $rootfs has /usr/local/bin/vllm (stand-in for vLLM $version) and ray"
