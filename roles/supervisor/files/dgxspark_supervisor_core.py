"""dgxspark.cluster supervisor: what to do, from what was seen. Pure: no I/O, no clock; the service feeds it.

The service (dgxspark_supervisor.py) looks at the serving group every interval and calls `decide()` with what it saw;
`decide()` returns the next state and at most one action for the service to carry out:

- ("stop", reason): a restart is due: stop the whole group (the engine first), then look again at once;
- ("wait_memory", reason): the group is stopped for a restart, but a node has less MemAvailable than the plan needs;
- ("start", reason): memory is there: start the group in order (ranks, then the engine);
- ("give_up", reason): the restart budget is spent, or memory did not come back in time; the group is left stopped.

Two budgets over one window. The restart budget (budget_restarts) is for an engine that never served since it started:
a start-up that loops can leak unified memory until the host wedges (eugr/spark-vllm-docker #257), so it stops soon. An
engine that had served (a probe got its token, or its API logged a request: vLLM's API listens only once the engine is
up, so a request that came in before the supervisor's next probe counts too) and then crashed or hung was killed by
what it was asked, a request that
any key holder can send again: its restarts count in the crash budget (crash_budget_restarts, larger), each after a
backoff that doubles from crash_backoff_s (the first restarts at once) up to crash_backoff_max_s. The memory guard holds
for both: no start before every node has the memory the plan needs.

Phases: starting (the engine loads: a failed probe does not count, until its first token, the probe's or any its token
counter shows, or the grace's end), serving,
restarting (stopped, waiting for memory), gave_up, paused. Only a token proves that the engine works: `/health` and the containers' states are
kept for the report, but a container that exited or a node that left counts at once, since the group cannot come back
by itself (Docker no longer restarts the serving containers when the supervisor runs them).

The engine's load (its /metrics: requests running and waiting, tokens generated) tells a busy engine from a hung one:
a probe that got no token in time while tokens were generated since the last look waited behind other requests and
does not count; requests that run for frozen_s with no token generated are a hang (a deadlock that looks healthy,
eugr/spark-vllm-docker #260), whatever the probe says.
"""

STARTING, SERVING, RESTARTING, GAVE_UP, PAUSED = "starting", "serving", "restarting", "gave_up", "paused"
GIB = 1024 * 1024  # KiB per GiB (MemAvailable is in KiB)

CONFIG_KEYS = ("interval_s", "deadline_s", "failures_to_restart", "grace_s", "stall_s", "frozen_s", "budget_restarts",
               "budget_window_s", "memory_wait_s", "memory_needed_kib", "group", "crash_budget_restarts", "crash_backoff_s",
               "crash_backoff_max_s")


def check_config(config):
    """The configuration's errors, as a list of messages (empty when it is usable)."""
    errors = ["missing key %r" % key for key in CONFIG_KEYS if key not in config]
    if errors:
        return errors
    for key in ("interval_s", "deadline_s", "failures_to_restart", "grace_s", "stall_s", "frozen_s", "budget_window_s",
                "memory_wait_s", "crash_backoff_s", "crash_backoff_max_s"):
        if not isinstance(config[key], (int, float)) or isinstance(config[key], bool) or config[key] <= 0:
            errors.append("%s must be a number above 0, got %r" % (key, config[key]))
    for key in ("budget_restarts", "crash_budget_restarts"):
        if not isinstance(config[key], int) or isinstance(config[key], bool) or config[key] < 0:
            errors.append("%s must be an integer of 0 or more, got %r" % (key, config[key]))
    group = config["group"]
    if not isinstance(group, list) or not group:
        errors.append("group must list the containers to restart, in start order")
        return errors
    for index, member in enumerate(group):
        if not isinstance(member, dict) or not member.get("node") or not member.get("container"):
            errors.append("group[%d] needs a node and a container, got %r" % (index, member))
    engines = [m for m in group if isinstance(m, dict) and m.get("engine")]
    if len(engines) != 1 or group[-1] is not engines[0]:
        errors.append("group must end with its one engine container (engine: true)")
    nodes = set(m.get("node") for m in group if isinstance(m, dict))
    needed = config["memory_needed_kib"]
    if not isinstance(needed, dict) or set(needed) != nodes:
        errors.append("memory_needed_kib must give a figure for each node of the group: %s" % ", ".join(sorted(nodes)))
    return errors


