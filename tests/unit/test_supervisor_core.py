"""The supervisor's decisions (roles/supervisor/files/dgxspark_supervisor_core.py), as scenarios: what the service saw at
each look, and what the supervisor must do. Figures are those of the role's defaults (interval 30 s, 3 probes, grace
3600 s, stall 900 s, budget 3 in 3600 s, memory wait 600 s; after serving, 10 crashes in 3600 s, backoff from 30 s to
600 s)."""
import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.spec_from_file_location(
    "dgxspark_supervisor_core",
    os.path.join(HERE, "..", "..", "roles", "supervisor", "files", "dgxspark_supervisor_core.py"))
core = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(core)

GIB = 1024 * 1024
GROUP = [{"node": "spark-alpha", "container": "dgxspark-ray"}, {"node": "spark-beta", "container": "dgxspark-ray"},
         {"node": "spark-alpha", "container": "dgxspark-vllm", "engine": True}]
CONFIG = {"interval_s": 30, "deadline_s": 30, "failures_to_restart": 3, "grace_s": 3600, "stall_s": 900, "frozen_s": 300,
          "budget_restarts": 3, "budget_window_s": 3600, "memory_wait_s": 600,
          "crash_budget_restarts": 10, "crash_backoff_s": 30, "crash_backoff_max_s": 600,
          "memory_needed_kib": {"spark-alpha": 100 * GIB, "spark-beta": 90 * GIB}, "group": GROUP}
OK = {"ok": True, "latency_s": 0.2, "error": ""}
NO_TOKEN = {"ok": False, "latency_s": 30.0, "error": "no answer within 30 s"}


def nodes(stopped=(), unreachable=(), missing=(), mem=None, exit_code=0):
    """What the service reads from each node: every container running, 110 GiB available, unless told otherwise."""
    mem = mem or {}
    seen = {}
    for node in ("spark-alpha", "spark-beta"):
        if node in unreachable:
            seen[node] = {"reachable": False, "error": "ssh: connect to host port 22: No route to host"}
            continue
        containers = dict((m["container"], {"running": (node, m["container"]) not in stopped, "exit_code": exit_code})
                          for m in GROUP if m["node"] == node and (node, m["container"]) not in missing)
        seen[node] = {"reachable": True, "containers": containers, "mem_available_kib": mem.get(node, 110 * GIB)}
    return seen


def look(now, probe="ok", paused=False, started=None, log_age=None, load=None, **node_state):
    """probe: "ok" (a token), None (not probed) or a failed probe; started: the engine container's start time; None:
    the one it has (run() fills it in); load: (running, waiting, tokens) from the engine's /metrics, None: not read."""
    probe = OK if probe == "ok" else probe
    return {"now": now, "probe": probe, "paused": paused, "nodes": nodes(**node_state), "engine_started_at": started,
            "last_log_age_s": log_age,
            "load": dict(zip(("running", "waiting", "tokens"), load)) if load is not None else None}


def stopped_group(seen):
    """What the service sees right after it stopped the group: every container exited, memory as it was."""
    after = dict(seen, probe=None, nodes={}, resumed=False)  # the request was taken by the look before
    for node, view in seen["nodes"].items():
        containers = dict((name, {"running": False, "exit_code": 0}) for name in view.get("containers", {}))
        after["nodes"][node] = dict(view, containers=containers)
    return after


def run(looks, state=None, config=None):
    """Feed the looks in order, as the service does: after a stop it looks again at once. Returns
    [(phase, 'action+action' or None)] and the last state."""
    config = config or CONFIG
    state = state or core.new_state(0)
    trace, engine_started_at = [], "t0"
    for seen in looks:
        engine_started_at = seen["engine_started_at"] = seen["engine_started_at"] or engine_started_at
        state, action = core.decide(config, state, seen)
        kinds = [action[0]] if action else []
        if action and action[0] == "stop":
            state, action = core.decide(config, state, stopped_group(seen))
            kinds += [action[0]] if action else []  # none while a backoff runs
        if action and action[0] == "start":
            engine_started_at = "restart-at-%d" % seen["now"]
            state = core.restarted(state, engine_started_at)
        trace.append((state["phase"], "+".join(kinds) or None))
    return trace, state


RESTARTED = ("starting", "stop+start")


