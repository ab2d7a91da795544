"""Releases of the serving group: specs from real `docker inspect` output of the lab's serving containers (vLLM 0.32 CPU
build on Ray 2.60, made by the ray_cluster and vllm_container roles), digests, ids, the history and the status line."""
import copy
import json
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter.release import release_backend as release_backend_filter
from ansible_collections.dgxspark.cluster.plugins.filter.release import release_engine as release_engine_filter
from ansible_collections.dgxspark.cluster.plugins.filter.release import release_id as release_id_filter
from ansible_collections.dgxspark.cluster.plugins.module_utils import release
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.serving_status import build_serving_status
from stand_ins import path_first, stand_in

HERE = os.path.dirname(os.path.abspath(__file__))


def _inspect(name):
    with open(os.path.join(HERE, "fixtures", "release", name), encoding="utf-8") as handle:
        return json.load(handle)


# `docker inspect dgxspark-vllm dgxspark-ray` on the lab's head, `docker inspect dgxspark-ray` on a worker.
HEAD = _inspect("docker_inspect_head.json")
WORKER = _inspect("docker_inspect_worker.json")
# `docker inspect dgxspark-vllm` on a worker of the lab serving with vLLM's own multi-node backend (mp): rank 1, headless.
MP_WORKER_SPECS = [release.container_spec(r) for r in _inspect("docker_inspect_mp_worker.json")]
HEAD_SPECS = [release.container_spec(r) for r in HEAD]
WORKER_SPECS = [release.container_spec(r) for r in WORKER]
VLLM, RAY = HEAD_SPECS
# `docker inspect dgxspark-vllm` on the lab's head serving with dgxspark_api_tls=generated (--ssl-certfile/--ssl-keyfile).
[VLLM_TLS] = [release.container_spec(r) for r in _inspect("docker_inspect_head_tls.json")]
IMAGE = "sha256:8cbbb3349d8fd3f0f7d2988e64e67ed6f3e1a63a1db1c98ff69da13ca8457d3a"


@pytest.mark.parametrize("spec, key, expected", [
    (VLLM, "name", "dgxspark-vllm"),
    (VLLM, "image", IMAGE),
    (VLLM, "image_name", "dgxspark-lab/serving:c922ebd08ec3"),
    (VLLM, "role", "vllm_container"),
    (VLLM, "entrypoint", ["/bin/bash", "-c"]),
    (VLLM, "pid_mode", "host"),
    (VLLM, "tty", True),
    (VLLM, "capabilities", []),
    (VLLM, "cap_drop", ["ALL"]),
    (VLLM, "restart_policy", "no"),
    (VLLM, "device_requests", []),
    (RAY, "role", "ray_cluster"),
    (RAY, "capabilities", ["IPC_LOCK"]),
    (RAY, "tty", False),
    (RAY, "init", True),
    (RAY, "network_mode", "host"),
    (RAY, "ipc_mode", "host"),
    (WORKER_SPECS[0], "pid_mode", None),  # a worker keeps its own PID namespace: Docker says ""
    (WORKER_SPECS[0], "devices", []),
    (WORKER_SPECS[0], "ulimits", []),
])
def test_spec_from_real_inspect(spec, key, expected):
    if key == "entrypoint":
        assert spec[key][:2] == expected and spec[key][-1] == "vllm-serve.sh"
    else:
        assert spec[key] == expected


def test_spec_keeps_values_with_equal_signs_and_every_mount():
    # NCCL_SOCKET_IFNAME's "=" prefix (exact match) must survive the Env list's KEY=VALUE split.
    assert VLLM["env"]["NCCL_SOCKET_IFNAME"] == "=enp1s0f1np1"
    assert VLLM["env"]["DGXSPARK_API_KEY_FILE"] == "/run/secrets/dgxspark/vllm_api_key"
    assert "dgxspark-ray-tmp:/tmp/ray:rw" in RAY["volumes"]
    assert "/etc/dgxspark/secrets/vllm_api_key:/run/secrets/dgxspark/vllm_api_key:ro" in VLLM["volumes"]
    assert VLLM["command"][:2] == ["serve", "/var/lib/dgxspark-lab/models/qwen3-moe-tiny"]


