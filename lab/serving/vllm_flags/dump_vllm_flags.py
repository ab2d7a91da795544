#!/usr/bin/env python3
"""Dump the argparse definition of a REAL `vllm serve` into the lab's flag data file.

Run it with a Python that has the real vLLM wheel installed (no GPU is needed to
build the parser; torch and vLLM's other dependencies must import):

    /path/to/venv-with-vllm/bin/python lab/serving/vllm_flags/dump_vllm_flags.py \
        --wheel-sha256 <sha256 of the wheel> > lab/serving/vllm_flags/<version>.json

It builds the parser exactly as `vllm serve` does (vllm/entrypoints/cli/serve.py:
ServeSubcommand.subparser_init -> vllm/entrypoints/common/cli_args.py:make_arg_parser,
which adds FrontendArgs and AsyncEngineArgs (vllm/engine/arg_utils.py) whose types and
choices come from the config dataclasses in vllm/config/*.py), then walks its actions.
Nothing is hand-edited: the stand-in (lab/serving/dgxspark_vllm_standin/flags.py) rebuilds
an argparse parser from this data.
"""
import argparse
import hashlib
import inspect
import json
import re
import sys


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is argparse.SUPPRESS:
        return "==SUPPRESS=="
    return {"repr": repr(value)}


def _closure(fn):
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    cells = getattr(fn, "__closure__", None) or ()
    return dict(zip(names, (c.cell_contents for c in cells)))


def describe_type(fn):
    """Describe an argparse `type` callable as data the stand-in can rebuild."""
    if fn is None:
        return None
    if fn in (int, float, str):
        return {"conv": fn.__name__, "name": fn.__name__}
    name = getattr(fn, "__name__", repr(fn))
    cl = _closure(fn)
    if name == "_optional_type":
        return {"conv": "optional", "name": name, "inner": describe_type(cl.get("return_type"))}
    if name == "_parse_type":
        inner = cl.get("return_type")
        return {"conv": "parse", "name": name, "inner": describe_type(inner),
                "inner_repr": re.sub(r" at 0x[0-9a-fA-F]+", "", str(inner))}
    if name == "loads":
        return {"conv": "json_loads", "name": name}
    if name == "parse_dataclass":
        cls = cl.get("cls")
        if cls is None:
            defaults = getattr(fn, "__defaults__", None) or ()
            cls = defaults[0] if defaults else None
        return {"conv": "dataclass_json", "name": name, "class": getattr(cls, "__name__", repr(cls))}
    if name in ("human_readable_int", "human_readable_int_or_auto", "union_dict_and_str",
                "parse_reasoning_parser", "check_port"):
        return {"conv": name, "name": name}
    if inspect.isclass(fn):
        return {"conv": "str", "name": name, "class": fn.__name__, "note": "class used as type"}
    return {"conv": "str", "name": name, "note": "unrecognised type callable %r; accepted as a string" % name}


