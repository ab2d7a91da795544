"""The monitoring role's textfile gauges (roles/monitoring/files/dgxspark_node_metrics.py): nvidia-smi's real query
output (recorded), Docker's inspect, the supervisor's report, and a whole collection on this machine with stand-in
commands, read back by a Prometheus text-format parser of our own rules (one sample per line, HELP and TYPE once)."""
import json
import os
import re
import time

import pytest

from node_metrics_script import metrics


# `nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits`, recorded on an H200 (driver 580.159.04, idle);
# the GB10 rows keep the same shape with the values a Spark gives (memory.used is not reported on unified memory).
H200_IDLE = "0, NVIDIA H200, 580.159.04, 345, 3201, 1980, 80.92, 39, 0, 0\n"
GB10_BUSY = "0, NVIDIA GB10, 580.95.05, 2405, 8533, 3003, 41.37, 61, 97, [N/A]\n"
GB10_STUCK = "0, NVIDIA GB10, 580.95.05, 702, 8533, 3003, 12.10, 52, 98, [Not Supported]\n"


def gauges(samples):
    return dict(((name, tuple(sorted(labels.items()))), value) for name, labels, value in samples)


@pytest.mark.parametrize("output, expected", [
    (H200_IDLE, {("dgxspark_gpu_info", (("driver", "580.159.04"), ("gpu", "0"), ("name", "NVIDIA H200"))): 1,
                 ("dgxspark_gpu_sm_clock_mhz", (("gpu", "0"),)): 345.0,
                 ("dgxspark_gpu_memory_clock_mhz", (("gpu", "0"),)): 3201.0,
                 ("dgxspark_gpu_sm_clock_max_mhz", (("gpu", "0"),)): 1980.0,
                 ("dgxspark_gpu_power_watts", (("gpu", "0"),)): 80.92,
                 ("dgxspark_gpu_temperature_celsius", (("gpu", "0"),)): 39.0,
                 ("dgxspark_gpu_utilization_ratio", (("gpu", "0"),)): 0.0,
                 ("dgxspark_gpu_memory_used_bytes", (("gpu", "0"),)): 0.0}),
    (GB10_BUSY, {("dgxspark_gpu_info", (("driver", "580.95.05"), ("gpu", "0"), ("name", "NVIDIA GB10"))): 1,
                 ("dgxspark_gpu_sm_clock_mhz", (("gpu", "0"),)): 2405.0,
                 ("dgxspark_gpu_memory_clock_mhz", (("gpu", "0"),)): 8533.0,
                 ("dgxspark_gpu_sm_clock_max_mhz", (("gpu", "0"),)): 3003.0,
                 ("dgxspark_gpu_power_watts", (("gpu", "0"),)): 41.37,
                 ("dgxspark_gpu_temperature_celsius", (("gpu", "0"),)): 61.0,
                 ("dgxspark_gpu_utilization_ratio", (("gpu", "0"),)): 0.97}),
    (GB10_STUCK, {("dgxspark_gpu_info", (("driver", "580.95.05"), ("gpu", "0"), ("name", "NVIDIA GB10"))): 1,
                  ("dgxspark_gpu_sm_clock_mhz", (("gpu", "0"),)): 702.0,
                  ("dgxspark_gpu_memory_clock_mhz", (("gpu", "0"),)): 8533.0,
                  ("dgxspark_gpu_sm_clock_max_mhz", (("gpu", "0"),)): 3003.0,
                  ("dgxspark_gpu_power_watts", (("gpu", "0"),)): 12.1,
                  ("dgxspark_gpu_temperature_celsius", (("gpu", "0"),)): 52.0,
                  ("dgxspark_gpu_utilization_ratio", (("gpu", "0"),)): 0.98}),
    ("", {}),
])
def test_gpu_query_becomes_gauges_and_unsupported_fields_are_left_out(output, expected):
    got = gauges(metrics.gpu_samples(output))
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key


@pytest.mark.parametrize("output", [
    "0, NVIDIA GB10, 580.95.05\n",  # fewer fields than asked: an nvidia-smi that ignored the query
    "Field \"clocks.max.sm\" is not a valid field to query.\n",
])
def test_gpu_query_with_the_wrong_shape_is_refused(output):
    with pytest.raises(ValueError, match="fields"):
        metrics.gpu_samples(output)


