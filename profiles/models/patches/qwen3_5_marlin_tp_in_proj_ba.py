# Seed 004 (Qwen3.5-397B-A17B int4 AutoRound, TP=4): the Marlin in_proj_ba workaround, as a versioned, checked patch.
#
# Why: the Gated DeltaNet layers fuse in_proj_b and in_proj_a (64 columns each) into one MergedColumnParallelLinear.
# At TP=4 each rank gets 128 / 4 = 32 output columns, below Marlin's minimum of 64, and vLLM refuses the layer
# ("output_size=32 < min_thread_n=64", seed 004 attempts 1-2). The community's fix keeps that small layer whole on
# every rank (replicated: 4096 x 128 int4, a few KiB) and lets each rank take its own columns after the matmul.
#
# How: run with python3 in each serving container before Ray or vLLM starts (profile kind "python"). It appends to
# vLLM's qwen3_next.py and qwen3_5.py a block that rebinds, inside those modules only, the name
# MergedColumnParallelLinear to a subclass that builds in_proj_ba with disable_tp=True and returns, from the full
# output, exactly the columns TP sharding would have given this rank. The forward code and the weight loading of
# vLLM stay as they are. Idempotent (a marker says it is there); a vLLM whose code no longer has the anchors this
# patch relies on is refused with the reason, rather than patched blindly (seed 004: "patch stale").
#   python3 qwen3_5_marlin_tp_in_proj_ba.py [--vllm-dir DIR]     exit 0: applied or already there; 1: refused
import argparse
import importlib.util
import os
import sys

MARKER = '# dgxspark.cluster patch qwen3_5_marlin_tp_in_proj_ba'
TARGETS = ('qwen3_next.py', 'qwen3_5.py')
ANCHOR = 'self.in_proj_ba = MergedColumnParallelLinear('
LINEAR_ANCHORS = ('class MergedColumnParallelLinear', 'disable_tp')

RUNTIME_BLOCK = '''
{marker} (begin)
def _dgxspark_rank_columns(output_sizes, tp_size, tp_rank):
    """(start, end) of the columns TP sharding gives this rank, in each output of a merged layer."""
    columns, offset = [], 0
    for size in output_sizes:
        chunk = size // tp_size
        columns.append((offset + tp_rank * chunk, offset + (tp_rank + 1) * chunk))
        offset += size
    return columns


class _DgxsparkReplicatedInProjBA(MergedColumnParallelLinear):
    """in_proj_ba kept whole on every rank (Marlin needs >= 64 columns); each rank keeps its own columns."""

    def __init__(self, *args, **kwargs):
        replicated = str(kwargs.get('prefix', '')).endswith('in_proj_ba')
        if replicated:
            kwargs['disable_tp'] = True
        super().__init__(*args, **kwargs)
        self._dgxspark_replicated = replicated
        self._dgxspark_columns = []
        if replicated:
            from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
            tp_size = get_tensor_model_parallel_world_size()
            # TP=1: the whole output is this rank's.
            self._dgxspark_columns = _dgxspark_rank_columns(
                self.output_sizes, tp_size, get_tensor_model_parallel_rank()) if tp_size > 1 else []

    def forward(self, input_):
        result = super().forward(input_)
        if not self._dgxspark_replicated or not self._dgxspark_columns:
            return result
        import torch
        output = result[0] if isinstance(result, tuple) else result
        output = torch.cat([output[..., start:end] for start, end in self._dgxspark_columns], dim=-1)
        return (output,) + tuple(result[1:]) if isinstance(result, tuple) else output


MergedColumnParallelLinear = _DgxsparkReplicatedInProjBA
{marker} (end)
'''.format(marker=MARKER)


def vllm_dir():
    spec = importlib.util.find_spec('vllm')  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def read(path):
    with open(path, 'r', encoding='utf-8') as handle:
        return handle.read()


def plan(root):
    """(files to patch, files already patched, refusal or None)."""
    linear = os.path.join(root, 'model_executor', 'layers', 'linear.py')
    if not os.path.isfile(linear) or not all(anchor in read(linear) for anchor in LINEAR_ANCHORS):
        return [], [], ('%s has no MergedColumnParallelLinear with disable_tp: this vLLM is older or newer than the '
                        'patch knows; refusing to patch it' % linear)
    to_patch, done = [], []
    for name in TARGETS:
        path = os.path.join(root, 'model_executor', 'models', name)
        if not os.path.isfile(path):
            continue
        text = read(path)
        if MARKER in text:
            done.append(path)
        elif ANCHOR in text:
            to_patch.append(path)
    if not to_patch and not done:
        return [], [], ('none of %s under %s builds in_proj_ba with MergedColumnParallelLinear: the patch is stale for '
                        'this vLLM; refusing to patch it' % (', '.join(TARGETS), os.path.join(root, 'model_executor', 'models')))
    return to_patch, done, None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--vllm-dir', help='the vllm package directory (default: the one python3 imports)')
    args = parser.parse_args(argv)
    root = args.vllm_dir or vllm_dir()
    name = 'dgxspark patch qwen3_5_marlin_tp_in_proj_ba'
    if not root:
        sys.stderr.write('%s: vllm is not importable by %s; refusing\n' % (name, sys.executable))
        return 1
    to_patch, done, refusal = plan(root)
    if refusal:
        sys.stderr.write('%s: %s\n' % (name, refusal))
        return 1
    for path in to_patch:
        with open(path, 'a', encoding='utf-8') as handle:
            handle.write(RUNTIME_BLOCK)
        sys.stderr.write('%s: applied to %s\n' % (name, path))
    for path in done:
        sys.stderr.write('%s: already applied to %s\n' % (name, path))
    return 0


if __name__ == '__main__':
    sys.exit(main())
