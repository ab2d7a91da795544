"""vLLM's compile cache belongs to one release (issue 49, item 9): emptied, marker written, when another release starts
(a deploy's new one, a rollback); kept for the same release; check mode and diff through the module as Ansible runs it."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import vllm_cache

HERE = os.path.dirname(os.path.abspath(__file__))
COLLECTIONS_PATH = os.path.abspath(os.path.join(HERE, '..', '..', '.build', 'collections'))
CACHE = '/var/cache/dgxspark/vllm'


def spec(name, cache=CACHE, **env):
    if cache is not None:
        env['VLLM_CACHE_ROOT'] = cache
    return {'name': name, 'env': env}


@pytest.mark.parametrize('specs, expected', [
    # the head with Ray: its Ray and vLLM containers mount the same directory
    ([spec('dgxspark-ray'), spec('dgxspark-vllm')], [CACHE]),
    # a Ray worker (no vLLM container: the plan's null) and a release recorded with a path spelled otherwise
    ([spec('dgxspark-ray', CACHE + '/'), None], [CACHE]),
    # two directories (a Ray container of an older inventory), sorted
    ([spec('dgxspark-ray', '/srv/vllm-cache'), spec('dgxspark-vllm')], ['/srv/vllm-cache', CACHE]),
    # no VLLM_CACHE_ROOT (ray_cluster_vllm_cache_dir empty): nothing to empty
    ([spec('dgxspark-ray', None, RAY_ADDRESS='x'), spec('dgxspark-vllm', '')], []),
    ([], []),
])
def test_the_cache_directories_are_those_the_containers_mount(specs, expected):
    assert vllm_cache.cache_dirs(specs) == expected


@pytest.mark.parametrize('specs, error', [
    ([spec('dgxspark-vllm', 'relative/cache')], "VLLM_CACHE_ROOT='relative/cache' of container dgxspark-vllm is not an absolute"),
    ([spec('dgxspark-vllm', '/')], "VLLM_CACHE_ROOT='/' of container dgxspark-vllm is not an absolute directory below /"),
    ([spec('dgxspark-vllm', '/var/..')], "VLLM_CACHE_ROOT='/var/..' of container dgxspark-vllm"),
    (['dgxspark-vllm'], "a serving container spec without an environment mapping: 'dgxspark-vllm'"),
    ([{'name': 'x', 'env': ['VLLM_CACHE_ROOT=/x']}], 'a serving container spec without an environment mapping'),
])
def test_a_cache_directory_that_cannot_be_emptied_safely_is_refused(specs, error):
    with pytest.raises(vllm_cache.VllmCacheError, match=error.replace('(', r'\(').replace(')', r'\)')):
        vllm_cache.cache_dirs(specs)


@pytest.mark.parametrize('previous, release, outcome', [
    (None, 'a1', 'missing'),     # no directory yet: Docker makes it when it mounts it
    ('', 'a1', 'emptied'),       # a cache of no known release (before this collection marked it)
    ('a0', 'a1', 'emptied'),     # a new release, or a rollback to an older one
    ('a1', 'a1', 'kept'),        # the same release again (a restart, a re-run)
])
def test_what_becomes_of_a_cache_when_a_release_starts(previous, release, outcome):
    assert vllm_cache.decide(previous, release) == outcome


def _cache_of(tmp_path, release):
    root = tmp_path / 'vllm'
    (root / 'torch_compile_cache' / 'abc').mkdir(parents=True)
    (root / 'torch_compile_cache' / 'abc' / 'artifact.py').write_text('written by the failed release')
    (root / 'modelinfos.json').write_text('{}')
    (root / 'outside-link').symlink_to(tmp_path / 'outside')
    (tmp_path / 'outside').mkdir()
    (tmp_path / 'outside' / 'kept').write_text('not the cache')
    if release is not None:
        (root / vllm_cache.MARKER).write_text(release + '\n')
    return root


def test_another_release_empties_the_directory_but_its_marker_and_follows_no_link(tmp_path):
    root = _cache_of(tmp_path, 'failed1')
    found = vllm_cache.apply([str(root)], 'proven0')
    assert found == {str(root): {'previous': 'failed1', 'outcome': 'emptied',
                                 'removed': ['modelinfos.json', 'outside-link', 'torch_compile_cache']}}
    assert sorted(os.listdir(root)) == [vllm_cache.MARKER]
    assert (root / vllm_cache.MARKER).read_text() == 'proven0\n'
    assert (tmp_path / 'outside' / 'kept').read_text() == 'not the cache'
    # The same release again (a supervisor's restart, a second run) keeps what its engine wrote since.
    (root / 'torch_compile_cache').mkdir()
    assert vllm_cache.apply([str(root)], 'proven0')[str(root)]['outcome'] == 'kept'
    assert sorted(os.listdir(root)) == [vllm_cache.MARKER, 'torch_compile_cache']


def test_check_mode_empties_nothing(tmp_path):
    root = _cache_of(tmp_path, None)
    found = vllm_cache.apply([str(root)], 'proven0', check_mode=True)
    assert found[str(root)]['outcome'] == 'emptied' and found[str(root)]['previous'] == ''
    assert sorted(os.listdir(root)) == ['modelinfos.json', 'outside-link', 'torch_compile_cache']


@pytest.mark.parametrize('release, error', [('', 'the release the cache belongs to is empty'),
                                            ('  ', 'the release the cache belongs to is empty')])
def test_an_empty_release_is_refused(tmp_path, release, error):
    with pytest.raises(vllm_cache.VllmCacheError, match=error):
        vllm_cache.apply([str(tmp_path)], release)


def test_a_file_where_the_directory_should_be_is_refused(tmp_path):
    (tmp_path / 'vllm').write_text('')
    with pytest.raises(vllm_cache.VllmCacheError, match='vllm is not a directory'):
        vllm_cache.apply([str(tmp_path / 'vllm')], 'a1')


def _run_module(tmp_path, args):
    args_file = tmp_path / 'args.json'
    args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS_PATH + os.pathsep + os.environ.get('PYTHONPATH', ''))
    proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.vllm_cache',
                           str(args_file)], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120,
                          check=False)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith('{')]
    assert results, (proc.stdout, proc.stderr)
    return results[-1]


def test_the_module_empties_once_with_check_mode_and_diff(tmp_path):
    root = _cache_of(tmp_path, 'failed1')
    containers = [spec('dgxspark-ray', str(root)), spec('dgxspark-vllm', str(root)), None]
    checked = _run_module(tmp_path, {'containers': containers, 'release': 'proven0', '_ansible_check_mode': True,
                                     '_ansible_diff': True})
    assert checked['changed'] is True and len(os.listdir(root)) == 4
    assert checked['diff'] == [{'before_header': str(root), 'after_header': str(root), 'after': 'release: proven0\n',
                                'before': 'release: failed1\nmodelinfos.json\noutside-link\ntorch_compile_cache\n'}]
    done = _run_module(tmp_path, {'containers': containers, 'release': 'proven0'})
    assert done['changed'] is True and os.listdir(root) == [vllm_cache.MARKER]
    assert done['msg'] == "vLLM's cache emptied for release proven0: %s (release failed1, 3 entries)" % root
    again = _run_module(tmp_path, {'containers': containers, 'release': 'proven0'})
    assert again['changed'] is False and again['msg'] == "vLLM's cache kept: %s kept" % root
    failed = _run_module(tmp_path, {'containers': [spec('dgxspark-vllm', 'relative')], 'release': 'proven0'})
    assert failed['failed'] is True and failed['msg'].startswith("vLLM's cache: VLLM_CACHE_ROOT='relative'")
