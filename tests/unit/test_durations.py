# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/durations.py's summary of what held `make test` back, over real `vmstat -t -n 15` output (procps-ng 4.0.2,
Debian 12; and the `gu` column later procps versions add)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SPEC = importlib.util.spec_from_file_location('durations', os.path.join(ROOT, 'tools', 'durations.py'))
durations = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(durations)

HEADER = ['procs -----------memory---------- ---swap-- -----io---- -system-- ------cpu----- -----timestamp-----',
          ' r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st                 UTC']
# The first sample is the average since boot: never part of the summary.
SINCE_BOOT = ' 1  0      0 12096596 222360 5007744    0    0   117   863 2017 6471 57 25 18  0  0 2026-11-28 00:12:13'
BUSY = ' 6  1      0 3096596 222360 5007744    0    0  4117  9863 9017 26471 70 28  1  1  0 2026-11-28 00:12:28'
WAITING = ' 2  4      0 2048000 222360 5007744    0    0 94117 99863 5017 16471 20 10 30 40  0 2026-11-28 00:12:43'
IDLE = ' 0  0      0 12096596 222360 5007744    0    0     0    72 6367 14959  2  3 95  0  0 2026-11-28 00:12:58'
NEWER_HEADER = ' r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st gu                 UTC'


@pytest.mark.parametrize('lines, expected', [
    (HEADER + [SINCE_BOOT], None),
    ([], None),
    (['vmstat: command not found'], None),
    (HEADER + [SINCE_BOOT, BUSY], {'samples': 1, 'user': 70, 'system': 28, 'idle': 1, 'iowait': 1, 'saturated': 100,
                                   'run_queue_max': 6}),
    (HEADER + [SINCE_BOOT, BUSY, WAITING, IDLE, IDLE],
     {'samples': 4, 'user': 23.5, 'system': 11, 'idle': 55.25, 'iowait': 10.25, 'saturated': 25, 'run_queue_max': 6}),
    # A header printed again (vmstat repeats it when it has no -n) starts no new "since boot" sample.
    (HEADER + [SINCE_BOOT, BUSY] + HEADER + [IDLE],
     {'samples': 2, 'user': 36, 'system': 15.5, 'idle': 48, 'iowait': 0.5, 'saturated': 50, 'run_queue_max': 6}),
    ([HEADER[0], NEWER_HEADER, SINCE_BOOT + '  0', WAITING.replace(' 2026', '  0 2026')],
     {'samples': 1, 'user': 20, 'system': 10, 'idle': 30, 'iowait': 40, 'saturated': 0, 'run_queue_max': 2}),
])
def test_what_held_the_run_back(lines, expected):
    assert durations.machine_load(lines) == expected


def test_the_table_ends_with_the_machine_s_load(tmp_path, capsys):
    (tmp_path / 'durations.tsv').write_text('unit\t118\tok\nfirst lab (ended)\t3996\tok\n', encoding='utf-8')
    (tmp_path / 'vmstat.log').write_text('\n'.join(HEADER + [SINCE_BOOT, BUSY, IDLE]) + '\n', encoding='utf-8')
    assert durations.main(str(tmp_path / 'durations.tsv'), str(tmp_path / 'absent'), str(tmp_path / 'vmstat.log')) == 0
    out = capsys.readouterr().out
    assert 'sum of the parts' in out and '4114 s' in out
    assert ('machine over the run (%s, 2 samples): CPU user 36 %%, system 16 %%, idle 48 %%, waiting on disk 0 %%; no idle '
            'CPU in 50 %% of the samples; run queue up to 6' % (tmp_path / 'vmstat.log')) in out


# /proc/stat of Linux 6.1 (Debian 12), two cores: user nice system idle iowait irq softirq steal guest guest_nice.
PROC_STAT = ('cpu  12230 15 6010 90000 300 0 120 5 0 0\n'
             'cpu0 6000 10 3000 45000 150 0 60 3 0 0\n'
             'intr 1 2 3\nctxt 42\n')