@pytest.mark.parametrize("name, looks, expected", [
    ("a healthy engine is left alone",
     [look(30), look(60), look(90)],
     [("serving", None)] * 3),
    ("failed probes during the grace do not count",
     [look(30, NO_TOKEN), look(1800, NO_TOKEN), look(3500, NO_TOKEN), look(3530)],
     [("starting", None)] * 3 + [("serving", None)]),
    ("after the grace, 3 failed probes in a row restart the group",
     [look(3600, NO_TOKEN), look(3630, NO_TOKEN), look(3660, NO_TOKEN)],
     [("serving", None), ("serving", None), RESTARTED]),
    ("a token in between starts the count again",
     [look(30), look(60, NO_TOKEN), look(90, NO_TOKEN), look(120), look(150, NO_TOKEN), look(180, NO_TOKEN)],
     [("serving", None)] * 6),
    ("a hung engine (health may answer, no token) restarts after 3 probes",
     [look(30), look(60, NO_TOKEN), look(90, NO_TOKEN), look(120, NO_TOKEN)],
     [("serving", None), ("serving", None), ("serving", None), RESTARTED]),
    ("an engine that exited (code 0 after a rank died) restarts at once, in the grace too",
     [look(30, None, stopped=[("spark-alpha", "dgxspark-vllm")])],
     [RESTARTED]),
    ("a rank's container killed restarts the group at once",
     [look(30), look(60, NO_TOKEN, stopped=[("spark-beta", "dgxspark-ray")], exit_code=137)],
     [("serving", None), RESTARTED]),
    ("a rank's node that left restarts the group",
     [look(30), look(60, NO_TOKEN, unreachable=["spark-beta"], mem={"spark-beta": 0})],
     [("serving", None), ("restarting", "stop+wait_memory")]),
    ("a missing container restarts the group",
     [look(30, missing=[("spark-beta", "dgxspark-ray")])],
     [RESTARTED]),
    ("a start that stopped making progress restarts before the grace ends",
     [look(30, None, log_age=600), look(960, None, log_age=900)],
     [("starting", None), RESTARTED]),
    ("the stall does not count once the engine serves",
     [look(30), look(60, log_age=5000)],
     [("serving", None), ("serving", None)]),
    # A deadlock that looks healthy (eugr/spark-vllm-docker #260): requests run, the token counter stands still. The
    # probe's own request waits behind them, so it is the load that tells.
    ("requests that run for frozen_s with no new token restart the group, whatever the probe says",
     [look(30, load=(0, 0, 500)), look(60, "ok", load=(4, 0, 900)), look(90, None, load=(4, 0, 900)),
      look(330, NO_TOKEN, load=(4, 2, 900)), look(360, NO_TOKEN, load=(4, 3, 900))],
     [("serving", None)] * 4 + [RESTARTED]),
    ("a busy engine whose probe waits behind the others is not restarted while tokens come",
     [look(30, load=(8, 20, 100))] + [look(60 + 30 * i, NO_TOKEN, load=(8, 20, 200 + 100 * i)) for i in range(6)],
     [("serving", None)] * 7),
    ("tokens that stop while the probe fails count the probes again",
     [look(30, load=(8, 20, 100)), look(60, NO_TOKEN, load=(8, 20, 200)), look(90, NO_TOKEN, load=(8, 20, 200)),
      look(120, NO_TOKEN, load=(8, 20, 200)), look(150, NO_TOKEN, load=(8, 20, 200))],
     [("serving", None)] * 4 + [RESTARTED]),
    ("no request running is idle, not frozen, however long the counter stands",
     [look(30 + 300 * i, load=(0, 0, 42)) for i in range(5)],
     [("serving", None)] * 5),
    ("a load that cannot be read changes nothing: the probes decide",
     [look(30, load=(4, 0, 10)), look(400, None), look(430, "ok", load=(4, 0, 10)), look(460, None, load=(4, 0, 10))],
     [("serving", None)] * 4),
    # A supervisor that starts (or is resumed) while the engine hangs: its probe waits behind the stuck requests, so no
    # probe's token ends the grace; the engine's counter, from 0 at its start, shows that it served.
    ("a supervisor started while the engine hangs does not wait out the grace: the counter shows the engine served",
     [look(30, NO_TOKEN, load=(4, 1, 900)), look(60, NO_TOKEN, load=(4, 2, 900)), look(90, NO_TOKEN, load=(4, 3, 900))],
     [("serving", None), ("serving", None), RESTARTED]),
    ("an engine that generated no token yet keeps its grace, its first request running included",
     [look(30, NO_TOKEN, load=(0, 0, 0)), look(60, NO_TOKEN, load=(1, 0, 0)), look(400, NO_TOKEN, load=(1, 0, 0)),
      look(430, NO_TOKEN, load=(1, 1, 0))],
     [("starting", None)] * 4),
])
def test_scenario(name, looks, expected):
    trace, _state = run(looks)
    assert trace == expected, name