@pytest.mark.parametrize("text, expected", [
    ("2026-11-27T05:01:02.123456789Z", 1795755662.123457),
    ("2026-11-27T05:01:02Z", 1795755662.0),
    ("0001-01-01T00:00:00Z", None),  # created, never started
    ("", None),
    ("garbage", None),
])
def test_docker_times(text, expected):
    got = metrics.docker_time(text)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_containers_expected_but_missing_read_as_not_running():
    inspected = [{"Name": "/dgxspark-ray", "RestartCount": 2,
                  "State": {"Running": True, "StartedAt": "2026-11-27T05:01:02.5Z"}},
                 {"Name": "/dgxspark-vllm", "RestartCount": 0,
                  "State": {"Running": False, "StartedAt": "0001-01-01T00:00:00Z"}}]
    got = gauges(metrics.container_samples(inspected, ["dgxspark-ray", "dgxspark-vllm", "dgxspark-other"]))
    assert got == {
        ("dgxspark_container_running", (("container", "dgxspark-ray"),)): 1,
        ("dgxspark_container_started_timestamp_seconds", (("container", "dgxspark-ray"),)): 1795755662.5,
        ("dgxspark_container_restart_count", (("container", "dgxspark-ray"),)): 2,
        ("dgxspark_container_running", (("container", "dgxspark-vllm"),)): 0,
        ("dgxspark_container_restart_count", (("container", "dgxspark-vllm"),)): 0,
        ("dgxspark_container_running", (("container", "dgxspark-other"),)): 0,
    }


@pytest.mark.parametrize("report, expected", [
    ({"phase": "serving", "time": 1795755662.0, "restarts": [1795750000.0], "budget_left": 2,
      "last_probe": {"ok": True, "latency_s": 0.18, "error": ""}},
     {"phase": "serving", "restarts": 1, "left": 2, "probe_ok": 1, "probe_s": 0.18}),
    ({"phase": "gave_up", "time": 1795755662.0, "restarts": [1, 2, 3], "budget_left": 0,
      "last_probe": {"ok": False, "latency_s": 10.0, "error": "no token within 10 s"}},
     {"phase": "gave_up", "restarts": 3, "left": 0, "probe_ok": 0, "probe_s": 10.0}),
    ({"phase": "starting", "time": 1795755662.0, "restarts": [], "budget_left": 3, "last_probe": None},
     {"phase": "starting", "restarts": 0, "left": 3, "probe_ok": None, "probe_s": None}),
])
def test_supervisor_report_becomes_gauges(report, expected):
    got = gauges(metrics.supervisor_samples(report))
    phases = dict((dict(labels)["phase"], value) for (name, labels), value in got.items()
                  if name == "dgxspark_supervisor_phase")
    assert phases == dict((p, 1 if p == expected["phase"] else 0) for p in metrics.SUPERVISOR_PHASES)
    assert got[("dgxspark_supervisor_restarts_in_window", ())] == expected["restarts"]
    assert got[("dgxspark_supervisor_budget_left", ())] == expected["left"]
    assert got.get(("dgxspark_supervisor_last_probe_ok", ())) == expected["probe_ok"]
    assert got.get(("dgxspark_supervisor_last_probe_seconds", ())) == expected["probe_s"]
    assert got[("dgxspark_supervisor_report_timestamp_seconds", ())] == 1795755662.0


LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def parse_text_format(text):
    """The text format's rules that the textfile collector enforces: HELP and TYPE once per metric, before its
    samples, and every sample line well formed. -> {name: [line, ...]}"""
    seen, helped, typed = {}, set(), set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert name not in helped and name not in seen, line
            helped.add(name)
        elif line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            assert kind == "gauge" and name in helped and name not in typed, line
            typed.add(name)
        else:
            match = LINE.match(line)
            assert match, line
            float(match.group(4))
            assert match.group(1) in typed, line
            seen.setdefault(match.group(1), []).append(line)
    return seen


def test_label_values_are_escaped():
    text = metrics.render([("dgxspark_gpu_info", {"gpu": "0", "name": 'odd "name"\\ x\ny', "driver": "1"}, 1)])
    assert 'name="odd \\"name\\"\\\\ x\\ny"' in text
    assert parse_text_format(text)["dgxspark_gpu_info"]


def write_tool(path, body):
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)


