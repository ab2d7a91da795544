"""Model manifests: hashing once at the source, the cheap comparison on a node, disk room, and the progress lines."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import (
    COPY_MARK,
    MANIFEST_NAME,
    PARTIAL_DIR,
    ManifestError,
    build,
    compare,
    disk_problem,
    human_bytes,
    validate,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils.transfer_progress import progress_line, verdict

MTIME_NS = 1700000000 * 10**9


def make_model(root, files, links=()):
    """A model directory like a Hugging Face snapshot: files {relpath: bytes}, symlinks (relpath, target)."""
    for rel, data in files.items():
        path = os.path.join(str(root), rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'wb') as handle:
            handle.write(data)
        os.utime(path, ns=(MTIME_NS, MTIME_NS))
    for rel, target in links:
        path = os.path.join(str(root), rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(target, path)
    return str(root)


SHARDS = {'model-00001-of-00002.safetensors': b'a' * 1000, 'model-00002-of-00002.safetensors': b'b' * 900,
          'model.safetensors.index.json': b'{"weight_map": {}}', 'config.json': b'{}'}


class CountingHasher:
    def __init__(self):
        self.read = []

    def __call__(self, path):
        self.read.append(os.path.basename(path))
        with open(path, 'rb') as handle:
            return hashlib.sha256(handle.read()).hexdigest()


def test_build_hashes_every_file_once_then_reuses_the_hashes(tmp_path):
    root = make_model(tmp_path / 'src', SHARDS)
    hasher = CountingHasher()
    manifest, hashed = build(root, None, hasher)
    assert sorted(hashed) == sorted(SHARDS) and len(hasher.read) == 4
    assert manifest['total_bytes'] == sum(len(v) for v in SHARDS.values())
    assert [f['path'] for f in manifest['files']] == sorted(SHARDS)
    again, rehashed = build(root, manifest, hasher)
    assert again == manifest and rehashed == [] and len(hasher.read) == 4


def test_build_rehashes_only_a_changed_file(tmp_path):
    root = make_model(tmp_path / 'src', SHARDS)
    manifest, _hashed = build(root, None)
    make_model(tmp_path / 'src', {'config.json': b'{"x": 1}'})
    os.utime(os.path.join(root, 'config.json'), ns=(MTIME_NS + 1, MTIME_NS + 1))
    _new, hashed = build(root, manifest)
    assert hashed == ['config.json']


def test_build_skips_the_collections_own_files_and_records_links(tmp_path):
    root = make_model(tmp_path / 'hub', {'blobs/abc': b'x' * 10, MANIFEST_NAME: b'{}', PARTIAL_DIR + '/blobs/abc': b'x'},
                      links=[('snapshots/rev1/model.safetensors', '../../blobs/abc')])
    manifest, _hashed = build(root, None)
    assert [f['path'] for f in manifest['files']] == ['blobs/abc']
    assert manifest['links'] == [{'path': 'snapshots/rev1/model.safetensors', 'target': '../../blobs/abc'}]


@pytest.mark.parametrize('make, message', [
    (lambda tmp: str(tmp / 'absent'), 'does not exist'),
    (lambda tmp: (os.makedirs(str(tmp / 'empty')), str(tmp / 'empty'))[1], 'has no files'),
])
def test_build_refuses_a_missing_or_empty_source(tmp_path, make, message):
    with pytest.raises(ManifestError, match=message):
        build(make(tmp_path), None)


def _node_copy(tmp_path, mutate):
    source = make_model(tmp_path / 'src', SHARDS, links=[('latest', 'config.json')])
    manifest, _hashed = build(source, None)
    node = make_model(tmp_path / 'node', SHARDS, links=[('latest', 'config.json')])
    mutate(node)
    return node, manifest


def _rm(rel):
    return lambda node: os.remove(os.path.join(node, rel))


def _write(rel, data, mtime_ns):
    def mutate(node):
        path = os.path.join(node, rel)
        with open(path, 'wb') as handle:
            handle.write(data)
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return mutate


SHARD1 = 'model-00001-of-00002.safetensors'


@pytest.mark.parametrize('mutate, missing, wrong, restamp, hashed, needed', [
    (lambda node: None, [], [], [], [], 0),
    (_rm(SHARD1), [SHARD1], [], [], [], 1000),
    (_write(SHARD1, b'a' * 999, MTIME_NS), [], [SHARD1], [], [], 1000),                     # truncated: size differs
    (_write(SHARD1, b'a' * 1000, MTIME_NS + 5), [], [], [SHARD1], [SHARD1], 0),            # touched: same content
    (_write(SHARD1, b'z' * 1000, MTIME_NS + 5), [], [SHARD1], [], [SHARD1], 1000),         # same size, other content
    (_write(SHARD1, b'z' * 1000, MTIME_NS), [], [], [], [], 0),                            # same size and mtime: trusted
])
def test_compare_reads_content_only_where_size_matches_and_mtime_does_not(tmp_path, mutate, missing, wrong, restamp, hashed,
                                                                          needed):
    node, manifest = _node_copy(tmp_path, mutate)
    result = compare(node, manifest)
    assert (result['missing'], result['wrong'], result['restamp'], result['hashed'], result['bytes_needed']) == (
        missing, wrong, restamp, hashed, needed)
    assert result['complete'] == (not (missing or wrong or restamp))


def test_compare_finds_a_wrong_symlink(tmp_path):
    def relink(node):
        os.remove(os.path.join(node, 'latest'))
        os.symlink('elsewhere', os.path.join(node, 'latest'))
    node, manifest = _node_copy(tmp_path, relink)
    result = compare(node, manifest)
    assert result['links_to_fix'] == ['latest'] and not result['complete']


@pytest.mark.parametrize('manifest, problem', [
    ({'files': [{'path': 'a', 'size': 1, 'mtime_ns': 1, 'sha256': 'x'}]}, None),
    ({}, 'mapping with a list of files'),
    ({'files': [{'path': 'a'}]}, 'lacks path, size'),
    ({'files': [{'path': '../etc/passwd', 'size': 1, 'mtime_ns': 1, 'sha256': 'x'}]}, 'leaves the model directory'),
    ({'files': [{'path': '/etc/passwd', 'size': 1, 'mtime_ns': 1, 'sha256': 'x'}]}, 'leaves the model directory'),
])
def test_validate(manifest, problem):
    problems = validate(manifest)
    assert (problems == []) if problem is None else (problem in ' '.join(problems))


@pytest.mark.parametrize('needed, reserve, free, expected', [
    (100 * 10**9, 0, 200 * 10**9, None),
    (100 * 10**9, 10 * 10**9, 105 * 10**9,
     'spark-gamma: not enough disk for the model at /data/m: 100.0 GB to copy + 10.0 GB kept free (distribute_reserve_bytes), '
     '105.0 GB free; free 5.0 GB there (or lower distribute_reserve_bytes)'),
    (2 * 10**9, 0, 10**9,
     'spark-gamma: not enough disk for the model at /data/m: 2.0 GB to copy, 1.0 GB free; free 1.0 GB there '
     '(or lower distribute_reserve_bytes)'),
])
def test_disk_problem_names_the_node_the_need_and_the_free_space(needed, reserve, free, expected):
    assert disk_problem('spark-gamma', '/data/m', needed, reserve, free) == expected


@pytest.mark.parametrize('count, text', [(0, '0 B'), (999, '999 B'), (1500, '1.5 KB'), (226 * 10**9, '226.0 GB'),
                                         (4 * 10**12, '4.0 TB')])
def test_human_bytes(count, text):
    assert human_bytes(count) == text


@pytest.mark.parametrize('progress, elapsed, line', [
    (None, 12, 'spark-beta: model waiting for the transfer to start (12s elapsed)'),
    ({'bytes': 10**9, 'total': 2 * 10**9}, 40,
     'spark-beta: model 1.0 GB of 2.0 GB (50%), 25.0 MB/s, about 40s left (40s elapsed)'),
    ({'bytes': 2 * 10**9, 'total': 2 * 10**9}, 80, 'spark-beta: model 2.0 GB of 2.0 GB (100%), 25.0 MB/s (1m20s elapsed)'),
    ({'bytes': 5 * 10**9, 'total': 0}, 100, 'spark-beta: model 5.0 GB, 50.0 MB/s (1m40s elapsed)'),
])
def test_progress_line(progress, elapsed, line):
    assert progress_line('spark-beta', 'model', progress, elapsed) == line


@pytest.mark.parametrize('progress, job, stalled, state, why', [
    ({'status': 'running'}, {'finished': 0}, 10, 'running', ''),
    ({'status': 'running'}, {'finished': 1, 'rc': 0}, 0, 'done', ''),
    ({'status': 'failed'}, {'finished': 1, 'rc': 1, 'stderr': 'no data from 192.168.100.12 for 120 s: ssh: connect timed out'},
     0, 'failed', 'no data from 192.168.100.12 for 120 s: ssh: connect timed out'),
    (None, {'finished': 0}, 301, 'failed', 'no progress for 300 s'),
    ({'status': 'done'}, None, 0, 'done', ''),
    ({'status': 'failed', 'error': 'the copy to 192.168.100.13 failed'}, None, 0, 'failed', 'the copy to 192.168.100.13 failed'),
    (None, None, 10, 'running', ''),
])
def test_verdict(progress, job, stalled, state, why):
    assert verdict(progress, job, stalled, 300) == (state, why)


def run_manifest_module(tmp_path, args):
    """model_manifest run as Ansible runs it."""
    collections = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), '.build', 'collections')
    args_file = tmp_path / 'args.json'
    args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.model_manifest', str(args_file)],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=collections), timeout=60, check=False)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')][-1]


@pytest.mark.parametrize('existed', [False, True], ids=['made-by-the-distribution', 'there-before'])
def test_a_copy_the_distribution_makes_is_marked_as_its_own_and_the_mark_is_not_part_of_the_model(tmp_path, existed):
    manifest, _hashed = build(make_model(tmp_path / 'source', SHARDS), None)
    node = tmp_path / 'node' / 'model'
    if existed:
        make_model(node, {'config.json': SHARDS['config.json']})
    result = run_manifest_module(tmp_path, {'path': str(node), 'manifest': manifest, 'state': 'prepared'})
    assert result['changed'] != existed and not result.get('failed'), result
    # Only a directory the distribution created may be removed later (serving_release): never one that was there.
    assert (node / COPY_MARK).exists() != existed
    make_model(node, SHARDS)
    assert compare(str(node), manifest)['missing'] == [] and compare(str(node), manifest)['wrong'] == []


def hf_cache_entry(tmp_path):
    """A Hugging Face cache entry as huggingface_hub 1.32 and later lays it out (sparkrun #299/#300): the snapshot's files
    are relative links into blobs/ (named by the content's sha256, as the Hub names LFS blobs), refs/main names the
    revision."""
    entry = tmp_path / 'hub' / 'models--org--tiny'
    contents = {'config.json': b'{"model_type": "qwen3"}', 'model.safetensors': os.urandom(4096),
                'tokenizer/vocab.json': b'{"a": 1}'}
    for rel, data in contents.items():
        blob = entry / 'blobs' / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = entry / 'snapshots' / ('0' * 40) / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(str(blob), str(link.parent)), str(link))
    (entry / 'refs').mkdir()
    (entry / 'refs' / 'main').write_text('0' * 40)
    return entry, contents


def test_a_snapshot_directory_of_links_into_the_blob_store_is_described_by_its_files_content(tmp_path):
    entry, contents = hf_cache_entry(tmp_path)
    snapshot = entry / 'snapshots' / ('0' * 40)
    manifest, hashed = build(str(snapshot), None)
    # Every link leaves the snapshot directory: each is the file it points to, with that file's content hash.
    assert manifest['links'] == []
    assert dict((f['path'], (f['size'], f['sha256'])) for f in manifest['files']) == dict(
        (rel, (len(data), hashlib.sha256(data).hexdigest())) for rel, data in contents.items())
    assert sorted(hashed) == sorted(contents)
    # A node that received the files (regular files, as the relay writes them) matches the manifest.
    copy = tmp_path / 'node'
    for rel, data in contents.items():
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_bytes(data)
        info = next(f for f in manifest['files'] if f['path'] == rel)
        os.utime(str(copy / rel), ns=(info['mtime_ns'], info['mtime_ns']))
    diff = compare(str(copy), manifest)
    assert (diff['missing'], diff['wrong'], diff['links_to_fix']) == ([], [], [])


def test_the_cache_entry_itself_keeps_its_links_and_sends_only_the_blobs(tmp_path):
    entry, contents = hf_cache_entry(tmp_path)
    manifest, _hashed = build(str(entry), None)
    assert sorted(f['path'] for f in manifest['files']) == sorted(
        ['blobs/' + hashlib.sha256(data).hexdigest() for data in contents.values()] + ['refs/main'])
    assert sorted(link['path'] for link in manifest['links']) == sorted('snapshots/%s/%s' % ('0' * 40, rel) for rel in contents)


def test_a_link_to_a_blob_that_is_gone_is_refused_with_the_fix(tmp_path):
    entry, contents = hf_cache_entry(tmp_path)
    os.remove(str(entry / 'blobs' / hashlib.sha256(contents['config.json']).hexdigest()))
    with pytest.raises(ManifestError, match=r'config.json in the model directory .* is a link to .*, which does not exist: the '
                                            r'model is incomplete .* download it again'):
        build(str(entry / 'snapshots' / ('0' * 40)), None)


def test_a_link_to_a_directory_outside_is_refused(tmp_path):
    entry, _contents = hf_cache_entry(tmp_path)
    os.symlink(str(entry / 'blobs'), str(entry / 'snapshots' / ('0' * 40) / 'more'))
    with pytest.raises(ManifestError, match=r'more in the model directory .* is a link to the directory .*blobs, outside it'):
        build(str(entry / 'snapshots' / ('0' * 40)), None)


@pytest.mark.parametrize('check_mode', [False, True], ids=['run', 'check-mode'])
def test_a_prepared_copy_lists_what_it_lacks_for_the_relay_in_manifest_order(tmp_path, check_mode):
    manifest, _hashed = build(make_model(tmp_path / 'source', SHARDS), None)
    node = make_model(tmp_path / 'node', {'config.json': SHARDS['config.json'],  # right: not listed
                                          'model-00002-of-00002.safetensors': b'x' * 10})  # wrong size: listed again
    entries = tmp_path / 'model-entries.json'
    args = {'path': node, 'manifest': manifest, 'state': 'prepared', 'entries': str(entries), '_ansible_check_mode': check_mode}
    result = run_manifest_module(tmp_path, args)
    assert result['changed'] and not result.get('failed'), result
    if check_mode:
        assert not entries.exists()
        return
    listed = json.loads(entries.read_text())
    assert [entry['path'] for entry in listed] == ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors',
                                                   'model.safetensors.index.json']
    assert listed == [entry for entry in manifest['files'] if entry['path'] in set(e['path'] for e in listed)]
    assert oct(entries.stat().st_mode & 0o777) == '0o600'
    # Once prepared (the wrong file removed: now missing), the same run again lists the same files and changes nothing.
    again = run_manifest_module(tmp_path, args)
    assert json.loads(entries.read_text()) == listed and again['changed'] is False, again


@pytest.mark.parametrize('files, reserve, problem', [
    (SHARDS, 0, ''),
    ({}, 0, ''),
    ({}, 10 ** 18, 'spark-beta: not enough disk for the model at {dir}: 1.9 KB to copy + 1000000.0 TB kept free'),
], ids=['complete', 'empty, with room', 'empty, no room'])
def test_check_compares_a_copy_and_names_a_node_without_room(tmp_path, files, reserve, problem):
    from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import check
    manifest, _hashed = build(make_model(tmp_path / 'source', SHARDS), None)
    node = make_model(tmp_path / 'node', files) if files else str(tmp_path / 'absent')
    found = check(node, manifest, reserve, 'spark-beta')
    assert found['complete'] == (files == SHARDS)
    assert found['bytes_needed'] == (0 if files else manifest['total_bytes'])
    assert found['disk_problem'].startswith(problem.format(dir=node)) and bool(found['disk_problem']) == bool(problem)
    with pytest.raises(ManifestError, match='^invalid manifest: '):
        check(node, {'files': [{'path': '../x', 'size': 1, 'mtime_ns': 1, 'sha256': 'a'}]})
