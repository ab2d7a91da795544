"""os_hardening's modules that manage systemd units and limits, over real formats: logind_remove_ipc
(module_utils/logind_remove_ipc.py) over `busctl get-property ... RemoveIPC` as systemd 252 (a lab node, Debian 12)
prints it, systemd_unit_file (module_utils/systemd_unit_file.py) over `systemctl is-enabled`/`is-active` answers,
memlock_grantable (module_utils/memlock_grantable.py) over getrlimit/setrlimit. The modules run as Ansible runs them,
with stand-in busctl and systemctl programs that log their calls, on files under tmp_path."""
import os
import resource

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.logind_remove_ipc import (
    DROPIN, dropin_text, restart_needed, running_remove_ipc)
from ansible_collections.dgxspark.cluster.plugins.module_utils.memlock_grantable import as_kib, limit_bytes, probe
from ansible_collections.dgxspark.cluster.plugins.module_utils.systemd_unit_file import check_name, steps
from test_os_hardening_modules import run_module

UNIT = 'dgxspark-gpu-clocks.service'
UNIT_TEXT = '[Unit]\nDescription=Lock the GPU clocks to 1800-2200 MHz\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\n'


def stand_in(tmp_path, name, script):
    """A program that logs its arguments to tmp_path/calls and runs ``script``."""
    program = tmp_path / name
    program.write_text('#!/bin/sh\necho "%s $*" >> %s\n%s\n' % (name, tmp_path / 'calls', script))
    program.chmod(0o755)
    return str(program)


def calls(tmp_path):
    path = tmp_path / 'calls'
    return path.read_text().splitlines() if path.exists() else []


# --- logind_remove_ipc -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize('rc, output, running', [
    (0, 'b true\n', True),
    (0, 'b false\n', False),
    # No logind or no D-Bus (a container without systemd): busctl fails; its value is unknown.
    (1, '', None),
    (0, 's "yes"\n', None),
])
def test_running_remove_ipc_from_busctl(rc, output, running):
    assert running_remove_ipc(rc, output) == running


@pytest.mark.parametrize('keep_ipc, running, restart', [
    (True, True, True), (True, False, False), (False, False, True), (False, True, False), (True, None, False),
    (False, None, False),
])
def test_logind_is_restarted_only_where_it_runs_otherwise(keep_ipc, running, restart):
    assert restart_needed(keep_ipc, running) == restart


def test_the_drop_in_is_the_text_the_role_always_wrote():
    assert dropin_text(False) is None
    assert dropin_text(True) == DROPIN and DROPIN.endswith('[Login]\nRemoveIPC=no\n')
    assert DROPIN.startswith('# Managed by dgxspark.cluster (os_hardening, tag os_logind): ')


@pytest.fixture(name='logind')
def fixture_logind(tmp_path):
    """A stand-in logind: busctl prints tmp_path/running ('b true' at first); systemctl restart sets it from the drop-in,
    as logind reads its files when it starts."""
    dropin = tmp_path / 'logind.conf.d' / '90-dgxspark.conf'
    (tmp_path / 'running').write_text('b true\n')
    busctl = stand_in(tmp_path, 'busctl', 'cat %s' % (tmp_path / 'running'))
    systemctl = stand_in(tmp_path, 'systemctl', '[ "$*" = "restart systemd-logind.service" ] || exit 2\n'
                                                'if [ -e %s ]; then echo "b false"; else echo "b true"; fi > %s'
                                                % (dropin, tmp_path / 'running'))
    return {'path': str(dropin), 'busctl': busctl, 'systemctl': systemctl}


def test_logind_keeps_ipc_with_check_mode_diff_and_one_restart(tmp_path, logind):
    dropin = tmp_path / 'logind.conf.d' / '90-dgxspark.conf'
    preview = run_module('logind_remove_ipc', dict(logind, _ansible_check_mode=True, _ansible_diff=True))
    assert preview['changed'] and preview['restarted'] and preview['running_remove_ipc'] is True
    assert preview['diff']['before'] == '' and preview['diff']['after'] == DROPIN
    assert not dropin.exists() and not any(call.startswith('systemctl') for call in calls(tmp_path))
    applied = run_module('logind_remove_ipc', logind)
    assert applied['changed'] and applied['restarted'] and dropin.read_text() == DROPIN
    assert oct(dropin.stat().st_mode & 0o777) == '0o644' and oct(dropin.parent.stat().st_mode & 0o777) == '0o755'
    assert calls(tmp_path)[-1] == 'systemctl restart systemd-logind.service'
    again = run_module('logind_remove_ipc', logind)
    assert not again['changed'] and not again['restarted'] and again['running_remove_ipc'] is False
    # Modes changed by hand are put back, without a restart.
    dropin.chmod(0o600)
    dropin.parent.chmod(0o700)
    fixed = run_module('logind_remove_ipc', logind)
    assert fixed['changed'] and not fixed['restarted'] and oct(dropin.stat().st_mode & 0o777) == '0o644'
    assert oct(dropin.parent.stat().st_mode & 0o777) == '0o755'


