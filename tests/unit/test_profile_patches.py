"""The profile patch files themselves (profiles/models/patches/): what they do to a process and to a vLLM tree.

No torch and no vLLM here: a fake torch package stands in where the patch only touches an attribute, and a vLLM tree
with the statements the Marlin patch anchors on stands in for the package it edits (the patch refuses any other)."""
import os
import subprocess
import sys
import types

import pytest

PATCHES = os.path.join(os.path.dirname(__file__), '..', '..', 'profiles', 'models', 'patches')
LOADER = os.path.join(os.path.dirname(__file__), '..', '..', 'roles', 'ray_cluster', 'files', 'dgxspark-sitecustomize.py')
MARLIN = os.path.join(PATCHES, 'qwen3_5_marlin_tp_in_proj_ba.py')


# ---------------------------------------------------------------- cudnn_off_sitecustomize.py (seed 003)

def patch_dir(tmp_path, patches):
    """A node's patch directory as ray_cluster lays it out: the collection's loader in site/, each sitecustomize patch
    (name -> bytes) in sitecustomize/; returns the containers' environment for it."""
    (tmp_path / 'site').mkdir()
    (tmp_path / 'sitecustomize').mkdir()
    with open(LOADER, 'rb') as handle:
        (tmp_path / 'site' / 'sitecustomize.py').write_bytes(handle.read())
    for name, data in patches.items():
        (tmp_path / 'sitecustomize' / name).write_bytes(data)
    return {'PYTHONPATH': str(tmp_path / 'site'), 'PATH': os.environ['PATH'], 'DGXSPARK_PATCH_DIR': str(tmp_path),
            'DGXSPARK_PATCHES': ' '.join('sitecustomize:sitecustomize/%s:sha' % name for name in patches)}


@pytest.fixture
def site(tmp_path):
    """The seed 003 patch behind the collection's loader, and a fake torch whose cuDNN starts enabled."""
    with open(os.path.join(PATCHES, 'cudnn_off_sitecustomize.py'), 'rb') as handle:
        env = patch_dir(tmp_path, {'cudnn_off_sitecustomize.py': handle.read()})
    torch = tmp_path / 'fake' / 'torch'
    torch.mkdir(parents=True)
    (torch / '__init__.py').write_text('import types\nbackends = types.SimpleNamespace(cudnn=types.SimpleNamespace(enabled=True))\n')
    env['PYTHONPATH'] += ':%s' % (tmp_path / 'fake')
    return env


def test_the_loader_runs_every_sitecustomize_patch_in_order_and_reports_a_broken_one(tmp_path):
    env = patch_dir(tmp_path, {'first.py': b'import builtins\nbuiltins.ORDER = ["first"]\n',
                               'broken.py': b'raise RuntimeError("boom")\n',
                               'last.py': b'import builtins\nbuiltins.ORDER.append("last")\n'})
    env['DGXSPARK_PATCHES'] += ' python:other.py:sha'  # not a sitecustomize: not run by the loader
    done = run_python(env, 'print(ORDER)')
    assert done.stdout.strip() == "['first', 'last']"
    assert 'dgxspark sitecustomize: sitecustomize/broken.py failed: RuntimeError: boom' in done.stderr
    assert 'other.py' not in done.stderr


def run_python(env, code):
    return subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, check=True, timeout=60)


def test_sitecustomize_turns_cudnn_off_when_torch_is_imported(site):
    done = run_python(site, 'import torch; print(torch.backends.cudnn.enabled)')
    assert done.stdout.strip() == 'False'
    assert 'torch.backends.cudnn.enabled=False' in done.stderr


def test_sitecustomize_imports_nothing_in_a_process_without_torch(site):
    done = run_python(site, 'import sys; print("torch" in sys.modules)')
    assert done.stdout.strip() == 'False' and done.stderr == ''


# ---------------------------------------------------------------- qwen3_5_marlin_tp_in_proj_ba.py (seed 004)

LINEAR = 'class MergedColumnParallelLinear(ColumnParallelLinear):\n    def __init__(self, *a, disable_tp=False, **k):\n        pass\n'
MODEL = ('from vllm.model_executor.layers.linear import MergedColumnParallelLinear\n\nclass GatedDeltaNet:\n'
         '    def __init__(self):\n        self.in_proj_ba = MergedColumnParallelLinear(\n            prefix="x.in_proj_ba")\n')


def vllm_tree(tmp_path, linear=LINEAR, models=(('qwen3_next.py', MODEL), ('qwen3_5.py', MODEL))):
    root = tmp_path / 'vllm'
    (root / 'model_executor' / 'layers').mkdir(parents=True)
    (root / 'model_executor' / 'models').mkdir(parents=True)
    (root / 'model_executor' / 'layers' / 'linear.py').write_text(linear)
    for name, text in models:
        (root / 'model_executor' / 'models' / name).write_text(text)
    return root


def run_marlin(root):
    return subprocess.run([sys.executable, MARLIN, '--vllm-dir', str(root)], capture_output=True, text=True, timeout=60, check=False)