def crash(now):
    return look(now, None, stopped=[("spark-alpha", "dgxspark-vllm")], exit_code=1)


def test_a_crash_loop_spends_the_budget_then_gives_up_and_stays_stopped():
    trace, state = run([crash(30), crash(90), crash(150), crash(210), crash(270)])
    assert trace == [RESTARTED] * 3 + [("gave_up", "give_up"), ("gave_up", None)]
    assert state["reason"] == ("the restart budget is spent (3 restarts in 3600 s); the last problem: container "
                               "dgxspark-vllm on spark-alpha is not running (exit code 1)")


def test_restarts_older_than_the_window_leave_the_budget():
    trace, state = run([crash(30), crash(90), crash(150), crash(3650)])
    assert trace == [RESTARTED] * 4
    assert state["restarts"] == [90, 150, 3650]


def test_a_budget_of_zero_never_restarts():
    trace, _state = run([crash(30)], config=dict(CONFIG, budget_restarts=0))
    assert trace == [("gave_up", "give_up")]


def test_no_restart_into_memory_that_is_not_there_then_restart_when_it_is_back():
    low = {"spark-beta": 60 * GIB}
    stopped = [("spark-alpha", "dgxspark-vllm")]
    trace, state = run([look(30), look(60, None, stopped=stopped, mem=low), look(90, None, stopped=stopped, mem=low),
                        look(120, None, stopped=stopped)])
    assert trace == [("serving", None), ("restarting", "stop+wait_memory"), ("restarting", "wait_memory"),
                     ("starting", "start")]
    # It had served: the restart is a crash's (the crash budget), not a start-up's.
    assert state["crashes"] == [60] and state["restarts"] == [] and state["engine_started_at"] == "restart-at-120"


def test_memory_that_does_not_come_back_gives_up_naming_the_node_and_both_figures():
    low = {"spark-beta": 60 * GIB}
    looks = [look(t, None, stopped=[("spark-alpha", "dgxspark-vllm")], mem=low) for t in (60, 300, 659, 660)]
    trace, state = run(looks)
    assert trace == [("restarting", "stop+wait_memory")] + [("restarting", "wait_memory")] * 2 + [("gave_up", "give_up")]
    assert state["reason"] == ("memory did not come back within 600 s: spark-beta has 60.0 GiB available, the plan needs "
                               "90.0 GiB (restart due because container dgxspark-vllm on spark-alpha is not running "
                               "(exit code 0))")
    assert state["restarts"] == [60]


def test_a_node_whose_memory_cannot_be_read_counts_as_short():
    short = core.memory_short(CONFIG, {"nodes": nodes(unreachable=["spark-beta"])})
    assert short == [("spark-beta", None, 90 * GIB)]
    assert core.describe_short(short) == "spark-beta cannot be read (the plan needs 90.0 GiB there)"


def test_paused_the_supervisor_does_nothing_and_a_resume_takes_the_group_as_it_is():
    stopped = [("spark-alpha", "dgxspark-vllm")]
    trace, state = run([crash(30), crash(90), look(120, None, paused=True, stopped=stopped),
                        look(150, None, paused=True, stopped=stopped), look(180, started="by-hand"), look(210)])
    assert trace == [RESTARTED, RESTARTED, ("paused", None), ("paused", None),
                     ("serving", None), ("serving", None)]
    assert state["restarts"] == []  # a fresh budget after the resume


def test_a_resume_after_a_give_up_starts_again_with_a_fresh_budget():
    trace, state = run([crash(30), crash(60), crash(90), crash(120), dict(crash(150), resumed=True)])
    assert trace[3] == ("gave_up", "give_up") and trace[4] == RESTARTED
    assert state["restarts"] == [150]


def test_a_resume_gives_a_fresh_grace():
    trace, _state = run([look(30, paused=True), look(4000, NO_TOKEN), look(4030, NO_TOKEN), look(4060, NO_TOKEN)])
    assert trace == [("paused", None)] + [("starting", None)] * 3


