#!/usr/bin/env python3
"""Print the table of `make test`'s parts and their wall times (.build/test-durations.tsv, written by tools/timed.sh;
the lab's modules and molecule's scenarios have a row each), then the run's own wall time (.build/test-started): the
lab's build runs beside the checks, so the parts add up to more than the run took."""
import os
import sys
import time


def main(path=".build/test-durations.tsv", started_path=".build/test-started"):
    try:
        with open(path, encoding="utf-8") as handle:
            rows = [line.rstrip("\n").split("\t") for line in handle if line.strip()]
    except FileNotFoundError:
        print("no durations recorded (%s)" % path)
        return 0
    width = max([len(r[0]) for r in rows] + [len("wall time of the run")])
    total = sum(int(r[1]) for r in rows)
    print("\nmake test: duration of each part")
    for part, seconds, verdict in rows:
        print("  %-*s %6d s  %s" % (width, part, int(seconds), verdict))
    print("  %-*s %6d s  (%.1f min)" % (width, "sum of the parts", total, total / 60.0))
    if os.path.exists(started_path):
        with open(started_path, encoding="utf-8") as handle:
            wall = int(time.time()) - int(handle.read().strip())
        print("  %-*s %6d s  (%.1f min)" % (width, "wall time of the run", wall, wall / 60.0))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