def test_devices_ulimits_and_gpu_requests_in_docker_container_words():
    record = copy.deepcopy(WORKER[0])
    record["HostConfig"].update({
        "Devices": [{"PathOnHost": "/dev/infiniband/uverbs0", "PathInContainer": "/dev/infiniband/uverbs0",
                     "CgroupPermissions": "rwm"}],
        "Ulimits": [{"Name": "memlock", "Soft": -1, "Hard": -1}],
        "DeviceRequests": [{"Driver": "nvidia", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}],
    })
    spec = release.container_spec(record)
    assert spec["devices"] == ["/dev/infiniband/uverbs0:/dev/infiniband/uverbs0:rwm"]
    assert spec["ulimits"] == ["memlock:-1:-1"]
    assert spec["device_requests"] == [{"driver": "nvidia", "count": -1, "device_ids": None, "capabilities": [["gpu"]],
                                        "options": None}]


@pytest.mark.parametrize("record", [{}, {"Name": "/x", "Image": "sha256:1"}, {"Name": "/x", "Config": None, "HostConfig": {}}])
def test_an_unreadable_inspect_record_is_an_error(record):
    with pytest.raises(release.ReleaseError, match="docker inspect record"):
        release.container_spec(record)


@pytest.mark.parametrize("key, value", [
    ("image", "sha256:0000"), ("entrypoint", ["/bin/sh"]), ("command", ["serve", "other"]), ("env", {"A": "1"}),
    ("volumes", []), ("network_mode", "bridge"), ("ipc_mode", "private"), ("pid_mode", None), ("init", False),
    ("tty", False), ("device_requests", [{"driver": "nvidia"}]), ("devices", ["/dev/x:/dev/x:rwm"]), ("ulimits", ["nofile:1:1"]),
    ("cap_drop", []), ("capabilities", ["SYS_ADMIN"]), ("security_opts", []), ("restart_policy", "always"),
    ("labels", {}), ("name", "other"),
])
def test_every_spec_key_changes_the_digest(key, value):
    changed = dict(VLLM, **{key: value})
    assert release.spec_digest(changed) != release.spec_digest(VLLM)
    assert key in release.SPEC_KEYS


@pytest.mark.parametrize("key, value", [("image_name", "sha256:8cbbb"), ("role", "")])
def test_what_is_not_docker_s_definition_leaves_the_digest(key, value):
    # A container put back from the image's ID is the same release as the one made from its name.
    assert release.spec_digest(dict(VLLM, **{key: value})) == release.spec_digest(VLLM)


def test_node_digest_is_order_free_and_release_id_covers_every_node():
    head = release.node_digest(HEAD_SPECS)
    assert head == release.node_digest(list(reversed(HEAD_SPECS)))
    worker = release.node_digest(WORKER_SPECS)
    rid = release.release_id({"spark-alpha": head, "spark-beta": worker})
    assert len(rid) == 12 and rid == release.release_id({"spark-beta": worker, "spark-alpha": head})
    assert rid != release.release_id({"spark-alpha": head, "spark-beta": release.node_digest([])})
    assert rid != release.release_id({"spark-alpha": head, "spark-gamma": worker})


@pytest.mark.parametrize("digests, message", [
    ({}, "no node of the serving group was read"),
    ({"spark-alpha": "ab", "spark-beta": None}, "no serving containers read on spark-beta"),
    ({"spark-alpha": "", "spark-beta": ""}, "no serving containers read on spark-alpha, spark-beta"),
])
def test_release_id_refuses_a_node_without_digest(digests, message):
    with pytest.raises(release.ReleaseError, match=message):
        release.release_id(digests)
    with pytest.raises(AnsibleFilterError, match="release_id: " + message):
        release_id_filter(digests)


def test_release_id_filter_wants_a_mapping():
    with pytest.raises(AnsibleFilterError, match="expects a mapping"):
        release_id_filter(["ab"])


def test_ray_comes_back_before_the_engine_and_the_engine_is_found():
    assert [s["name"] for s in release.restore_order(HEAD_SPECS)] == ["dgxspark-ray", "dgxspark-vllm"]
    assert release.engine(HEAD_SPECS) == {"container": "dgxspark-vllm", "url": "http://127.0.0.1:8000",
                                          "served_model_name": "Qwen/Qwen3.5-397B-A17B-FP8"}
    assert release.engine(WORKER_SPECS) is None
    assert release.engine(MP_WORKER_SPECS) is None  # a headless rank serves no API