@pytest.mark.parametrize('proc_stat, ticks, expected', [
    (PROC_STAT, 100, 183.8),  # user + nice + system + irq + softirq + steal; idle and iowait are not busy
    (PROC_STAT, 250, 73.52),
    ('cpu  100 0 50 10 0 0 0\n', 100, 1.5),  # an older kernel: no steal column
    ('intr 1 2 3\n', 100, None),
])
def test_the_machine_s_busy_seconds(proc_stat, ticks, expected):
    assert durations.machine_busy_seconds(proc_stat, ticks) == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize('text, scale, expected', [
    ('85427330000000\n', 1e-9, 85427.33),  # cgroup v1 cpuacct.usage, nanoseconds
    ('usage_usec 5000000\nuser_usec 4000000\nsystem_usec 1000000\n', 1e-6, 5.0),  # cgroup v2 cpu.stat
    ('', 1e-9, None),
    ('nr_periods 0\n', 1e-6, None),
])
def test_the_containers_cpu_seconds(text, scale, expected):
    assert durations.container_seconds(text, scale) == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize('start, end, expected', [
    ('1000.00 400.00', '7000.50 5000.25', {'machine': 6000.5, 'containers': 4600.25}),
    ('1000.00 -', '7000.00 5000.00', {'machine': 6000.0, 'containers': None}),
])
def test_what_the_run_s_cpu_went_to(start, end, expected):
    split = durations.cpu_split(start, end)
    assert split['machine'] == pytest.approx(expected['machine'])
    assert split['containers'] == (None if expected['containers'] is None else pytest.approx(expected['containers']))


def test_the_table_says_what_the_cpu_went_to(tmp_path, capsys, monkeypatch):
    (tmp_path / 'durations.tsv').write_text('unit\t118\tok\n', encoding='utf-8')
    (tmp_path / 'started').write_text('%d\n' % (__import__('time').time() - 100), encoding='utf-8')
    (tmp_path / 'cpu').write_text('1000.00 400.00\n', encoding='utf-8')
    monkeypatch.setattr(durations, 'cpu_counters', lambda: '1150.00 520.00')
    monkeypatch.setattr(durations.os, 'cpu_count', lambda: 2)
    durations.main(str(tmp_path / 'durations.tsv'), str(tmp_path / 'started'), str(tmp_path / 'absent'), str(tmp_path / 'cpu'))
    out = capsys.readouterr().out
    assert re.search(r"CPU over the run: 150 CPU-s of the 20\d that 2 cores offer; 120 in the lab's containers \(nodes and "
                     r"their serving containers\), 30 outside them", out), out


# Outcomes of a pytest run, for its real JUnit file: a pass, a skip, a failed assert with a message of many lines, a
# fixture that raises (an error, not a failure), and an assert whose message is longer than a line of the summary.
JUNIT_TESTS = '''
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("the lab did not come up")

def test_passes():
    pass

def test_skipped():
    pytest.skip("not here")

def test_hang_names_the_shard():
    failure = "stall_timeout 25 s\\nLast progress: 1/4"
    assert "2/4" in failure, failure

def test_needs_the_lab(broken):
    pass

def test_long():
    assert False, "long " * 200
'''


def test_the_failed_tests_of_a_real_junit_file_each_with_the_first_line_of_its_error(tmp_path):
    (tmp_path / 'test_outcomes.py').write_text(JUNIT_TESTS, encoding='utf-8')
    junit = tmp_path / 'junit-lab.xml'
    subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '--junitxml', str(junit),
                    '--rootdir', str(tmp_path), '-c', os.devnull, str(tmp_path / 'test_outcomes.py')],
                   cwd=tmp_path, capture_output=True, check=False)
    found = durations.failed_tests(junit.read_text(encoding='utf-8'))
    assert [test_id for test_id, _message in found] == [
        'test_outcomes::test_hang_names_the_shard', 'test_outcomes::test_needs_the_lab (error)', 'test_outcomes::test_long']
    assert found[0][1] == 'AssertionError: stall_timeout 25 s'
    assert found[1][1].startswith('failed on setup with "RuntimeError: the lab did not come up"')
    assert found[2][1].startswith('AssertionError: long long')


