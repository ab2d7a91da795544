#!/usr/bin/env bash
# `make test`: every check, in order, stopping at the first failure; at the end (pass or fail) the table of each
# part's wall time: what a fresh machine installs first (the venv, Debian packages, the serving venv), lint, sanity,
# unit, serving (the stand-in's own tests), build, the lab by module (tests/lab/conftest.py records them), molecule by
# scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -f .build/test-durations.tsv
trap 'python3 tools/durations.py' EXIT
t() { tools/timed.sh "$@"; }

t setup bash tools/setup.sh
t system-deps bash tools/system-deps.sh
t serving-venv bash tools/serving-venv.sh

t yamllint .venv/bin/yamllint --strict .
t ansible-lint env PATH="$PWD/.venv/bin:$PATH" .venv/bin/ansible-lint --profile production --nocolor
t sanity bash tools/sanity.sh
t unit .venv/bin/pytest -n auto tests/unit tests/lab/test_labctl_unit.py
t serving .venv/bin/pytest tests/serving
t build bash -c 'rm -rf .build/dist && mkdir -p .build/dist && .venv/bin/ansible-galaxy collection build --output-path .build/dist .'
t lab-up bash -c 'bash lab/ensure-docker.sh && .venv/bin/python lab/labctl.py up --nodes 4 --serving'
# one row per module, written by tests/lab/conftest.py
# The slowest lab tests by name (which to shorten next), after the modules.
DGXSPARK_TEST_DURATIONS=.build/test-durations.tsv .venv/bin/pytest -m lab --durations=30 --durations-min=20 tests/lab
for scenario in $(ls molecule/*/molecule.yml | cut -d/ -f2 | sort); do
    t "molecule/$scenario" env PATH="$PWD/.venv/bin:$PATH" .venv/bin/molecule test -s "$scenario"
done
echo "make test: all checks passed"