@pytest.mark.parametrize("options, url", [
    ([], "http://127.0.0.1:8000"),
    (["--port", "9000"], "http://127.0.0.1:9000"),
    (["--port=9001", "--host=::"], "http://127.0.0.1:9001"),
    (["--host", "10.0.0.5", "--port", "8080"], "http://10.0.0.5:8080"),
    # TLS (dgxspark_api_tls): the engine serves https, and a rollback's readiness must ask it that way (it waited for an
    # answer over http until its timeout)
    (["--ssl-certfile", "/run/dgxspark/tls/api.crt", "--ssl-keyfile", "/run/secrets/dgxspark/api_tls_key"],
     "https://127.0.0.1:8000"),
    (["--port", "8443", "--ssl-certfile=/c.crt", "--ssl-keyfile=/k"], "https://127.0.0.1:8443"),
    (["--ssl-keyfile", "/k"], "http://127.0.0.1:8000"),  # no certificate: vLLM serves plain HTTP
])
def test_engine_url_from_the_options(options, url):
    spec = dict(VLLM, command=["serve", "/m"] + options)
    assert release.engine([spec])["url"] == url


def _history(*ids):
    return {"releases": [release.make_release(rid, HEAD_SPECS, "T-" + rid) for rid in ids], "rolled_back": None}


@pytest.mark.parametrize("before, rid, keep, after, dropped", [
    ((), "r1", 3, ["r1"], []),
    (("r1",), "r2", 3, ["r2", "r1"], []),
    (("r2", "r1"), "r3", 3, ["r3", "r2", "r1"], []),
    (("r3", "r2", "r1"), "r4", 3, ["r4", "r3", "r2"], ["r1"]),
    (("r3", "r2", "r1"), "r4", 2, ["r4", "r3"], ["r2", "r1"]),
    (("r3", "r2", "r1"), "r1", 3, ["r1", "r3", "r2"], []),  # an older release deployed again comes first, once
])
def test_recording_a_release(before, rid, keep, after, dropped):
    new, gone = release.record(_history(*before), rid, HEAD_SPECS, "NOW", keep)
    assert [r["id"] for r in new["releases"]] == after
    assert [r["id"] for r in gone] == dropped
    assert new["releases"][0]["deployed_at"] == "NOW" and new["rolled_back"] is None


def test_recording_the_newest_again_changes_nothing_not_even_its_date():
    history = _history("r2", "r1")
    new, gone = release.record(history, "r2", HEAD_SPECS, "LATER", 3)
    assert new is history and gone == []


def test_recording_the_same_id_with_other_containers_on_this_node_replaces_it():
    history = _history("r1")
    specs = [dict(VLLM, command=VLLM["command"] + ["--max-num-seqs", "64"]), RAY]
    new, _gone = release.record(history, "r1", specs, "NOW", 3)
    assert len(new["releases"]) == 1 and new["releases"][0]["node_digest"] == release.node_digest(specs)


def test_keep_below_two_is_refused():
    with pytest.raises(release.ReleaseError, match="keep must be at least 2"):
        release.record(_history(), "r1", HEAD_SPECS, "NOW", 1)


@pytest.mark.parametrize("history, target, reason", [
    (_history(), None, "no previous release is recorded"),
    (_history("r1"), None, "no previous release is recorded"),
    (_history("r2", "r1"), "r1", ""),
    (_history("r3", "r2", "r1"), "r2", ""),
    (dict(_history("r1"), rolled_back={"id": "r2", "at": "T"}), None, "release r1 serves already: rollback.yml put it back in place of r2"),
])
def test_rollback_target(history, target, reason):
    found, why = release.rollback_target(history)
    assert (found["id"] if found else None) == target
    assert why.startswith(reason)


def test_after_a_rollback_the_replaced_release_leaves_and_a_second_has_nothing_to_do():
    history = release.after_rollback(_history("r2", "r1"), "NOW")
    assert [r["id"] for r in history["releases"]] == ["r1"] and history["rolled_back"] == {"id": "r2", "at": "NOW"}
    assert release.rollback_target(history)[0] is None
    # The next deploy that proves a release ends the rolled-back state.
    assert release.record(history, "r3", HEAD_SPECS, "LATER", 3)[0]["rolled_back"] is None


