#!/usr/bin/env python3
"""Print the table of `make test`'s parts and their wall times (.build/test-durations.tsv, written by tools/timed.sh;
the lab's modules and molecule's scenarios have a row each)."""
import sys


def main(path=".build/test-durations.tsv"):
    try:
        with open(path, encoding="utf-8") as handle:
            rows = [line.rstrip("\n").split("\t") for line in handle if line.strip()]
    except FileNotFoundError:
        print("no durations recorded (%s)" % path)
        return 0
    width = max(len(r[0]) for r in rows)
    total = sum(int(r[1]) for r in rows)
    print("\nmake test: duration of each part")
    for part, seconds, verdict in rows:
        print("  %-*s %6d s  %s" % (width, part, int(seconds), verdict))
    print("  %-*s %6d s  (%.1f min)" % (width, "total", total, total / 60.0))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
