"""The ranks of vLLM's mp backend that stopped (plugin_utils/rank_failures.py, filter rank_failures), over the real logs
of three headless ranks after a corrupt shard on spark-delta (fixtures/rank_failures/README.md) and a real `docker
inspect` of a headless rank (fixtures/release/docker_inspect_mp_worker.json) with each recorded state."""
import copy
import json
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter.rank_failures import rank_failures
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.rank_failures import (RankFailuresError, failures_text,
                                                                                     stopped_ranks)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "rank_failures")
with open(os.path.join(HERE, "fixtures", "release", "docker_inspect_mp_worker.json"), encoding="utf-8") as _handle:
    RANK_INSPECT = json.load(_handle)[0]
# (status, exit code, finished) of each rank as recorded; a running rank has Docker's zero time.
RECORDED = {"spark-beta": (1, "exited", 1, "2026-11-29T06:10:48.11005547Z"),
            "spark-gamma": (2, "exited", 1, "2026-11-29T06:10:46.710119797Z"),
            "spark-delta": (3, "exited", 1, "2026-11-29T06:10:44.415327741Z")}
SAFETENSOR = ("safetensors._safetensors_rust.SafetensorError: Error while deserializing header: invalid JSON in header: "
              "expected value at line 1 column 1")
PEER_GONE = "Connection closed by peer [192.168.100.13]"


def inspect(status, exit_code, finished, oom=False):
    record = copy.deepcopy(RANK_INSPECT)
    running = status == "running"
    record["State"].update(Status=status, Running=running, Restarting=False, Paused=False, ExitCode=exit_code,
                           FinishedAt=finished, OOMKilled=oom)
    return [record]


def log(host):
    with open(os.path.join(FIXTURES, "%s.log" % host), encoding="utf-8") as handle:
        return handle.read()


def rank(host, status=None, exit_code=None, finished=None, oom=False):
    number, recorded_status, recorded_exit, recorded_finished = RECORDED[host]
    return {"host": host, "rank": number, "log": log(host),
            "inspect": inspect(status or recorded_status, recorded_exit if exit_code is None else exit_code,
                               finished or recorded_finished, oom)}


RUNNING = dict(status="running", exit_code=0, finished="0001-01-01T00:00:00Z")


@pytest.mark.parametrize("ranks, order", [
    # As recorded: spark-delta's rank stopped first (its shard), the others when their peer went.
    ([rank("spark-beta"), rank("spark-gamma"), rank("spark-delta")], ["spark-delta", "spark-gamma", "spark-beta"]),
    # Only the rank that failed has stopped yet.
    ([rank("spark-beta", **RUNNING), rank("spark-gamma", **RUNNING), rank("spark-delta")], ["spark-delta"]),
    # Every other rank runs: nothing to say (the head's own failure stands alone).
    ([rank("spark-beta", **RUNNING), rank("spark-gamma", **RUNNING)], []),
    # A node without the container comes last.
    ([{"host": "spark-beta", "rank": 1, "inspect": [], "log": ""}, rank("spark-delta")], ["spark-delta", "spark-beta"]),
])
def test_the_ranks_that_stopped_come_first_to_stop_first(ranks, order):
    assert [r["host"] for r in stopped_ranks(ranks)] == order


def test_the_rank_that_failed_gives_its_own_exception_the_others_their_peer_gone():
    stopped = dict((r["host"], r) for r in stopped_ranks([rank("spark-beta"), rank("spark-gamma"), rank("spark-delta")]))
    assert SAFETENSOR in stopped["spark-delta"]["exceptions"]
    assert PEER_GONE in stopped["spark-gamma"]["exceptions"][0] and stopped["spark-gamma"]["exit_code"] == 1


def test_the_paragraph_names_the_first_rank_its_time_and_cause_first():
    text = failures_text([rank("spark-beta"), rank("spark-gamma"), rank("spark-delta")], "dgxspark-vllm")
    assert text.startswith("vLLM's own multi-node backend (mp): 3 other ranks stopped while rank 0 waited; the cause is in "
                           "the first one's log (`docker logs dgxspark-vllm` on that node).\n")
    first = text.splitlines()[1]
    assert first == ("First: The rank on spark-delta (rank 3) stopped (status exited, exit code 1, at "
                     "2026-11-29T06:10:44.415327741Z). Its first exceptions:")
    assert text.index(SAFETENSOR) < text.index("The rank on spark-gamma") < text.index("The rank on spark-beta")


@pytest.mark.parametrize("oom, missing, expected", [
    (True, False, "stopped (status exited, exit code 137, killed for lack of memory, at 2026-11-29T06:10:44.415327741Z)"),
    (False, True, "The rank on spark-beta (rank 1) has no container."),
])
def test_the_paragraph_says_how_each_rank_stopped(oom, missing, expected):
    ranks = [rank("spark-delta", exit_code=137, oom=oom)] if not missing else [{"host": "spark-beta", "rank": 1, "inspect": []}]
    assert expected in failures_text(ranks, "dgxspark-vllm")


def test_without_an_exception_the_last_lines_are_given():
    quiet = rank("spark-beta")
    quiet["log"] = "dgxspark_rank_watch: rank 0's rendezvous 192.168.100.10:29501 failed 3 connects in a row\n"
    text = failures_text([quiet], "dgxspark-vllm")
    assert "Its last lines:\n  | dgxspark_rank_watch: rank 0's rendezvous" in text and "First:" not in text


def test_the_filter_takes_the_roles_loop_results():
    infos = [{"item": "spark-beta", "exists": True, "container": inspect("running", 0, "0001-01-01T00:00:00Z")[0]},
             {"item": "spark-delta", "exists": True, "container": rank("spark-delta")["inspect"][0]},
             {"item": "spark-gamma", "skipped": True}]
    logs = [{"item": "spark-delta", "stdout": log("spark-delta"), "stderr": ""},
            {"item": "spark-beta", "stdout": "", "stderr": ""}]
    nodes = [{"host": "spark-alpha", "rank": 0}, {"host": "spark-beta", "rank": 1}, {"host": "spark-delta", "rank": 3}]
    text = rank_failures(infos, logs, nodes, "dgxspark-vllm")
    assert "1 other rank stopped" in text and "The rank on spark-delta (rank 3) stopped" in text and SAFETENSOR in text
    assert rank_failures([], [], nodes, "dgxspark-vllm") == ""


@pytest.mark.parametrize("bad", ["not a list", [{"rank": 1}], [{"host": "spark-beta", "inspect": "{not json"}]])
def test_bad_input_is_a_clear_error(bad):
    with pytest.raises(RankFailuresError):
        stopped_ranks(bad)


def test_the_filter_refuses_what_is_not_the_loops_results():
    with pytest.raises(AnsibleFilterError, match="rank_failures: "):
        rank_failures({"results": []}, [], [], "dgxspark-vllm")
