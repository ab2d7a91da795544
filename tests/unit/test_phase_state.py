"""Phase stamps: canonical digests, watch validation, the real `ip -j` and `docker inspect` shapes, and the verdicts."""
import json
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.phase_state import (
    PhaseStateError,
    compare,
    container_state,
    digest,
    interface_state,
    service_state,
    make_stamp,
    validate_phase,
    validate_watch,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.phase_inputs import code_digest

# `ip -j addr show dev enp1s0f1np1` on a configured lab node (iproute2 6.1, bookworm).
IP_JSON = json.dumps([{
    "ifindex": 7, "ifname": "enp1s0f1np1", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "mtu": 9000, "qdisc": "noqueue",
    "operstate": "UP", "group": "default", "txqlen": 1000, "link_type": "ether", "address": "02:42:ac:1f:f0:0a",
    "addr_info": [{"family": "inet", "local": "192.168.100.10", "prefixlen": 24, "broadcast": "192.168.100.255", "scope": "global",
                   "label": "enp1s0f1np1", "valid_life_time": 4294967295, "preferred_life_time": 4294967295},
                  {"family": "inet6", "local": "fe80::42:acff:fe1f:f00a", "prefixlen": 64, "scope": "link",
                   "valid_life_time": 4294967295, "preferred_life_time": 4294967295}]}])
# `docker inspect dgxspark-ray` (trimmed to the fields read).
INSPECT = {"Id": "4f1c0e", "Name": "/dgxspark-ray", "Image": "sha256:aa11", "RestartCount": 0,
           "State": {"Status": "running", "Running": True, "Restarting": False, "ExitCode": 0}}
OBSERVED = {"files": {"/etc/dgxspark/secrets/ray_token": {"sha256": "ab", "mode": "600", "uid": 0, "gid": 0}},
            "interfaces": {}, "containers": {"dgxspark-ray": container_state(INSPECT)}, "sysctls": {}}


def test_digest_is_canonical():
    assert digest({"b": 1, "a": [1, 2]}) == digest({"a": [1, 2], "b": 1})
    assert digest({"a": 1}) != digest({"a": "1"})


@pytest.mark.parametrize("show, expected", [
    ("LoadState=loaded\nActiveState=active\nUnitFileState=enabled\n", {"active": True, "enabled": True}),
    ("LoadState=loaded\nActiveState=failed\nUnitFileState=enabled\n", {"active": False, "enabled": True}),
    ("LoadState=loaded\nActiveState=inactive\nUnitFileState=disabled\n", {"active": False, "enabled": False}),
    ("LoadState=not-found\nActiveState=inactive\nUnitFileState=\n", None),
    ("", None),
])
def test_service_state_from_systemctl_show(show, expected):
    assert service_state(show) == expected


def test_interface_state_keeps_what_counts():
    assert interface_state(IP_JSON) == {"operstate": "UP", "mtu": 9000, "addresses": ["192.168.100.10/24"]}
    assert interface_state("[]") is None


def test_container_state():
    assert container_state(INSPECT) == {"id": "4f1c0e", "image": "sha256:aa11", "running": True, "restart_count": 0}
    assert container_state(None) is None


@pytest.mark.parametrize("stamp, inputs, observed, converged, reason", [
    (None, "d1", OBSERVED, False, "no record that phase ray converged on this node"),
    (make_stamp("ray", "d1", OBSERVED), "d1", OBSERVED, True, "phase ray converged before with the same inputs"),
    (make_stamp("ray", "d0", OBSERVED), "d1", OBSERVED, False, "the inputs of phase ray changed"),
    (make_stamp("os", "d1", OBSERVED), "d1", OBSERVED, False, "from another version of the collection"),
    (dict(make_stamp("ray", "d1", OBSERVED), version=0), "d1", OBSERVED, False, "from another version of the collection"),
    (make_stamp("ray", "d1", OBSERVED), "d1",
     dict(OBSERVED, containers={"dgxspark-ray": dict(container_state(INSPECT), restart_count=1)}), False,
     "what phase ray left on this node changed since it converged (containers)"),
    (make_stamp("ray", "d1", OBSERVED), "d1", dict(OBSERVED, files={"/etc/dgxspark/secrets/ray_token": None}), False,
     "changed since it converged (files)"),
])
def test_compare(stamp, inputs, observed, converged, reason):
    verdict, why = compare(stamp, "ray", inputs, observed)
    assert verdict is converged
    assert reason in why


@pytest.mark.parametrize("watch, message", [
    ("files", "watch must be a mapping"),
    ({"volumes": []}, "watch has unknown kind(s) volumes"),
    ({"files": "/etc/x"}, "watch.files must be a list of names"),
    ({"files": ["etc/x"]}, "watch.files has 'etc/x'; give an absolute path."),
    ({"containers": [""]}, "watch.containers has ''"),
])
def test_bad_watch(watch, message):
    with pytest.raises(PhaseStateError) as err:
        validate_watch(watch)
    assert message in str(err.value)


def test_watch_is_sorted_and_complete():
    expected = {"files": [], "interfaces": [], "containers": ["a", "b"], "sysctls": [], "nft_tables": [], "services": []}
    assert validate_watch({"containers": ["b", "a", "a"]}) == expected


@pytest.mark.parametrize("phase", ["Ray", "", None, "ray/../x"])
def test_bad_phase(phase):
    with pytest.raises(PhaseStateError):
        validate_phase(phase)


def test_code_digest_follows_content_and_names(tmp_path):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    main = tmp_path / "roles" / "r" / "tasks" / "main.yml"
    main.write_text("a\n")
    first = code_digest(str(tmp_path), ["roles/r"])
    assert code_digest(str(tmp_path), ["roles/r"]) == first
    (tmp_path / "roles" / "r" / "tasks" / "__pycache__").mkdir()
    (tmp_path / "roles" / "r" / "tasks" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert code_digest(str(tmp_path), ["roles/r"]) == first
    main.write_text("b\n")
    assert code_digest(str(tmp_path), ["roles/r"]) != first
    with pytest.raises(PhaseStateError, match="does not exist"):
        code_digest(str(tmp_path), ["roles/missing"])
    assert os.path.exists(main)


# --- the module, run as Ansible runs it (files, sysctls; no Docker or ip needed for those kinds) ---------------------

def run_phase_module(tmp_path, args):
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    collections = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".build", "collections")
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=collections)
    proc = subprocess.run([sys.executable, "-m", "ansible_collections.dgxspark.cluster.plugins.modules.phase_state", str(args_file)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")][-1]


def test_module_records_then_converges_then_sees_a_hand_edit(tmp_path):
    managed = tmp_path / "managed.conf"
    managed.write_text("vm.swappiness = 1\n")
    sysctl = tmp_path / "swappiness"
    sysctl.write_text("1\n")
    stamps = tmp_path / "stamps"
    args = {"phase": "os", "inputs_digest": "d1", "stamp_dir": str(stamps),
            "watch": {"files": [str(managed), str(tmp_path / "absent")], "sysctls": [str(sysctl)]}}
    first = run_phase_module(tmp_path, args)
    assert first["converged"] is False and first["reason"] == "no record that phase os converged on this node"
    preview = run_phase_module(tmp_path, dict(args, state="recorded", _ansible_check_mode=True, _ansible_diff=True))
    assert preview["changed"] is True and not stamps.exists() and '"phase": "os"' in preview["diff"]["after"]
    recorded = run_phase_module(tmp_path, dict(args, state="recorded"))
    assert recorded["changed"] is True and oct(os.stat(stamps / "os.json").st_mode & 0o777) == "0o600"
    assert run_phase_module(tmp_path, dict(args, state="recorded"))["changed"] is False
    again = run_phase_module(tmp_path, args)
    assert again["converged"] is True
    assert again["observed"]["files"][str(tmp_path / "absent")] is None
    assert run_phase_module(tmp_path, dict(args, inputs_digest="d2"))["converged"] is False
    managed.write_text("vm.swappiness = 60\n")
    edited = run_phase_module(tmp_path, args)
    assert edited["converged"] is False and "(files)" in edited["reason"]
    managed.write_text("vm.swappiness = 1\n")
    sysctl.write_text("60\n")
    assert "(sysctls)" in run_phase_module(tmp_path, args)["reason"]


def test_module_refuses_a_bad_watch(tmp_path):
    result = run_phase_module(tmp_path, {"phase": "os", "inputs_digest": "d", "watch": {"volumes": []}})
    assert result["failed"] is True and "watch has unknown kind(s) volumes" in result["msg"]


def test_module_checks_several_phases_in_one_call(tmp_path):
    managed = tmp_path / "managed.conf"
    managed.write_text("a\n")
    stamps = tmp_path / "stamps"
    os_args = {"phase": "os", "inputs_digest": "d1", "stamp_dir": str(stamps), "watch": {"files": [str(managed)]}}
    run_phase_module(tmp_path, dict(os_args, state="recorded"))
    checks = [{"phase": "os", "inputs_digest": "d1", "watch": {"files": [str(managed)]}},
              {"phase": "firewall", "inputs_digest": "d2", "watch": {}}]
    both = run_phase_module(tmp_path, {"checks": checks, "stamp_dir": str(stamps)})
    assert both["changed"] is False and both["converged"] is False
    assert both["phases"]["os"] == {"converged": True, "reason": both["phases"]["os"]["reason"], "inputs_digest": "d1"}
    assert both["phases"]["firewall"]["converged"] is False and "firewall" in both["phases"]["firewall"]["reason"]
    managed.write_text("b\n")
    assert "(files)" in run_phase_module(tmp_path, {"checks": checks[:1], "stamp_dir": str(stamps)})["phases"]["os"]["reason"]
    refused = run_phase_module(tmp_path, {"checks": checks, "state": "recorded", "stamp_dir": str(stamps)})
    assert refused["failed"] is True and "record one phase at a time" in refused["msg"]
    bad = run_phase_module(tmp_path, {"checks": [{"phase": "Os", "inputs_digest": "d", "watch": {}}], "stamp_dir": str(stamps)})
    assert bad["failed"] is True and "lower-case name" in bad["msg"]
