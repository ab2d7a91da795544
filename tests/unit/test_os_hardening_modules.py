"""os_hardening's node-side modules over real formats: drop_caches (module_utils/drop_caches.py) over a /proc/meminfo read
on a Linux 6.x host (fixtures/os_hardening/meminfo.txt), docker_daemon_json (module_utils/docker_daemon_json.py) over the
lab node's daemon.json (lab/node/rootfs) and the one the NVIDIA Container Toolkit writes (`nvidia-ctk runtime configure`),
sysctl_runtime (module_utils/sysctl_runtime.py) over `systemd-analyze cat-config sysctl.d` of a lab node (systemd 252,
Debian 12) with the role's drop-in, alone and with a vendor file read after it, process_memory
(module_utils/process_memory.py) over /proc/PID/status of a user process and of a kernel thread, default_target
(module_utils/default_target.py) with a stand-in systemctl, installed_units (module_utils/installed_units.py) over
`systemctl show` of a lab node (systemd 252) with gdm (aliased gdm3) and lightdm installed. The modules run as Ansible
runs them, on files under tmp_path."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.docker_daemon_json import (
    DaemonJsonError, flag_conflicts, flag_names, merged, parse, render)
from ansible_collections.dgxspark.cluster.plugins.module_utils.installed_units import installed, parse_show
from ansible_collections.dgxspark.cluster.plugins.module_utils.process_memory import find, summary as process_summary, vmrss_kib
from ansible_collections.dgxspark.cluster.plugins.module_utils.drop_caches import DropCachesError, drop, parse_meminfo, summary
from ansible_collections.dgxspark.cluster.plugins.module_utils.sysctl_runtime import SysctlError, boot_value, normalized, proc_path

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, 'fixtures', 'os_hardening')
COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(HERE)), '.build', 'collections')


def fixture_text(name):
    with open(os.path.join(FIXTURES, name), encoding='utf-8') as handle:
        return handle.read()


MEMINFO = fixture_text('meminfo.txt')
MEMINFO_VALUES = dict((line.split(':')[0], int(line.split()[1])) for line in MEMINFO.splitlines())
LAB_DAEMON_JSON = fixture_text('daemon_lab.json')
NVIDIA_DAEMON_JSON = fixture_text('daemon_nvidia_ctk.json')
SHOW_DOCKER = fixture_text('systemctl_show_docker.txt')
SHOW_DOCKER_ABSENT = fixture_text('systemctl_show_docker_absent.txt')
CAT_CONFIG = fixture_text('sysctl_cat_config.txt')
CAT_CONFIG_OVERRIDDEN = fixture_text('sysctl_cat_config_overridden.txt')
MEMLOCK = {'default-ulimits': {'memlock': {'Name': 'memlock', 'Soft': -1, 'Hard': -1}}}


def with_memory(text, available_kib, cached_kib):
    """The meminfo text with MemAvailable and Cached replaced, in the kernel's column layout."""
    lines = []
    for line in text.splitlines():
        if line.startswith('MemAvailable:'):
            line = 'MemAvailable:   %8d kB' % available_kib
        elif line.startswith('Cached:'):
            line = 'Cached:         %8d kB' % cached_kib
        lines.append(line)
    return '\n'.join(lines) + '\n'


def run_module(name, args):
    args_file = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'args-%s-%d.json' % (name, os.getpid()))
    with open(args_file, 'w', encoding='utf-8') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, handle)
    try:
        proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.' + name, args_file],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=COLLECTIONS), timeout=60,
                              check=False)
    finally:
        os.unlink(args_file)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')][-1]


# --- drop_caches -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('text, expected', [
    (MEMINFO, {'MemAvailable': MEMINFO_VALUES['MemAvailable'], 'Cached': MEMINFO_VALUES['Cached']}),
    # SwapCached and Active(file) are not Cached; the order of the lines does not matter.
    (with_memory(MEMINFO, 123456789, 42), {'MemAvailable': 123456789, 'Cached': 42}),
    ('Cached:         40123456 kB\nSwapCached:            7 kB\nMemAvailable:   98765432 kB\n',
     {'MemAvailable': 98765432, 'Cached': 40123456}),
])
def test_meminfo_gives_memavailable_and_cached_in_kib(text, expected):
    assert parse_meminfo(text) == expected


