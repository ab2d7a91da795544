#!/usr/bin/env bash
# Run one part of `make test` and record its wall time for the table `make test` prints at the end:
#   tools/timed.sh PART COMMAND...      (appends "PART<TAB>SECONDS<TAB>ok|FAILED" to .build/test-durations.tsv)
set -uo pipefail
part=${1:?usage: timed.sh PART COMMAND...}
shift
mkdir -p .build
started=$(date +%s)
"$@"
rc=$?
printf '%s\t%s\t%s\n' "$part" "$(( $(date +%s) - started ))" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" >> .build/test-durations.tsv
exit $rc