@pytest.mark.parametrize("data, message", [
    ([], "not a release history"),
    ({"releases": {}}, "not a release history"),
    ({"releases": [{"id": "r1"}]}, "without id, node_digest or containers"),
    ({"releases": ["r1"]}, "without id, node_digest or containers"),
])
def test_a_history_file_that_is_not_one_is_an_error(data, message):
    with pytest.raises(release.ReleaseError, match=message):
        release.validate_history(data, "/var/lib/dgxspark/release/history.json")


def test_an_absent_history_is_empty():
    assert release.validate_history(None, "p") == {"releases": [], "rolled_back": None}


def _observed(history, running_is_current=True):
    target, reason = release.rollback_target(history)
    return {"current": history["releases"][0] if history["releases"] else None, "rollback_target": target,
            "rollback_reason": reason, "rolled_back": history["rolled_back"], "running_is_current": running_is_current}


IMAGE_TEXT = "dgxspark-lab/serving:c922ebd08ec3 (8cbbb3349d8f), serving Qwen/Qwen3.5-397B-A17B-FP8"


@pytest.mark.parametrize("observed, line", [
    (None, None),
    ({"skipped": True}, None),
    (_observed(_history()), "release: none recorded yet (deploy.yml records the release once it serves)"),
    (_observed(_history("r1")), "release: r1 deployed T-r1 (%s)" % IMAGE_TEXT),
    (_observed(_history("r2", "r1")),
     "release: r2 deployed T-r2 (%s); previous r1 deployed T-r1 (rollback.yml puts it back)" % IMAGE_TEXT),
    (_observed(dict(_history("r1"), rolled_back={"id": "r2", "at": "T"})),
     "release: r1 deployed T-r1 (%s); put back by rollback.yml at T in place of r2" % IMAGE_TEXT),
    (_observed(_history("r1"), running_is_current=False),
     "release: r1 deployed T-r1 (%s); the containers running now are not this release (a deploy under way or failed "
     "without rollback, or a change by hand)" % IMAGE_TEXT),
])
def test_status_line(observed, line):
    assert release.status_line(observed) == line


def test_the_status_table_ends_with_the_release_line():
    plan = {"head": "spark-alpha", "nodes": [{"host": "spark-alpha", "rank": 0, "role": "head", "runs": ["ray", "vllm"]}]}
    status = build_serving_status(plan, {}, release=_observed(_history("r2", "r1")))
    assert status["table"][-1].startswith("release: r2 deployed T-r2")
    assert not any("release" in p for p in status["problems"])
    unreachable = build_serving_status(plan, {}, unreachable=["spark-alpha"], release=_observed(_history("r1")))
    assert not any(line.startswith("release:") for line in unreachable["table"])


# --- model copies: which a recorded release lets go (its history, then the module on real directories) ---------------

def _served(*pairs, rolled_back=None):
    """A history of (id, model_dir) releases, newest first."""
    history = {"releases": [release.make_release(rid, HEAD_SPECS, "T", model) for rid, model in pairs], "rolled_back": None}
    if rolled_back:
        history["rolled_back"] = dict({"id": rolled_back[0], "at": "T"}, **({"model_dir": rolled_back[1]} if rolled_back[1] else {}))
    return history