@pytest.mark.parametrize('text, missing', [
    ('MemTotal:       124485016 kB\nCached:          1658908 kB\n', 'MemAvailable'),
    ('MemAvailable:   98765432 kB\nSwapCached:            0 kB\n', 'Cached'),
    ('', 'MemAvailable or Cached'),
])
def test_meminfo_without_a_line_is_refused(text, missing):
    with pytest.raises(DropCachesError, match='no %s line' % missing):
        parse_meminfo(text)


@pytest.mark.parametrize('before, after, expected', [
    ((98765432, 40123456), (121234567, 1234567),
     'spark-alpha: MemAvailable 94.19 -> 115.62 GiB (+21.43 GiB); Cached 38.26 -> 1.18 GiB.'),
    # Memory taken by something else meanwhile: the change is negative and said so.
    ((10485760, 2097152), (9437184, 1048576), 'spark-alpha: MemAvailable 10.00 -> 9.00 GiB (-1.00 GiB); Cached 2.00 -> 1.00 GiB.'),
    ((10485760, 2097152), None, 'spark-alpha: would drop the page cache (check mode); MemAvailable 10.00 GiB, Cached 2.00 GiB now.'),
])
def test_summary_reports_gib_before_and_after(before, after, expected):
    def as_dict(pair):
        return None if pair is None else {'MemAvailable': pair[0], 'Cached': pair[1]}
    assert summary('spark-alpha', as_dict(before), as_dict(after)) == expected


@pytest.mark.parametrize('mode', [1, 2, 3])
def test_drop_syncs_first_then_writes_the_mode(tmp_path, mode):
    target = tmp_path / 'drop_caches'
    target.write_text('0\n')
    calls = []
    drop(mode, str(target), sync=lambda: calls.append(target.read_text()))
    assert calls == ['0\n'] and target.read_text() == '%d\n' % mode


@pytest.mark.parametrize('mode, path, message', [
    (4, None, r'takes 1 \(page cache\), 2 \(dentries and inodes\) or 3 \(both\), not 4'),
    (3, 'missing-dir/drop_caches', r'cannot set vm.drop_caches=3 \(.*missing-dir/drop_caches\): .*No such file'),
])
def test_drop_refuses_a_bad_mode_or_an_unwritable_file(tmp_path, mode, path, message):
    with pytest.raises(DropCachesError, match=message):
        drop(mode, str(tmp_path / (path or 'drop_caches')), sync=lambda: None)


def test_the_module_drops_reports_and_in_check_mode_drops_nothing(tmp_path):
    target, meminfo = tmp_path / 'drop_caches', tmp_path / 'meminfo'
    target.write_text('0\n')
    meminfo.write_text(MEMINFO)
    args = {'mode': 1, 'node': 'spark-beta', 'drop_caches_path': str(target), 'meminfo_path': str(meminfo)}
    preview = run_module('drop_caches', dict(args, _ansible_check_mode=True))
    assert preview['changed'] and preview['after'] is None and target.read_text() == '0\n'
    assert preview['msg'].startswith('spark-beta: would drop the page cache (check mode)')
    dropped = run_module('drop_caches', args)
    assert dropped['changed'] and target.read_text() == '1\n'
    assert dropped['before'] == dropped['after'] == parse_meminfo(MEMINFO)
    assert dropped['msg'].startswith('spark-beta: MemAvailable ') and '(+0.00 GiB)' in dropped['msg']


def test_the_module_fails_naming_vm_drop_caches_where_it_is_read_only(tmp_path):
    meminfo = tmp_path / 'meminfo'
    meminfo.write_text(MEMINFO)
    failed = run_module('drop_caches', {'node': 'spark-beta', 'drop_caches_path': str(tmp_path / 'ro' / 'drop_caches'),
                                        'meminfo_path': str(meminfo)})
    assert failed['failed'] and failed['msg'].startswith('spark-beta: cannot set vm.drop_caches=3 (')


