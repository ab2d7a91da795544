# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What status.yml says of the supervisor (roles/supervisor), from its last report (report.json on the head).

Pure logic, stdlib only. One line for the table (what it saw last, its restarts and budget), problems (it gave up; its
last probe got no token; its report is missing or stale: the service is not running) and notes (it restarted the
group and the group serves again; it is paused).
"""

from __future__ import annotations

import time

GIB_KIB = 1024.0 * 1024.0


def _ago(seconds):
    seconds = max(0, int(seconds))
    if seconds < 120:
        return '%d s' % seconds
    if seconds < 7200:
        return '%d min' % (seconds // 60)
    return '%.1f h' % (seconds / 3600.0)


def _stamp(seconds):
    return time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(seconds))


def _probe_text(probe, now):
    if not probe:
        return 'no probe yet'
    verdict = 'ok' if probe.get('ok') else 'no token (%s)' % (probe.get('error') or 'unknown')
    return 'last probe %s ago, %.2f s, %s' % (_ago(now - probe.get('time', now)), probe.get('latency_s') or 0.0, verdict)


def _memory_text(report):
    short = report.get('memory_short') or {}
    return '; '.join('%s: %s available, %.1f GiB needed' % (
        node, ('%.1f GiB' % (figures['available_kib'] / GIB_KIB)) if figures.get('available_kib') is not None else 'unknown',
        figures['needed_kib'] / GIB_KIB) for node, figures in sorted(short.items()))


def supervisor_status(report, now, expected=True, head='the head', paused=None):
    """(line or None, problems, notes) from the supervisor's report (a dict, or None when there is none). paused: whether
    its pause file is there now (None: not read); a pause or a resume newer than the report wins."""
    problems, notes = [], []
    if not report:
        if not expected:
            return None, problems, notes
        problems.append('The supervisor has no report on %s: dgxspark-supervisor.service is not installed or never ran '
                        '(`systemctl status dgxspark-supervisor` on %s; a deploy installs it).' % (head, head))
        return 'supervisor: no report', problems, notes
    phase = report.get('phase', '?')
    if paused is False and phase == 'paused':
        phase = 'resuming'  # resumed since the report: it acts again at its next look
    elif paused and phase != 'paused':
        report = dict(report, paused_by=report.get('paused_by') or 'since its last report')
        phase = 'paused'
    restarts = report.get('restarts') or []
    budget = '%d restart%s of %d in the last %s (%d left)' % (
        len(restarts), '' if len(restarts) == 1 else 's', report.get('budget_restarts', 0),
        _ago(report.get('budget_window_s', 0)), report.get('budget_left', 0))
    crashes = report.get('crashes') or []
    if crashes:  # restarts after the engine had served, in a budget of their own (a supervisor of before has none)
        budget += '; %d after serving of %d (%d left)' % (
            len(crashes), report.get('crash_budget_restarts', 0), report.get('crash_budget_left', 0))
    since = 'since %s' % _stamp(report['since']) if report.get('since') else ''
    line = 'supervisor: %s %s; %s; %s' % (phase, since, _probe_text(report.get('last_probe'), now), budget)
    age = now - report.get('time', 0)
    interval = report.get('interval_s') or 30
    if age > 3 * interval + 30:
        problems.append('The supervisor\'s last report on %s is %s old (it looks every %d s): dgxspark-supervisor.service is '
                        'stopped or stuck (`systemctl status dgxspark-supervisor` and `journalctl -u dgxspark-supervisor` on %s).'
                        % (head, _ago(age), interval, head))
    messages = ''.join('\n  | %s' % m for m in (report.get('messages') or [])[-5:])
    if phase == 'gave_up':
        memory = _memory_text(report)
        problems.append('The supervisor gave up at %s and left the group stopped: %s%s. Its last messages:%s\nFix the cause, then '
                        'resume it (`%s resume` on %s: a fresh budget) or deploy again.' % (
                            _stamp(report.get('since', now)), report.get('reason', ''),
                            ('. Memory: %s' % memory) if memory else '', messages or ' (none)',
                            '/usr/local/lib/dgxspark/supervisor/dgxspark_supervisor.py', head))
    elif phase == 'restarting':
        problems.append('The supervisor is restarting the group: %s' % report.get('reason', ''))
    elif phase == 'paused':
        notes.append('The supervisor is paused (%s): it restarts nothing until a deploy or `dgxspark_supervisor.py resume` on %s.'
                     % ((report.get('paused_by') or 'by an operator').strip(), head))
    elif phase == 'serving' and report.get('last_probe') and not report['last_probe'].get('ok'):
        problems.append('The supervisor\'s last probe got no token: %s (%s).' % (
            report['last_probe'].get('error') or 'unknown', report.get('reason', '')))
    if (restarts or crashes) and phase in ('serving', 'starting'):
        count = len(restarts) + len(crashes)
        notes.append('The supervisor restarted the group %d time%s in the last %s (last: %s); `journalctl -u '
                     'dgxspark-supervisor` on %s says why.'
                     % (count, '' if count == 1 else 's', _ago(report.get('budget_window_s', 0)),
                        _stamp(max(restarts + crashes)), head))
    return line, problems, notes
