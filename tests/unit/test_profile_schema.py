"""Table tests for profile_schema: patch entries, sha256 checks, vLLM version ranges."""
import hashlib
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import profile_schema as ps

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


def test_plan_profile_validation_lists_patch_problems_with_the_others(base):
    from ansible_collections.dgxspark.cluster.plugins.plugin_utils import cluster_plan as cp
    problems = cp.validate_profile('m', {'patches': [entry(sha256='0' * 64)], '_dir': base})
    assert any('sha256 mismatch' in p for p in problems)
    assert any('field ' in p for p in problems)  # the other profile problems are still listed


def minimal_profile(**over):
    value = dict((
        ('hf_repo', 'org/model'), ('total_params_b', 10), ('active_params_b', 1), ('weight_size_gb', 5), ('is_moe', False),
        ('num_attention_heads', 8), ('num_key_value_heads', 2), ('head_dim', 64), ('num_hidden_layers', 4),
        ('kv_cache_layers', 4), ('max_position_embeddings', 4096), ('default_max_model_len', 2048),
        ('default_kv_cache_dtype', 'auto'), ('kv_cache_auto_dtype_bytes', 2), ('sources', {'hf_repo': 'here'})))
    value.update(over)
    return {k: v for k, v in value.items() if v is not None}


@pytest.mark.parametrize('over,expected', [
    ({}, []),
    ({'replicated_weight_gb': 0, 'notes': ['x'], 'vllm_options': {'a': 1}}, []),
    ({'hf_repo': None}, ['field hf_repo is missing (a string)']),
    ({'head_dim': 64.5}, ['field head_dim must be an integer (got 64.5)']),
    ({'is_moe': 'yes'}, ['field is_moe must be true or false']),
    ({'num_hidden_layers': True}, ['field num_hidden_layers must be an integer (got True)']),
    ({'weight_size_gb': 0}, ['field weight_size_gb must be positive']),
    ({'replicated_weight_gb': -1}, ['replicated_weight_gb must not be negative']),
    ({'vllm_options': ['--x']}, ['field vllm_options must be a mapping']),
    ({'num_key_value_head': 2}, ['unknown field num_key_value_head (did you mean num_key_value_heads?)']),
    ({'colour': 'red'}, ['unknown field colour; fix the profile file']),
    ({'_dir': '/x'}, []),  # internal keys the loader adds
    ({'hf_repo': None, 'head_dim': 'x', 'paches': []},  # every problem at once
     ['field hf_repo is missing', 'field head_dim must be an integer', 'unknown field paches (did you mean patches?)']),
])
def test_validate_profile_fields(over, expected):
    problems = ps.validate_profile_fields('m', minimal_profile(**over))
    assert len(problems) == len(expected), problems
    for fragment, problem in zip(expected, problems):
        assert fragment in problem and problem.startswith('model profile m: ')


def test_two_patches_of_one_name_are_refused_but_two_sitecustomize_load_together(base):
    with open(os.path.join(base, 'patches', 'q.py'), 'wb') as handle:
        handle.write(GOOD)
    assert ps.validate_patches('m', [entry(), entry(file='patches/q.py')], base) == []
    problems = ps.validate_patches('m', [entry(), entry()], base)
    assert problems == ['profile m: patches: two patches named p.py (they share one directory on the nodes): rename one']


def test_plan_patches_carry_the_controller_path(base):
    patches = ps.plan_patches({'_dir': base, '_name': 'm', 'patches': [entry(kind='python'), entry()]})
    assert patches == [
        dict(entry(kind='python'), name='p.py', origin='profile m', source=os.path.join(base, 'patches', 'p.py'), node_path='p.py'),
        dict(entry(), name='p.py', origin='profile m', source=os.path.join(base, 'patches', 'p.py'),
             node_path='sitecustomize/p.py')]