def test_logind_restarted_when_it_still_runs_with_an_old_value(tmp_path, logind):
    """The file is right but logind was never restarted (a run cut short): the running value decides."""
    run_module('logind_remove_ipc', logind)
    (tmp_path / 'running').write_text('b true\n')
    result = run_module('logind_remove_ipc', logind)
    assert result['changed'] and result['restarted'] and (tmp_path / 'running').read_text() == 'b false\n'


def test_logind_default_back_removes_the_drop_in(tmp_path, logind):
    run_module('logind_remove_ipc', logind)
    removed = run_module('logind_remove_ipc', dict(logind, keep_ipc=False, _ansible_diff=True))
    assert removed['changed'] and removed['restarted'] and removed['diff']['after'] == ''
    assert not (tmp_path / 'logind.conf.d' / '90-dgxspark.conf').exists()
    assert not run_module('logind_remove_ipc', dict(logind, keep_ipc=False))['changed']


def test_logind_without_busctl_answer_manages_the_file_only(tmp_path, logind):
    failing = stand_in(tmp_path, 'busctl-failing', 'echo "Failed to connect to bus" >&2; exit 1')
    result = run_module('logind_remove_ipc', dict(logind, busctl=failing))
    assert result['changed'] and not result['restarted'] and result['running_remove_ipc'] is None
    assert not any(call.startswith('systemctl') for call in calls(tmp_path))


# --- systemd_unit_file -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize('state, before, enabled, active, expected', [
    # A fresh node: `is-enabled`/`is-active` of a unit systemd does not know.
    ('started', None, 'Failed to get unit file state for %s: No such file or directory\n' % UNIT, 'inactive\n',
     ['write', ['daemon-reload'], ['enable', UNIT], ['start', UNIT]]),
    # Converged: nothing to do (a oneshot unit with RemainAfterExit=yes stays active).
    ('started', UNIT_TEXT, 'enabled\n', 'active\n', []),
    # Another range: written and restarted, so that it runs with the new file.
    ('started', UNIT_TEXT.replace('1800', '1900'), 'enabled\n', 'active\n', ['write', ['daemon-reload'], ['restart', UNIT]]),
    # Stopped or disabled by hand: started or enabled again, not rewritten.
    ('started', UNIT_TEXT, 'enabled\n', 'failed\n', [['start', UNIT]]),
    ('started', UNIT_TEXT, 'disabled\n', 'active\n', [['enable', UNIT]]),
    ('absent', UNIT_TEXT, None, None, [['disable', '--now', UNIT], 'remove', ['daemon-reload']]),
    ('absent', None, None, None, []),
], ids=['fresh', 'converged', 'new-content', 'stopped', 'disabled', 'remove', 'already-gone'])
def test_unit_steps(state, before, enabled, active, expected):
    assert steps(UNIT, state, before, UNIT_TEXT, enabled, active) == expected


@pytest.mark.parametrize('name', ['gpu-clocks', '../etc/passwd.service', 'a b.service', '', None])
def test_a_name_that_is_not_a_unit_is_refused(name):
    with pytest.raises(ValueError, match='is not a systemd unit name'):
        check_name(name)


@pytest.fixture(name='systemd')
def fixture_systemd(tmp_path):
    """A stand-in systemctl keeping the unit's state in tmp_path/enabled and tmp_path/active."""
    (tmp_path / 'units').mkdir()
    state = {'enabled': tmp_path / 'enabled', 'active': tmp_path / 'active'}
    state['enabled'].write_text('disabled\n')
    state['active'].write_text('inactive\n')
    script = ('case "$1" in\n'
              '  is-enabled) cat %(enabled)s;; is-active) cat %(active)s;; daemon-reload) ;;\n'
              '  enable) echo enabled > %(enabled)s;; start|restart) echo active > %(active)s;;\n'
              '  disable) echo disabled > %(enabled)s; echo inactive > %(active)s;;\n'
              '  *) exit 2;;\n'
              'esac\n' % state)
    return {'name': UNIT, 'directory': str(tmp_path / 'units'), 'systemctl': stand_in(tmp_path, 'systemctl', script)}


