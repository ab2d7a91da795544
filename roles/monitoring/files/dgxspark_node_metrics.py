"""dgxspark.cluster's gauges for node_exporter's textfile collector, written by a systemd timer on every node.

What no exporter says about a Spark: the GB10's clocks, power, temperature and use (nvidia-smi; a clock stuck near
702 MHz until a power cycle is a known GB10 failure), whether nvidia-smi answers at all (driver deadlocks hang it), the
serving containers (running, last start: a restart loop shows as starts), the supervisor's view (head only), the
phase stamps (what was deployed and when), the memory floor the alert rules compare MemAvailable with, and the PCIe
AER error counters of every device (a CX-7 fatal AER under sustained load soft-locked Spark heads).

    python3 dgxspark_node_metrics.py [CONFIG]     (default /etc/dgxspark/monitoring/node_metrics.json)

The output replaces OUTPUT atomically (a .tmp file renamed), as the textfile collector requires. Every reading that
fails becomes a 0 in its `_ok` gauge, never a failed run: the other gauges still reach Prometheus.
"""

import calendar
import json
import os
import re
import subprocess
import sys
import time

CONFIG = "/etc/dgxspark/monitoring/node_metrics.json"
# nvidia-smi --query-gpu fields -> (gauge, scale); None: a label of dgxspark_gpu_info, not a gauge.
GPU_FIELDS = (
    ("index", None),
    ("name", None),
    ("driver_version", None),
    ("clocks.sm", ("dgxspark_gpu_sm_clock_mhz", 1.0)),
    ("clocks.mem", ("dgxspark_gpu_memory_clock_mhz", 1.0)),
    ("clocks.max.sm", ("dgxspark_gpu_sm_clock_max_mhz", 1.0)),
    ("power.draw", ("dgxspark_gpu_power_watts", 1.0)),
    ("temperature.gpu", ("dgxspark_gpu_temperature_celsius", 1.0)),
    ("utilization.gpu", ("dgxspark_gpu_utilization_ratio", 0.01)),
    ("memory.used", ("dgxspark_gpu_memory_used_bytes", 1048576.0)),
)
HELP = {
    "dgxspark_gpu_query_ok": "1 when nvidia-smi answered within its timeout (a hung driver does not)",
    "dgxspark_gpu_info": "The GPU's name and driver (value 1)",
    "dgxspark_gpu_sm_clock_mhz": "SM clock now (MHz)",
    "dgxspark_gpu_memory_clock_mhz": "Memory clock now (MHz)",
    "dgxspark_gpu_sm_clock_max_mhz": "The SM clock's maximum (MHz): what a busy GPU should come near",
    "dgxspark_gpu_power_watts": "Power draw (W)",
    "dgxspark_gpu_temperature_celsius": "GPU temperature (C)",
    "dgxspark_gpu_utilization_ratio": "GPU utilization (0-1)",
    "dgxspark_gpu_memory_used_bytes": "GPU memory used, where the driver reports it (GB10's unified memory may not)",
    "dgxspark_container_running": "1 when the serving container runs",
    "dgxspark_container_started_timestamp_seconds": "When the container last started: a restart loop changes it often",
    "dgxspark_container_restart_count": "Docker's own restart count of the container (since it was created)",
    "dgxspark_containers_query_ok": "1 when Docker answered",
    "dgxspark_supervisor_phase": "The supervisor's phase (value 1 for the current one)",
    "dgxspark_supervisor_report_timestamp_seconds": "When the supervisor last wrote its report (stale: it is not running)",
    "dgxspark_supervisor_restarts_in_window": "Restarts of the group within the supervisor's budget window",
    "dgxspark_supervisor_budget_left": "Restarts the supervisor may still make in its window",
    "dgxspark_supervisor_last_probe_ok": "1 when the last one-token probe got its token",
    "dgxspark_supervisor_last_probe_seconds": "How long the last probe took",
    "dgxspark_supervisor_report_ok": "1 when the supervisor's report could be read",
    "dgxspark_phase_converged_timestamp_seconds": "When a deployment phase last converged on this node (its stamp)",
    "dgxspark_memory_floor_bytes": "MemAvailable below this is an alert: a share of what the plan leaves outside vLLM",
    "dgxspark_node_metrics_timestamp_seconds": "When these gauges were written",
    "dgxspark_firewall_table_loaded": "1 when the firewall's table inet dgxspark is loaded (its watch puts it back within "
                                      "seconds; 0 for long: the watch cannot, and the node should have stopped serving)",
    "dgxspark_pcie_aer_errors": "PCIe AER errors a device reported since boot, by severity (the kernel's aer_dev_* "
                                      "counters): a CX-7 fatal AER soft-locked Spark heads under sustained load",
}
SUPERVISOR_PHASES = ("starting", "serving", "restarting", "gave_up", "paused")
_NOT_A_NUMBER = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Requested functionality has been deprecated)\]?$", re.I)


