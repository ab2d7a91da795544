# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which NCCL the serving engine loaded on each node, at readiness (issue 50 item 2): the engine_nccl_build module's
reading of /proc (maps recorded from a real NCCL all-reduce on the H100 machine, cgroup lines recorded from the lab's
Docker; tests/unit/fixtures/nccl/README.md) and the nccl_builds filter that compares the nodes."""

from __future__ import annotations

import hashlib
import os

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.filter.nccl_builds import nccl_builds
from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_identity import (
    container_pids, loaded_by_processes, mapped_libraries,
)

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures', 'nccl')
HOSTS = ['spark-alpha', 'spark-beta']


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


MAPS = fixture('h100_all_reduce_maps.txt')
WHEEL = fixture('h100_all_reduce_loaded.txt').split()[1]
CGROUP_LAB = fixture('lab_engine_cgroup.txt')


def test_the_maps_of_a_real_nccl_process_name_the_wheels_library_once():
    assert mapped_libraries(MAPS) == [WHEEL]
    # Every other line of the recording (libraries, anonymous memory, [heap], [stack]) is left out.
    assert len(MAPS.splitlines()) > 100


def test_the_maps_of_the_labs_cpu_engine_name_no_nccl():
    """vLLM's CPU build (the lab's Ray worker, torch mapped) loads no libnccl: the readiness check has nothing to compare."""
    maps = fixture('lab_ray_worker_maps.txt')
    assert 'libtorch_cpu.so' in maps and mapped_libraries(maps) == []


@pytest.mark.parametrize('line, expected', [
    ('7f00-7f10 r-xp 00000000 fd:01 42 /usr/lib/aarch64-linux-gnu/libnccl.so.2.28.3', ['/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.3']),
    ('7f00-7f10 r-xp 00000000 fd:01 42 /opt/x/libnccl.so.2 (deleted)', ['/opt/x/libnccl.so.2']),  # upgraded under it
    ('7f00-7f10 r-xp 00000000 fd:01 42 /opt/x/libnccl-net.so', ['/opt/x/libnccl-net.so']),  # a plugin counts too
    ('7f00-7f10 r-xp 00000000 fd:01 42 /opt/libnccl/other.so', []),  # a directory of that name is not the library
    ('7f00-7f10 rw-p 00000000 00:00 0 ', []),
    ('7f00-7f10 rw-p 00000000 00:00 0 [heap]', []),
    ('', []),
])
def test_mapped_libraries_reads_the_path_field_only(line, expected):
    assert mapped_libraries(line) == expected


def make_proc(tmp_path, processes):
    """A /proc tree: {pid: (cgroup text, maps text, {path in its root: content})}."""
    for pid, (cgroup, maps, files) in processes.items():
        base = tmp_path / str(pid)
        base.mkdir()
        (base / 'cgroup').write_text(cgroup)
        (base / 'maps').write_text(maps)
        for path, content in files.items():
            target = base / 'root' / path.lstrip('/')
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    (tmp_path / 'self').mkdir()  # not a pid
    return str(tmp_path)


def lab_container_id():
    """The container id in the recorded cgroup lines (cgroupfs driver: `N:controller:/docker/<id>`)."""
    return CGROUP_LAB.strip().splitlines()[-1].rsplit('/', 1)[-1]


def test_the_engine_processes_are_found_by_their_containers_id_in_the_recorded_cgroup(tmp_path):
    engine = lab_container_id()
    assert len(engine) == 64
    proc = make_proc(tmp_path, {
        10: (CGROUP_LAB, '', {}),
        11: (CGROUP_LAB.replace(engine, 'a' * 64), '', {}),  # another container
        12: ('0::/init.scope\n', '', {}),  # the host's own
    })
    assert container_pids([engine, 'b' * 64], proc) == {engine: [10], 'b' * 64: []}


def test_the_systemd_drivers_cgroup_path_names_the_container_too(tmp_path):
    """Docker with the systemd cgroup driver on cgroup v2, as DGX OS runs it: one line, `docker-<id>.scope`."""
    proc = make_proc(tmp_path, {30: ('0::/system.slice/docker-%s.scope\n' % ('c' * 64), '', {})})
    assert container_pids(['c' * 64], proc) == {'c' * 64: [30]}


def test_the_library_is_hashed_through_the_processs_own_root(tmp_path):
    line = '7f00-7f10 r-xp 00000000 fd:01 42 %s\n' % WHEEL
    proc = make_proc(tmp_path, {
        20: (CGROUP_LAB, MAPS, {WHEEL: b'wheel build'}),
        21: (CGROUP_LAB, line, {WHEEL: b'wheel build'}),  # a second rank on the node: the same file, counted once
        22: (CGROUP_LAB, 'no library\n', {}),
    })
    found = loaded_by_processes([20, 21, 22, 99], proc)  # 99 ended meanwhile
    assert found == {'version': None, 'libraries': [(hashlib.sha256(b'wheel build').hexdigest(), WHEEL)], 'processes': 2}


def result(*libraries):
    return {'changed': False, 'libraries': [{'path': path, 'sha256': sha} for sha, path in libraries], 'processes': 1}


WHEEL_BUILD = ('1' * 64, '/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2')
OTHER_BUILD = ('2' * 64, '/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2')
SYSTEM_BUILD = ('3' * 64, '/usr/lib/aarch64-linux-gnu/libnccl.so.2')


@pytest.mark.parametrize('results, line_start, failure_parts', [
    ([result(WHEEL_BUILD), result(WHEEL_BUILD)], 'NCCL build: NCCL from /usr/local', []),
    # The same path, another file: the version string would agree, the sha256 does not.
    ([result(WHEEL_BUILD), result(OTHER_BUILD)], 'NCCL build: differs',
     ['spark-alpha,spark-beta: the nodes loaded different NCCL files', 'on spark-beta']),
    # One node's engine mapped the wheel's and the system's (an LD_PRELOAD): the first one loaded answers.
    ([result(WHEEL_BUILD, SYSTEM_BUILD), result(WHEEL_BUILD)], 'NCCL build: differs',
     ["spark-alpha: the engine's processes on this node mapped 2 NCCL libraries"]),
    # vLLM's CPU build (the lab): nothing mapped, nothing to compare.
    ([result(), result()], 'NCCL build: no engine process mapped a libnccl on spark-alpha, spark-beta', []),
    # A worker without a rank (Ray's head only, say) is left out of the comparison.
    ([result(WHEEL_BUILD), {'skipped': True}], 'NCCL build: NCCL from', []),
])
def test_nccl_builds_compares_the_nodes(results, line_start, failure_parts):
    builds = nccl_builds(results, HOSTS)
    assert builds['line'].startswith(line_start)
    text = '\n'.join(builds['failures'])
    assert all(part in text for part in failure_parts)
    assert bool(builds['failures']) == bool(failure_parts)


@pytest.mark.parametrize('results, hosts', [
    ([result()], HOSTS),  # one result for two hosts
    ('not a list', HOSTS),
    ([{'libraries': [{'path': '/x'}]}, result()], HOSTS),  # no sha256
])
def test_nccl_builds_refuses_what_is_not_one_result_a_host(results, hosts):
    with pytest.raises(AnsibleFilterError, match='nccl_builds'):
        nccl_builds(results, hosts)