@pytest.mark.parametrize('entries,site_dir,profile_names,expected_names,expected', [
    (None, '', [], [], []),
    ([], None, ['a.py'], ['a.py'], []),
    ([entry()], '', ['a.py'], ['a.py'], ['dgxspark_site_patches needs dgxspark_site_patches_dir']),
    ([entry()], 'BASE', [], ['p.py'], []),
    ([entry()], 'BASE', ['a.py'], ['p.py', 'a.py'], []),  # the site's first, then the profile's
    ([entry(sha256='0' * 64)], 'BASE', ['a.py'], ['a.py'], ['dgxspark_site_patches[0]: sha256 mismatch for patches/p.py']),
    ([entry(kind='shell'), entry(reason=None)], 'BASE', [], [],  # every problem at once
     ["dgxspark_site_patches[0]: kind 'shell' is not one of", 'dgxspark_site_patches[1]: reason is required',
      'dgxspark_site_patches: two patches named p.py']),
    ([entry()], 'BASE', ['p.py'], ['p.py', 'p.py'], ['dgxspark_site_patches: p.py is also a patch of the model profile']),
])
def test_site_patches_come_before_the_profile_s(base, entries, site_dir, profile_names, expected_names, expected):
    profile = [{'name': name, 'origin': 'profile m'} for name in profile_names]
    patches, problems = ps.site_patches(entries, base if site_dir == 'BASE' else site_dir, profile)
    assert [p['name'] for p in patches] == expected_names
    assert len(problems) == len(expected), problems
    for fragment, problem in zip(expected, problems):
        assert problem.startswith(fragment), problem
    for patch in patches[:len(entries or [])] if not problems else []:
        assert patch['origin'] == 'dgxspark_site_patches' and patch['source'] == os.path.join(base, 'patches', 'p.py')


def test_a_site_patch_outside_the_image_vllm_is_refused_naming_the_inventory():
    patches = [{'file': 'lab.py', 'vllm': '>=0.32,<0.33', 'origin': 'dgxspark_site_patches'},
               {'file': 'p.py', 'vllm': '>=0.11', 'origin': 'profile m'}]
    assert ps.version_problems('m', patches, '0.32.0+cpu') == []
    assert ps.version_problems('m', patches, '0.33.0') == [
        'dgxspark_site_patches: patch lab.py applies to vLLM >=0.32,<0.33, but the image has vLLM 0.33.0; refusing to start it']


def test_the_containers_run_every_sitecustomize_through_one_loader():
    patches = [{'kind': 'sitecustomize', 'node_path': 'sitecustomize/a.py', 'sha256': 'aa'},
               {'kind': 'python', 'node_path': 'b.py', 'sha256': 'bb'},
               {'kind': 'sitecustomize', 'node_path': 'sitecustomize/c.py', 'sha256': 'cc'}]
    assert ps.patch_container_env(patches) == {
        'DGXSPARK_PATCH_DIR': '/opt/dgxspark/patches',
        'DGXSPARK_PATCHES': 'sitecustomize:sitecustomize/a.py:aa python:b.py:bb sitecustomize:sitecustomize/c.py:cc',
        'PYTHONPATH': '/opt/dgxspark/patches/site'}
    assert ps.patch_container_env(patches[1:2]) == {
        'DGXSPARK_PATCH_DIR': '/opt/dgxspark/patches', 'DGXSPARK_PATCHES': 'python:b.py:bb'}
    assert ps.patch_container_env([]) == {}


_SITE = {'kind': 'sitecustomize', 'node_path': 'sitecustomize/a.py'}
_PYTHON = {'kind': 'python', 'node_path': 'b.py'}


@pytest.mark.parametrize('patches,base_dir,expected', [
    ([], '', []),
    (None, '/etc/dgxspark/patches', []),
    ([_PYTHON], '', ['b.py', 'dgxspark-apply-patches.sh']),
    ([_SITE, _PYTHON], '', ['sitecustomize/a.py', 'b.py', 'dgxspark-apply-patches.sh', 'site/sitecustomize.py']),
    ([_SITE], '/etc/dgxspark/patches', ['/etc/dgxspark/patches/sitecustomize/a.py',
                                        '/etc/dgxspark/patches/dgxspark-apply-patches.sh',
                                        '/etc/dgxspark/patches/site/sitecustomize.py']),
])
def test_the_files_a_node_keeps_for_the_patches(patches, base_dir, expected):
    assert ps.patch_node_files(patches, base_dir) == expected


def test_a_patch_without_its_node_path_is_a_filter_error():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.dgxspark.cluster.plugins.filter import profile_patches
    with pytest.raises(AnsibleFilterError, match="patch_node_files: a patch lacks 'node_path'"):
        profile_patches.patch_node_files([{'kind': 'python'}])


def test_every_profile_field_is_documented():
    path = os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'profiles.md')
    with open(path, encoding='utf-8') as handle:
        text = handle.read()
    for name, _types, _required, _doc in ps.PROFILE_FIELDS:
        assert '`%s`' % name in text, name
    for key in ps.PATCH_KEYS + ps.PATCH_KINDS:
        assert '`%s`' % key in text, key
