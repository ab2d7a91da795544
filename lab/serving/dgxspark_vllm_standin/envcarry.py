"""How vLLM's Ray executor carries the driver's environment to its workers (LAB STAND-IN).

The rules are data (the "env_carry_over" block of lab/serving/vllm_flags/<version>.json, read
from the real vLLM's modules by dump_vllm_flags.py).  Two modes exist in vLLM's history:

* "driver_env_setdefault" (vLLM 0.33.0, RayExecutorV2; vllm/v1/executor/ray_env_utils.py
  get_driver_env_vars + RayWorkerProc.initialize_worker): the driver sends ALL of its
  os.environ except the worker-specific names (vllm/v1/executor/ray_utils.py
  WORKER_SPECIFIC_ENV_VARS) and the names in $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json;
  the worker applies them with os.environ.setdefault, so a value already set on the worker's
  node (its container's environment at `ray start`) wins.
* "prefixed_overwrite" (the older RayDistributedExecutor, and vLLM 0.33's data-parallel
  engine-core actors; vllm/ray/ray_env.py get_env_vars_to_copy): only vLLM's registered
  variables, names starting with a carried prefix (VLLM_, NCCL_, UCX_, HF_, HUGGING_FACE_,
  ...) and a few named extras are sent, minus the same exclusions, and the worker OVERWRITES
  its own values with them.

$DGXSPARK_LAB_RAY_ENV_MODE (not a vLLM variable) picks the other mode for experiments.
"""
import json
import os

DEFAULT_LEGACY_RULES = {
    "prefixes": ["HF_", "HUGGING_FACE_", "NCCL_", "UCX_", "VLLM_"],
    "extra_vars": ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"],
    "registered_vars": [],
    "worker_specific_vars": ["CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "VLLM_HOST_IP", "VLLM_HOST_PORT"],
    "worker_mode": "prefixed_overwrite",
}
MODES = ("driver_env_setdefault", "prefixed_overwrite")


def config_root(env):
    """VLLM_CONFIG_ROOT as vllm/envs.py computes it."""
    default = os.path.join(env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"), "vllm")
    return os.path.expanduser(env.get("VLLM_CONFIG_ROOT") or default)


def non_carry_over_file(env):
    return os.path.join(config_root(env), "ray_non_carry_over_env_vars.json")


def load_non_carry_over(env):
    """Names listed in ray_non_carry_over_env_vars.json (vllm/ray/ray_env.py).

    Returns (names, path, warning). A file that is not valid JSON gives an empty set and
    vLLM's warning, as vLLM does."""
    path = non_carry_over_file(env)
    if not os.path.exists(path):
        return set(), path, None
    try:
        with open(path, encoding="utf-8") as handle:
            return set(json.load(handle)), path, None
    except json.JSONDecodeError:
        return set(), path, "Failed to parse %s. Using an empty set for non-carry-over env vars." % path


def _csv(value):
    return {tok.strip() for tok in (value or "").split(",") if tok.strip()}


def rules_mode(rules, env=None):
    env = os.environ if env is None else env
    mode = env.get("DGXSPARK_LAB_RAY_ENV_MODE") or rules.get("worker_mode") or "prefixed_overwrite"
    if mode not in MODES:
        raise ValueError("DGXSPARK_LAB_RAY_ENV_MODE=%s: expected one of %s" % (mode, ", ".join(MODES)))
    return mode


def driver_env_to_send(driver_env, rules, non_carry_over, mode):
    """The variables (name -> value) the driver hands to every Ray worker."""
    exclude = set(rules.get("worker_specific_vars", [])) | set(non_carry_over)
    if mode == "driver_env_setdefault":
        return {k: v for k, v in driver_env.items() if k not in exclude}
    prefixes = set(rules.get("prefixes", [])) | _csv(driver_env.get("VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"))
    names = set(rules.get("registered_vars", []))
    names |= {n for n in driver_env if any(n.startswith(p) for p in prefixes)}
    names |= set(rules.get("extra_vars", [])) | _csv(driver_env.get("VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"))
    names -= exclude
    return {n: driver_env[n] for n in names if n in driver_env}


def apply_on_worker(worker_env, sent, mode):
    """Apply what the driver sent to a worker's environment (dict, changed in place).

    Returns a list of (name, before, after) for the values that changed."""
    changes = []
    for name in sorted(sent):
        value = sent[name]
        before = worker_env.get(name)
        if mode == "driver_env_setdefault":
            if name in worker_env:
                continue
            worker_env[name] = value
        else:
            worker_env[name] = value
        if before != value:
            changes.append((name, before, value))
    return changes


def carry(driver_env, worker_env, rules, mode=None, non_carry_over=None):
    """Resulting worker environment (a new dict) for the given driver and worker environments."""
    mode = mode or rules_mode(rules, driver_env)
    if non_carry_over is None:
        non_carry_over = load_non_carry_over(driver_env)[0]
    result = dict(worker_env)
    apply_on_worker(result, driver_env_to_send(driver_env, rules, non_carry_over, mode), mode)
    return result