def test_a_resume_while_the_engine_hangs_names_the_hang_once_frozen_s_passed():
    """Paused, then resumed while requests stand still (the lab's test_deadlock_lab stages it): the frozen count runs
    from the resume, and the hang is named before the probes' count would end it (frozen_s shorter than 3 looks)."""
    config = dict(CONFIG, frozen_s=45)
    hung = (3, 1, 640)
    trace, state = run([look(30, load=(3, 0, 600)), look(60, paused=True, load=hung), look(90, None, paused=True, load=hung),
                        dict(look(120, NO_TOKEN, load=hung), resumed=True), look(150, NO_TOKEN, load=hung),
                        look(180, NO_TOKEN, load=hung)], config=config)
    assert trace == [("serving", None), ("paused", None), ("paused", None), ("serving", None), ("serving", None), RESTARTED]
    assert state["last_problem"].startswith("3 requests have run for 60 s with no token generated"), state["last_problem"]
    assert state["crashes"] == [180] and state["restarts"] == []  # it had served: the crash budget


def test_an_engine_started_by_a_deploy_gets_a_fresh_grace_and_budget_even_after_a_give_up():
    trace, state = run([crash(30), crash(60), crash(90), crash(120), look(150, None, started="deploy"),
                        look(180, NO_TOKEN, started="deploy")])
    assert trace[3] == ("gave_up", "give_up")
    assert trace[4:] == [("starting", None), ("starting", None)]
    assert state["restarts"] == []


def test_the_supervisor_s_own_restart_is_not_taken_for_a_deploy():
    # the engine's new start time after our restart is recorded by restarted(): the next look keeps the budget
    trace, state = run([crash(30), look(60, None)])
    assert trace == [RESTARTED, ("starting", None)]
    assert state["restarts"] == [30]


def test_the_last_probe_is_kept_for_the_report():
    _trace, state = run([look(30), look(60, NO_TOKEN)])
    assert state["last_probe"] == dict(NO_TOKEN, time=60)
    assert state["reason"] == "probe 1 of 3 failed: no answer within 30 s"


@pytest.mark.parametrize("change, message", [
    ({"interval_s": 0}, "interval_s must be a number above 0, got 0"),
    ({"grace_s": "1h"}, "grace_s must be a number above 0, got '1h'"),
    ({"frozen_s": 0}, "frozen_s must be a number above 0, got 0"),
    ({"budget_restarts": -1}, "budget_restarts must be an integer of 0 or more, got -1"),
    ({"budget_restarts": True}, "budget_restarts must be an integer of 0 or more, got True"),
    ({"crash_budget_restarts": -2}, "crash_budget_restarts must be an integer of 0 or more, got -2"),
    ({"crash_backoff_s": 0}, "crash_backoff_s must be a number above 0, got 0"),
    ({"crash_backoff_max_s": "10m"}, "crash_backoff_max_s must be a number above 0, got '10m'"),
    ({"group": []}, "group must list the containers to restart, in start order"),
    ({"group": GROUP[:2]}, "group must end with its one engine container (engine: true)"),
    ({"group": [GROUP[2]] + GROUP[:2]}, "group must end with its one engine container (engine: true)"),
    ({"group": [{"node": "spark-alpha"}] + GROUP}, "group[0] needs a node and a container, got {'node': 'spark-alpha'}"),
    ({"memory_needed_kib": {"spark-alpha": 1}}, "memory_needed_kib must give a figure for each node of the group: "
                                                "spark-alpha, spark-beta"),
])
def test_a_bad_configuration_is_named(change, message):
    assert message in core.check_config(dict(CONFIG, **change))


def test_a_missing_key_is_named_and_the_defaults_are_usable():
    assert core.check_config(dict((k, v) for k, v in CONFIG.items() if k != "stall_s")) == ["missing key 'stall_s'"]
    assert core.check_config(CONFIG) == []


def test_a_new_engine_s_counter_from_zero_starts_the_frozen_count_anew():
    """After the supervisor's own restart the engine's counter starts again from 0: that is no standing counter."""
    trace, state = run([look(30, load=(2, 0, 5000)), look(60, NO_TOKEN, load=(2, 0, 5000)), look(90, NO_TOKEN, load=(2, 0, 5000)),
                        look(120, NO_TOKEN, load=(2, 0, 5000))])
    assert trace[-1] == RESTARTED and state["load"] == {}
    trace, state = run([look(3800, load=(2, 0, 3)), look(3830, load=(2, 0, 3))], state=state)
    assert trace == [("serving", None)] * 2 and state["load"]["still_since"] == 3800