def describe_env_rules():
    """How this vLLM copies the driver's environment to its Ray workers (read from its modules)."""
    import importlib
    import vllm.envs as envs
    from vllm.ray import ray_env
    rules = {
        "config_file": "$VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json (VLLM_CONFIG_ROOT default: "
                       "${XDG_CONFIG_HOME:-~/.config}/vllm; vllm/envs.py, vllm/ray/ray_env.py)",
        "prefixes": sorted(getattr(ray_env, "DEFAULT_ENV_VAR_PREFIXES", [])),
        "extra_vars": sorted(getattr(ray_env, "DEFAULT_EXTRA_ENV_VARS", [])),
        "registered_vars": sorted(envs.environment_variables),
    }
    try:
        ray_utils = importlib.import_module("vllm.v1.executor.ray_utils")
        rules["worker_specific_vars"] = sorted(ray_utils.WORKER_SPECIFIC_ENV_VARS)
        rules["worker_specific_source"] = "vllm/v1/executor/ray_utils.py WORKER_SPECIFIC_ENV_VARS"
    except (ImportError, AttributeError):
        rules["worker_specific_vars"] = ["CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "VLLM_HOST_IP", "VLLM_HOST_PORT"]
    import importlib.util
    v2 = importlib.util.find_spec("vllm.v1.executor.ray_executor_v2")
    legacy = importlib.util.find_spec("vllm.v1.executor.ray_executor")
    rules["executors_present"] = {"ray_executor_v2": v2 is not None, "ray_executor (RayDistributedExecutor)": legacy is not None}
    try:
        if v2 is None or legacy is not None:
            raise ImportError("legacy Ray executor present or no RayExecutorV2")
        importlib.import_module("vllm.v1.executor.ray_env_utils").get_driver_env_vars  # noqa: B018
        rules["worker_mode"] = "driver_env_setdefault"
        rules["worker_mode_source"] = (
            "vllm/v1/executor/ray_executor_v2.py RayExecutorV2._init_executor -> "
            "vllm/v1/executor/ray_env_utils.py get_driver_env_vars (all of os.environ minus worker-specific and "
            "RAY_NON_CARRY_OVER_ENV_VARS) -> RayWorkerProc.initialize_worker applies them with os.environ.setdefault "
            "(a value already set on the worker's node wins)")
    except (ImportError, AttributeError):
        rules["worker_mode"] = "prefixed_overwrite"
        rules["worker_mode_source"] = (
            "RayDistributedExecutor: get_env_vars_to_copy (registered vLLM vars + prefixed vars + extra vars, minus "
            "worker-specific and RAY_NON_CARRY_OVER_ENV_VARS); update_environment_variables overwrites")
    rules["engine_core_actor_mode"] = "prefixed_overwrite"
    rules["engine_core_actor_source"] = ("vllm/v1/engine/utils.py CoreEngineActorManager: get_env_vars_to_copy -> "
                                         "RuntimeEnv(env_vars=...) (data-parallel engine actors)")
    return rules


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel-sha256", default=None)
    ap.add_argument("--wheel-name", default=None)
    ap.add_argument("--platform", choices=["cuda", "detect"], default="cuda")
    opts = ap.parse_args()

    import vllm
    import vllm.platforms
    if opts.platform == "cuda":
        # No GPU where this runs: pin the platform vLLM would detect on the Spark (CUDA), so
        # defaults that depend on it (DeviceConfig, choices trimmed per platform) are the CUDA ones.
        # vllm.platforms.cuda needs libcuda.so at import, so declare a Platform with CUDA's identity.
        from vllm.platforms.interface import Platform, PlatformEnum

        class _CudaIdentity(Platform):
            _enum = PlatformEnum.CUDA
            device_name = "cuda"
            device_type = "cuda"
            dispatch_key = "CUDA"
            ray_device_key = "GPU"
            dist_backend = "nccl"
            device_control_env_var = "CUDA_VISIBLE_DEVICES"

        vllm.platforms.current_platform = _CudaIdentity()
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand().subparser_init(subparsers)

    group_of = {}
    for group in serve._action_groups:
        for action in group._group_actions:
            group_of[id(action)] = group.title
    deprecated = {id(a) for a in getattr(serve, "_deprecated", set())}

    flags = []
    positionals = []
    for action in serve._actions:
        entry = {
            "options": list(action.option_strings),
            "dest": action.dest,
            "action": type(action).__name__,
            "nargs": action.nargs,
            "const": _jsonable(action.const),
            "default": _jsonable(action.default),
            "choices": _jsonable(list(action.choices)) if action.choices is not None else None,
            "metavar": _jsonable(action.metavar),
            "type": describe_type(action.type),
            "required": bool(action.required),
            "group": group_of.get(id(action)),
            "deprecated": id(action) in deprecated or bool(getattr(action, "deprecated", False)),
        }
        if hasattr(action, "negative_option_strings"):
            entry["negative_options"] = sorted(action.negative_option_strings)
        help_text = action.help if isinstance(action.help, str) else ""
        entry["help"] = help_text.split("\n\n", 1)[0].strip()[:400]
        (flags if action.option_strings else positionals).append(entry)

    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, DEPRECATED_QUANTIZATION_METHODS
    env_rules = describe_env_rules()
    from vllm.config.cache import KV_CACHE_DTYPES
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    data = {
        "vllm_version": vllm.__version__,
        "prog": serve.prog,
        "usage": serve.usage,
        "top_usage": top.format_usage().strip(),
        "python_used_for_dump": sys.version.split()[0],
        "generated_by": "lab/serving/vllm_flags/dump_vllm_flags.py",
        "sources": [
            {"what": "vLLM wheel from PyPI (real parser built and walked)",
             "name": opts.wheel_name, "sha256": opts.wheel_sha256},
            {"what": "parser construction", "files": [
                "vllm/entrypoints/cli/serve.py (ServeSubcommand.subparser_init)",
                "vllm/entrypoints/common/cli_args.py (make_arg_parser, FrontendArgs, validate_parsed_serve_args)",
                "vllm/engine/arg_utils.py (EngineArgs.add_cli_args, _compute_kwargs)",
                "vllm/config/*.py (dataclass field types -> argparse type/choices)",
                "vllm/utils/argparse_utils.py (FlexibleArgumentParser, EnableDisableAction)"]},
            {"what": "config-time checks (not argparse)", "files": [
                "vllm/config/model.py (Unknown quantization method ...)",
                "vllm/model_executor/layers/quantization/__init__.py (QUANTIZATION_METHODS)"]},
        ],
        "positionals": positionals,
        "flags": flags,
        "platform_for_dump": opts.platform,
        "env_carry_over": env_rules,
        "config_checks": {
            "quantization": {
                "supported": list(QUANTIZATION_METHODS),
                "deprecated": list(DEPRECATED_QUANTIZATION_METHODS),
                "message": "Unknown quantization method: {value}. Must be one of {supported}.",
                "source": "vllm/config/model.py ModelConfig._verify_quantization",
            },
            "kv_cache_dtype": {
                "supported": list(KV_CACHE_DTYPES),
                "message": "Invalid kv_cache_dtype: {value!r}. Valid values are: {supported}",
                "source": "vllm/config/cache.py CacheConfig._validate_cache_dtype",
            },
            "attention_backend": {
                "supported": list(AttentionBackendEnum.__members__),
                "case_insensitive": True,
                "auto_means_none": True,
                "message": "Unknown attention backend: '{value_upper}'. Valid options are: {supported_joined}",
                "source": "vllm/config/attention.py AttentionConfig.validate_backend_before, "
                          "vllm/v1/attention/backends/registry.py _AttentionBackendEnumMeta",
            },
            "reasoning_parser": {
                "supported": sorted(ReasoningParserManager.list_registered()),
                "message": "invalid reasoning parser: {value} (chose from {{ {supported_comma} }})",
                "exception": "KeyError",
                "source": "vllm/entrypoints/common/cli_args.py validate_api_server_args",
            },
            "tool_call_parser": {
                "supported": list(ToolParserManager.list_registered()),
                "only_with": "enable_auto_tool_choice",
                "message": "invalid tool call parser: {value} (chose from {{ {supported_comma} }})",
                "exception": "KeyError",
                "source": "vllm/entrypoints/common/cli_args.py validate_api_server_args",
            },
            "distributed_executor_backend": {
                "supported": ["ray", "mp", "uni", "external_launcher"],
                "local_gpus_default": 1,
                "world_too_big_message": (
                    "World size ({world}) is larger than the number of available GPUs ({gpus}) in this node. "
                    "If this is intentional and you are using:\n- ray, set '--distributed-executor-backend ray'.\n"
                    "- multiprocessing, set '--nnodes' appropriately."),
                "source": "vllm/config/parallel.py ParallelConfig.__post_init__ (backend default: mp; "
                          "ray only when asked or inside a Ray placement group)",
            },
        },
    }
    json.dump(data, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
