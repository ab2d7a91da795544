#!/usr/bin/env python3
"""Print the table of `make test`'s parts and their wall times (.build/test-durations.tsv, written by tools/timed.sh;
the lab's modules and molecule's scenarios have a row each), then the run's own wall time (.build/test-started): the
lab's build runs beside the checks, so the parts add up to more than the run took. Last, the tests that failed, each
with the first line of its error (the pytest runs' JUnit files), where CI's excerpt of the output still shows them."""
import glob
import os
import re
import sys
import time
import xml.etree.ElementTree as ElementTree

# Where the CPU time of every Docker container (the lab's nodes, and the serving containers inside them) adds up:
# cgroup v1's cpuacct (nanoseconds), or cgroup v2 with Docker's cgroupfs driver (microseconds).
CONTAINER_CPU_FILES = (("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage", 1e-9),
                       ("/sys/fs/cgroup/docker/cpu.stat", 1e-6))


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


def machine_busy_seconds(proc_stat, ticks_per_second=100):
    """CPU-seconds the machine spent busy since boot, from /proc/stat's `cpu` line (user, nice, system, irq, softirq,
    steal; idle and iowait left out)."""
    for line in proc_stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:9]] + [0] * 8
            return float(sum(values[i] for i in (0, 1, 2, 5, 6, 7))) / ticks_per_second
    return None


def container_seconds(text, scale):
    """CPU-seconds in a cgroup usage file: cpuacct.usage (one number) or cpu.stat (its usage_usec line)."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 1 and fields[0].isdigit():
            return int(fields[0]) * scale
        if len(fields) == 2 and fields[0] == "usage_usec":
            return int(fields[1]) * scale
    return None


def cpu_counters():
    """'machine containers' CPU-seconds now (containers '-' where no cgroup file is readable)."""
    with open("/proc/stat", encoding="utf-8") as handle:
        machine = machine_busy_seconds(handle.read(), os.sysconf("SC_CLK_TCK"))
    containers = None
    for path, scale in CONTAINER_CPU_FILES:
        try:
            with open(path, encoding="utf-8") as handle:
                containers = container_seconds(handle.read(), scale)
        except OSError:
            continue
        if containers is not None:
            break
    return "%.2f %s" % (machine, "-" if containers is None else "%.2f" % containers)


def cpu_split(start, end):
    """What the run's CPU went to, from two cpu_counters() readings: {'machine': s, 'containers': s or None}."""
    (machine0, containers0), (machine1, containers1) = start.split(), end.split()
    containers = None if "-" in (containers0, containers1) else float(containers1) - float(containers0)
    return {"machine": float(machine1) - float(machine0), "containers": containers}


def print_cpu_split(path, wall):
    try:
        with open(path, encoding="utf-8") as handle:
            start = handle.read().strip()
    except FileNotFoundError:
        return
    split = cpu_split(start, cpu_counters())
    line = "  CPU over the run: %.0f CPU-s of the %.0f that %d cores offer" % (split["machine"], wall * os.cpu_count(),
                                                                               os.cpu_count())
    if split["containers"] is not None:
        line += ("; %.0f in the lab's containers (nodes and their serving containers), %.0f outside them (Ansible's "
                 "controller, pytest, molecule, lint)" % (split["containers"], split["machine"] - split["containers"]))
    print(line)


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


# At most this many failed tests, each line at most this long: the end of the output is what CI shows.
MAX_FAILURES = 8
MAX_FAILURE_LINE = 400


# A playbook's failure in the YAML result format: "fatal: [host]: FAILED! =>" (or "UNREACHABLE!", or "failed: [host]
# (item=...) =>"), then the result's keys indented alike, each value going on over the lines indented deeper.
ANSIBLE_FAILURE = re.compile(r"^( *)(?:fatal|failed): \[([^\]]+)\]")


def result_keys(lines, base):
    """{key: its value on one line} of a YAML result's lines, indented more than base (the first line sets the keys')."""
    keys, key, indent = {}, None, None
    for line in lines:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip(" "))
        if indent is None:
            indent = depth
        if depth < indent or depth <= base:
            break
        if depth == indent and ":" in line:
            key, value = line.strip().split(":", 1)
            keys[key] = value.strip().strip("|-'\"")
        elif key is not None:
            keys[key] = (keys[key] + " " + line.strip()).strip()
    return dict((k, v.strip("'\"")) for k, v in keys.items())


def ansible_failure(message):
    """'TASK [name] on host: msg (stderr: ...)' for the last task that failed in a playbook's output within message, or
    None when there is none: a lab test's assertion message ends with the playbook's output, whose first line tells
    nothing."""
    # (pytest's JUnit message indents the lines after the first of an assertion's message by two spaces)
    lines = message.splitlines()
    failures = [n for n, line in enumerate(lines) if ANSIBLE_FAILURE.match(line)]
    if not failures:
        return None
    at = failures[-1]
    failure = ANSIBLE_FAILURE.match(lines[at])
    task = next((line[line.index("[") + 1:line.rindex("]")] for line in reversed(lines[:at]) if line.lstrip().startswith("TASK [")), "?")
    keys = result_keys(lines[at + 1:], len(failure.group(1)))
    text = keys.get("msg") or lines[at].split("=>", 1)[-1].strip() or "failed"
    if keys.get("stderr"):
        text += " (stderr: %s)" % keys["stderr"]
    return "TASK [%s] on %s: %s" % (task, failure.group(2), text)


def failed_tests(junit_text):
    """(test id, what went wrong) for each test of a pytest JUnit file that failed or erred: the playbook task that
    failed and its message when the error holds a playbook's output, else the error's first line."""
    found = []
    for case in ElementTree.fromstring(junit_text).iter("testcase"):
        for outcome in ("failure", "error"):
            element = case.find(outcome)
            if element is None:
                continue
            message = (element.get("message") or element.text or "").strip()
            test_id = "%s::%s" % (case.get("classname", "?").rsplit(".", 1)[-1], case.get("name", "?"))
            found.append(("%s%s" % (test_id, " (error)" if outcome == "error" else ""),
                          (ansible_failure(message) or message.splitlines()[0]) if message else "(no message)"))
    return found


def print_failures(pattern):
    lines = []
    for path in sorted(glob.glob(pattern)):
        try:
            with open(path, encoding="utf-8") as handle:
                found = failed_tests(handle.read())
        except (OSError, ElementTree.ParseError):
            continue  # a run stopped while writing its file
        label = os.path.basename(path)[len("junit-"):-len(".xml")]
        lines += ["  %s: %s: %s" % (label, test_id, message) for test_id, message in found]
    if lines:
        print("\nmake test: the tests that failed (%s)" % pattern)
        for line in lines[:MAX_FAILURES]:
            print(line if len(line) <= MAX_FAILURE_LINE else line[:MAX_FAILURE_LINE - 3] + "...")
        if len(lines) > MAX_FAILURES:
            print("  ... and %d more" % (len(lines) - MAX_FAILURES))


def main(path=".build/test-durations.tsv", started_path=".build/test-started", vmstat_path=".build/vmstat.log",
         cpu_path=".build/cpu-started", junit_pattern=".build/junit-*.xml"):
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
        print_cpu_split(cpu_path, wall)
    print_machine_load(vmstat_path)
    print_failures(junit_pattern)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--cpu-counters"]:
        print(cpu_counters())
        sys.exit(0)
    sys.exit(main(*sys.argv[1:]))
