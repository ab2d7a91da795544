"""Record how the REAL `vllm serve` parser answers a list of argv (fixture for tests/serving/test_flags.py).

    /path/to/venv-with-vllm/bin/python lab/serving/vllm_flags/record_real_parse.py CASES.json > RESULTS.json

CASES.json: a list of argv lists (without `vllm serve`). Needs the real vLLM installed; no GPU.
"""
import sys, json
import vllm.platforms
from vllm.platforms.interface import Platform, PlatformEnum
class C(Platform):
    _enum = PlatformEnum.CUDA; device_name="cuda"; device_type="cuda"; dispatch_key="CUDA"; ray_device_key="GPU"; dist_backend="nccl"; device_control_env_var="CUDA_VISIBLE_DEVICES"
vllm.platforms.current_platform = C()
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
top = FlexibleArgumentParser(prog="vllm")
sp = top.add_subparsers(required=False, dest="subparser")
ServeSubcommand().subparser_init(sp)
cases = json.load(open(sys.argv[1]))
out = []
import io, contextlib
for argv in cases:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = top.parse_args(["serve"] + argv)
        out.append({"rc": 0, "ns": {k: repr(v) for k, v in vars(ns).items() if k in ("model_tag","tensor_parallel_size","enable_prefix_caching","limit_mm_per_prompt","served_model_name","max_model_len","max_num_batched_tokens","quantization","kv_cache_dtype","language_model_only","enable_expert_parallel")}})
    except SystemExit as e:
        out.append({"rc": e.code, "err": err.getvalue().strip().splitlines()[-1]})
json.dump(out, sys.stdout, indent=1)