@pytest.mark.parametrize("before, new, keep, prune", [
    (_served(("a", "/m/a")), ("b", "/m/b"), 3, []),
    (_served(("c", "/m/c"), ("b", "/m/b"), ("a", "/m/a")), ("d", "/m/d"), 3, ["/m/a"]),
    # The oldest's model serves a kept release too.
    (_served(("c", "/m/a"), ("b", "/m/b"), ("a", "/m/a")), ("d", "/m/d"), 3, []),
    (_served(("c", "/m/c"), ("b", "/m/b"), ("a", "/m/a")), ("d", "/m/c"), 2, ["/m/b", "/m/a"]),
    # Two dropped releases on one model: removed once.
    (_served(("c", "/m/c"), ("b", "/m/a"), ("a", "/m/a")), ("d", "/m/d"), 2, ["/m/a"]),
    # The release rollback.yml replaced leaves with the next proven release, unless that one serves its model again.
    (_served(("a", "/m/a"), rolled_back=("b", "/m/b")), ("c", "/m/a"), 3, ["/m/b"]),
    (_served(("a", "/m/a"), rolled_back=("b", "/m/b")), ("b2", "/m/b"), 3, []),
    (_served(("a", "/m/a"), rolled_back=("b", None)), ("c", "/m/a"), 3, []),
    # Nothing inside or around a kept model directory, never the root or a relative path.
    (_served(("c", "/m/c"), ("b", "/m/b"), ("a", "/m")), ("d", "/m/d"), 3, []),
    (_served(("c", "/m/c"), ("b", "/m/b"), ("a", "/m/c/old/")), ("d", "/m/d"), 3, []),
    (_served(("c", "/m/c"), ("b", "/m/b"), ("a", "/")), ("d", "/m/d"), 3, []),
    (_served(("c", "/m/c"), ("b", "/m/b"), ("a", "m/a")), ("d", "/m/d"), 3, []),
    # A release recorded before releases said their model: it could serve any directory, so nothing goes.
    (_served(("c", "/m/c"), ("b", None), ("a", "/m/a")), ("d", "/m/d"), 3, []),
    (_served(("c", "/m/c"), ("b", "/m/b"), ("a", None)), ("d", "/m/d"), 3, []),
    # No model given now: the new release's is unknown.
    (_served(("c", "/m/c"), ("b", "/m/b"), ("a", "/m/a")), ("d", None), 3, []),
], ids=["nothing-dropped", "oldest-dropped", "oldest-model-still-kept", "keep-two", "two-dropped-one-model",
        "rolled-back-one-leaves", "rolled-back-model-serves-again", "rolled-back-without-model", "parent-of-a-kept-one",
        "inside-a-kept-one", "root", "relative", "kept-one-without-model", "dropped-one-without-model", "new-one-without-model"])
def test_the_model_directories_a_recorded_release_lets_go(before, new, keep, prune):
    after, dropped = release.record(before, new[0], HEAD_SPECS, "NOW", keep, new[1])
    assert release.model_dirs_to_prune(before, after, dropped) == prune


def test_a_rollback_keeps_the_model_of_the_release_it_replaced():
    history = release.after_rollback(_served(("b", "/m/b"), ("a", "/m/a")), "NOW")
    assert history["rolled_back"] == {"id": "b", "at": "NOW", "model_dir": "/m/b"}


