#!/usr/bin/env bash
# `make test`: every check, and at the end (pass or fail) the table of each part's wall time: what a fresh machine
# installs first (the venv, Debian packages, Docker), lint, promtool, sanity, unit, build, the lab by module
# (tests/lab/conftest.py records them; lab1/ for the second lab's), molecule by scenario (on the second lab, beside the
# first's tests), when each of the three parallel parts ended, and the run's own wall time.
# The lab's build (debootstrap, the engine's wheels: network and disk) runs in the background beside the virtualenv and
# the checks that only need the CPU; the checks then run beside the labs' first modules. A failure of any part stops the
# run.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .build
rm -f .build/test-durations.tsv .build/lab-up.log .build/cpu-started .build/junit-*.xml
date +%s > .build/test-started
# The machine's and the containers' CPU counters now: the table ends with what the run's CPU went to.
python3 tools/durations.py --cpu-counters > .build/cpu-started || rm -f .build/cpu-started
# At the end, pass or fail: stop the background parts still running (each `|| true`: errexit holds in a trap, and a
# part that already ended must not keep the table from printing), then print the table.
background=()
finish() {
    for pid in "${background[@]}"; do
        pkill -TERM -P "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
    done
    python3 tools/durations.py || true
}
trap finish EXIT
t() { tools/timed.sh "$@"; }
# Waits for a part that runs in the background, records how long the run waited for it ("NAME (waited for)") and
# returns the part's status.
wait_for_part() {
    local name=$1 pid=$2 started rc=0
    started=$(date +%s)
    wait "$pid" || rc=$?
    printf '%s (waited for)\t%s\t%s\n' "$name" "$(( $(date +%s) - started ))" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" \
        >> .build/test-durations.tsv
    return "$rc"
}

t system-deps bash tools/system-deps.sh
# What holds the run back (CPU, disk, memory), sampled every 15 s; the table at the end sums it up.
vmstat -t -n 15 > .build/vmstat.log 2>&1 &
background+=("$!")
t docker bash lab/ensure-docker.sh
# labctl needs only Python's standard library: it starts before the project's virtualenv exists.
t lab-up python3 lab/labctl.py up --nodes 4 --serving > .build/lab-up.log 2>&1 &
lab_up=$!
# A check that fails stops the run; the lab's build must not outlive it.
background+=("$lab_up")

t setup bash tools/setup.sh
# The checks that only need the CPU (lint, sanity, promtool, unit, build) run in the background, beside the lab's build
# and then beside the labs' first modules, whose time is mostly waiting; a failed check stops the run all the same.
# At the labs' priority: at nice 19 they starved (CI: unit tests 1027 s instead of 149), and tests that stream in real
# time (the benchmark's pace) saw seconds-long stalls.
(
    t yamllint .venv/bin/yamllint --strict . &&
    t ansible-lint env PATH="$PWD/.venv/bin:$PATH" .venv/bin/ansible-lint --profile production --nocolor &&
    t promtool bash tools/promtool.sh &&
    t sanity bash tools/sanity.sh &&
    t unit .venv/bin/pytest -n auto --junitxml=.build/junit-unit.xml tests/unit tests/lab/test_labctl_unit.py tests/lab/test_lab_rootfs_unit.py &&
    t build bash -c 'rm -rf .build/dist && mkdir -p .build/dist && .venv/bin/ansible-galaxy collection build --output-path .build/dist .'
) > .build/checks.log 2>&1 &
checks=$!
background+=("$checks")
lab_rc=0
wait_for_part lab-up "$lab_up" || lab_rc=$?
cat .build/lab-up.log
[ $lab_rc -eq 0 ] || { echo "make test: the lab did not come up (its log above)" >&2; exit 1; }
# The second lab (its own nodes, networks and bridges, lab/README.md) runs beside the first at a quarter of its CPU
# weight: first, on two nodes, the lab's own module (while the first lab's deploy module starts its engines), then
# molecule's scenarios, then the lab modules that start no engine but take
# nodes, rails or the management network down (distribute, cx7 faults, preflight), those of the rails' plan and check,
# and os_hardening's (it rewrites a node's Docker configuration). The first lab runs every other module, the serving
# ones (tests/lab/conftest.py): the two lanes end about together, so that neither runs alone on a machine that the
# other left half idle.
second_lab_first=(tests/lab/test_lab.py)
# Run by `make test-lab-more` (and under mp by `make test-lab-mp`), not here, as molecule's serving_mp scenario (below): the profile patches module deploys
# seed 003's 2-node shape from nothing for its checks. Under Ray, the patches' path is the one every deploy here takes
# (the lab's own sitecustomize patch: without it Ray's executor refuses the CPU platform); on the slower CI host the
# suite did not fit CI's 90 minutes with it (736 s of the second lab, its 2-node deploy from nothing).
# The fleet's module too (issue 51: two serving groups of 2 nodes, then the 4-node layout again): 1531 s beside other
# labs on this 2-core host, more than the suite's budget has left; it runs in `make test-lab-more`.
make_test_leaves=(tests/lab/test_profile_patches_lab.py tests/lab/test_fleet_lab.py)
# Last, on 4 nodes: the switch between the executor backends (vLLM's own multi-node backend from nothing, then Ray and
# back), whose engine starts fill the time the second lab would otherwise leave the first alone.
second_lab_last=(tests/lab/test_distribute_lab.py tests/lab/test_cx7_netplan_faults.py tests/lab/test_preflight_lab.py
                 tests/lab/test_cx7_netplan_bad_inputs.py tests/lab/test_cx7_netplan_generate.py
                 tests/lab/test_fabric_check_lab.py tests/lab/test_os_hardening_lab.py tests/lab/test_backend_switch_lab.py)