def label_value(value):
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def sample(name, labels, value):
    """One line of the text format: name{a="x"} value (labels sorted)."""
    inner = ",".join('%s="%s"' % (key, label_value(labels[key])) for key in sorted(labels))
    return "%s%s %s" % (name, "{%s}" % inner if inner else "", repr(float(value)) if value % 1 else "%d" % value)


def parse_number(text, scale=1.0):
    """nvidia-smi's value with nounits -> float, or None for [N/A], [Not Supported] and the like."""
    text = text.strip()
    if not text or _NOT_A_NUMBER.match(text):
        return None
    try:
        return float(text) * scale
    except ValueError:
        return None


def gpu_samples(csv_output):
    """`nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits` -> [(name, labels, value)]."""
    samples = []
    for line in csv_output.splitlines():
        if not line.strip():
            continue
        values = [part.strip() for part in line.split(",")]
        if len(values) != len(GPU_FIELDS):
            raise ValueError("nvidia-smi gave %d fields, %d asked: %r" % (len(values), len(GPU_FIELDS), line))
        row = dict(zip((field for field, _gauge in GPU_FIELDS), values))
        gpu = {"gpu": row["index"]}
        samples.append(("dgxspark_gpu_info", dict(gpu, name=row["name"], driver=row["driver_version"]), 1))
        for field, gauge in GPU_FIELDS:
            if gauge is None:
                continue
            value = parse_number(row[field], gauge[1])
            if value is not None:
                samples.append((gauge[0], gpu, value))
    return samples


def docker_time(text):
    """Docker's RFC 3339 time (nanoseconds, Z) -> epoch seconds; None for the zero time of a never-started container."""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$", text or "")
    if not match or match.group(1).startswith("0001-"):
        return None
    seconds = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S"))
    return seconds + (float("0" + match.group(2)) if match.group(2) else 0.0)


def container_samples(inspected, names):
    """`docker inspect NAME...` (a JSON list; a missing name is absent) -> samples for every expected name."""
    found = dict((item.get("Name", "").lstrip("/"), item) for item in inspected)
    samples = []
    for name in names:
        item = found.get(name)
        state = (item or {}).get("State") or {}
        labels = {"container": name}
        samples.append(("dgxspark_container_running", labels, 1 if state.get("Running") else 0))
        started = docker_time(state.get("StartedAt"))
        if started is not None:
            samples.append(("dgxspark_container_started_timestamp_seconds", labels, started))
        if item is not None:
            samples.append(("dgxspark_container_restart_count", labels, int(item.get("RestartCount") or 0)))
    return samples


def supervisor_samples(report):
    """The supervisor's report.json (roles/supervisor) -> samples."""
    samples = [("dgxspark_supervisor_phase", {"phase": phase}, 1 if report.get("phase") == phase else 0)
               for phase in SUPERVISOR_PHASES]
    samples.append(("dgxspark_supervisor_report_timestamp_seconds", {}, float(report.get("time") or 0)))
    samples.append(("dgxspark_supervisor_restarts_in_window", {}, len(report.get("restarts") or [])))
    samples.append(("dgxspark_supervisor_budget_left", {}, int(report.get("budget_left") or 0)))
    probe = report.get("last_probe")
    if probe:
        samples.append(("dgxspark_supervisor_last_probe_ok", {}, 1 if probe.get("ok") else 0))
        samples.append(("dgxspark_supervisor_last_probe_seconds", {}, float(probe.get("latency_s") or 0)))
    return samples


