"""The ray_cluster role's patch directory on a node (module_utils/profile_patch_files.py, the module profile_patch_files)
and its action's controller part (plugins/action/profile_patch_files.py), over the real files: the seed 003 profile's
cuDNN sitecustomize patch, the role's apply script and sitecustomize loader, under tmp_path."""
import hashlib
import json
import os
import stat
import subprocess
import sys
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.dgxspark.cluster.plugins.action import profile_patch_files as action
from ansible_collections.dgxspark.cluster.plugins.action.profile_patch_files import patch_contents
from ansible_collections.dgxspark.cluster.plugins.module_utils.profile_patch_files import PatchFilesError, relative_path, sync
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.profile_schema import carried_patches

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COLLECTIONS = os.path.join(REPO, '.build', 'collections')
ROLE_FILES = os.path.join(REPO, 'roles', 'ray_cluster', 'files')
PROFILES = os.path.join(REPO, 'profiles', 'models')
CUDNN = 'sitecustomize/cudnn_off_sitecustomize.py'


def text(path):
    with open(path, encoding='utf-8') as handle:
        return handle.read()


PATCH = text(os.path.join(PROFILES, 'patches', 'cudnn_off_sitecustomize.py'))
SCRIPT = text(os.path.join(ROLE_FILES, 'dgxspark-apply-patches.sh'))
LOADER = text(os.path.join(ROLE_FILES, 'dgxspark-sitecustomize.py'))
# What the action passes for the seed 003 profile: its patch, the apply script, the loader.
FILES = {CUDNN: PATCH, 'dgxspark-apply-patches.sh': SCRIPT, 'site/sitecustomize.py': LOADER}
ME = (os.getuid(), os.getgid())


def tree(root):
    """``{path under root: (text, mode)}`` of every file, and the mode of every directory (as ``(None, mode)``)."""
    found = {}
    for base, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(base, name)
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            found[os.path.relpath(path, root)] = (None if name in dirs else text(path), mode)
    return found


def lay_out(root, files, mode=0o644):
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        path.write_text(content)
        path.chmod(mode)


@pytest.mark.parametrize('before, files, written, removed', [
    # a fresh node: the directory, its two subdirectories, the three files
    (None, FILES, sorted(FILES), []),
    # converged: nothing to do
    (FILES, FILES, [], []),
    # the patch of an earlier profile (and an unknown file in a subdirectory) go; the rest stays
    (dict(FILES, **{'old_patch.py': 'import os\n', 'sitecustomize/old.py': 'x = 1\n'}), FILES, [], ['old_patch.py', 'sitecustomize/old.py']),
    # a patch whose content changed is rewritten
    (dict(FILES, **{CUDNN: PATCH + '# edited\n'}), FILES, [CUDNN], []),
    # a profile without patches: the directory is emptied (its subdirectories stay)
    (FILES, {}, [], sorted(FILES)),
])
def test_sync(tmp_path, before, files, written, removed):
    root = tmp_path / 'patches'
    if before is not None:
        root.mkdir(mode=0o755)
        lay_out(root, before)
    was = tree(root) if before is not None else {}
    # check mode: says the same, writes nothing
    checked = sync(str(root), files, check_mode=True, uid=ME[0], gid=ME[1])
    assert (tree(root) if root.exists() else {}) == was
    result = sync(str(root), files, uid=ME[0], gid=ME[1])
    for one in (checked, result):
        assert one['written'] == [str(root / name) for name in written]
        assert one['removed'] == [str(root / name) for name in removed]
        assert one['changed'] == bool(written or removed or before is None)
        assert [d['before_header'] for d in one['diff']] == one['written'] + one['removed']
    assert tree(root) == dict((name, (content, 0o644)) for name, content in files.items()) | dict(
        (d, (None, 0o755)) for d in ('site', 'sitecustomize') if before is not None or files)
    # a second run has nothing to do
    again = sync(str(root), files, uid=ME[0], gid=ME[1])
    assert not again['changed'] and again['diff'] == []


def test_the_diff_shows_what_changes(tmp_path):
    root = tmp_path / 'patches'
    lay_out(root, {CUDNN: 'old\n', 'gone.py': 'gone\n'})
    result = sync(str(root), {CUDNN: PATCH}, check_mode=True, uid=ME[0], gid=ME[1])
    assert result['diff'] == [{'before_header': str(root / CUDNN), 'after_header': str(root / CUDNN), 'before': 'old\n', 'after': PATCH},
                              {'before_header': str(root / 'gone.py'), 'after_header': str(root / 'gone.py'), 'before': 'gone\n',
                               'after': ''}]


def test_a_mode_alone_is_fixed(tmp_path):
    root = tmp_path / 'patches'
    root.mkdir(mode=0o700)
    root.chmod(0o700)
    lay_out(root, {'a.py': 'a\n'}, mode=0o600)
    result = sync(str(root), {'a.py': 'a\n'}, uid=ME[0], gid=ME[1])
    assert result['written'] == [str(root / 'a.py')] and result['directories'] == [str(root)]
    assert tree(root) == {'a.py': ('a\n', 0o644)} and stat.S_IMODE(root.stat().st_mode) == 0o755