first_lab_ignores=()
for module in "${second_lab_first[@]}" "${second_lab_last[@]}" "${make_test_leaves[@]}"; do first_lab_ignores+=("--ignore=$module"); done
# molecule's serving_mp scenario runs in `make test-lab-more`, not here: make test's mp coverage is the backend switch
# module below (mp from nothing on 4 nodes, a no-op re-run, a killed rank healed, the switches), and on a slow CI host
# (the AMD runs took 1.6-2x the Intel ones) the suite did not fit CI's 90 minutes with both. So does fleet_router's, with
# the fleet's lab module: 806 s of the second lab here, when the suite took 83.6 minutes on this 2-core host with it.
scenarios="serving $(ls molecule/*/molecule.yml | cut -d/ -f2 | grep -vx 'serving\|serving_mp\|fleet_router' | sort | tr '\n' ' ')"
(
    export DGXSPARK_LAB_INSTANCE=1 DGXSPARK_LAB_STATE_SUFFIX=-1 DGXSPARK_LAB_CPU_SHARES=256
    second_lab_pytest() {
        local junit=$1
        shift
        DGXSPARK_TEST_DURATIONS=.build/test-durations.tsv .venv/bin/pytest -p no:cacheprovider -m lab --durations=15 \
            --durations-min=20 --junitxml=".build/junit-$junit.xml" "$@"
    }
    DGXSPARK_LAB_NODES=2 second_lab_pytest lab1-first "${second_lab_first[@]}" || exit 1
    for scenario in $scenarios; do
        t "molecule/$scenario" env PATH="$PWD/.venv/bin:$PATH" .venv/bin/molecule test -s "$scenario" || exit 1
    done
    second_lab_pytest lab1-last "${second_lab_last[@]}" || exit 1
    python3 lab/labctl.py down
) > .build/second-lab.log 2>&1 &
second_lab=$!
# The first lab's output is the run's own (the slowest lab tests by name, which to shorten next, after the modules).
# Its playbooks run with the API's TLS on (the collection's cluster CA, issue 49): every serving check calls the API and
# Prometheus over https; the second lab's backend switch deploys the users' default, plain HTTP, from nothing.
DGXSPARK_LAB_API_TLS=generated DGXSPARK_TEST_DURATIONS=.build/test-durations.tsv .venv/bin/pytest -m lab --durations=30 --durations-min=20 \
    --junitxml=.build/junit-lab.xml "${first_lab_ignores[@]}" tests/lab &
first_lab=$!
background+=("$first_lab" "$second_lab")
# Whichever of the three ends first with a failure ends the run (the EXIT trap stops the others).
declare -A parts=(["$checks"]=checks ["$first_lab"]="first lab" ["$second_lab"]="second lab")
failed=""
while [ ${#parts[@]} -gt 0 ]; do
    rc=0
    wait -n -p ended "${!parts[@]}" || rc=$?
    name=${parts[$ended]}
    unset "parts[$ended]"
    printf '%s (ended)\t%s\t%s\n' "$name" "$(( $(date +%s) - $(cat .build/test-started) ))" \
        "$([ $rc -eq 0 ] && echo ok || echo FAILED)" >> .build/test-durations.tsv
    [ $rc -eq 0 ] || { failed=$name; break; }
done
echo "---- the checks' log"; cat .build/checks.log
echo "---- the second lab's log"; cat .build/second-lab.log
[ -z "$failed" ] || { echo "make test: the $failed failed (its log above)" >&2; exit 1; }
echo "make test: all checks passed"