def test_the_hang_is_named_with_the_requests_and_the_counter():
    _trace, state = run([look(30, load=(3, 1, 77)), look(200, load=(3, 1, 77)), look(340, NO_TOKEN, load=(3, 1, 77))])
    assert state["last_problem"] == ("3 requests have run for 310 s with no token generated (the engine's token counter "
                                     "stands at 77): the engine is hung, though it may answer /health")


def test_a_probe_that_waited_behind_a_busy_engine_says_so():
    _trace, state = run([look(30, load=(8, 20, 100)), look(60, NO_TOKEN, load=(8, 20, 164))])
    assert state["failures"] == 0
    assert state["reason"] == ("the probe got no token in time (no answer within 30 s), but the engine generated 64 tokens "
                               "since the last look (8 requests running, 20 waiting): busy, not hung")


# ---------------------------------------------------------------- crashes after serving (issue 50, item 11)
# One ordinary request killed the lab's engine (POST /v1/completions with logprobs: EngineDeadError, exit code 0,
# tests/unit/fixtures/supervisor/vllm_0.32_cpu_engine_dead_after_logprobs.log): three of them in an hour spent the
# restart budget, which is there for start-up loops, and the cluster stayed dark.

def served_crash(now):
    """The engine, which had served, stopped: its API logged the request before."""
    seen = look(now, None, stopped=[("spark-alpha", "dgxspark-vllm")], exit_code=0)
    seen["nodes"]["spark-alpha"]["containers"]["dgxspark-vllm"]["last_request"] = {
        "time": "2026-12-06T03:33:04Z", "method": "POST", "path": "/v1/completions", "status": 500, "client": "172.31.240.1"}
    return seen


@pytest.mark.parametrize("crashes, backoff", [(0, 0), (1, 30), (2, 60), (3, 120), (5, 480), (6, 600), (12, 600)])
def test_the_backoff_doubles_from_the_second_crash_up_to_its_ceiling(crashes, backoff):
    assert core.crash_backoff_s(CONFIG, crashes) == backoff


def test_crashes_after_serving_restart_with_a_growing_backoff_beyond_the_restart_budget():
    looks, expected = [look(30)], [("serving", None)]
    now = 30
    for backoff in (0, 30, 60, 120):
        now += 30
        looks.append(served_crash(now))
        if backoff:
            expected.append(("restarting", "stop"))  # stopped, not started before the backoff's end
            looks.append(look(now + backoff - 5, None, stopped=[("spark-alpha", "dgxspark-vllm")]))
            expected.append(("restarting", None))
            now += backoff
            looks.append(look(now, None, stopped=[("spark-alpha", "dgxspark-vllm")]))
            expected.append(("starting", "start"))
        else:
            expected.append(RESTARTED)
        now += 30
        looks.append(look(now))  # it serves again
        expected.append(("serving", None))
    trace, state = run(looks)
    assert trace == expected
    assert len(state["crashes"]) == 4 and state["restarts"] == []  # the restart budget (3) is untouched


def test_the_crash_names_the_request_before_it_and_the_backoff():
    _trace, state = run([look(30), served_crash(60), look(90), served_crash(120)])
    assert state["last_problem"] == (
        "container dgxspark-vllm on spark-alpha is not running (exit code 0); the last request its API logged: POST "
        "/v1/completions from 172.31.240.1 at 2026-12-06T03:33:04Z, answered 500")
    seen = served_crash(150)
    state, action = core.decide(CONFIG, dict(state, phase="serving", serving_since=125), seen)
    assert action == ("stop", state["last_problem"] + " (after serving: crash 3 of 10 in 3600 s, the group starts again in 60 s)")


def test_the_crash_budget_spent_gives_up_and_says_which_budget():
    config = dict(CONFIG, crash_budget_restarts=2, crash_backoff_s=1, crash_backoff_max_s=1)
    looks = [look(30), served_crash(60), look(90), served_crash(120), look(121, None, stopped=[("spark-alpha", "dgxspark-vllm")]),
             look(150), served_crash(180)]
    trace, state = run(looks, config=config)
    assert trace[-1] == ("gave_up", "give_up")
    assert state["reason"].startswith("the crash budget (restarts after the engine had served) is spent (2 restarts in 3600 s)")


