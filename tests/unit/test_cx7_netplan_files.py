"""The cx7_netplan role's two files on a node (module_utils/cx7_netplan_files.py, the module cx7_netplan_files) over real
formats: the netplan file and sysctl drop-in the role renders (plugin_utils/netplan.py), the lab node's management netplan
file (lab/labctl/ssh.py) and an Ubuntu cloud-init one (fixtures/cx7_netplan/), under tmp_path; `netplan generate` is a
stand-in that records the scratch root it was given (the real one runs in tests/lab/test_cx7_netplan_generate.py)."""
import grp
import json
import os
import pwd
import stat
import subprocess
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.cx7_netplan_files import (
    NetplanFilesError,
    file_state,
    generate,
    other_netplan_files,
    present,
    restored,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.netplan import node_config

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, 'fixtures', 'cx7_netplan')
COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(HERE)), '.build', 'collections')
PLAN = {
    'mtu': 9000,
    'rails': [{'name': 'rail1', 'interface': 'enp1s0f1np1', 'subnet': '192.168.100.0/24', 'prefixlen': 24, 'address_offset': 10},
              {'name': 'rail2', 'interface': 'enP2p1s0f1np1', 'subnet': '192.168.101.0/24', 'prefixlen': 24, 'address_offset': 10}],
    'nodes': [{'host': h, 'rank': i, 'rail_addresses': {'rail1': '192.168.100.%d' % (10 + i), 'rail2': '192.168.101.%d' % (10 + i)}}
              for i, h in enumerate(['spark-alpha', 'spark-beta'])],
}
CONFIG = node_config(PLAN, 'spark-alpha')
OLD_CONFIG = node_config(dict(PLAN, mtu=1500), 'spark-alpha')
ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name
OTHER_USER = 'nobody' if ME != 'nobody' else 'root'


def fixture_text(name):
    with open(os.path.join(FIXTURES, name), encoding='utf-8') as handle:
        return handle.read()


MGMT = fixture_text('lab-mgmt-netplan.txt')
CLOUD_INIT = fixture_text('cloud-init-netplan.txt')


def specs(root, content=CONFIG['content'], sysctl=CONFIG['sysctl_content']):
    """The role's two file specs under ``root`` (etc/netplan, etc/sysctl.d), owned by whoever runs the test."""
    return {'netplan': {'path': str(root / 'etc/netplan/40-cx7.yaml'), 'content': content, 'mode': '0600', 'owner': ME, 'group': MY_GROUP},
            'sysctl': {'path': str(root / 'etc/sysctl.d/90-dgxspark-cx7-ipv6.conf'), 'content': sysctl, 'mode': '0644', 'owner': ME,
                       'group': MY_GROUP}}