def test_the_unit_is_written_started_restarted_and_removed(tmp_path, systemd):
    path = tmp_path / 'units' / UNIT
    args = dict(systemd, content=UNIT_TEXT)
    preview = run_module('systemd_unit_file', dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert preview['changed'] and preview['diff']['after'] == UNIT_TEXT and not path.exists()
    assert preview['steps'] == ['write', 'systemctl daemon-reload', 'systemctl enable %s' % UNIT, 'systemctl start %s' % UNIT]
    started = run_module('systemd_unit_file', args)
    assert started['changed'] and path.read_text() == UNIT_TEXT and oct(path.stat().st_mode & 0o777) == '0o644'
    assert calls(tmp_path)[-3:] == ['systemctl daemon-reload', 'systemctl enable %s' % UNIT, 'systemctl start %s' % UNIT]
    assert not run_module('systemd_unit_file', args)['changed']
    moved = run_module('systemd_unit_file', dict(args, content=UNIT_TEXT.replace('1800', '1900')))
    assert moved['steps'] == ['write', 'systemctl daemon-reload', 'systemctl restart %s' % UNIT]
    removed = run_module('systemd_unit_file', dict(systemd, state='absent', _ansible_diff=True))
    assert removed['changed'] and not path.exists() and removed['diff']['after'] == ''
    assert calls(tmp_path)[-2:] == ['systemctl disable --now %s' % UNIT, 'systemctl daemon-reload']
    assert not run_module('systemd_unit_file', dict(systemd, state='absent'))['changed']


def test_a_unit_that_fails_to_start_fails_the_module(tmp_path, systemd):
    failing = stand_in(tmp_path, 'systemctl-failing', '[ "$1" = start ] && { echo "Job failed" >&2; exit 1; }; '
                                                      '[ "$1" = is-active ] && echo inactive; exit 0')
    failed = run_module('systemd_unit_file', dict(systemd, content=UNIT_TEXT, systemctl=failing))
    assert failed['failed'] and failed['msg'] == 'systemctl start %s failed (rc 1): Job failed' % UNIT


# --- memlock_grantable -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize('limit, value', [
    ('unlimited', resource.RLIM_INFINITY), (8192, 8192 * 1024), ('8192', 8192 * 1024), (' 64 ', 64 * 1024),
])
def test_limit_bytes(limit, value):
    assert limit_bytes(limit) == value


@pytest.mark.parametrize('limit', ['lots', '-5', '1.5', ''])
def test_a_limit_that_is_not_one_is_refused(limit):
    with pytest.raises(ValueError, match="is not a memlock limit"):
        limit_bytes(limit)


def rlimits(hard, allowed):
    """getrlimit/setrlimit of a process whose hard memlock limit is ``hard`` and that may (``allowed``) raise it."""
    def getrlimit(dummy):
        return (min(hard, 65536), hard)

    def setrlimit(dummy, limits):
        # What Python's resource.setrlimit raises where the kernel answers EPERM.
        if above(limits[1], hard) and not allowed:
            raise ValueError('not allowed to raise maximum limit')
    return getrlimit, setrlimit


def above(value, hard):
    infinity = resource.RLIM_INFINITY
    return hard != infinity and (value == infinity or value > hard)


@pytest.mark.parametrize('limit, hard, allowed, expected', [
    # A lab node (a container): its hard limit 8192 KiB can be granted, not raised.
    (8192, 8192 * 1024, False, (True, '8192')),
    (4096, 8192 * 1024, False, (True, '8192')),
    ('unlimited', 8192 * 1024, False, (False, '8192')),
    # A Spark as root (CAP_SYS_RESOURCE).
    ('unlimited', 8192 * 1024, True, (True, '8192')),
    ('unlimited', resource.RLIM_INFINITY, False, (True, 'unlimited')),
])
def test_probe(limit, hard, allowed, expected):
    assert probe(limit, *rlimits(hard, allowed)) == expected


def test_as_kib():
    assert (as_kib(resource.RLIM_INFINITY), as_kib(8388608)) == ('unlimited', '8192')


def test_the_module_grants_the_current_hard_limit_and_refuses_more_without_the_capability():
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    granted = run_module('memlock_grantable', {'limit': as_kib(hard), '_ansible_check_mode': True})
    assert not granted['changed'] and granted['hard'] == as_kib(hard)
    if hard == resource.RLIM_INFINITY or os.geteuid() == 0:
        pytest.skip('this process may raise its memlock limit: the refusal is tested by test_probe only')
    refused = run_module('memlock_grantable', {'limit': 'unlimited', 'node': 'spark-beta'})
    assert refused['failed'] and refused['msg'].startswith(
        'memlock unlimited cannot be granted on spark-beta: its hard memlock limit is %d KiB and raising it is not '
        'permitted here' % (hard // 1024))
    assert refused['msg'].endswith('/etc/security/limits.d/90-dgxspark-memlock.conf would make pam_limits refuse every new '
                                   'login session, SSH included. Set the limit to at most that value. Nothing was changed.')