@pytest.mark.parametrize("smi_body, docker_body, report, expected_ok", [
    ("printf '%s'\n" % GB10_BUSY.strip(), "echo '[{\"Name\": \"/dgxspark-vllm\", \"RestartCount\": 0, "
     "\"State\": {\"Running\": true, \"StartedAt\": \"2026-11-27T05:01:02Z\"}}]'\n",
     {"phase": "serving", "time": 1.0, "restarts": [], "budget_left": 3, "last_probe": {"ok": True, "latency_s": 0.2}},
     {"dgxspark_gpu_query_ok": 1, "dgxspark_containers_query_ok": 1, "dgxspark_supervisor_report_ok": 1}),
    # nvidia-smi hangs past its timeout, Docker is down, the report is not there: zeros, and the file is still written
    ("sleep 5\n", "echo 'Cannot connect to the Docker daemon' >&2; exit 1\n", None,
     {"dgxspark_gpu_query_ok": 0, "dgxspark_containers_query_ok": 0, "dgxspark_supervisor_report_ok": 0}),
    ("echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9\n",
     "echo '[]'; echo 'Error: No such object: dgxspark-vllm' >&2; exit 1\n", None,
     {"dgxspark_gpu_query_ok": 0, "dgxspark_containers_query_ok": 1, "dgxspark_supervisor_report_ok": 0}),
])
def test_a_whole_collection_writes_a_valid_file_even_when_readings_fail(
        tmp_path, monkeypatch, smi_body, docker_body, report, expected_ok):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_tool(str(bin_dir / "nvidia-smi"), smi_body)
    write_tool(str(bin_dir / "docker"), docker_body)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    phases = tmp_path / "phases"
    phases.mkdir()
    (phases / "vllm.json").write_text("{}")
    os.utime(str(phases / "vllm.json"), (1795755662, 1795755662))
    report_path = tmp_path / "report.json"
    if report is not None:
        report_path.write_text(json.dumps(report))
    output = tmp_path / "dgxspark.prom"
    config = {"output": str(output), "containers": ["dgxspark-vllm"], "supervisor_report": str(report_path),
              "phase_dir": str(phases), "memory_floor_bytes": 4 * 2 ** 30, "nvidia_smi_timeout_s": 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    started = time.time()
    assert metrics.main([str(tmp_path / "config.json")]) == 0
    assert time.time() - started < 4  # the hung nvidia-smi was cut at its timeout
    text = output.read_text()
    assert not os.path.exists(str(output) + ".tmp") and oct(os.stat(str(output)).st_mode & 0o777) == "0o644"
    seen = parse_text_format(text)
    for name, value in expected_ok.items():
        assert seen[name] == ["%s %d" % (name, value)], text
    assert seen["dgxspark_memory_floor_bytes"] == ["dgxspark_memory_floor_bytes 4294967296"]
    assert seen["dgxspark_phase_converged_timestamp_seconds"] == [
        'dgxspark_phase_converged_timestamp_seconds{phase="vllm"} 1795755662']
    assert ("dgxspark_gpu_sm_clock_mhz" in seen) == bool(expected_ok["dgxspark_gpu_query_ok"])


AER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "aer")


def test_pcie_aer_counters_are_read_from_every_device_that_has_them(tmp_path):
    """The kernel's aer_dev_* files (its documentation's sample outputs): the TOTAL_ line of each, by severity."""
    with open(os.path.join(AER, "aer_dev_fatal_kernel_doc.txt")) as handle:
        fatal = handle.read()
    with open(os.path.join(AER, "aer_dev_correctable_kernel_doc.txt")) as handle:
        correctable = handle.read()
    cx7 = tmp_path / "0000:01:00.0"
    cx7.mkdir()
    (cx7 / "aer_dev_correctable").write_text(correctable)
    (cx7 / "aer_dev_fatal").write_text(fatal.replace("TOTAL_ERR_FATAL 0", "TOTAL_ERR_FATAL 1"))
    (cx7 / "aer_dev_nonfatal").write_text(fatal.replace("TOTAL_ERR_FATAL", "TOTAL_ERR_NONFATAL"))
    (tmp_path / "0000:00:00.0").mkdir()  # a device without AER: nothing
    assert metrics.aer_samples(str(tmp_path)) == [
        ("dgxspark_pcie_aer_errors", {"device": "0000:01:00.0", "severity": "correctable"}, 2),
        ("dgxspark_pcie_aer_errors", {"device": "0000:01:00.0", "severity": "nonfatal"}, 0),
        ("dgxspark_pcie_aer_errors", {"device": "0000:01:00.0", "severity": "fatal"}, 1),
    ]
    assert metrics.aer_samples(str(tmp_path / "absent")) == []
    text = metrics.render(metrics.aer_samples(str(tmp_path)))
    assert parse_text_format(text)["dgxspark_pcie_aer_errors"][2] == (
        'dgxspark_pcie_aer_errors{device="0000:01:00.0",severity="fatal"} 1')


@pytest.mark.parametrize("nft_body, expected", [
    ("echo 'table inet dgxspark {'; echo '}'\n", 1),
    ("echo 'Error: No such file or directory' >&2; exit 1\n", 0),
])
def test_the_firewall_table_is_a_gauge(tmp_path, nft_body, expected):
    nft = str(tmp_path / "nft")
    write_tool(nft, nft_body)
    samples = [s for s in metrics.collect({"nft": nft, "nvidia_smi": str(tmp_path / "absent"), "pci_devices_dir": str(tmp_path)})
               if s[0] == "dgxspark_firewall_table_loaded"]
    assert samples == [("dgxspark_firewall_table_loaded", {}, expected)]
    # no nft on the node: no gauge (nothing to say), rather than a false alarm
    assert not [s for s in metrics.collect({"nft": str(tmp_path / "none"), "nvidia_smi": str(tmp_path / "absent"),
                                            "pci_devices_dir": str(tmp_path)}) if s[0] == "dgxspark_firewall_table_loaded"]