def put(path, text, mode=0o600):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def mode_of(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


# --- what writing a file would do -------------------------------------------------------------------------------------

@pytest.mark.parametrize('current, mode, owner, expected', [
    # converged: nothing to write
    (CONFIG['content'], 0o600, ME, {'exists': True, 'differs': False, 'write': False, 'previous': CONFIG['content']}),
    # no file yet
    (None, None, ME, {'exists': False, 'differs': True, 'write': True, 'previous': None}),
    # the configuration of an earlier run (MTU 1500): rewritten, its content kept for the backup and the rollback
    (OLD_CONFIG['content'], 0o600, ME, {'exists': True, 'differs': True, 'write': True, 'previous': OLD_CONFIG['content']}),
    # same content, wrong mode or owner: rewritten, nothing to back up
    (CONFIG['content'], 0o644, ME, {'exists': True, 'differs': False, 'write': True, 'previous': CONFIG['content']}),
    (CONFIG['content'], 0o600, OTHER_USER, {'exists': True, 'differs': False, 'write': True, 'previous': CONFIG['content']}),
], ids=['converged', 'absent', 'other-mtu', 'mode', 'owner'])
def test_file_state(tmp_path, current, mode, owner, expected):
    spec = dict(specs(tmp_path)['netplan'], owner=owner)
    if current is not None:
        put(tmp_path / 'etc/netplan/40-cx7.yaml', current, mode)
    assert file_state(spec) == dict(expected, path=spec['path'])


def test_file_state_of_a_link_and_of_what_cannot_be_read(tmp_path):
    spec = specs(tmp_path)['netplan']
    put(tmp_path / 'elsewhere.yaml', CONFIG['content'])
    (tmp_path / 'etc/netplan').mkdir(parents=True)
    os.symlink(str(tmp_path / 'elsewhere.yaml'), spec['path'])
    # a link, even to the same content, is replaced by the file
    assert file_state(spec) == {'path': spec['path'], 'exists': True, 'differs': True, 'write': True, 'previous': CONFIG['content']}
    os.unlink(spec['path'])
    (tmp_path / 'etc/netplan/40-cx7.yaml').write_bytes(b'\xff\xfe not text')
    with pytest.raises(NetplanFilesError, match='cannot read .*40-cx7.yaml .*remove it and run again'):
        file_state(spec)


# --- the other netplan files ------------------------------------------------------------------------------------------

def test_other_netplan_files_in_netplans_order_without_the_roles_own(tmp_path):
    dirs = [str(tmp_path / d) for d in ('etc/netplan', 'run/netplan', 'lib/netplan')]
    put(tmp_path / 'etc/netplan/50-cloud-init.yaml', CLOUD_INIT)
    put(tmp_path / 'etc/netplan/01-dgxspark-lab-mgmt.yaml', MGMT)
    put(tmp_path / 'etc/netplan/40-cx7.yaml', OLD_CONFIG['content'])            # the role's own
    put(tmp_path / 'etc/netplan/.hidden.yaml', MGMT)                            # not read, as find leaves hidden files
    put(tmp_path / 'etc/netplan/99-notes.yml', MGMT)                            # netplan reads *.yaml only
    put(tmp_path / 'run/netplan/90-nm.yaml', 'network: [\n')                     # kept as it is: the preflight says it cannot be parsed
    os.symlink(str(tmp_path / 'etc/netplan/50-cloud-init.yaml'), str(tmp_path / 'run/netplan/60-link.yaml'))  # not a regular file
    (tmp_path / 'run/netplan/70-dir.yaml').mkdir()
    found = other_netplan_files(str(tmp_path / 'etc/netplan/../netplan/40-cx7.yaml'), dirs)
    assert found == [{'path': dirs[0] + '/01-dgxspark-lab-mgmt.yaml', 'content': MGMT},
                     {'path': dirs[0] + '/50-cloud-init.yaml', 'content': CLOUD_INIT},
                     {'path': dirs[1] + '/90-nm.yaml', 'content': 'network: [\n'}]


# --- netplan generate on a scratch root -------------------------------------------------------------------------------

def test_generate_sees_the_other_files_and_the_candidate_in_a_scratch_root_that_goes_afterwards(tmp_path):
    others = [{'path': '/etc/netplan/01-dgxspark-lab-mgmt.yaml', 'content': MGMT}, {'path': '/lib/netplan/50-cloud-init.yaml', 'content': CLOUD_INIT}]
    seen = {}

    def run(argv):
        root = argv[-1]
        seen['argv'] = argv
        seen['files'] = dict((os.path.relpath(os.path.join(d, f), root), (open(os.path.join(d, f), encoding='utf-8').read(),
                                                                          oct(mode_of(os.path.join(d, f)))))
                             for d, _dirs, files in os.walk(root) for f in files)
        return 1, '', '/etc/netplan/40-cx7.yaml:9:11: Error in network definition: address without prefix length\n'

    result = generate('/usr/sbin/netplan', '40-cx7.yaml', CONFIG['content'], others, run)
    assert seen['argv'][:3] == ['/usr/sbin/netplan', 'generate', '--root-dir'] and seen['argv'][3].endswith('.cx7_netplan')
    assert seen['files'] == {'etc/netplan/01-dgxspark-lab-mgmt.yaml': (MGMT, '0o600'), 'lib/netplan/50-cloud-init.yaml': (CLOUD_INIT, '0o600'),
                             'etc/netplan/40-cx7.yaml': (CONFIG['content'], '0o600')}
    assert result == {'rc': 1, 'stdout': '', 'cmd': seen['argv'],
                      'stderr': '/etc/netplan/40-cx7.yaml:9:11: Error in network definition: address without prefix length\n'}
    assert not os.path.exists(seen['argv'][3])


def test_generate_without_netplan_says_so():
    result = generate(None, '40-cx7.yaml', CONFIG['content'], [], None)
    assert result['rc'] == 127 and 'netplan is not installed' in result['stderr']


# --- write, back up, restore -----------------------------------------------------------------------------------------

def test_present_writes_what_differs_backs_up_the_netplan_file_and_restored_puts_it_back(tmp_path):
    spec = specs(tmp_path)
    netplan, sysctl, backup = tmp_path / 'etc/netplan/40-cx7.yaml', tmp_path / 'etc/sysctl.d/90-dgxspark-cx7-ipv6.conf', tmp_path / 'backup'
    put(netplan, OLD_CONFIG['content'], 0o644)
    sysctl.parent.mkdir(parents=True)
    preview = present(spec, str(backup), check_mode=True)
    assert preview['changed'] and netplan.read_text() == OLD_CONFIG['content'] and not sysctl.exists() and not backup.exists()
    assert [(d['before_header'], d['before'], d['after']) for d in preview['diff']] == [
        (str(netplan), OLD_CONFIG['content'], CONFIG['content']), (str(sysctl), '', CONFIG['sysctl_content'])]
    written = present(spec, str(backup))
    assert written['changed'] and written['netplan']['changed'] and written['sysctl']['changed']
    assert written['previous'] == {'netplan': OLD_CONFIG['content'], 'sysctl': None}
    assert netplan.read_text() == CONFIG['content'] and mode_of(netplan) == 0o600
    assert sysctl.read_text() == CONFIG['sysctl_content'] and mode_of(sysctl) == 0o644
    assert written['backup'] == str(backup / '40-cx7.yaml') and (backup / '40-cx7.yaml').read_text() == OLD_CONFIG['content']
    assert mode_of(backup / '40-cx7.yaml') == 0o600 and mode_of(backup) == 0o700
    assert sorted(os.listdir(str(netplan.parent))) == ['40-cx7.yaml']       # no temporary file left beside it
    again = present(spec, str(backup))
    assert not again['changed'] and again['previous'] == {} and again['diff'] == [] and again['backup'] is None

    preview = restored(spec, written['previous'], check_mode=True)
    assert preview['changed'] and netplan.read_text() == CONFIG['content'] and sysctl.exists()
    back = restored(spec, written['previous'])
    assert back['restored'] == [str(netplan)] and back['removed'] == [str(sysctl)]
    assert back['msg'] == 'restored the previous %s; removed %s (there was none)' % (netplan, sysctl)
    assert netplan.read_text() == OLD_CONFIG['content'] and mode_of(netplan) == 0o600 and not sysctl.exists()
    assert restored(spec, written['previous']) == {'changed': False, 'restored': [], 'removed': [], 'diff': [], 'msg': 'nothing to restore'}


def test_a_mode_alone_is_fixed_without_a_backup(tmp_path):
    spec = specs(tmp_path)
    put(tmp_path / 'etc/netplan/40-cx7.yaml', CONFIG['content'], 0o644)
    put(tmp_path / 'etc/sysctl.d/90-dgxspark-cx7-ipv6.conf', CONFIG['sysctl_content'], 0o644)
    written = present(spec, str(tmp_path / 'backup'))
    assert written['changed'] and written['netplan']['changed'] and not written['sysctl']['changed']
    assert written['previous'] == {'netplan': CONFIG['content']} and written['backup'] is None and not (tmp_path / 'backup').exists()
    assert mode_of(tmp_path / 'etc/netplan/40-cx7.yaml') == 0o600


def test_a_write_that_fails_half_way_says_what_it_wrote_for_the_rollback(tmp_path):
    spec = specs(tmp_path)
    put(tmp_path / 'etc/netplan/40-cx7.yaml', OLD_CONFIG['content'])
    # no etc/sysctl.d: the drop-in cannot be written after the netplan file was
    with pytest.raises(NetplanFilesError, match='cannot write .*90-dgxspark-cx7-ipv6.conf: the directory .* does not exist') as failed:
        present(spec)
    assert failed.value.result['changed'] and failed.value.result['previous'] == {'netplan': OLD_CONFIG['content']}
    restored(spec, failed.value.result['previous'])
    assert (tmp_path / 'etc/netplan/40-cx7.yaml').read_text() == OLD_CONFIG['content']


# --- the module, as Ansible runs it ----------------------------------------------------------------------------------

def run_module(args, path=None):
    args_file = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'args-cx7_netplan_files-%d.json' % os.getpid())
    with open(args_file, 'w', encoding='utf-8') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, handle)
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    if path:
        env['PATH'] = path + os.pathsep + env.get('PATH', '')
    try:
        proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.cx7_netplan_files', args_file],
                              capture_output=True, text=True, env=env, timeout=60, check=False)
    finally:
        os.unlink(args_file)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')][-1]


