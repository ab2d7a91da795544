# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM waiting for its Ray placement group, read from its log, and what to tell the user.

vLLM's Ray executor (vllm/v1/executor/ray_utils.py, 0.32) asks Ray for one placement group of ``world_size`` bundles of
one device each, strategy PACK, with bundle 0 pinned to the engine's own node by the resource ``node:<VLLM_HOST_IP or
the address of the default route>``. While Ray cannot place it, vLLM logs "Waiting for creating a placement group of
specs for N seconds. specs=[...]" at growing intervals. On one-GPU hosts with several NICs the pin is what fails
(eugr/spark-vllm-docker #227): vLLM pins the address of one interface while Ray registered the node with another, so
no node has the pinned resource and the group waits for ever.
"""

from __future__ import annotations

import ast
import re

STRATEGY = 'PACK'  # what vLLM 0.32's ray_utils asks for; the message names it, a SPREAD fix would change only this
_WAIT = re.compile(r'Waiting for creating a placement group of specs for (?P<seconds>\d+) seconds\. specs=(?P<specs>\[.*?\])\.')


def parse_placement_wait(line):
    """One vLLM log line -> {'seconds', 'bundles', 'device', 'pinned'} (pinned: the IP of bundle 0's ``node:`` resource, or
    ''), or None when the line is not vLLM's placement wait."""
    match = _WAIT.search(line or '')
    if not match:
        return None
    try:
        specs = ast.literal_eval(match.group('specs'))
    except (ValueError, SyntaxError):
        specs = []
    bundles = [spec for spec in specs if isinstance(spec, dict)]
    pinned = next((key[len('node:'):] for key in (bundles[0] if bundles else {}) if key.startswith('node:')), '')
    devices = sorted(set(key for spec in bundles for key in spec if not key.startswith('node:')))
    return {'seconds': int(match.group('seconds')), 'bundles': len(bundles), 'device': '/'.join(devices) or '?', 'pinned': pinned}


def latest_placement_wait(lines):
    """The last placement wait among log lines (newest last), or None."""
    for line in reversed(list(lines)):
        found = parse_placement_wait(line)
        if found:
            return found
    return None


def placement_text(wait):
    """A short report part: 'Ray placement group pending 40 s (PACK, 4 bundles of 1 GPU, bundle 0 on node:192.168.100.10)'."""
    return 'Ray placement group pending %d s (%s, %d bundles of 1 %s%s)' % (
        wait['seconds'], STRATEGY, wait['bundles'], wait['device'],
        ', bundle 0 on node:%s' % wait['pinned'] if wait['pinned'] else '')


def placement_advice(wait):
    """What to check when vLLM still waits for its placement group."""
    pin = ('bundle 0 is pinned to the resource node:%s, which only a Ray node registered with that address has: on the head, '
           'VLLM_HOST_IP must be the address Ray started with (--node-ip-address; the plan sets both to rail 1\'s address, and a '
           'different one, e.g. the management interface\'s, waits for ever, eugr/spark-vllm-docker #227); ' % wait['pinned']
           if wait['pinned'] else '')
    return ('vLLM has waited %d s for its Ray placement group (strategy %s, %d bundles of 1 %s): %severy node must have a free %s '
            'in Ray. Compare `ray status` and `ray list nodes` in the head\'s Ray container with the plan\'s rail addresses.' % (
                wait['seconds'], STRATEGY, wait['bundles'], wait['device'], pin, wait['device']))