# --- docker_daemon_json ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize('text, keys, expected', [
    # The lab node's file: every key kept, default-ulimits added.
    (LAB_DAEMON_JSON, MEMLOCK, dict(json.loads(LAB_DAEMON_JSON), **MEMLOCK)),
    # The NVIDIA runtime's file keeps its runtime.
    (NVIDIA_DAEMON_JSON, MEMLOCK, dict(json.loads(NVIDIA_DAEMON_JSON), **MEMLOCK)),
    # Another default ulimit is kept beside memlock; an older memlock is replaced.
    ('{"default-ulimits": {"nofile": {"Name": "nofile", "Soft": 1024, "Hard": 1024},'
     ' "memlock": {"Name": "memlock", "Soft": 8388608, "Hard": 8388608}}}', MEMLOCK,
     {'default-ulimits': {'nofile': {'Name': 'nofile', 'Soft': 1024, 'Hard': 1024}, 'memlock': MEMLOCK['default-ulimits']['memlock']}}),
    # A missing or empty file is an empty object.
    (None, MEMLOCK, MEMLOCK),
    ('\n  \n', MEMLOCK, MEMLOCK),
    # A value that is not an object is replaced whole.
    ('{"default-ulimits": []}', MEMLOCK, MEMLOCK),
])
def test_keys_are_merged_keeping_every_other_key(text, keys, expected):
    assert merged(parse(text), keys) == expected


@pytest.mark.parametrize('text, message', [
    ('{"storage-driver": "overlay2",', 'Expecting property name enclosed in double quotes'),
    ('["overlay2"]', 'is a JSON array, not an object'),
    ('"overlay2"', 'is a JSON string, not an object'),
    ('null', 'is a JSON null, not an object'),
    ('42', 'is a JSON number, not an object'),
])
def test_a_file_that_is_not_a_json_object_is_refused(text, message):
    with pytest.raises(DaemonJsonError, match=message):
        parse(text)


def test_render_is_what_to_nice_json_wrote():
    """The layout the role wrote with to_nice_json(indent=2): a file it wrote before stays byte for byte the same."""
    assert render({'b': {'y': 1, 'x': [1, 2]}, 'a': 'é'}) == (
        '{\n  "a": "\\u00e9",\n  "b": {\n    "x": [\n      1,\n      2\n    ],\n    "y": 1\n  }\n}\n')


