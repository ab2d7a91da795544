# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress of a copy on one node (from the relay's progress file) as the line the controller prints, and the verdict
(running, done, failed, stalled) of the distribute_wait action."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import human_bytes


def _duration(seconds):
    seconds = int(round(seconds))
    if seconds >= 3600:
        return '%dh%02dm' % (seconds // 3600, seconds % 3600 // 60)
    if seconds >= 60:
        return '%dm%02ds' % (seconds // 60, seconds % 60)
    return '%ds' % seconds


def progress_line(node, label, progress, elapsed):
    """'spark-beta: model 1.2 GB of 2.1 GB (57%), 24.3 MB/s, about 37s left (52s elapsed)'."""
    if not progress:
        return '%s: %s waiting for the transfer to start (%s elapsed)' % (node, label, _duration(elapsed))
    moved, total = int(progress.get('bytes') or 0), int(progress.get('total') or 0)
    rate = moved / elapsed if elapsed > 0 else 0.0
    parts = ['%s: %s %s' % (node, label, human_bytes(moved))]
    if total:
        parts[0] += ' of %s (%d%%)' % (human_bytes(total), min(100, 100 * moved // total))
    parts.append('%s/s' % human_bytes(rate))
    if total and rate > 0 and moved < total:
        parts.append('about %s left' % _duration((total - moved) / rate))
    return ', '.join(parts) + ' (%s elapsed)' % _duration(elapsed)


def verdict(progress, job, stalled_for, stall_timeout):
    """(state, message): state is running, done or failed.

    `job` is the async job's status (None when the node's part runs under another node's job), `progress` the relay's
    progress file (None before it exists), `stalled_for` the seconds since the byte count last moved."""
    if job is not None and job.get('finished'):
        if job.get('rc', 1) == 0 and not job.get('failed'):
            return 'done', ''
        err = (job.get('stderr') or job.get('msg') or '').strip().splitlines()
        return 'failed', (err[-1] if err else 'the transfer failed (exit code %s)' % job.get('rc'))
    if job is None and progress:
        if progress.get('status') == 'done':
            return 'done', ''
        if progress.get('status') == 'failed':
            return 'failed', progress.get('error') or 'the transfer failed'
    if stalled_for > stall_timeout:
        return 'failed', 'no progress for %d s' % stall_timeout
    return 'running', ''


def distribute_wait_argument_spec():
    """The options of the dgxspark.cluster.distribute_wait action (shared by the action and its documentation module)."""
    return {
        'progress_file': {'type': 'str', 'required': True},
        'label': {'type': 'str', 'default': 'transfer'},
        'jid': {'type': 'str'},
        'timeout': {'type': 'int', 'default': 86400},
        'stall_timeout': {'type': 'int', 'default': 300},
        'progress_interval': {'type': 'int', 'default': 30},
        'poll_interval': {'type': 'int', 'default': 5},
    }
