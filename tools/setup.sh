#!/usr/bin/env bash
# Create the project's virtualenv and make the checkout resolvable as dgxspark.cluster.
# Idempotent: reinstalls only when requirements.txt changes.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin="${PYTHON:-python3}"
stamp=".venv/.requirements-$(sha256sum requirements.txt | cut -c1-16)"

if [ ! -x .venv/bin/python ]; then
    "$python_bin" -m venv .venv
fi
if [ ! -f "$stamp" ]; then
    .venv/bin/pip install --quiet --disable-pip-version-check --upgrade pip
    .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
    rm -f .venv/.requirements-*
    touch "$stamp"
fi

# ansible.cfg's collections_path and pytest.ini's pythonpath point at this link.
mkdir -p .build/collections/ansible_collections/dgxspark
ln -sfn ../../../.. .build/collections/ansible_collections/dgxspark/cluster