def new_state(now):
    """The state of a supervisor that just started: the group is taken as it is, with a fresh grace and budget."""
    return {"phase": STARTING, "since": now, "failures": 0, "restarts": [], "crashes": [], "start_after": None,
            "reason": "", "last_problem": "", "memory": {}, "last_probe": None, "serving_since": None,
            "engine_started_at": None, "engine_started": True, "load": {}}


def group_problem(config, seen):
    """Why the group cannot serve as it is, from the containers and nodes seen ('' when nothing is wrong there).
    seen["nodes"]: {node: {"reachable": bool, "error": str, "containers": {name: {"running": bool, "exit_code": int}}}}."""
    for member in config["group"]:
        node = seen["nodes"].get(member["node"]) or {}
        if not node.get("reachable"):
            return "node %s cannot be reached (%s)" % (member["node"], node.get("error") or "no answer")
        container = (node.get("containers") or {}).get(member["container"])
        if container is None:
            return "container %s is missing on %s" % (member["container"], member["node"])
        if not container.get("running"):
            return "container %s on %s is not running (exit code %s)%s" % (
                member["container"], member["node"], container.get("exit_code"), _last_request(container))
    return ""


def engine_answered(config, seen):
    """Whether the engine container, stopped, had taken requests: its API logged one (vLLM's API server listens only
    once the engine is up), so it served, whether or not a probe of the supervisor saw it."""
    engine = config["group"][-1]
    container = ((seen["nodes"].get(engine["node"]) or {}).get("containers") or {}).get(engine["container"]) or {}
    return bool(container.get("last_request"))


def _last_request(container):
    """What the engine's API logged last before it stopped (dgxspark_node_ctl.py's last_request), as a clause."""
    request = container.get("last_request")
    if not request:
        return ""
    return "; the last request its API logged: %s %s from %s at %s, answered %s" % (
        request["method"], request["path"], request["client"], request["time"], request["status"])


def memory_short(config, seen):
    """[(node, available KiB or None when unknown, needed KiB)] of the nodes whose MemAvailable is below what the plan
    needs there; a node whose figure could not be read (unreachable) counts as short."""
    short = []
    for node in sorted(config["memory_needed_kib"]):
        needed = config["memory_needed_kib"][node]
        view = seen["nodes"].get(node) or {}
        available = view.get("mem_available_kib") if view.get("reachable") else None
        if available is None or available < needed:
            short.append((node, available, needed))
    return short


def describe_short(short):
    parts = []
    for node, available, needed in short:
        if available is None:
            parts.append("%s cannot be read (the plan needs %.1f GiB there)" % (node, needed / float(GIB)))
        else:
            parts.append("%s has %.1f GiB available, the plan needs %.1f GiB"
                         % (node, available / float(GIB), needed / float(GIB)))
    return "; ".join(parts)


def restarts_in_window(config, state, now, kind="restarts"):
    """The restarts of one budget (restarts: of an engine that never served; crashes: after it served) in the window."""
    return [t for t in state.get(kind) or [] if now - t < config["budget_window_s"]]


def crash_backoff_s(config, crashes):
    """How long the group stays stopped before a restart that follows `crashes` earlier crashes after serving in the
    window: none after the first, then crash_backoff_s doubling, up to crash_backoff_max_s."""
    if not crashes:
        return 0
    return min(config["crash_backoff_max_s"], config["crash_backoff_s"] * 2 ** (crashes - 1))