def test_marlin_patch_applies_once_then_reports_it_is_there(tmp_path):
    root = vllm_tree(tmp_path)
    first = run_marlin(root)
    assert first.returncode == 0 and first.stderr.count('applied to') == 2, first.stderr
    patched = (root / 'model_executor' / 'models' / 'qwen3_next.py').read_text()
    assert patched.startswith(MODEL) and patched.count('(begin)') == 1
    compile(patched, 'qwen3_next.py', 'exec')
    second = run_marlin(root)
    assert second.returncode == 0 and second.stderr.count('already applied to') == 2
    assert (root / 'model_executor' / 'models' / 'qwen3_next.py').read_text() == patched


@pytest.mark.parametrize('linear,models,reason', [
    ('class MergedColumnParallelLinear:\n    pass\n', (('qwen3_next.py', MODEL),), 'has no MergedColumnParallelLinear with disable_tp'),
    (LINEAR, (('qwen3_next.py', MODEL.replace('MergedColumnParallelLinear(', 'ReplicatedLinear(')),), 'the patch is stale'),
    (LINEAR, (), 'the patch is stale'),
])
def test_marlin_patch_refuses_a_vllm_it_does_not_know_and_changes_nothing(tmp_path, linear, models, reason):
    root = vllm_tree(tmp_path, linear, models)
    before = {name: (root / 'model_executor' / 'models' / name).read_text() for name, _text in models}
    done = run_marlin(root)
    assert done.returncode == 1 and reason in done.stderr and 'refusing' in done.stderr
    assert {name: (root / 'model_executor' / 'models' / name).read_text() for name in before} == before


class FakeTensor(list):
    """Columns of a one-row output; output[..., a:b] takes columns."""

    def __getitem__(self, key):
        if isinstance(key, tuple) and key[0] is Ellipsis:
            return FakeTensor(list.__getitem__(self, key[1]))
        return list.__getitem__(self, key)


def load_runtime_block(tp_size, tp_rank):
    """The block the patch appends, executed over a fake MergedColumnParallelLinear and fake tensor-parallel state."""
    spec = {}
    with open(MARLIN, encoding='utf-8') as handle:
        exec(compile(handle.read(), MARLIN, 'exec'), spec)  # pylint: disable=exec-used

    class MergedColumnParallelLinear(object):
        def __init__(self, input_size, output_sizes, bias=True, disable_tp=False, prefix=''):
            self.output_sizes, self.disable_tp, self.prefix = output_sizes, disable_tp, prefix
            self.tp_size = 1 if disable_tp else tp_size

        def forward(self, input_):
            del input_  # the full output when replicated: columns numbered 0..sum-1
            return FakeTensor(range(sum(self.output_sizes) // self.tp_size)), None

    distributed = types.ModuleType('vllm.distributed')
    distributed.get_tensor_model_parallel_world_size = lambda: tp_size
    distributed.get_tensor_model_parallel_rank = lambda: tp_rank
    torch = types.ModuleType('torch')
    torch.cat = lambda parts, dim: FakeTensor(column for part in parts for column in part)
    saved = {name: sys.modules.get(name) for name in ('vllm', 'vllm.distributed', 'torch')}
    sys.modules.update({'vllm': types.ModuleType('vllm'), 'vllm.distributed': distributed, 'torch': torch})
    namespace = {'MergedColumnParallelLinear': MergedColumnParallelLinear}
    try:
        exec(spec['RUNTIME_BLOCK'], namespace)  # pylint: disable=exec-used
        return namespace['MergedColumnParallelLinear'], namespace['_dgxspark_rank_columns'], saved
    except Exception:
        restore(saved)
        raise


def restore(saved):
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module


@pytest.mark.parametrize('tp_size,tp_rank,expected', [
    # Qwen3.5-397B: 64 b columns then 64 a columns; TP=4 rank r keeps b[16r:16r+16] and a[16r:16r+16].
    (4, 0, list(range(0, 16)) + list(range(64, 80))),
    (4, 3, list(range(48, 64)) + list(range(112, 128))),
    (2, 1, list(range(32, 64)) + list(range(96, 128))),
    (1, 0, list(range(128))),
])
def test_replicated_in_proj_ba_gives_each_rank_the_columns_tp_sharding_would(tp_size, tp_rank, expected):
    layer_class, _columns, saved = load_runtime_block(tp_size, tp_rank)
    try:
        layer = layer_class(4096, [64, 64], bias=False, prefix='model.layers.0.linear_attn.in_proj_ba')
        output, bias = layer.forward(None)
    finally:
        restore(saved)
    assert layer.disable_tp is True and bias is None
    assert list(output) == expected


def test_other_merged_layers_stay_tensor_parallel():
    layer_class, _columns, saved = load_runtime_block(4, 1)
    try:
        layer = layer_class(4096, [1024, 1024], prefix='model.layers.0.mlp.gate_up_proj')
        output, _bias = layer.forward(None)
    finally:
        restore(saved)
    assert layer.disable_tp is False and list(output) == list(range(512))


@pytest.mark.parametrize('sizes,tp,rank,expected', [
    ([64, 64], 4, 2, [(32, 48), (96, 112)]),
    ([8, 16], 2, 1, [(4, 8), (16, 24)]),
])
def test_rank_columns_table(sizes, tp, rank, expected):
    _layer, rank_columns, saved = load_runtime_block(tp, rank)
    restore(saved)
    assert rank_columns(sizes, tp, rank) == expected