def test_a_crash_before_the_engine_served_still_counts_in_the_restart_budget():
    trace, state = run([look(30), served_crash(60), crash(90), crash(120), crash(150), crash(180)])
    # The first crash came after serving; the next ones came before the restarted engine answered anything.
    assert trace == [("serving", None)] + [RESTARTED] * 4 + [("gave_up", "give_up")]
    assert state["crashes"] == [60] and state["restarts"] == [90, 120, 150]
    assert state["reason"].startswith("the restart budget is spent (3 restarts")


def test_an_engine_that_docker_could_not_start_has_not_served_since():
    """Seen on the lab (the crash-loop test): the Ray container died at each start, so Docker refused to start the
    head's vLLM container, which joins its PID namespace. The engine container kept its start time and the requests
    its API had logged when it last served; they are not this run's: the restart budget, not the crash budget."""
    ray_and_engine_down = [("spark-alpha", "dgxspark-ray"), ("spark-alpha", "dgxspark-vllm")]
    state = core.new_state(0)
    trace, now = [], 60
    for _attempt in range(5):
        seen = look(now, None, stopped=ray_and_engine_down, exit_code=1, started="served-at-5")
        seen["nodes"]["spark-alpha"]["containers"]["dgxspark-vllm"]["last_request"] = {
            "time": "2026-12-06T03:33:04Z", "method": "POST", "path": "/v1/completions", "status": 200,
            "client": "172.31.240.1"}
        state, action = core.decide(CONFIG, state, seen)
        if action and action[0] == "stop":
            state, action = core.decide(CONFIG, state, stopped_group(seen))
        if action and action[0] == "start":
            state = core.restarted(state, "served-at-5")  # Docker refused the engine's start
        trace.append((state["phase"], action[0] if action else None))
        now += 30
    # The first restart follows the engine's serving run (a crash after serving, no backoff); the next three find an
    # engine that never ran again: the restart budget, spent at the fourth.
    assert trace == [("starting", "start")] * 4 + [("gave_up", "give_up")]
    assert state["crashes"] == [60] and state["restarts"] == [90, 120, 150]
    assert state["reason"].startswith("the restart budget is spent (3 restarts in 3600 s)")


@pytest.mark.parametrize("before, after, started", [
    ("t0", "restart-at-60", True), ("t0", "t0", False), (None, "restart-at-60", True)])
def test_a_start_of_the_group_tells_whether_the_engine_container_started(before, after, started):
    state = dict(core.new_state(0), engine_started_at=before)
    assert core.restarted(state, after)["engine_started"] is started


def test_the_memory_wait_counts_from_the_backoff_s_end():
    short = {"spark-beta": 10 * GIB}
    stopped = [("spark-alpha", "dgxspark-vllm")]
    trace, state = run([look(30), served_crash(60), look(90), served_crash(120)])
    assert state["phase"] == "restarting" and state["start_after"] == 150
    trace, state = run([look(30), served_crash(60), look(90), served_crash(120), look(140, None, stopped=stopped, mem=short),
                        look(150, None, stopped=stopped, mem=short), look(140 + 600, None, stopped=stopped, mem=short),
                        look(150 + 600, None, stopped=stopped, mem=short)])
    # In the backoff nothing is asked of memory; then it waits for it 600 s from the backoff's end, not from the stop.
    assert trace[-4:] == [("restarting", None), ("restarting", "wait_memory"), ("restarting", "wait_memory"),
                          ("gave_up", "give_up")]


def test_a_crash_before_the_supervisor_s_next_probe_counts_as_after_serving_when_the_api_had_answered():
    """Seen on the lab: the engine came back, a client's request killed it 2 s later, before the supervisor's next probe
    saw it serve. Its API had logged the request, so it had served: the crash budget, not the start-up's."""
    stopped = [("spark-alpha", "dgxspark-vllm")]
    trace, state = run([look(30), served_crash(60), served_crash(62), look(92, None, stopped=stopped), served_crash(95)])
    assert trace == [("serving", None), RESTARTED, ("restarting", "stop"), ("starting", "start"), ("restarting", "stop")]
    assert state["restarts"] == [] and state["crashes"] == [60, 62, 95] and state["start_after"] == 155
