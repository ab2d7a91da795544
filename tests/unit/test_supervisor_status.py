"""What status.yml says of the supervisor (plugins/plugin_utils/supervisor_status.py), over reports of the shape the
supervisor's own code writes (roles/supervisor/files/dgxspark_supervisor.py's Supervisor.report: checked below)."""
import importlib.util
import os
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.supervisor_status import supervisor_status

NOW = 1795746673.0
GIB = 1024 * 1024


def report(**changes):
    base = {"time": NOW - 5, "phase": "serving", "since": NOW - 600, "paused_by": "", "reason": "",
            "last_probe": {"ok": True, "latency_s": 0.21, "error": "", "time": NOW - 5}, "serving_since": NOW - 590,
            "interval_s": 10, "restarts": [], "budget_restarts": 3, "budget_window_s": 3600, "budget_left": 3,
            "crashes": [], "crash_budget_restarts": 10, "crash_budget_left": 10, "start_after": None,
            "memory_short": {}, "nodes": {}, "messages": []}
    base.update(changes)
    return base


def test_a_serving_supervisor_is_one_line_and_no_problem():
    line, problems, notes = supervisor_status(report(), NOW)
    assert line == ("supervisor: serving since 2026-11-27 02:21:13Z; last probe 5 s ago, 0.21 s, ok; 0 restarts of 3 in "
                    "the last 60 min (3 left)")
    assert (problems, notes) == ([], [])


def test_crashes_after_serving_are_counted_apart_and_noted():
    line, problems, notes = supervisor_status(report(crashes=[NOW - 900, NOW - 200], crash_budget_left=8), NOW)
    assert line.endswith("0 restarts of 3 in the last 60 min (3 left); 2 after serving of 10 (8 left)") and problems == []
    assert notes == ["The supervisor restarted the group 2 times in the last 60 min (last: 2026-11-27 02:27:53Z); "
                     "`journalctl -u dgxspark-supervisor` on the head says why."]


def test_restarts_that_healed_are_a_note():
    line, problems, notes = supervisor_status(report(restarts=[NOW - 300], budget_left=2), NOW)
    assert "1 restart of 3 in the last 60 min (2 left)" in line and problems == []
    assert notes == ["The supervisor restarted the group 1 time in the last 60 min (last: 2026-11-27 02:26:13Z); "
                     "`journalctl -u dgxspark-supervisor` on the head says why."]


def test_a_give_up_is_a_problem_with_its_reason_memory_and_last_messages():
    gave_up = report(phase="gave_up", since=NOW - 60, budget_left=0, restarts=[NOW - 300, NOW - 200, NOW - 100],
                     reason="memory did not come back within 600 s: spark-beta has 40.0 GiB available, the plan needs 103.4 GiB",
                     memory_short={"spark-beta": {"available_kib": 40 * GIB, "needed_kib": 103 * GIB}},
                     messages=["2026-11-27T02:30:13Z dgxspark-vllm on spark-alpha exited (code 1); its last log line: "
                               "ValueError: Unknown quantization method: nvfp4"])
    _line, problems, notes = supervisor_status(gave_up, NOW, head="spark-alpha")
    assert len(problems) == 1 and notes == []
    assert problems[0].startswith("The supervisor gave up at 2026-11-27 02:30:13Z and left the group stopped: memory did "
                                  "not come back within 600 s: spark-beta has 40.0 GiB available")
    assert ". Memory: spark-beta: 40.0 GiB available, 103.0 GiB needed." in problems[0]
    assert "Unknown quantization method: nvfp4" in problems[0]
    assert "dgxspark_supervisor.py resume` on spark-alpha" in problems[0]


@pytest.mark.parametrize("changes, problem", [
    ({"last_probe": {"ok": False, "latency_s": 10.0, "error": "no token within 10 s", "time": NOW - 5},
      "reason": "probe 1 of 3 failed: no token within 10 s"},
     "The supervisor's last probe got no token: no token within 10 s (probe 1 of 3 failed: no token within 10 s)."),
    ({"time": NOW - 600}, "The supervisor's last report on the head is 10 min old (it looks every 10 s)"),
    ({"phase": "restarting", "reason": "waiting for memory before starting the group again: spark-beta has 40.0 GiB"},
     "The supervisor is restarting the group: waiting for memory before starting the group again: spark-beta"),
])
def test_what_makes_status_fail(changes, problem):
    _line, problems, _notes = supervisor_status(report(**changes), NOW)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_a_pause_is_a_note_naming_who_paused():
    _line, problems, notes = supervisor_status(report(phase="paused", paused_by="stop.yml\n"), NOW)
    assert problems == [] and notes == ["The supervisor is paused (stop.yml): it restarts nothing until a deploy or "
                                        "`dgxspark_supervisor.py resume` on the head."]


def test_a_pause_or_a_resume_newer_than_the_report_wins():
    line, problems, notes = supervisor_status(report(phase="paused", paused_by="deploy: phase ray"), NOW, paused=False)
    assert line.startswith("supervisor: resuming ") and (problems, notes) == ([], [])
    line, problems, notes = supervisor_status(report(), NOW, paused=True)
    assert line.startswith("supervisor: paused ") and problems == []
    assert notes == ["The supervisor is paused (since its last report): it restarts nothing until a deploy or "
                     "`dgxspark_supervisor.py resume` on the head."]


def test_no_report_is_a_problem_only_where_a_supervisor_is_expected():
    assert supervisor_status(None, NOW, expected=False) == (None, [], [])
    line, problems, _notes = supervisor_status(None, NOW, head="spark-alpha")
    assert line == "supervisor: no report" and "dgxspark-supervisor.service is not installed or never ran" in problems[0]


def test_the_reports_here_have_the_keys_the_supervisor_writes():
    files = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles", "supervisor", "files")
    sys.path.insert(0, files)
    spec = importlib.util.spec_from_file_location("dgxspark_supervisor", os.path.join(files, "dgxspark_supervisor.py"))
    service = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(service)
    config = {"interval_s": 10, "budget_restarts": 3, "budget_window_s": 3600, "crash_budget_restarts": 10,
              "state_dir": "/nonexistent", "group": []}
    written = service.Supervisor(config, clock=lambda: NOW).report()
    assert sorted(written) == sorted(report())