def _restart(config, state, now, problem, answered=False):
    """A restart is due because of `problem`: stop the group (then start it once memory allows and any backoff is
    over), or give up when the budget of its kind is spent (the group is stopped too: a half group would hold memory
    and serve nothing). answered: the stopped engine's API had logged a request."""
    served = answered or bool(state.get("serving_since"))
    kind, budget = ("crashes", "crash_budget_restarts") if served else ("restarts", "budget_restarts")
    recent = restarts_in_window(config, state, now, kind)
    state.update(last_problem=problem, failures=0, serving_since=None, load={}, start_after=None)
    state[kind] = recent
    what = "crash budget (restarts after the engine had served)" if served else "restart budget"
    if len(recent) >= config[budget]:
        state.update(phase=GAVE_UP, since=now, reason="the %s is spent (%d restarts in %d s); the last problem: %s" % (
            what, len(recent), config["budget_window_s"], problem))
        return state, ("give_up", state["reason"])
    backoff = crash_backoff_s(config, len(recent)) if served else 0
    recent.append(now)
    if backoff:
        state["start_after"] = now + backoff
    state.update(phase=RESTARTING, since=now, reason="restarting because %s" % problem)
    if served:
        problem = "%s (after serving: crash %d of %d in %d s%s)" % (
            problem, len(recent), config[budget], config["budget_window_s"],
            ", the group starts again in %d s" % backoff if backoff else "")
    return state, ("stop", problem)


def _start_when_memory_allows(config, state, seen, now):
    """The group is stopped for a restart: start it when its backoff is over and every node has the memory the plan
    needs there (the memory wait counts from the backoff's end)."""
    start_after = state.get("start_after")
    if start_after and now < start_after:
        state["reason"] = "waiting %d s more before starting the group again (the backoff after crashes after serving)" % (
            start_after - now)
        return state, None
    if start_after:
        state.update(since=start_after, start_after=None)
    short = memory_short(config, seen)
    state["memory"] = dict((node, {"available_kib": a, "needed_kib": n}) for node, a, n in short)
    if not short:
        state.update(phase=STARTING, since=now, reason="restarted because %s" % state["last_problem"])
        return state, ("start", state["last_problem"])
    if now - state["since"] >= config["memory_wait_s"]:
        state.update(phase=GAVE_UP, since=now, reason="memory did not come back within %d s: %s (restart due because "
                     "%s)" % (config["memory_wait_s"], describe_short(short), state["last_problem"]))
        return state, ("give_up", state["reason"])
    state["reason"] = "waiting for memory before starting the group again: %s" % describe_short(short)
    return state, ("wait_memory", state["reason"])