def test_the_module_reads_validates_writes_and_restores(tmp_path):
    spec = specs(tmp_path)
    dirs = [str(tmp_path / d) for d in ('etc/netplan', 'run/netplan', 'lib/netplan')]
    put(tmp_path / 'etc/netplan/01-dgxspark-lab-mgmt.yaml', MGMT)
    (tmp_path / 'etc/sysctl.d').mkdir(parents=True)
    standin = tmp_path / 'bin'
    standin.mkdir()
    # A stand-in netplan: rejects the configuration unless the scratch root holds the candidate and the management file (at
    # its path under the scratch root: here under tmp_path).
    put(standin / 'netplan', '#!/bin/sh\n[ -f "$3/etc/netplan/40-cx7.yaml" ] && [ -f "$3%s/01-dgxspark-lab-mgmt.yaml" ] && exit 0\n'
                             'echo "no candidate" >&2; exit 1\n' % dirs[0], 0o755)
    read = run_module(dict(spec, netplan_dirs=dirs, _ansible_check_mode=True), path=str(standin))
    assert not read['changed'] and read['netplan'] == {'path': spec['netplan']['path'], 'exists': False, 'differs': True, 'write': True}
    assert read['others'] == [{'path': dirs[0] + '/01-dgxspark-lab-mgmt.yaml', 'content': MGMT}]
    assert read['generate']['rc'] == 0 and read['generate']['cmd'][0] == str(standin / 'netplan'), read['generate']
    written = run_module(dict(spec, state='present', backup_dir=str(tmp_path / 'backup'), _ansible_diff=True))
    assert written['changed'] and written['previous'] == {'netplan': None, 'sysctl': None} and len(written['diff']) == 2
    read = run_module(dict(spec, netplan_dirs=dirs), path=str(standin))
    assert not read['netplan']['write'] and not read['sysctl']['write'] and read['generate'] is None
    back = run_module(dict(spec, state='restored', previous=written['previous']))
    assert back['changed'] and back['removed'] == [spec['netplan']['path'], spec['sysctl']['path']] and 'diff' not in back
    refused = run_module(dict(spec, state='restored', previous={'other': None}))
    assert refused['failed'] and refused['msg'] == 'previous names other: only netplan and sysctl'
    refused = run_module(dict(specs(tmp_path, content=None), state='present'))
    assert refused['failed'] and refused['msg'] == 'state=present needs the content of netplan'
