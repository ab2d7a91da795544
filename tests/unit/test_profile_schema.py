"""Table tests for profile_schema: patch entries, sha256 checks, vLLM version ranges."""
import hashlib
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import profile_schema as ps

GOOD = b'print("marker")\n'
GOOD_SHA = hashlib.sha256(GOOD).hexdigest()


@pytest.fixture
def base(tmp_path):
    (tmp_path / 'patches').mkdir()
    (tmp_path / 'patches' / 'p.py').write_bytes(GOOD)
    return str(tmp_path)


def entry(**over):
    value = {'file': 'patches/p.py', 'sha256': GOOD_SHA, 'kind': 'sitecustomize',
             'vllm': '>=0.33,<0.34', 'reason': 'test'}
    value.update(over)
    return {k: v for k, v in value.items() if v is not None}


@pytest.mark.parametrize('patches,expected', [
    (None, []),
    ([entry()], []),
    ([entry(kind='python')], []),
    ('x', ['must be a list']),
    (['x'], ['must be a mapping']),
    ([entry(extra=1)], ["unknown key 'extra'"]),
    ([entry(reason=None)], ['reason is required']),
    ([entry(kind='shell')], ["kind 'shell' is not one of"]),
    ([entry(vllm='~0.33')], ['bad version clause']),
    ([entry(sha256='ABC')], ['64 lowercase hex']),
    ([entry(sha256='0' * 64)], ['sha256 mismatch for patches/p.py']),
    ([entry(file='/etc/passwd')], ['must be relative']),
    ([entry(file='../p.py')], ['must be relative']),
    ([entry(file='patches/none.py')], ['not found']),
    # every problem at once
    ([entry(kind='shell', vllm='bad', sha256='0' * 64)], ['kind', 'bad version clause', 'sha256 mismatch']),
])
def test_validate_patches(base, patches, expected):
    problems = ps.validate_patches('m', patches, base)
    assert len(problems) == len(expected), problems
    for want, got in zip(expected, problems):
        assert want in got


@pytest.mark.parametrize('version,spec,inside', [
    ('0.33.0', '>=0.33,<0.34', True),
    ('0.33.1rc2+cu130', '>=0.33,<0.34', True),
    ('v0.34.0', '>=0.33,<0.34', False),
    ('0.32.9', '>=0.33,<0.34', False),
    ('0.33', '==0.33.0', True),
    ('0.33.0', '!=0.33.0', False),
    ('0.33.0', '>0.32', True),
])
def test_version_in_range(version, spec, inside):
    assert ps.version_in_range(version, spec) is inside


def test_version_problems_names_patch_range_and_version():
    problems = ps.version_problems('m', [entry(vllm='>=0.34')], '0.33.0')
    assert problems == ['profile m: patch patches/p.py applies to vLLM >=0.34, but the image has vLLM 0.33.0; '
                        'refusing to start it']
    assert ps.version_problems('m', [entry()], '0.33.0') == []


def test_unreadable_version_is_an_error():
    with pytest.raises(ValueError, match='cannot read a vLLM version'):
        ps.version_in_range('unknown', '>=0.33')


def test_seed_003_patch_file_is_real_python():
    path = os.path.join(os.path.dirname(__file__), '..', '..', 'profiles', 'models', 'patches', 'cudnn_off_sitecustomize.py')
    with open(path) as handle:
        compile(handle.read(), path, 'exec')


def test_plan_profile_validation_lists_patch_problems_with_the_others(base):
    from ansible_collections.dgxspark.cluster.plugins.module_utils import cluster_plan as cp
    problems = cp.validate_profile('m', {'patches': [entry(sha256='0' * 64)], '_dir': base})
    assert any('sha256 mismatch' in p for p in problems)
    assert any('field ' in p for p in problems)  # the other profile problems are still listed
