#!/usr/bin/env python3
"""Print the table of `make test`'s parts and their wall times (.build/test-durations.tsv, written by tools/timed.sh;
the lab's modules and molecule's scenarios have a row each), then the run's own wall time (.build/test-started): the
lab's build runs beside the checks, so the parts add up to more than the run took."""
import os
import sys
import time


def machine_load(lines):
    """Summary of `vmstat -t -n INTERVAL` output: mean CPU shares (us, sy, id, wa), the share of samples with the CPU
    saturated (idle under 5 %) and the longest run queue. The first sample (averages since boot) is left out. None when
    there is no sample."""
    header = None
    samples = []
    for line in lines:
        fields = line.split()
        if "us" in fields and "id" in fields:
            header = fields
            continue
        if header is None or not fields or not fields[0].isdigit():
            continue
        samples.append(dict(zip(header, fields)))
    samples = samples[1:]
    if not samples:
        return None
    count = float(len(samples))

    def mean(key):
        return sum(int(s.get(key, 0)) for s in samples) / count

    return {
        "samples": len(samples), "user": mean("us"), "system": mean("sy"), "idle": mean("id"), "iowait": mean("wa"),
        "saturated": 100.0 * sum(1 for s in samples if int(s["id"]) < 5) / count,
        "run_queue_max": max(int(s["r"]) for s in samples),
    }


def print_machine_load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            load = machine_load(handle)
    except FileNotFoundError:
        return
    if load:
        print("  machine over the run (%s, %d samples): CPU user %.0f %%, system %.0f %%, idle %.0f %%, waiting on disk "
              "%.0f %%; no idle CPU in %.0f %% of the samples; run queue up to %d"
              % (path, load["samples"], load["user"], load["system"], load["idle"], load["iowait"], load["saturated"],
                 load["run_queue_max"]))


def main(path=".build/test-durations.tsv", started_path=".build/test-started", vmstat_path=".build/vmstat.log"):
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
    print_machine_load(vmstat_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
