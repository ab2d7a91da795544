#!/usr/bin/env bash
# Shared by bench/network_play and bench/deploy: time one playbook on freshly reset lab nodes.
#   play_runs PLAYBOOK NODES [--serving]
#   first run   -- nodes reset to fresh (`labctl reset`: rails unaddressed, no containers, image and model kept)
#   second run  -- the same play again: nothing to change (the changed count must be 0)
#   check run   -- `--check --diff` on the converged nodes
# Prints the wall time, return code and changed/failed counts of every run, then second/first and check/first.
set -euo pipefail
PY=.venv/bin/python

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# Sum of changed= and failed= over the PLAY RECAP lines of a run's output.
recap() { awk '/ : ok=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "changed") c += kv[2]; if (kv[1] == "failed") f += kv[2] } } END { printf "changed=%d failed=%d", c, f }' "$1"; }

play_runs() {
    local playbook=$1 nodes=$2 serving=${3:-} name log
    name=$(basename "$playbook" .yml)
    [ -x "$PY" ] || { echo "run 'make setup' first" >&2; exit 2; }
    log=$(mktemp "/tmp/$name.lab.XXXXXX.log")
    {
        bash lab/ensure-docker.sh
        $PY lab/labctl.py up --nodes "$nodes" $serving
        # shellcheck disable=SC2046  # the node names are single words
        $PY lab/labctl.py reset $($PY lab/labctl.py status --json | $PY -c 'import json,sys; print(" ".join(n["node"] for n in json.load(sys.stdin)["nodes"]))')
    } >>"$log" 2>&1
    declare -A took
    local run extra out t0 t1 rc
    for run in first second check; do
        extra=()
        [ "$run" = check ] && extra=(--check --diff)
        out=$(mktemp "/tmp/$name.$run.XXXXXX.log")
        t0=$(now)
        rc=0
        ANSIBLE_NOCOLOR=1 .venv/bin/ansible-playbook "$playbook" -i lab/state/inventory "${extra[@]}" >"$out" 2>&1 || rc=$?
        t1=$(now)
        took[$run]=$(secs "$t0" "$t1")
        echo "$name $run run ($nodes nodes): ${took[$run]} s, rc $rc, $(recap "$out")   (output: $out)"
    done
    awk -v a="${took[first]}" -v b="${took[second]}" -v c="${took[check]}" \
        'BEGIN { printf "second/first wall time: %.2f; check/first: %.2f\n", b / a, c / a }'
    echo "lab log: $log"
}
