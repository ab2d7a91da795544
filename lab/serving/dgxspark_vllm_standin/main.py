"""`vllm` command of the dgxspark LAB STAND-IN: `vllm serve` on real Ray, without GPU or model.

Steps, as vLLM 0.33's Ray executor does them (sources in lab/serving/README.md):
parse flags (data from vllm_flags/<version>.json) -> config checks -> join the running Ray
cluster -> placement group of TP x PP bundles {"GPU": 1} (PACK) -> one actor per bundle,
driver's node first -> carry the driver's environment to the actors -> neighbour TCP checks
over the bootstrap interface -> read the safetensors shards with vLLM's progress line ->
serve /health, /v1/models, /v1/chat/completions, /metrics.
"""
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback

from . import envcarry, flags, progress, safetensors_io
from .server import TOKENS_PER_S_ENV, StandinHTTPServer, api_tokens, stream_tokens_per_s
from .worker import RankWorker

PG_WAIT_TIMEOUT_DEFAULT = 1800  # vllm/v1/executor/ray_utils.py PG_WAIT_TIMEOUT


class StandinError(Exception):
    def __init__(self, message, exception="ValueError"):
        super().__init__(message)
        self.exception = exception


def log(msg, level="INFO"):
    sys.stderr.write("(APIServer pid=%d) %s %s [dgxspark-lab-standin] %s\n"
                     % (os.getpid(), level, time.strftime("%m-%d %H:%M:%S"), msg))
    sys.stderr.flush()


def fail(message, exception="ValueError"):
    """vLLM dies with a Python traceback and exit status 1 for config and startup errors."""
    sys.stderr.write("Traceback (most recent call last):\n  (dgxspark lab stand-in: traceback of vLLM elided)\n")
    sys.stderr.write("%s: %s\n" % (exception, message))
    sys.stderr.flush()
    return 1


# --- model directory ------------------------------------------------------------------