def test_the_module_merges_with_diff_and_check_mode_then_changes_nothing(tmp_path):
    path = tmp_path / 'daemon.json'
    path.write_text(NVIDIA_DAEMON_JSON)
    path.chmod(0o600)
    args = {'path': str(path), 'merge': MEMLOCK}
    preview = run_module('docker_daemon_json', dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert preview['changed'] and path.read_text() == NVIDIA_DAEMON_JSON
    assert preview['diff']['before'] == NVIDIA_DAEMON_JSON and json.loads(preview['diff']['after']) == preview['config']
    written = run_module('docker_daemon_json', args)
    assert written['changed'] and json.loads(path.read_text()) == dict(json.loads(NVIDIA_DAEMON_JSON), **MEMLOCK)
    assert oct(path.stat().st_mode & 0o777) == '0o644'
    assert not run_module('docker_daemon_json', args)['changed']
    # The same data in another layout is left as it is.
    path.write_text(json.dumps(written['config']))
    assert not run_module('docker_daemon_json', dict(args, _ansible_diff=True))['changed']
    assert path.read_text() == json.dumps(written['config'])


def test_the_module_writes_a_missing_file_and_refuses_a_broken_one(tmp_path):
    path = tmp_path / 'daemon.json'
    created = run_module('docker_daemon_json', {'path': str(path), 'merge': MEMLOCK})
    assert created['changed'] and json.loads(path.read_text()) == MEMLOCK
    path.write_text('{"storage-driver": "overlay2",')
    refused = run_module('docker_daemon_json', {'path': str(path), 'merge': MEMLOCK})
    assert refused['failed'] and refused['msg'].startswith('%s is not a valid JSON object (' % path)
    assert 'it was not changed' in refused['msg'] and path.read_text() == '{"storage-driver": "overlay2",'


@pytest.mark.parametrize('key, flags', [
    ('default-ulimits', ['--default-ulimits', '--default-ulimit']),
    ('insecure-registries', ['--insecure-registries', '--insecure-registry']),
    ('storage-driver', ['--storage-driver']),
])
def test_flag_names_of_a_daemon_json_key(key, flags):
    assert flag_names(key) == flags


EXEC_START = SHOW_DOCKER.split('ExecStart=', 1)[1]


@pytest.mark.parametrize('exec_start, keys, flags', [
    # The lab node's (and Docker's packaged) unit: -H and --containerd only.
    (EXEC_START, MEMLOCK, []),
    (EXEC_START, {'containerd': '/run/containerd/containerd.sock'}, ['--containerd']),
    (EXEC_START.replace(' -H fd://', ' -H fd:// --default-ulimit memlock=-1:-1'), MEMLOCK, ['--default-ulimit']),
    (EXEC_START.replace(' -H fd://', ' --default-ulimit=nofile=1024:1024'), MEMLOCK, ['--default-ulimit']),
    # Another flag that starts the same is not the key's.
    (EXEC_START.replace(' -H fd://', ' --default-ulimits-x'), MEMLOCK, []),
    ('', MEMLOCK, []),
])
def test_flags_that_set_a_merged_key_too(exec_start, keys, flags):
    assert flag_conflicts(exec_start, keys) == flags


def stand_in_systemctl(tmp_path, show_text):
    (tmp_path / 'show.txt').write_text(show_text)
    program = tmp_path / 'systemctl'
    program.write_text('#!/bin/sh\n[ "$*" = "show --property=LoadState --property=ExecStart docker.service" ] || exit 2\n'
                       'cat %s\n' % (tmp_path / 'show.txt'))
    program.chmod(0o755)
    return str(program)


@pytest.mark.parametrize('show_text, changed', [(SHOW_DOCKER, True), (SHOW_DOCKER_ABSENT, False)])
def test_the_module_merges_only_where_docker_is_installed(tmp_path, show_text, changed):
    path = tmp_path / 'daemon.json'
    path.write_text(LAB_DAEMON_JSON)
    args = {'path': str(path), 'merge': MEMLOCK, 'service': 'docker', 'systemctl': stand_in_systemctl(tmp_path, show_text)}
    result = run_module('docker_daemon_json', args)
    assert (result['changed'], result['installed']) == (changed, changed)
    assert json.loads(path.read_text()) == (dict(json.loads(LAB_DAEMON_JSON), **MEMLOCK) if changed else json.loads(LAB_DAEMON_JSON))


def test_the_module_refuses_a_key_dockerd_gets_as_a_flag(tmp_path):
    path = tmp_path / 'daemon.json'
    path.write_text(LAB_DAEMON_JSON)
    show = SHOW_DOCKER.replace(' -H fd://', ' -H fd:// --default-ulimit memlock=-1:-1')
    refused = run_module('docker_daemon_json', {'path': str(path), 'merge': MEMLOCK, 'service': 'docker.service',
                                                'systemctl': stand_in_systemctl(tmp_path, show)})
    assert refused['failed'] and refused['msg'].startswith('docker.service starts dockerd with --default-ulimit; dockerd '
                                                           'refuses to start when a directive is both a flag and in daemon.json')
    assert "Docker's configuration was not changed" in refused['msg'] and path.read_text() == LAB_DAEMON_JSON


# --- sysctl_runtime --------------------------------------------------------------------------------------------------

BOOT_ORDER = ['/usr/lib/sysctl.d/50-pid-max.conf', '/etc/sysctl.d/90-dgxspark-os.conf', '/usr/lib/sysctl.d/99-protect-links.conf',
              '/etc/sysctl.d/99-sysctl.conf']


@pytest.mark.parametrize('text, name, expected', [
    (CAT_CONFIG, 'vm.swappiness', ('1', BOOT_ORDER)),
    # A file read after the drop-in wins; '-' (ignore errors) and '/' separators name the same setting.
    (CAT_CONFIG_OVERRIDDEN, 'vm.swappiness', ('60', BOOT_ORDER[:2] + ['/etc/sysctl.d/95-vendor-tuning.conf'] + BOOT_ORDER[2:])),
    (CAT_CONFIG, 'fs.protected_regular', ('2', BOOT_ORDER)),
    # Commented-out lines (#net.ipv4.ip_forward=1 in /etc/sysctl.conf) set nothing.
    (CAT_CONFIG, 'net.ipv4.ip_forward', (None, BOOT_ORDER)),
    (CAT_CONFIG, 'vm.swappines', (None, BOOT_ORDER)),
    ('', 'vm.swappiness', (None, [])),
])
def test_boot_value_is_the_last_file_s(text, name, expected):
    assert boot_value(text, name) == expected


@pytest.mark.parametrize('name, path', [
    ('vm.swappiness', '/proc/sys/vm/swappiness'),
    ('vm/swappiness', '/proc/sys/vm/swappiness'),
    ('net.ipv4.conf.all.rp_filter', '/proc/sys/net/ipv4/conf/all/rp_filter'),
])
def test_proc_path(name, path):
    assert proc_path(name) == path


@pytest.mark.parametrize('name', ['swappiness', 'vm.swappiness/../../etc/passwd', 'vm..swappiness', '', None])
def test_a_name_that_is_not_a_sysctl_is_refused(name):
    with pytest.raises(SysctlError, match='is not a sysctl name'):
        proc_path(name)


@pytest.mark.parametrize('value, expected', [('1\n', '1'), (1, '1'), ('4096\t87380\t6291456\n', '4096 87380 6291456')])
def test_values_compare_as_the_kernel_prints_them(value, expected):
    assert normalized(value) == expected


@pytest.fixture(name='systemd_analyze')
def fixture_systemd_analyze(tmp_path):
    """A stand-in systemd-analyze that prints the overridden boot configuration for `cat-config sysctl.d`."""
    (tmp_path / 'cat-config.txt').write_text(CAT_CONFIG_OVERRIDDEN)
    program = tmp_path / 'systemd-analyze'
    program.write_text('#!/bin/sh\n[ "$*" = "cat-config sysctl.d" ] || exit 2\ncat %s\n' % (tmp_path / 'cat-config.txt'))
    program.chmod(0o755)
    return str(program)


def test_the_module_sets_the_running_value_with_diff_and_check_mode(tmp_path, systemd_analyze):
    running = tmp_path / 'proc' / 'vm' / 'swappiness'
    running.parent.mkdir(parents=True)
    running.write_text('60\n')
    args = {'name': 'vm.swappiness', 'value': '1', 'proc_sys': str(tmp_path / 'proc'), 'systemd_analyze': systemd_analyze}
    preview = run_module('sysctl_runtime', dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert preview['changed'] and preview['running'] == '60' and running.read_text() == '60\n'
    assert preview['diff']['before'] == '60\n' and preview['diff']['after'] == '1\n'
    applied = run_module('sysctl_runtime', args)
    assert applied['changed'] and running.read_text() == '1\n'
    assert (applied['boot_value'], applied['boot_files'][2]) == ('60', '/etc/sysctl.d/95-vendor-tuning.conf')
    assert 'warnings' not in applied
    warned = run_module('sysctl_runtime', dict(args, dropin='/etc/sysctl.d/90-dgxspark-os.conf'))
    assert [w['event']['msg'] for w in warned['warnings']] == [
        'on %s a sysctl file read after /etc/sysctl.d/90-dgxspark-os.conf sets vm.swappiness = 60, which wins at boot '
        'over 1. Remove that line or rename /etc/sysctl.d/90-dgxspark-os.conf to sort after it. Order read: %s.'
        % (os.uname()[1], ', '.join(applied['boot_files']))]
    # In check mode the drop-in may not be written yet: no warning.
    assert 'warnings' not in run_module('sysctl_runtime', dict(args, dropin='/x.conf', _ansible_check_mode=True))
    assert not run_module('sysctl_runtime', args)['changed']
    running.write_text('30\n')
    left = run_module('sysctl_runtime', dict(args, apply=False))
    assert not left['changed'] and left['running'] == '30' and running.read_text() == '30\n'


def test_the_module_without_systemd_analyze_or_proc_sys(tmp_path):
    args = {'name': 'vm.swappiness', 'value': '1', 'proc_sys': str(tmp_path), 'systemd_analyze': str(tmp_path / 'none')}
    (tmp_path / 'vm').mkdir()
    (tmp_path / 'vm' / 'swappiness').write_text('1\n')
    quiet = run_module('sysctl_runtime', args)
    assert not quiet['changed'] and quiet['boot_value'] is None and quiet['boot_files'] == []
    missing = run_module('sysctl_runtime', dict(args, name='vm.no_such_setting'))
    assert missing['failed'] and missing['msg'].startswith('cannot read %s/vm/no_such_setting' % tmp_path)


# --- process_memory --------------------------------------------------------------------------------------------------

STATUS_USER = fixture_text('proc_status_user.txt')
STATUS_KTHREAD = fixture_text('proc_status_kthread.txt')
USER_RSS_KIB = int(STATUS_USER.split('VmRSS:')[1].split()[0])


def fake_proc(tmp_path, processes):
    """A /proc with one directory per (pid, comm, status text), and the entries that are not processes."""
    root = tmp_path / 'proc'
    for pid, comm, status in processes:
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / 'comm').write_text(comm + '\n')
        (root / str(pid) / 'status').write_text(status)
    (root / 'self').mkdir(parents=True, exist_ok=True)
    (root / 'meminfo').write_text(MEMINFO)
    return str(root)


@pytest.mark.parametrize('status, kib', [(STATUS_USER, USER_RSS_KIB), (STATUS_KTHREAD, None), ('', None)])
def test_vmrss_of_a_status_file(status, kib):
    assert vmrss_kib(status) == kib


@pytest.mark.parametrize('names, expected', [
    (['Xorg', 'gnome-shell'], [(1301, 'gnome-shell'), (20001, 'Xorg')]),
    # Names longer than the kernel's 15 characters compare on those 15 (gnome-session-binary is gnome-session-b).
    (['gnome-session-binary'], [(1400, 'gnome-session-b')]),
    # A kernel thread of that name holds no memory of its own and is left out; no match is an empty list.
    (['kworker/0:1'], []),
    (['plasmashell'], []),
])
def test_find_lists_the_named_user_space_processes_by_pid(tmp_path, names, expected):
    proc = fake_proc(tmp_path, [(20001, 'Xorg', STATUS_USER), (1301, 'gnome-shell', STATUS_USER),
                                (1400, 'gnome-session-b', STATUS_USER), (7, 'kworker/0:1', STATUS_KTHREAD), (2, 'sshd', STATUS_USER)])
    assert [(p['pid'], p['comm']) for p in find(names, proc)] == expected
    assert all(p['rss_kib'] == USER_RSS_KIB for p in find(names, proc))


def test_process_summary():
    assert process_summary([{'pid': 1234, 'comm': 'Xorg', 'rss_kib': 62669}, {'pid': 1301, 'comm': 'gnome-shell', 'rss_kib': 236032}]) \
        == 'Xorg (pid 1234, 61.2 MiB), gnome-shell (pid 1301, 230.5 MiB)'
    assert process_summary([]) == ''


def test_the_module_reports_the_processes_and_their_memory(tmp_path):
    proc = fake_proc(tmp_path, [(20001, 'Xorg', STATUS_USER), (20002, 'Xwayland', STATUS_USER)])
    found = run_module('process_memory', {'names': ['Xorg', 'Xwayland'], 'proc': proc, '_ansible_check_mode': True})
    assert not found['changed'] and [p['pid'] for p in found['processes']] == [20001, 20002]
    assert found['rss_mib'] == round(2 * USER_RSS_KIB / 1024.0, 1) and found['summary'].startswith('Xorg (pid 20001, ')
    none = run_module('process_memory', {'names': ['lightdm'], 'proc': proc})
    assert (none['processes'], none['rss_mib'], none['summary']) == ([], 0.0, '')


# --- default_target --------------------------------------------------------------------------------------------------

@pytest.fixture(name='systemctl')
def fixture_systemctl(tmp_path):
    """A stand-in systemctl: get-default reads the link as systemd does; show knows the units under tmp_path/lib (a unit it
    does not know has an empty FragmentPath and rc 0, as systemctl answers)."""
    lib = tmp_path / 'lib'
    lib.mkdir()
    for unit in ('multi-user.target', 'graphical.target'):
        (lib / unit).write_text('[Unit]\nDescription=%s\n' % unit)
    program = tmp_path / 'systemctl'
    program.write_text('#!/bin/sh\n'
                       'case "$1" in\n'
                       '  get-default) basename "$(readlink %(link)s)";;\n'
                       '  show) [ -e "%(lib)s/$4" ] && echo "%(lib)s/$4" || echo;;\n'
                       '  *) exit 2;;\n'
                       'esac\n' % {'link': tmp_path / 'default.target', 'lib': lib})
    program.chmod(0o755)
    os.symlink(str(lib / 'graphical.target'), str(tmp_path / 'default.target'))
    return program


def test_the_module_links_the_default_target_with_diff_and_check_mode(tmp_path, systemctl):
    link = tmp_path / 'default.target'
    args = {'target': 'multi-user.target', 'link': str(link), 'systemctl': str(systemctl)}
    preview = run_module('default_target', dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert preview['changed'] and preview['previous'] == 'graphical.target'
    assert os.readlink(str(link)) == str(tmp_path / 'lib' / 'graphical.target')
    assert preview['diff']['before'] == '-> %s\n' % (tmp_path / 'lib' / 'graphical.target')
    assert preview['diff']['after'] == '-> %s\n' % (tmp_path / 'lib' / 'multi-user.target')
    made = run_module('default_target', args)
    assert made['changed'] and os.readlink(str(link)) == made['unit_file'] == str(tmp_path / 'lib' / 'multi-user.target')
    again = run_module('default_target', args)
    assert not again['changed'] and again['previous'] == 'multi-user.target' and again['unit_file'] is None


def test_the_module_refuses_a_target_without_a_unit_file(tmp_path, systemctl):
    link = tmp_path / 'default.target'
    refused = run_module('default_target', {'target': 'no-such.target', 'link': str(link), 'systemctl': str(systemctl)})
    assert refused['failed'] and refused['msg'] == ('cannot make the node boot into no-such.target: no-such.target has no unit '
                                                    'file on this node (systemctl show --property=FragmentPath is empty)')
    assert os.readlink(str(link)) == str(tmp_path / 'lib' / 'graphical.target')


# --- installed_units -------------------------------------------------------------------------------------------------

SHOW_NAMES = ['gdm.service', 'gdm3.service', 'lightdm.service', 'sddm.service', 'xdm.service']
SHOW = fixture_text('systemctl_show_display_managers.txt')


def test_parse_show_gives_one_block_per_name():
    assert parse_show(SHOW) == [
        {'Id': 'gdm.service', 'LoadState': 'loaded'}, {'Id': 'gdm.service', 'LoadState': 'loaded'},
        {'Id': 'lightdm.service', 'LoadState': 'loaded'}, {'Id': 'sddm.service', 'LoadState': 'not-found'},
        {'Id': 'xdm.service', 'LoadState': 'not-found'}]


@pytest.mark.parametrize('text, names, units', [
    # gdm3 is gdm: stopped once, under its own name; sddm and xdm are not installed.
    (SHOW, SHOW_NAMES, ['gdm.service', 'lightdm.service']),
    ('Id=sddm.service\nLoadState=not-found\n', ['sddm.service'], []),
    # A masked unit is installed (systemd knows it), as service_facts listed it.
    ('Id=gdm.service\nLoadState=masked\n\nId=nodm.service\nLoadState=not-found\n', ['gdm3.service', 'nodm.service'], ['gdm.service']),
])
def test_installed_units_are_the_loadable_ones_each_once(text, names, units):
    assert installed(names, text) == units


def test_an_answer_that_does_not_match_the_names_is_refused():
    with pytest.raises(ValueError, match='answered 5 units for 2 names'):
        installed(['gdm.service', 'lightdm.service'], SHOW)


def test_the_module_asks_systemctl_once(tmp_path):
    (tmp_path / 'show.txt').write_text(SHOW)
    program = tmp_path / 'systemctl'
    program.write_text('#!/bin/sh\n[ "$*" = "show --property=Id --property=LoadState %s" ] || exit 2\ncat %s\n'
                       % (' '.join(SHOW_NAMES), tmp_path / 'show.txt'))
    program.chmod(0o755)
    found = run_module('installed_units', {'names': SHOW_NAMES, 'systemctl': str(program), '_ansible_check_mode': True})
    assert not found['changed'] and found['units'] == ['gdm.service', 'lightdm.service']
    refused = run_module('installed_units', {'names': ['gdm.service'], 'systemctl': str(program)})
    assert refused['failed'] and refused['msg'].startswith('systemctl show failed (rc 2)')
    assert run_module('installed_units', {'names': [], 'systemctl': str(program)})['units'] == []
