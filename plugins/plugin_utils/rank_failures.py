# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ranks of vLLM's own multi-node backend (mp) that failed, read from each node's container and log.

With Ray, a rank's exception reaches the engine's log on the head (Ray forwards it: ``RayTaskError(...)``). With mp,
each rank runs in its node's own container: when one fails (a corrupt shard on that node, say), rank 0 on the head
only sees its peer go (gloo's ``Connection closed by peer [ADDRESS]``). The readiness check of the head then names the
ranks that stopped, the first to stop first, each with its first exceptions and last error lines: the cause first.

Pure logic, stdlib only (the vllm_container role reads the containers and logs of the other nodes).
"""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_progress import (
    VllmProgressError, container_state, error_lines, first_exceptions, split_log_lines)

LAST_LINES = 5


class RankFailuresError(ValueError):
    """Input of the wrong shape."""


def stopped_ranks(ranks):
    """[{host, rank, inspect (docker inspect: the list, one element or its JSON; None: no container), log (text)}] ->
    the ranks whose container is not running, the first to stop first (a missing container last): [{host, rank,
    status, exit_code, finished_at, oom_killed, exceptions, last_lines}]."""
    if not isinstance(ranks, list):
        raise RankFailuresError('expects a list of ranks, not %s' % type(ranks).__name__)
    stopped = []
    for rank in ranks:
        if not isinstance(rank, dict) or 'host' not in rank:
            raise RankFailuresError('each rank is a mapping with host, rank, inspect and log, not %r' % (rank,))
        try:
            state = container_state(rank.get('inspect') or [])
            lines = split_log_lines(rank.get('log') or '')
        except VllmProgressError as exc:
            raise RankFailuresError('%s: %s' % (rank['host'], exc)) from exc
        if state['running'] and not state['restarting']:
            continue
        stopped.append({'host': rank['host'], 'rank': rank.get('rank'), 'status': state['status'] or 'missing',
                        'exit_code': state['exit_code'], 'finished_at': state['finished_at'],
                        'oom_killed': state['oom_killed'], 'exceptions': first_exceptions(lines),
                        'last_lines': error_lines(lines, limit=LAST_LINES)})
    # RFC 3339 times of one clock sort as text; a rank with no container (no time) comes last.
    return sorted(stopped, key=lambda r: (r['finished_at'] is None, r['finished_at'] or '', str(r['rank'])))


def _block(lines):
    return ''.join('\n  | %s' % (line if len(line) <= 400 else line[:399] + '...') for line in lines)


def failures_text(ranks, container):
    """The paragraph that comes before the head's own failure: '' when every other rank still runs."""
    stopped = stopped_ranks(ranks)
    if not stopped:
        return ''
    parts = []
    for index, rank in enumerate(stopped):
        how = 'has no container' if rank['status'] == 'missing' else 'stopped (status %s, exit code %s%s%s)' % (
            rank['status'], rank['exit_code'], ', killed for lack of memory' if rank['oom_killed'] else '',
            ', at %s' % rank['finished_at'] if rank['finished_at'] else '')
        text = '%sThe rank on %s (rank %s) %s.' % ('First: ' if index == 0 and len(stopped) > 1 else '', rank['host'],
                                                   rank['rank'], how)
        if rank['exceptions']:
            text += ' Its first exceptions:%s' % _block(rank['exceptions'])
        elif rank['last_lines']:
            text += ' Its last lines:%s' % _block(rank['last_lines'])
        parts.append(text)
    count = len(stopped)
    return ('vLLM\'s own multi-node backend (mp): %d other rank%s stopped while rank 0 waited; the cause is in the first '
            'one\'s log (`docker logs %s` on that node).\n%s' % (count, '' if count == 1 else 's', container, '\n'.join(parts)))
