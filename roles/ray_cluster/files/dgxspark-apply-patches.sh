#!/usr/bin/env bash
# dgxspark.cluster: the model profile's patches, checked and applied by a serving container's start script before Ray
# or vLLM starts (ray-node.sh, vllm-serve.sh). Reads DGXSPARK_PATCH_DIR (the node's patch directory, mounted read-only)
# and DGXSPARK_PATCHES ("kind:path:sha256 ...", in the profile's order). Every file's sha256 must be the one the profile
# records, then each "python" patch runs with python3 (it edits this container's own copy of vLLM, idempotently);
# a "sitecustomize" is already on PYTHONPATH. Any failure exits non-zero: the container does not start half-patched.
set -u
dir=${DGXSPARK_PATCH_DIR:?DGXSPARK_PATCH_DIR is not set}
for entry in ${DGXSPARK_PATCHES:-}; do
    IFS=: read -r kind path sha <<<"$entry"
    file=$dir/$path
    # Hashed by python3, not sha256sum: in vLLM's container on the head only unreadable programs start non-dumpable.
    actual=$(python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$file" 2>/dev/null)
    if [ "$actual" != "$sha" ]; then
        echo "dgxspark patches: $file has sha256 ${actual:-(missing)}, the profile records $sha; not starting" >&2
        exit 1
    fi
    done_what=verified
    if [ "$kind" = python ]; then
        if ! python3 "$file"; then
            echo "dgxspark patches: $path failed (its message is above); not starting" >&2
            exit 1
        fi
        done_what="verified and applied"
    fi
    echo "dgxspark patches: $path ($kind) $done_what"
done
