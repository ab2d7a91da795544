# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drain of a replica out of the fleet's router (module_utils/serving_drain.py, issue 51 item 3), over the lab's real
vLLM /metrics (tests/unit/fixtures/supervisor/README.md says where each file comes from)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import serving_drain

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures', 'supervisor')


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


IDLE, BUSY = fixture('vllm_0.32_cpu_metrics_idle.txt'), fixture('vllm_0.32_cpu_metrics_busy.txt')
QUEUED = BUSY.replace('vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3.5-397B-A17B-FP8"} 0.0',
                      'vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3.5-397B-A17B-FP8"} 3.0')
TWO_ENGINES = IDLE + 'vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3.5-397B-A17B-FP8"} 1.0\n'


@pytest.mark.parametrize('text, expected', [
    (IDLE, 0),
    (BUSY, 2),
    (QUEUED, 5),  # queued requests count: they would be cut too
    (TWO_ENGINES, 1),  # summed over the engines (data parallel)
    ('\n'.join(l for l in IDLE.splitlines() if not l.startswith('vllm:num_requests_running')), None),
    ('# HELP python_info\npython_info{version="3.12"} 1.0\n', None),  # not vLLM's metrics: never taken as idle
    ('', None),
], ids=['idle', 'two-running', 'running-and-queued', 'two-engines', 'no-running-gauge', 'not-vllm', 'empty'])
def test_the_requests_in_flight_are_running_plus_waiting_summed_over_the_engines(text, expected):
    assert serving_drain.requests_in_flight(text) == expected


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def reader(sequence):
    reads = iter(sequence)

    def read():
        item = next(reads)
        if isinstance(item, Exception):
            raise item
        return item
    return read


@pytest.mark.parametrize('reads, timeout, drained, in_flight, count, waited, error', [
    ([IDLE], 120, True, 0, 1, 0.0, None),
    ([BUSY, BUSY, QUEUED, IDLE], 120, True, 0, 4, 3.0, None),
    ([TimeoutError('timed out'), IDLE], 120, True, 0, 2, 1.0, None),
    ([BUSY] * 10, 4.5, False, 2, 5, 4.0, None),
    ([BUSY, BUSY, TimeoutError('timed out')], 2, False, 2, 3, 2.0, 'timed out'),
    ([ConnectionRefusedError(111, 'Connection refused')], 120, True, 0, 1, 0.0, 'nothing listens'),
    ([BUSY, ConnectionRefusedError(111, 'Connection refused')], 120, True, 0, 2, 1.0, 'nothing listens'),
    (['not metrics'] * 3, 2, False, None, 3, 2.0, 'the /metrics read lists no vllm:num_requests_running or _waiting'),
    ([BUSY], 0, False, 2, 1, 0.0, None),  # check mode: one read, no wait
], ids=['idle-at-once', 'drains-after-3-s', 'slow-then-idle', 'deadline', 'slow-at-the-deadline', 'nothing-listens',
        'stopped-while-draining', 'never-vllm', 'check-mode'])
def test_a_drain_waits_until_no_request_is_in_flight_or_the_deadline(reads, timeout, drained, in_flight, count, waited, error):
    clock = Clock()
    result = serving_drain.wait_drained(reader(reads), timeout, 1.0, clock=clock, sleep=clock.sleep)
    assert result['drained'] is drained
    assert result['in_flight'] == in_flight
    assert result['reads'] == count
    assert result['waited_s'] == waited
    assert (error in result['error']) if error else result['error'] is None
