#!/usr/bin/env bash
# A virtualenv with the serving image's pinned Ray, for the stand-in's local integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.build/serving-venv
stamp="$venv/.requirements-$(sha256sum lab/serving/requirements.txt | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r lab/serving/requirements.txt
    touch "$stamp"
fi