@pytest.mark.parametrize('cases, expected_lines', [
    (0, []),
    (2, ['make test: the tests that failed', '  lab: test_outcomes::test_0: AssertionError: 0',
         '  lab: test_outcomes::test_1: AssertionError: 1']),
    (10, ['  lab: test_outcomes::test_7: AssertionError: 7', '  ... and 2 more']),
], ids=['none', 'two', 'more-than-shown'])
def test_the_table_ends_with_the_tests_that_failed(tmp_path, capsys, cases, expected_lines):
    cases_xml = ''.join('<testcase classname="tests.lab.test_outcomes" name="test_%d"><failure message="AssertionError: %d'
                        '&#10;assert 0">trace</failure></testcase>' % (n, n) for n in range(cases))
    junit = ('<testsuites><testsuite>%s<testcase classname="tests.lab.test_outcomes" name="test_ok"/></testsuite></testsuites>'
             % cases_xml)
    (tmp_path / 'junit-lab.xml').write_text(junit, encoding='utf-8')
    # A file a stopped run left half written is passed over.
    (tmp_path / 'junit-unit.xml').write_text('<testsuites><testsuite><testcase', encoding='utf-8')
    (tmp_path / 'durations.tsv').write_text('unit\t118\tok\n', encoding='utf-8')
    assert durations.main(str(tmp_path / 'durations.tsv'), str(tmp_path / 'absent'), str(tmp_path / 'absent'),
                          str(tmp_path / 'absent'), str(tmp_path / 'junit-*.xml')) == 0
    out = capsys.readouterr().out
    for line in expected_lines:
        assert line + '\n' in out or line + ' (' in out
    assert ('failed' in out) == bool(cases)
    assert 'test_8' not in out and out.count('AssertionError') == min(cases, durations.MAX_FAILURES)


FAILURES = os.path.join(os.path.dirname(__file__), 'fixtures', 'ansible_failures')


def failure_output(name):
    with open(os.path.join(FAILURES, name + '.txt'), encoding='utf-8') as handle:
        return handle.read()


# Real ansible-playbook output (ansible.cfg's default callback, YAML results), as a lab test's assertion message holds it:
# "AssertionError: " and the output's last characters, cut anywhere in a line.
@pytest.mark.parametrize('name, expected', [
    ('fail_module', 'TASK [Stop when the head lacks room] on localhost: spark-beta lacks room for the model: 812 GB free, '
                    '900 GB needed (distribute_reserve_bytes keeps 50 GB); nothing was changed on any node. ' + 'x' * 150),
    ('command_rc', 'TASK [Run a command that fails] on localhost: non-zero return code (stderr: err)'),
    ('loop_item', 'TASK [Loop over items] on localhost: item a is bad'),
], ids=['fail-module-msg-over-two-lines', 'command-rc-with-stderr', 'loop-item'])
def test_the_failed_task_of_a_playbook_s_output(name, expected):
    output = failure_output(name)
    assert durations.ansible_failure('AssertionError: ' + output[output.index('PLAY [') + 9:]) == expected


@pytest.mark.parametrize('message', [
    'AssertionError: stall_timeout 25 s\nLast progress: 1/4',
    'AssertionError: ok: [spark-alpha]\nchanged: [spark-beta]',
    '',
], ids=['no-playbook', 'playbook-that-did-not-fail', 'empty'])
def test_no_failed_task_without_a_failure_line(message):
    assert durations.ansible_failure(message) is None


def test_a_failed_lab_test_is_summed_up_by_the_task_that_failed(tmp_path):
    # The assertion message's first line is a piece of the playbook's output (as in CI's excerpt of stop 65's run):
    # the summary names the task and its error instead.
    output = failure_output('command_rc')
    (tmp_path / 'test_outcomes.py').write_text(
        'def test_deploy():\n    out = %r\n    assert False, out[40:]\n' % output, encoding='utf-8')
    junit = tmp_path / 'junit-lab.xml'
    subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '--junitxml', str(junit),
                    '--rootdir', str(tmp_path), '-c', os.devnull, str(tmp_path / 'test_outcomes.py')],
                   cwd=tmp_path, capture_output=True, check=False)
    assert durations.failed_tests(junit.read_text(encoding='utf-8')) == [
        ('test_outcomes::test_deploy', 'TASK [Run a command that fails] on localhost: non-zero return code (stderr: err)')]