def render(samples):
    """Samples -> the text format, each metric's samples together under one HELP and TYPE line."""
    order, grouped = [], {}
    for name, labels, value in samples:
        if name not in grouped:
            order.append(name)
            grouped[name] = []
        grouped[name].append(sample(name, labels, value))
    lines = []
    for name in order:
        lines.append("# HELP %s %s" % (name, HELP[name]))
        lines.append("# TYPE %s gauge" % name)
        lines.extend(grouped[name])
    return "\n".join(lines) + "\n"


AER_FILES = (("correctable", "aer_dev_correctable", "TOTAL_ERR_COR"), ("nonfatal", "aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
             ("fatal", "aer_dev_fatal", "TOTAL_ERR_FATAL"))


def aer_samples(pci_dir):
    """The kernel's AER counters of every PCIe device that has them (/sys/bus/pci/devices/<dev>/aer_dev_*: `Label N`
    lines ending with TOTAL_ERR_<severity> N, Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats)."""
    samples = []
    try:
        devices = sorted(os.listdir(pci_dir))
    except OSError:
        return samples
    for device in devices:
        for severity, name, total in AER_FILES:
            try:
                with open(os.path.join(pci_dir, device, name)) as handle:
                    text = handle.read()
            except OSError:
                continue
            found = re.search(r"^%s (\d+)\s*$" % total, text, re.M)
            if found:
                samples.append(("dgxspark_pcie_aer_errors", {"device": device, "severity": severity}, int(found.group(1))))
    return samples


def _run(argv, timeout):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    return proc.returncode, proc.stdout


def collect(config, now=None):
    """Every reading of this node -> samples (the readings that fail give a 0 in their _ok gauge)."""
    samples = []
    rc, out = _run([config.get("nvidia_smi", "nvidia-smi"), "--query-gpu=" + ",".join(field for field, _gauge in GPU_FIELDS),
                    "--format=csv,noheader,nounits"], config.get("nvidia_smi_timeout_s", 10))
    try:
        gpus = gpu_samples(out) if rc == 0 else None
    except ValueError:
        gpus = None
    samples.append(("dgxspark_gpu_query_ok", {}, 1 if gpus else 0))
    samples.extend(gpus or [])
    names = config.get("containers") or []
    if names:
        # A missing container makes `docker inspect` exit 1 with the others' JSON; a Docker that is down prints none.
        _rc, out = _run(["docker", "inspect"] + names, config.get("docker_timeout_s", 10))
        try:
            inspected = json.loads(out)
        except ValueError:
            inspected = None
        answered = isinstance(inspected, list)
        samples.append(("dgxspark_containers_query_ok", {}, 1 if answered else 0))
        samples.extend(container_samples(inspected if answered else [], names))
    if config.get("supervisor_report"):
        try:
            with open(config["supervisor_report"]) as handle:
                report = json.load(handle)
        except (OSError, ValueError):
            report = None
        samples.append(("dgxspark_supervisor_report_ok", {}, 1 if report else 0))
        samples.extend(supervisor_samples(report) if report else [])
    phase_dir = config.get("phase_dir")
    if phase_dir and os.path.isdir(phase_dir):
        for entry in sorted(os.listdir(phase_dir)):
            if entry.endswith(".json"):
                samples.append(("dgxspark_phase_converged_timestamp_seconds", {"phase": entry[:-5]},
                                os.stat(os.path.join(phase_dir, entry)).st_mtime))
    nft = config.get("nft", "/usr/sbin/nft")
    if nft and os.path.exists(nft):
        rc, _out = _run([nft, "list", "table", "inet", "dgxspark"], config.get("nft_timeout_s", 10))
        samples.append(("dgxspark_firewall_table_loaded", {}, 1 if rc == 0 else 0))
    samples.extend(aer_samples(config.get("pci_devices_dir", "/sys/bus/pci/devices")))
    if config.get("memory_floor_bytes") is not None:
        samples.append(("dgxspark_memory_floor_bytes", {}, int(config["memory_floor_bytes"])))
    samples.append(("dgxspark_node_metrics_timestamp_seconds", {}, round(time.time() if now is None else now, 3)))
    return samples


def write(path, text):
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.chmod(path + ".tmp", 0o644)
    os.replace(path + ".tmp", path)


def main(argv):
    with open(argv[0] if argv else CONFIG) as handle:
        config = json.load(handle)
    write(config["output"], render(collect(config)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
