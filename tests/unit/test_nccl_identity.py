# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which NCCL a rank loaded (issue 50), over NCCL's own INFO lines recorded from a real all-reduce on an H200 machine
with two NCCL builds (torch's pip wheel 2.28.9 and the system's libnccl2 2.28.3; tests/unit/fixtures/nccl/README.md),
and the fabric report's failure when nodes differ."""

from __future__ import annotations

import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import build_fabric_report
from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_identity import CAUSE_NCCL_BUILD, failures, parse_rank_output

from test_fabric import EXPECT, HOSTS, PLAN, healthy_probes

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures', 'nccl')
WHEEL = '/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2'
SYSTEM = '/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3'
WHEEL_SHA = '1c8618b866734cbdd5401715d6178be763ece283b7f808ecf86dedab211162c1'
SYSTEM_SHA = '2db3d5f54a7fa83a0a4a0a3c573a2314cb23cb6fc05f84e7dc26e501d650aaf4'


def rank_output(info, loaded):
    """A rank's output as the fabric check's test prints it: NCCL's own lines, then `# NCCL library:` lines made from the
    recorded /proc/self/maps reading (record_all_reduce.py: `<sha256> <path>`)."""
    with open(os.path.join(FIXTURES, info)) as handle:
        text = handle.read()
    with open(os.path.join(FIXTURES, loaded)) as handle:
        libraries = [line.split(' ', 1) for line in handle if len(line.split(' ', 1)[0]) == 64]
    return text + ''.join('# NCCL library: %s %s' % (sha, path) for sha, path in libraries)


PIP = rank_output('h200_pip_wheel_nccl_info.txt', 'h200_pip_wheel_loaded.txt')
BOTH = rank_output('h200_system_nccl_preloaded_info.txt', 'h200_system_nccl_preloaded_loaded.txt')


def test_the_version_is_ncclss_own_and_the_libraries_are_what_the_rank_mapped():
    assert parse_rank_output(PIP) == {'version': '2.28.9+cuda13.0', 'libraries': [(WHEEL_SHA, WHEEL)]}
    # The system's library preloaded: NCCL answers 2.28.3 (torch.cuda.nccl.version() said 2.28.9), both are mapped.
    assert parse_rank_output(BOTH) == {'version': '2.28.3+cuda13.0', 'libraries': [(WHEEL_SHA, WHEEL), (SYSTEM_SHA, SYSTEM)]}
    assert parse_rank_output('') == {'version': None, 'libraries': []}


def test_one_build_everywhere_is_said_in_one_line():
    line, found = failures(dict((host, PIP) for host in HOSTS), HOSTS)
    assert found == []
    assert line == 'NCCL build: NCCL 2.28.9+cuda13.0 from %s (sha256 %s) on 3 node(s)' % (WHEEL, WHEEL_SHA[:12])


def test_the_same_version_from_another_build_is_named_with_each_node():
    other = PIP.replace(WHEEL_SHA, 'f' * 64)
    line, found = failures({'spark-alpha': PIP, 'spark-beta': other, 'spark-gamma': PIP}, HOSTS)
    [failure] = found
    assert failure['cause'] == CAUSE_NCCL_BUILD and failure['host'] == 'spark-alpha,spark-beta,spark-gamma'
    assert failure['detail'].startswith('the nodes run the same NCCL version from different builds')
    assert ('NCCL 2.28.9+cuda13.0 from %s (sha256 %s) on spark-alpha, spark-gamma; NCCL 2.28.9+cuda13.0 from %s (sha256 '
            'ffffffffffff) on spark-beta' % (WHEEL, WHEEL_SHA[:12], WHEEL)) in failure['detail']
    assert line.endswith('(see failures)')


def test_two_libraries_in_one_rank_and_another_version_elsewhere_are_both_failures():
    _line, found = failures({'spark-alpha': PIP, 'spark-beta': BOTH, 'spark-gamma': PIP}, HOSTS)
    assert [f['host'] for f in found] == ['spark-beta', 'spark-alpha,spark-beta,spark-gamma']
    assert 'mapped 2 NCCL libraries' in found[0]['detail'] and 'the first one loaded answers' in found[0]['detail']
    assert found[1]['detail'].startswith('the nodes run different NCCL versions')


@pytest.mark.parametrize('outputs', [{}, {'spark-alpha': 'no NCCL line at all\n'}])
def test_no_output_or_no_nccl_line_is_not_checked(outputs):
    assert failures(outputs, HOSTS) == (None, [])


def test_the_fabric_report_carries_the_nccl_build_line_and_failure():
    report = build_fabric_report(PLAN, healthy_probes(), EXPECT, nccl_ranks=dict((host, PIP) for host in HOSTS))
    assert report['ok'] and any(line.startswith('NCCL build: NCCL 2.28.9+cuda13.0') for line in report['table'])
    report = build_fabric_report(PLAN, healthy_probes(), EXPECT, nccl_ranks={'spark-alpha': PIP, 'spark-beta': BOTH})
    assert not report['ok'] and all('[NCCL build]' in line for line in report['failure_lines'])


def test_the_fabric_checks_own_test_output_on_a_gpu_is_read_whole():
    """nccl_busbw.py as the role runs it (NCCL_DEBUG=VERSION), on the H200 machine, one rank: NCCL's bare version line
    and the library line sit inside the nccl-tests table, which still parses."""
    from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import parse_nccl_tests  # pylint: disable=import-outside-toplevel
    with open(os.path.join(FIXTURES, 'nccl_busbw_h200_1rank.txt')) as handle:
        text = handle.read()
    assert parse_rank_output(text) == {'version': '2.28.9+cuda13.0', 'libraries': [(WHEEL_SHA, WHEEL)]}
    parsed = parse_nccl_tests(text)
    assert parsed['avg_busbw_gbs'] == 0.0 and len(parsed['rows']) == 4  # one rank: nothing crosses a link