def run_release_module(tmp_path, args):
    """serving_release run as Ansible runs it, with a `docker` that answers inspect with the lab head's real records."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    collections = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".build", "collections")
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "docker", '#!/bin/sh\necho "$*" >> %s/docker.log\n[ "$1" = inspect ] && cat %s\nexit 0\n' % (
        tmp_path, os.path.join(HERE, "fixtures", "release", "docker_inspect_head.json")))
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, containers=["dgxspark-vllm", "dgxspark-ray"],
                                                                 history_path=str(tmp_path / "history.json"))}))
    env = dict(os.environ, PYTHONPATH=collections, PATH=path_first(bin_dir))
    proc = subprocess.run([sys.executable, "-m", "ansible_collections.dgxspark.cluster.plugins.modules.serving_release", str(args_file)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")][-1]


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
def test_recording_removes_only_the_distributed_copies_no_kept_release_serves(tmp_path, check_mode):
    models = {}
    for name, marked in [("dropped-copy", True), ("dropped-source", False), ("kept-copy", True), ("linked-copy", True)]:
        models[name] = tmp_path / name
        models[name].mkdir()
        (models[name] / "config.json").write_text("{}")
        if marked:
            (models[name] / ".dgxspark-copy").write_text("made by the distribution\n")
    os.symlink(str(models["linked-copy"]), str(tmp_path / "link"))
    digest = release.node_digest(HEAD_SPECS)
    (tmp_path / "history.json").write_text(json.dumps(_served(
        ("c", str(models["kept-copy"])), ("b", str(tmp_path / "link")), ("a", str(models["dropped-source"])),
        rolled_back=("x", str(models["dropped-copy"])))))
    result = run_release_module(tmp_path, {"state": "recorded", "release_id": "d", "node_digest": digest, "keep": 2,
                                           "model_dir": str(models["kept-copy"]), "_ansible_check_mode": check_mode,
                                           "_ansible_diff": True})
    # b (a link to a copy) and a (a source) leave with x (a copy); only the copy the distribution made, not a link, goes.
    assert result["changed"] and result["pruned_model_dirs"] == [str(models["dropped-copy"])], result
    assert "model copy removed: %s" % models["dropped-copy"] in result["diff"]["after"]
    assert models["dropped-copy"].exists() == check_mode
    assert all(models[name].exists() for name in ("dropped-source", "kept-copy", "linked-copy"))
    history = json.loads((tmp_path / "history.json").read_text())
    assert [(r["id"], r.get("model_dir")) for r in history["releases"]] == (
        [("c", str(models["kept-copy"])), ("b", str(tmp_path / "link")), ("a", str(models["dropped-source"]))] if check_mode
        else [("d", str(models["kept-copy"])), ("c", str(models["kept-copy"]))])


@pytest.mark.parametrize("node_specs, expected", [
    (HEAD_SPECS, "ray"),               # Ray's head: Ray and the engine
    (WORKER_SPECS, "ray"),             # a Ray worker: Ray only
    ([VLLM], "mp"),                    # mp's rank 0: vLLM only
    (MP_WORKER_SPECS, "mp"),           # mp's headless rank 1
    ([], "mp"),
])
def test_the_backend_a_release_ran_with(node_specs, expected):
    record = release.make_release("3f9a1c0b7e22", node_specs, "2026-11-28T12:00:00Z")
    assert release.backend(record) == expected
    assert release_backend_filter(record) == expected


@pytest.mark.parametrize("record", [None, {}, {"containers": "dgxspark-ray"}])
def test_the_backend_of_what_is_not_a_release_is_an_error(record):
    with pytest.raises(AnsibleFilterError, match="release_backend: a release record without its list of containers"):
        release_backend_filter(record)


RAY_ID = HEAD[1]["Id"] if HEAD[1]["Name"].lstrip("/") == RAY["name"] else HEAD[0]["Id"]


@pytest.mark.parametrize("recorded, named", [
    ("container:" + RAY_ID, "container:" + RAY["name"]),  # the head's vLLM joins its Ray container: named
    ("container:0123456789ab", "container:0123456789ab"),  # a container not read here: left as Docker said
    ("host", "host"),
    (None, None),
])
def test_a_joined_namespace_is_recorded_by_the_containers_name(recorded, named):
    spec = dict(VLLM, pid_mode=recorded)
    assert release.named_namespaces([spec], HEAD)[0]["pid_mode"] == named


def test_a_release_is_the_same_whatever_id_its_ray_container_got():
    first = release.named_namespaces([dict(VLLM, pid_mode="container:" + RAY_ID)], HEAD)
    renamed = [dict(record, Id="f" * 64) if record["Id"] == RAY_ID else record for record in HEAD]
    second = release.named_namespaces([dict(VLLM, pid_mode="container:" + "f" * 64)], renamed)
    assert release.spec_digest(first[0]) == release.spec_digest(second[0])


@pytest.mark.parametrize("specs, url", [
    (HEAD_SPECS, "http://127.0.0.1:8000"),
    ([VLLM_TLS, RAY], "https://127.0.0.1:8000"),
    (WORKER_SPECS, None),
    (MP_WORKER_SPECS, None),
])
def test_release_engine_reads_the_scheme_from_the_containers_not_the_recorded_url(specs, url):
    """A rollback to a release that served TLS waited for an answer over http until its timeout: the url the record kept
    said http. The filter reads the engine's command, so a record written before says https too."""
    record = release.make_release("a" * 12, specs, "T")
    if record["engine"]:
        record["engine"]["url"] = "http://127.0.0.1:8000"  # as records of earlier versions kept it
    engine = release_engine_filter(record)
    assert (engine or {}).get("url") == url
    if url:
        assert engine["served_model_name"] == "Qwen/Qwen3.5-397B-A17B-FP8" and engine["container"] == "dgxspark-vllm"


@pytest.mark.parametrize("record", [None, {}, {"containers": "dgxspark-vllm"}])
def test_release_engine_refuses_what_is_not_a_release_record(record):
    with pytest.raises(AnsibleFilterError, match="release_engine: expects a release record with its list of containers"):
        release_engine_filter(record)
