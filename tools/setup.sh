#!/usr/bin/env bash
# Create the project's virtualenv and make the checkout resolvable as dgxspark.cluster.
#   tools/setup.sh           the development install: requirements.txt (the runtime, the linters, the tests)
#   tools/setup.sh runtime   what a controller needs to run the collection: requirements-runtime.txt
# Idempotent: reinstalls only when the requirements change.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin="${PYTHON:-python3}"
requirements=requirements.txt
[ "${1:-}" = runtime ] && requirements="requirements-runtime.txt"
stamp=".venv/.requirements-$(cat "$requirements" requirements-runtime.txt | sha256sum | cut -c1-16)-$requirements"

if [ ! -x .venv/bin/python ]; then
    "$python_bin" -m venv .venv
fi
if [ ! -f "$stamp" ]; then
    .venv/bin/pip install --quiet --disable-pip-version-check --upgrade pip
    .venv/bin/pip install --quiet --disable-pip-version-check -r "$requirements"
    if [ "$requirements" = requirements-runtime.txt ]; then
        # Only the collections the collection uses, from the same pinned `ansible` wheel as the development install.
        wheel_dir=$(mktemp -d)
        ansible_pin=$(grep -E '^ansible==' requirements.txt)
        .venv/bin/pip download --quiet --disable-pip-version-check --no-deps "$ansible_pin" -d "$wheel_dir"
        .venv/bin/python tools/runtime_collections.py "$wheel_dir"/ansible-*.whl .build/collections
        rm -rf "$wheel_dir"
    fi
    rm -f .venv/.requirements-*
    touch "$stamp"
fi

# ansible.cfg's collections_path and pytest.ini's pythonpath point at this link.
mkdir -p .build/collections/ansible_collections/dgxspark
ln -sfn ../../../.. .build/collections/ansible_collections/dgxspark/cluster
