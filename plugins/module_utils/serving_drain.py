# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drain of a replica that a rolling release took out of the fleet's router (issue 51 item 3): wait until its engine
runs and queues no request (vLLM's /metrics, read with the API key), up to a deadline. Stdlib only: it runs on the head."""

from __future__ import annotations

import time

# vLLM's gauges of the requests it holds: being decoded, and queued for a free slot (summed over its engines).
IN_FLIGHT = ('vllm:num_requests_running', 'vllm:num_requests_waiting')


def requests_in_flight(text):
    """The requests vLLM runs and queues, summed over its series, from its /metrics (Prometheus' text format).

    None when a gauge is missing (an engine that is not vLLM, or not serving yet): a drain must not take that as idle."""
    found = {}
    for line in text.splitlines():
        if not line or line.startswith('#'):
            continue
        name = line.split('{', 1)[0].split(' ', 1)[0]
        if name not in IN_FLIGHT:
            continue  # ..._waiting_by_reason and the like start alike but are other families
        rest = line[line.rindex('}') + 1:] if '{' in line else line[len(name):]
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        found[name] = found.get(name, 0.0) + value
    if len(found) != len(IN_FLIGHT):
        return None
    return int(round(sum(found.values())))


def wait_drained(read_metrics, timeout, interval=1.0, clock=time.monotonic, sleep=time.sleep):
    """Read the engine's in-flight requests every ``interval`` s until they are 0, or ``timeout`` s have passed.

    read_metrics(): the /metrics text, or raises OSError/ValueError (counted as unread, tried again), or
    ConnectionRefusedError (nothing listens: no request can be in flight, drained at once). Returns a dict:
    ``drained`` (bool), ``in_flight`` (the last count read, None if never read), ``waited_s``, ``reads``, ``error`` (the last
    read's error, or None)."""
    started = clock()
    result = {'drained': False, 'in_flight': None, 'waited_s': 0.0, 'reads': 0, 'error': None}
    while True:
        result['reads'] += 1
        try:
            count = requests_in_flight(read_metrics())
            result['error'] = None if count is not None else 'the /metrics read lists no vllm:num_requests_running or _waiting'
        except ConnectionRefusedError as exc:
            result.update(drained=True, in_flight=0, waited_s=round(clock() - started, 1),
                          error='nothing listens (%s): no request in flight' % exc)
            return result
        except (OSError, ValueError) as exc:
            count, result['error'] = None, str(exc)
        if count is not None:
            result['in_flight'] = count
        result['waited_s'] = round(clock() - started, 1)
        if count == 0:
            result['drained'] = True
            return result
        if clock() - started + interval > timeout:
            return result
        sleep(interval)