def resolve_model_dir(model, env):
    if os.path.isdir(model):
        return os.path.abspath(model)
    hub = env.get("HF_HUB_CACHE") or os.path.join(
        env.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    repo = os.path.join(hub, "models--" + model.replace("/", "--"))
    snaps = os.path.join(repo, "snapshots")
    ref = os.path.join(repo, "refs", "main")
    if os.path.exists(ref):
        with open(ref, encoding="utf-8") as handle:
            cand = os.path.join(snaps, handle.read().strip())
        if os.path.isdir(cand):
            return cand
    if os.path.isdir(snaps):
        entries = sorted(os.listdir(snaps))
        if entries:
            return os.path.join(snaps, entries[-1])
    raise StandinError(
        "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached "
        "files. (dgxspark lab stand-in: %r is neither a directory nor in the Hugging Face cache %s; the lab has no "
        "network: make one with lab/serving/make_model_dir.py)" % (model, hub), "OSError")


def read_model_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    if not os.path.exists(path):
        raise StandinError("Invalid repository ID or local directory specified: '%s'. "
                           "config.json is missing there." % model_dir)
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    return config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config


def check_model_against_args(config, args, env):
    tp = args.tensor_parallel_size
    heads = config.get("num_attention_heads")
    if heads is not None and heads % tp:
        raise StandinError("Total number of attention heads (%d) must be divisible by tensor parallel size (%d)."
                           % (heads, tp))
    derived = config.get("max_position_embeddings")
    max_len = args.max_model_len
    if max_len in (None, -1):
        return derived
    if derived and max_len > derived and env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0") not in ("1", "true", "True"):
        raise StandinError(
            "User-specified max_model_len (%d) is greater than the derived max_model_len (max_position_embeddings=%d "
            "in model's config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1." % (max_len, derived))
    return max_len


# --- backend --------------------------------------------------------------------------

def choose_backend(args, world, spec, env):
    """ParallelConfig.__post_init__ (vllm/config/parallel.py): the default is mp; ray only when asked."""
    check = (spec.get("config_checks") or {}).get("distributed_executor_backend") or {}
    backend = args.distributed_executor_backend
    local_gpus = int(env.get("DGXSPARK_LAB_LOCAL_GPUS") or check.get("local_gpus_default", 1))
    if backend is None and world > 1:
        if getattr(args, "nnodes", 1) > 1:
            backend = "mp"
        elif local_gpus < world:
            raise StandinError(check.get("world_too_big_message", "World size ({world}) is larger than the number "
                                         "of available GPUs ({gpus}) in this node.").format(world=world, gpus=local_gpus))
        else:
            backend = "mp"
    if backend is None:
        backend = "uni"
    if backend != "ray" and world > local_gpus and getattr(args, "nnodes", 1) <= 1:
        raise StandinError("World size (%d) is larger than the number of available GPUs (%d) in this node "
                           "(backend %s)." % (world, local_gpus, backend))
    if backend != "ray" and getattr(args, "nnodes", 1) > 1:
        raise StandinError("dgxspark lab stand-in: --nnodes > 1 (vLLM's multi-node mp launcher) is not emulated; "
                           "use --distributed-executor-backend ray", "NotImplementedError")
    return backend


# --- ray world ------------------------------------------------------------------------

class RayWorld:
    def __init__(self, world, tp, pp, env, spec):
        self.world, self.tp, self.pp, self.env, self.spec = world, tp, pp, env, spec
        self.pg = None
        self.actors = []

    def start(self):
        import ray
        from ray.util import placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if os.environ.get("RAY_USAGE_STATS_ENABLED", "0") != "1":
            os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        address = os.environ.get("RAY_ADDRESS") or "auto"
        try:
            ray.init(address=address, logging_level="WARNING", log_to_driver=True)
        except ConnectionError as err:
            raise StandinError("Could not find any running Ray instance (ray.init(address=%r)): %s. Start Ray first: "
                               "`ray start --head` on the head node, `ray start --address=HEAD:6379` on the others."
                               % (address, err), "ConnectionError") from None
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        total_gpus = ray.cluster_resources().get("GPU", 0)
        log("Ray cluster: %d node(s) alive, %g GPU(s) in ray.cluster_resources(); this world needs %d "
            "(TP %d x PP %d)" % (len(nodes), total_gpus, self.world, self.tp, self.pp))
        if self.world > total_gpus:
            log("The number of required GPUs exceeds the total number of available GPUs in the placement group.",
                "WARNING")
        # vLLM 0.33.0 (vllm/v1/executor/ray_utils.py initialize_ray_cluster) always asks for PACK and never
        # reads VLLM_DISTRIBUTED_EXECUTOR_CONFIG: the stand-in does the same, so a deployment that counts on the
        # variable fails here as it would on Sparks instead of passing only in the lab.
        strategy = "PACK"
        if os.environ.get("VLLM_DISTRIBUTED_EXECUTOR_CONFIG"):
            log("VLLM_DISTRIBUTED_EXECUTOR_CONFIG is set but has no effect: vLLM %s always places its workers with "
                "strategy PACK (pin each node's --node-ip-address to its fabric address instead)."
                % self.spec.get("vllm_version"), "WARNING")
        specs = [{"GPU": 1.0} for _ in range(self.world)]
        self.pg = ray.util.placement_group(specs, strategy=strategy)
        self._wait_ready(specs, total_gpus, len(nodes))

        table = placement_group_table(self.pg)
        bundle_to_node = table["bundles_to_node_id"]
        node_ip = {n["NodeID"]: n["NodeManagerAddress"] for n in nodes}
        driver_node = ray.get_runtime_context().get_node_id()
        order = sorted(range(self.world), key=lambda i: (0 if bundle_to_node.get(i) == driver_node else 1,
                                                         bundle_to_node.get(i)))
        remote_cls = ray.remote(RankWorker)
        for rank, bundle in enumerate(order):
            actor = remote_cls.options(
                num_cpus=0, num_gpus=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=self.pg,
                                                                     placement_group_bundle_index=bundle),
                runtime_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}},
            ).remote(rank, self.world)
            self.actors.append(actor)
        log("Placement group %s ready (strategy %s); rank -> bundle: %s" % (
            self.pg.id.hex()[:12], strategy, ", ".join("%d->%d@%s" % (r, b, node_ip.get(bundle_to_node.get(b), "?"))
                                                       for r, b in enumerate(order))))
        return self

    def _wait_ready(self, specs, total_gpus, n_nodes):
        import ray
        timeout = float(os.environ.get("DGXSPARK_LAB_PG_WAIT_TIMEOUT") or PG_WAIT_TIMEOUT_DEFAULT)
        start = time.time()
        ref = self.pg.ready()
        interval = 10.0
        while time.time() - start < timeout:
            ready, _ = ray.wait([ref], timeout=min(interval, max(0.1, timeout - (time.time() - start))))
            if ready:
                return
            interval *= 2
            log("Waiting for creating a placement group of specs for %d seconds. specs=%s. Check `ray status` and "
                "`ray list nodes` to see if you have enough resources, and make sure the IP addresses used by ray "
                "cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running "
                "on a multi-node." % (int(time.time() - start), specs))
        try:
            ray.get(ref, timeout=0)
            return
        except ray.exceptions.GetTimeoutError:
            pass
        ray.util.remove_placement_group(self.pg)
        self.pg = None
        required = sum(s.get("GPU", 0) for s in specs)
        raise StandinError(
            "Cannot provide a placement group requiring %d GPUs (placement_group_specs=%s) within %d seconds.\n"
            "Tensor parallel size may exceed available GPUs in your cluster. Check resources with `ray status` and "
            "`ray list nodes`.\n"
            "If running on K8s with limited GPUs, consider reducing --tensor-parallel-size to match available GPU "
            "resources.\n"
            "dgxspark lab stand-in: GPUs available in the Ray cluster: %g on %d node(s); required: %d "
            "(tensor_parallel_size %d x pipeline_parallel_size %d)."
            % (required, specs, int(timeout), total_gpus, n_nodes, required, self.tp, self.pp))

    def call(self, method, *args_per_rank):
        import ray
        refs = []
        for rank, actor in enumerate(self.actors):
            args = [a[rank] if isinstance(a, list) else a for a in args_per_rank]
            refs.append(getattr(actor, method).remote(*args))
        return ray.get(refs)

    def alive(self):
        import ray
        try:
            ray.get([a.describe.remote() for a in self.actors], timeout=30)
            return None
        except Exception as err:  # pylint: disable=broad-except
            return "%s: %s" % (type(err).__name__, str(err).splitlines()[0] if str(err) else "")

    def stop(self):
        import ray
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # pylint: disable=broad-except
                pass
        if self.pg is not None:
            try:
                ray.util.remove_placement_group(self.pg)
            except Exception:  # pylint: disable=broad-except
                pass
        ray.shutdown()


