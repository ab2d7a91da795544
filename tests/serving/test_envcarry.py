import json

import pytest

from dgxspark_vllm_standin import envcarry

DRIVER = {
    "VLLM_HOST_IP": "192.168.100.10", "VLLM_HOST_PORT": "5000", "LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "0",
    "VLLM_ATTENTION_BACKEND": "FLASHINFER", "NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "=rocep1s0f1:1",
    "UCX_NET_DEVICES": "enp1s0f1np1", "HF_HUB_OFFLINE": "1", "HUGGING_FACE_HUB_TOKEN": "x",
    "GLOO_SOCKET_IFNAME": "enp1s0f1np1", "OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1", "PATH": "/usr/bin",
    "FLASH_ATTENTION_X": "1", "PYTHONHASHSEED": "0",
}
WORKER = {"VLLM_HOST_IP": "192.168.100.11", "NCCL_SOCKET_IFNAME": "enP2p1s0f1np1", "GLOO_SOCKET_IFNAME": "enP2p1s0f1np1",
          "PATH": "/sbin"}


@pytest.fixture
def rules(spec):
    return spec["env_carry_over"]


def test_rules_come_from_vllm_033(rules):
    assert rules["worker_mode"] == "driver_env_setdefault"
    assert {"VLLM_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_"} <= set(rules["prefixes"])
    assert {"VLLM_HOST_IP", "VLLM_HOST_PORT", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES"} <= set(rules["worker_specific_vars"])


# (name, non-carry-over list, mode, expected value on the worker; None = unset)
TABLE = [
    # vLLM 0.33 (RayExecutorV2): everything is sent, applied with setdefault -> node-local values win
    ("VLLM_HOST_IP", [], "driver_env_setdefault", "192.168.100.11"),
    ("NCCL_SOCKET_IFNAME", [], "driver_env_setdefault", "enP2p1s0f1np1"),
    ("NCCL_IB_HCA", [], "driver_env_setdefault", "=rocep1s0f1:1"),
    ("NCCL_IB_HCA", ["NCCL_IB_HCA"], "driver_env_setdefault", None),
    ("OMPI_MCA_btl_tcp_if_include", [], "driver_env_setdefault", "enp1s0f1np1"),
    ("PATH", [], "driver_env_setdefault", "/sbin"),
    ("LOCAL_RANK", [], "driver_env_setdefault", None),
    ("CUDA_VISIBLE_DEVICES", [], "driver_env_setdefault", None),
    ("VLLM_HOST_PORT", [], "driver_env_setdefault", None),
    # older RayDistributedExecutor: prefixed names only, overwriting the worker's own values
    ("VLLM_HOST_IP", [], "prefixed_overwrite", "192.168.100.11"),
    ("NCCL_SOCKET_IFNAME", [], "prefixed_overwrite", "enp1s0f1np1"),
    ("NCCL_SOCKET_IFNAME", ["NCCL_SOCKET_IFNAME"], "prefixed_overwrite", "enP2p1s0f1np1"),
    ("GLOO_SOCKET_IFNAME", [], "prefixed_overwrite", "enP2p1s0f1np1"),
    ("UCX_NET_DEVICES", [], "prefixed_overwrite", "enp1s0f1np1"),
    ("HF_HUB_OFFLINE", [], "prefixed_overwrite", "1"),
    ("HUGGING_FACE_HUB_TOKEN", [], "prefixed_overwrite", "x"),
    ("OMPI_MCA_btl_tcp_if_include", [], "prefixed_overwrite", None),
    ("PATH", [], "prefixed_overwrite", "/sbin"),
    ("LOCAL_RANK", [], "prefixed_overwrite", None),
    ("CUDA_VISIBLE_DEVICES", [], "prefixed_overwrite", None),
    ("FLASH_ATTENTION_X", [], "prefixed_overwrite", "1"),
    ("PYTHONHASHSEED", [], "prefixed_overwrite", "0"),
]


@pytest.mark.parametrize("name,non_carry,mode,expected", TABLE)
def test_carry_table(rules, name, non_carry, mode, expected):
    result = envcarry.carry(DRIVER, WORKER, rules, mode=mode, non_carry_over=set(non_carry))
    assert result.get(name) == expected


@pytest.mark.parametrize("mode", envcarry.MODES)
def test_non_carry_over_file_read_from_vllm_config_root(tmp_path, rules, mode):
    (tmp_path / "ray_non_carry_over_env_vars.json").write_text(json.dumps(["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"]))
    driver = dict(DRIVER, VLLM_CONFIG_ROOT=str(tmp_path))
    names, path, warning = envcarry.load_non_carry_over(driver)
    assert names == {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"} and warning is None
    assert path == str(tmp_path / "ray_non_carry_over_env_vars.json")
    result = envcarry.carry(driver, WORKER, rules, mode=mode)
    assert result["NCCL_SOCKET_IFNAME"] == "enP2p1s0f1np1"
    assert "NCCL_IB_HCA" not in result


def test_config_root_defaults(tmp_path):
    assert envcarry.config_root({"XDG_CONFIG_HOME": str(tmp_path)}) == str(tmp_path / "vllm")
    assert envcarry.config_root({"HOME": "/h"}).endswith("/.config/vllm")


def test_invalid_json_gives_empty_set_and_warning(tmp_path):
    (tmp_path / "ray_non_carry_over_env_vars.json").write_text("[not json")
    names, _, warning = envcarry.load_non_carry_over({"VLLM_CONFIG_ROOT": str(tmp_path)})
    assert names == set() and warning.startswith("Failed to parse")


def test_extra_prefixes_and_vars(rules):
    driver = dict(DRIVER, VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY="GLOO_", VLLM_RAY_EXTRA_ENV_VARS_TO_COPY="OMPI_MCA_btl_tcp_if_include")
    sent = envcarry.driver_env_to_send(driver, rules, set(), "prefixed_overwrite")
    assert sent["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1" and "OMPI_MCA_btl_tcp_if_include" in sent


def test_mode_override(rules):
    assert envcarry.rules_mode(rules, {}) == "driver_env_setdefault"
    assert envcarry.rules_mode(rules, {"DGXSPARK_LAB_RAY_ENV_MODE": "prefixed_overwrite"}) == "prefixed_overwrite"
    with pytest.raises(ValueError):
        envcarry.rules_mode(rules, {"DGXSPARK_LAB_RAY_ENV_MODE": "bogus"})