def decide(config, state, seen):
    """(next state, action or None) from the state and what was seen at `seen["now"]`:
    seen = {"now": s, "paused": bool, "resumed": bool (an operator asked to resume), "probe": {"ok": bool, "latency_s": s, "error": str} or None (not probed),
            "nodes": {...} (group_problem, memory_short), "engine_started_at": the engine container's start (str),
            "last_log_age_s": seconds since the engine logged or loaded a shard (None when unknown),
            "load": {"running", "waiting", "tokens"} from the engine's /metrics, or None (not read)}."""
    now = seen["now"]
    state = dict(state)
    if seen.get("probe") is not None:
        state["last_probe"] = dict(seen["probe"], time=now)
    if seen.get("paused"):
        if state["phase"] != PAUSED:
            state.update(phase=PAUSED, since=now, reason="paused by an operator")
        return state, None
    started = seen.get("engine_started_at")
    if state["phase"] == PAUSED or seen.get("resumed") or (started and state.get("engine_started_at") not in (None, started)):
        # Resumed (after a pause or a give-up), or the engine was started by someone else (a deploy): the group is taken
        # as it is, with a fresh grace and budget.
        fresh = new_state(now)
        fresh["last_probe"] = state["last_probe"]
        state = fresh
    if started:
        state["engine_started_at"] = started
    if state["phase"] == GAVE_UP:
        return state, None
    if state["phase"] == RESTARTING:
        return _start_when_memory_allows(config, state, seen, now)
    problem = group_problem(config, seen)
    if problem:
        return _restart(config, state, now, problem, engine_answered(config, seen) and state.get("engine_started", True))
    if state["phase"] == STARTING and ((seen.get("load") or {}).get("tokens") or 0) > 0:
        # The engine's counter (from 0 at its start) shows tokens: it loaded and served, as a probe's token would prove.
        # Without this a supervisor started or resumed while the engine hangs would wait out the whole grace: its probe
        # waits behind the stuck requests, and the frozen count is for a serving engine only.
        state.update(phase=SERVING, serving_since=state.get("serving_since") or now)
    frozen, busy = _load_signs(config, state, seen.get("load"), now)
    if frozen and state["phase"] == SERVING:
        return _restart(config, state, now, frozen)
    probe = seen.get("probe") or {}
    if not probe.get("ok") and busy and seen.get("probe") is not None:
        # Tokens prove the engine works, as a probe's token would: the count of failed probes starts again.
        state.update(failures=0, reason="the probe got no token in time (%s), but %s: busy, not hung" % (
            probe.get("error") or "?", busy))
        return state, None
    if probe.get("ok"):
        if state["phase"] != SERVING or not state.get("serving_since"):
            state["serving_since"] = now
        state.update(phase=SERVING, failures=0, reason="")
        return state, None
    if state["phase"] == STARTING:
        # A load in progress: the probe does not count, but a load that stopped moving does.
        age = seen.get("last_log_age_s")
        if age is not None and age >= config["stall_s"]:
            why = "the engine's start made no progress for %d s (no log line, no shard loaded)" % age
            return _restart(config, state, now, why)
        if now - state["since"] < config["grace_s"]:
            return state, None
        state["phase"] = SERVING  # the grace is over: from now on a failed probe counts
    state["failures"] = state.get("failures", 0) + 1
    error = probe.get("error") or "not probed"
    if state["failures"] >= config["failures_to_restart"]:
        why = "%d probes in a row got no token (last: %s)" % (state["failures"], error)
        return _restart(config, state, now, why)
    state["reason"] = "probe %d of %d failed: %s" % (state["failures"], config["failures_to_restart"], error)
    return state, None


def _load_signs(config, state, load, now):
    """(why the engine is hung, or '', why it is busy, or '') from its load at this look and the last ones; keeps in
    state["load"] the tokens seen and since when requests have run without a new one.
    load: {"running", "waiting", "tokens"} from the engine's /metrics, or None when they could not be read."""
    previous = state.get("load") or {}
    if not load:
        state["load"] = {}
        return "", ""
    grew = previous.get("tokens") is not None and load["tokens"] > previous["tokens"]
    # A counter that moved either way (a new engine starts again from 0), or no request running, starts the count anew.
    still = previous.get("tokens") == load["tokens"] and load["running"] > 0 and previous.get("still_since") is not None
    still_since = previous["still_since"] if still else now
    state["load"] = {"tokens": load["tokens"], "running": load["running"], "waiting": load["waiting"],
                     "still_since": still_since}
    if load["running"] > 0 and now - still_since >= config["frozen_s"]:
        return ("%d requests have run for %d s with no token generated (the engine's token counter stands at %d): "
                "the engine is hung, though it may answer /health" % (load["running"], now - still_since, load["tokens"]),
                "")
    if grew:
        return "", "the engine generated %d tokens since the last look (%d requests running, %d waiting)" % (
            load["tokens"] - previous["tokens"], load["running"], load["waiting"])
    return "", ""


def restarted(state, engine_started_at):
    """The state after the service started the group again: the engine's new start is the supervisor's own. An engine
    container whose start time did not change did not start (Docker refused it: on the head, the Ray container whose
    PID namespace it joins had already exited), so what its API logged belongs to an earlier run."""
    state = dict(state)
    state["engine_started"] = engine_started_at != state.get("engine_started_at")
    state["engine_started_at"] = engine_started_at
    return state