@pytest.mark.parametrize('name', ['/etc/passwd', '../escape.py', 'a/../../escape.py', '', '.'])
def test_a_path_outside_the_directory_is_refused(name):
    with pytest.raises(PatchFilesError, match='is not a path under the patch directory'):
        relative_path(name)


def test_a_file_in_the_way_of_a_directory_is_refused(tmp_path):
    root = tmp_path / 'patches'
    lay_out(root, {'site': 'not a directory\n'})
    with pytest.raises(PatchFilesError, match='site is in the way of a directory of the patches'):
        sync(str(root), FILES, uid=ME[0], gid=ME[1])


# --- the action's controller part ------------------------------------------------------------------------------------

def plan_patches(directory, entries):
    return carried_patches(entries, str(directory), 'profile test')


def find_role_file(name):
    return os.path.join(ROLE_FILES, name)


def test_the_action_reads_the_patches_and_the_role_files_they_need():
    sha = hashlib.sha256(PATCH.encode('utf-8')).hexdigest()
    patches = plan_patches(PROFILES, [{'file': 'patches/cudnn_off_sitecustomize.py', 'sha256': sha, 'kind': 'sitecustomize'}])
    assert patch_contents(patches, find_role_file) == FILES
    assert patch_contents([], find_role_file) == {}


def test_the_action_adds_no_loader_without_a_sitecustomize(tmp_path):
    (tmp_path / 'fix.py').write_text('print(1)\n')
    patches = plan_patches(tmp_path, [{'file': 'fix.py', 'kind': 'python',
                                       'sha256': hashlib.sha256(b'print(1)\n').hexdigest()}])
    assert patch_contents(patches, find_role_file) == {'fix.py': 'print(1)\n', 'dgxspark-apply-patches.sh': SCRIPT}


@pytest.mark.parametrize('content, sha, message', [
    ('print(2)\n', hashlib.sha256(b'print(1)\n').hexdigest(),
     r'^profile_patch_files: the patch .*/fix.py has sha256 [0-9a-f]{64}, but the profile says [0-9a-f]{64}: the file changed'),
    (None, 'a' * 64, r'^profile_patch_files: cannot read the patch .*/fix.py: '),
    (b'\xff\xfe', hashlib.sha256(b'\xff\xfe').hexdigest(), r'^profile_patch_files: the patch .*/fix.py is not UTF-8 text'),
])
def test_the_action_refuses_a_patch_that_is_not_the_profiles(tmp_path, content, sha, message):
    if content is not None:
        (tmp_path / 'fix.py').write_bytes(content if isinstance(content, bytes) else content.encode())
    patches = plan_patches(tmp_path, [{'file': 'fix.py', 'kind': 'python', 'sha256': sha}])
    with pytest.raises(AnsibleActionFail, match=message):
        patch_contents(patches, find_role_file)


def test_the_action_runs_the_module_with_the_contents():
    task = mock.MagicMock()
    task.args = {'directory': '/etc/dgxspark/patches', 'patches': plan_patches(PROFILES, [
        {'file': 'patches/cudnn_off_sitecustomize.py', 'kind': 'sitecustomize', 'sha256': hashlib.sha256(PATCH.encode()).hexdigest()}])}
    task.async_val = 0
    task.check_mode = False
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    plugin = action.ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    with mock.patch.object(plugin, '_find_needle', side_effect=lambda kind, name: find_role_file(name)), \
            mock.patch.object(plugin, '_execute_module', return_value={'changed': True, 'written': ['x']}) as module:
        result = plugin.run(task_vars={})
    assert result['changed'] and result['written'] == ['x']
    assert module.call_args.kwargs['module_name'] == 'dgxspark.cluster.profile_patch_files'
    assert module.call_args.kwargs['module_args'] == {'directory': '/etc/dgxspark/patches', 'files': FILES}


# --- the module, as Ansible runs it ----------------------------------------------------------------------------------

def run_module(args):
    args_file = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'args-profile_patch_files-%d.json' % os.getpid())
    with open(args_file, 'w', encoding='utf-8') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, handle)
    try:
        proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.profile_patch_files',
                               args_file], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=COLLECTIONS),
                              timeout=60, check=False)
    finally:
        os.unlink(args_file)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')][-1]


@pytest.mark.skipif(os.getuid() != 0, reason='the module writes files owned by root')
def test_the_module_writes_removes_and_diffs(tmp_path):
    root = tmp_path / 'patches'
    lay_out(root, {'old.py': 'old\n'})
    checked = run_module({'directory': str(root), 'files': FILES, '_ansible_check_mode': True, '_ansible_diff': True})
    assert checked['changed'] and checked['removed'] == [str(root / 'old.py')] and len(checked['diff']) == 4
    assert tree(root) == {'old.py': ('old\n', 0o644)}
    done = run_module({'directory': str(root), 'files': FILES})
    assert done['changed'] and len(done['written']) == 3 and 'diff' not in done
    assert not run_module({'directory': str(root), 'files': FILES})['changed']
    refused = run_module({'directory': str(root), 'patches': [{'source': '/x'}]})
    assert refused['failed'] and 'reads the patches through its action plugin' in refused['msg']