class LocalWorld:
    """world on this node only (backend uni/mp): ranks run in this process, env unchanged."""

    def __init__(self, world):
        self.actors = [RankWorker(rank, world) for rank in range(world)]

    def start(self):
        return self

    def call(self, method, *args_per_rank):
        out = []
        for rank, actor in enumerate(self.actors):
            args = [a[rank] if isinstance(a, list) else a for a in args_per_rank]
            if method == "describe":
                out.append({"rank": rank, "hostname": socket.gethostname(), "pid": os.getpid(), "node_id": None,
                            "ray_node_ip": None, "gpu_ids": [str(rank)]})
            else:
                out.append(getattr(actor, method)(*args))
        return out

    def alive(self):
        return None

    def stop(self):
        for actor in self.actors:
            actor.shutdown()


# --- serve ----------------------------------------------------------------------------

def non_default_args(args, parser):
    out = {}
    for key, value in sorted(vars(args).items()):
        if key in ("model_tag",):
            continue
        if value != parser.get_default(key):
            out[key] = value
    return out


def serve(argv, spec=None):
    spec = spec or flags.load_spec()
    parser = flags.build_parser(spec)
    try:
        args = parser.parse_args(argv)  # exits 2 on argparse errors, as vLLM
        flags.post_parse_checks(args, spec)
    except flags.ConfigError as err:
        return fail(str(err), err.exception)
    env = dict(os.environ)
    log("vLLM API server version %s (dgxspark LAB STAND-IN: no GPU, no model; it generates no text)"
        % spec["vllm_version"])
    log("non-default args: %s" % non_default_args(args, parser))
    model = getattr(args, "model", None) or parser.get_default("model")
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    world_size = tp * pp
    world = None
    try:
        model_dir = resolve_model_dir(model, env)
        config = read_model_config(model_dir)
        max_model_len = check_model_against_args(config, args, env)
        backend = choose_backend(args, world_size, spec, env)
        log("Resolved architecture: %s; model dir %s; max_model_len %s"
            % (",".join(config.get("architectures") or ["?"]), model_dir, max_model_len))
        world = RayWorld(world_size, tp, pp, env, spec).start() if backend == "ray" else LocalWorld(world_size).start()

        rules = spec.get("env_carry_over") or envcarry.DEFAULT_LEGACY_RULES
        mode = envcarry.rules_mode(rules, env) if backend == "ray" else "none (no Ray)"
        sent = {}
        if backend == "ray":
            non_carry, path, warning = envcarry.load_non_carry_over(env)
            if warning:
                log(warning, "WARNING")
            sent = envcarry.driver_env_to_send(env, rules, non_carry, mode)
            if non_carry:
                log("RAY_NON_CARRY_OVER_ENV_VARS from config: %s" % sorted(non_carry))
            log("Copying the following environment variables to workers (%s): %s"
                % (mode, sorted(k for k in sent if not k.startswith(("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")))))
            log("To exclude env vars from copying, add them to %s" % path)
        described = world.call("describe")
        envs = world.call("init_env", sent, mode) if backend == "ray" else [
            {"rank": r, "vllm_host_ip": env.get("VLLM_HOST_IP"), "vllm_host_ip_from_node": env.get("VLLM_HOST_IP"),
             "gloo_socket_ifname": env.get("GLOO_SOCKET_IFNAME"), "bootstrap_ip": None,
             "env": {k: v for k, v in sorted(env.items()) if k.startswith(("NCCL_", "GLOO_"))},
             "overwritten_or_filled": []} for r in range(world_size)]
        listeners = world.call("open_listener")
        nxt = [(r + 1) % world_size for r in range(world_size)]
        checks = world.call("check_neighbour", nxt, [listeners[n]["ip"] for n in nxt],
                            [listeners[n]["port"] for n in nxt])
        ranks = []
        for d, e, lst in zip(described, envs, listeners):
            merged = dict(d)
            merged.update(e)
            merged["listener"] = "%s:%d (%s)" % (lst["ip"], lst["port"], lst["source"])
            ranks.append(merged)
            log("rank %d: host %s, ray node ip %s, VLLM_HOST_IP %s, GLOO_SOCKET_IFNAME %s (%s), NCCL_SOCKET_IFNAME %s"
                % (merged["rank"], merged["hostname"], merged.get("ray_node_ip"), merged.get("vllm_host_ip"),
                   merged.get("gloo_socket_ifname"), merged.get("bootstrap_ip"),
                   merged["env"].get("NCCL_SOCKET_IFNAME")))
        for check in checks:
            log("transport check rank %d -> rank %d %s: %s" % (check["from_rank"], check["to_rank"], check["to"],
                                                               "ok" if check["ok"] else "FAILED " + check["error"]),
                "INFO" if check["ok"] else "ERROR")
        failed = [c for c in checks if not c["ok"]]
        if failed and os.environ.get("DGXSPARK_LAB_ALLOW_TRANSPORT_FAILURE") != "1":
            raise StandinError("dgxspark lab stand-in: %d neighbour TCP check(s) failed over the bootstrap interface: %s"
                               % (len(failed), "; ".join("rank %d -> %d %s: %s" % (c["from_rank"], c["to_rank"],
                                                                                   c["to"], c["error"]) for c in failed)),
                               "RuntimeError")

        shards, _ = safetensors_io.list_shards(model_dir)
        if not shards:
            raise StandinError("Cannot find any model weights with `%s`" % model_dir, "RuntimeError")
        hang_at = os.environ.get("DGXSPARK_LAB_HANG_AT_SHARD")
        hang_at = int(hang_at) if hang_at not in (None, "") else None
        bar = progress.Progress(len(shards))
        tensors = nbytes = 0
        for i, shard in enumerate(shards):
            results = world.call("load_shard", shard, hang_at is not None and i == hang_at)
            tensors += results[0]["tensors"]
            nbytes += results[0]["bytes"]
            bar.update()
        log("Loading weights took %.2f seconds" % (time.monotonic() - bar.start))

        hostnames = []
        for r in ranks:
            if r["hostname"] not in hostnames:
                hostnames.append(r["hostname"])
        state = {
            "vllm_version": spec["vllm_version"], "model": model, "started": int(time.time()),
            "served_model_names": list(args.served_model_name or [model]), "max_model_len": max_model_len,
            "world": {"size": world_size, "tensor_parallel_size": tp, "pipeline_parallel_size": pp, "backend": backend,
                      "env_mode": mode, "nodes": hostnames, "ranks": ranks, "transport_checks": checks,
                      "weights": {"model_dir": model_dir, "shards": len(shards), "tensors": tensors, "bytes": nbytes}},
        }
        host = args.host if args.host is not None else ""
        try:
            rate = stream_tokens_per_s(env)
        except ValueError as err:
            raise StandinError(str(err))
        log("LAB STAND-IN streaming mode: %g tokens/s per stream, every token labelled as the stand-in's (%s)"
            % (rate, TOKENS_PER_S_ENV))
        httpd = StandinHTTPServer((host, args.port), state, api_tokens(args.api_key, env), rate)
    except StandinError as err:
        if world is not None:
            world.stop()
        return fail(str(err), err.exception)
    except OSError as err:
        if world is not None:
            world.stop()
        return fail(str(err), type(err).__name__)

    stop = threading.Event()

    def _terminate(signum, _frame):
        log("Received signal %d; shutting down" % signum)
        stop.set()

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    shown = host or "0.0.0.0"
    log("Starting vLLM API server 0 on http://%s:%d" % (shown, args.port))
    sys.stderr.write("INFO:     Started server process [%d]\nINFO:     Waiting for application startup.\n"
                     "INFO:     Application startup complete.\n"
                     "INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)\n" % (os.getpid(), shown, args.port))
    sys.stderr.flush()
    status = 0
    monitor = float(os.environ.get("DGXSPARK_LAB_MONITOR_INTERVAL") or 5)
    while not stop.wait(monitor):
        problem = world.alive()
        if problem:
            log("EngineCore encountered a fatal error: a rank actor is gone (%s)" % problem, "ERROR")
            status = 1
            break
    sys.stderr.write("INFO:     Shutting down\n")
    httpd.shutdown()
    httpd.server_close()
    world.stop()
    sys.stderr.write("INFO:     Finished server process [%d]\n" % os.getpid())
    return status


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-v"]):
        print(flags.load_spec()["vllm_version"])
        return 0
    if argv[:1] != ["serve"]:
        sys.stderr.write("usage: vllm [-h] [-v] {serve} ...\n")
        if argv and not argv[0].startswith("-"):
            sys.stderr.write("vllm: error: argument subparser: invalid choice: '%s' (the dgxspark lab stand-in "
                             "provides: 'serve')\n" % argv[0])
        else:
            sys.stderr.write("vllm: error: the dgxspark lab stand-in provides `vllm serve` only\n")
        return 2
    try:
        return serve(argv[1:])
    except SystemExit:
        raise
    except Exception:  # pylint: disable=broad-except
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
