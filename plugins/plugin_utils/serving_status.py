# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The read-only status of a serving cluster (playbooks/status.yml): one table row per node (Ray
container, Ray membership, vLLM health, served model, uptime) and the list of problems.

Pure logic, stdlib only. Inputs: the cluster plan, what dgxspark.cluster.serving_probe returned for
each node's Ray container, the probe of the vLLM container on the head (with url, models and chat),
the ray_membership result (null when the head could not be asked) and the unreachable hosts.
"""

from __future__ import annotations

import calendar
import datetime
import time

from ansible_collections.dgxspark.cluster.plugins.module_utils.release import status_line
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.supervisor_status import supervisor_status
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_progress import (
    VllmProgressError,
    error_lines,
    format_duration,
    timestamp_seconds,
)


class ServingStatusError(ValueError):
    """The inputs of the status table (plan, probes, membership, now) are of the wrong shape."""


def _now_seconds(now):
    if now is None:
        return time.time()
    if isinstance(now, bool):
        raise ServingStatusError('now must be a time, got %r' % (now,))
    if isinstance(now, (int, float)):
        return float(now)
    if isinstance(now, datetime.datetime):
        if now.tzinfo is None:
            return calendar.timegm(now.timetuple()) + now.microsecond / 1e6
        return now.timestamp()
    if isinstance(now, str):
        try:
            return timestamp_seconds(now)
        except VllmProgressError:
            pass
    raise ServingStatusError('now must be epoch seconds, an RFC 3339 time such as 2026-11-23T17:14:38Z, or a UTC datetime '
                             '(now(utc=true)); got %r' % (now,))


def _nodes(plan):
    if not isinstance(plan, dict) or not isinstance(plan.get('nodes'), list):
        raise ServingStatusError('the cluster plan must be a mapping with a list "nodes" (the plan of dgxspark.cluster.cluster_plan); '
                                 'got %s' % type(plan).__name__)
    nodes = []
    for index, node in enumerate(plan['nodes']):
        if not isinstance(node, dict) or not node.get('host'):
            raise ServingStatusError('node %d of the cluster plan has no host: give the plan of dgxspark.cluster.cluster_plan.' % index)
        nodes.append({'host': node['host'], 'rank': node.get('rank', index), 'role': node.get('role') or ('head' if index == 0 else 'worker')})
    return nodes


def _container_of(probe):
    """The probe's container record; None for a probe that did not run (null, {}, a skipped or failed task result)."""
    if probe is None:
        return None
    if not isinstance(probe, dict):
        raise ServingStatusError('a probe must be the result of dgxspark.cluster.serving_probe (a mapping with "container"), got %r' % (
            type(probe).__name__,))
    if isinstance(probe.get('container'), dict):
        return probe['container']
    if not probe or probe.get('skipped') or probe.get('failed') or probe.get('unreachable'):
        return None
    raise ServingStatusError('a probe must be the result of dgxspark.cluster.serving_probe (a mapping with "container"), got the keys %s' % (
        ', '.join(sorted(probe)),))


def _not_probed_reason(probe):
    """Why a probe has no container record, as a clause (empty when nothing says why)."""
    if isinstance(probe, dict) and (probe.get('failed') or probe.get('unreachable')) and probe.get('msg'):
        return ' (the probe failed: %s)' % ' '.join(str(probe['msg']).split())[:300]
    if isinstance(probe, dict) and probe.get('skipped'):
        return ' (the probe was skipped)'
    return ''


def _container_cell(container):
    if container is None:
        return 'not probed'
    if not container.get('exists'):
        return 'missing'
    text = container.get('status') or '?'
    if not container.get('running') and container.get('exit_code') is not None:
        text += ' (exit %s)' % container['exit_code']
    restarts = int(container.get('restart_count') or 0)
    if restarts:
        text += ', %d restart%s' % (restarts, '' if restarts == 1 else 's')
    return text


def _uptime(container, now):
    if not container or not container.get('running'):
        return '-'
    started = timestamp_seconds(container.get('started_at'))
    return '-' if started is None else format_duration(now - started)


def _name(container, default):
    return (container or {}).get('name') or default


def _lines_text(lines):
    return ''.join('\n  | %s' % line for line in lines)


def _first_text(exceptions):
    """The first exceptions of the container's last run (serving_probe), where the cause usually is."""
    return ('\nIts first exceptions:%s' % _lines_text(exceptions)) if exceptions else ''


def _container_problems(kind, host, container, probe, problems, crash_lines, healthy=None, notes=None):
    """Problems of one container (not running, restarted); crash_lines: how many error lines to quote. healthy: whether
    what it serves works now (Ray: the node is alive in Ray; vLLM: /health 200), None when unknown. A container Docker
    restarted that works again healed by itself: a note, not a problem."""
    name = _name(container, 'the %s container' % kind)
    restarts = int(container.get('restart_count') or 0)
    code = container.get('exit_code')
    logs = (probe or {}).get('logs') or []
    oom = ', killed for lack of memory (OOMKilled): lower gpu_memory_utilization or max_model_len' if container.get('oom_killed') else ''
    if restarts > 0 and container.get('running') and healthy:
        if notes is not None:
            notes.append('The %s container %s on %s was restarted %d time%s by Docker and works again (it healed by itself); '
                         '`docker logs %s` on %s says why it exited.' % (kind, name, host, restarts, '' if restarts == 1 else 's',
                                                                         name, host))
        return
    crash_loop = container.get('restarting') or (restarts > 0 and code not in (None, 0))
    first = _first_text((probe or {}).get('first_exceptions'))
    if crash_loop or (kind == 'vLLM' and restarts > 0):
        lines = error_lines(logs, limit=crash_lines)
        problems.append(
            'The %s container %s on %s is in a crash loop: Docker restarted it %d time%s (status %s, exit code %s%s).%s\nIts last error '
            'lines:%s\nFix the cause these lines name, then start it again with the serving role; `docker logs %s` on %s shows the '
            'whole log.' % (kind, name, host, restarts, '' if restarts == 1 else 's', container.get('status'), 'none' if code is None else code,
                            oom, first, _lines_text(lines) if lines else ' (none in the log read)', name, host))
        return
    if not container.get('running'):
        lines = error_lines(logs, limit=5)
        problems.append(
            'The %s container %s on %s is not running (status %s, exit code %s%s%s).%s%s\nRead `docker logs %s` on %s and start it '
            'again with the serving role.' % (kind, name, host, container.get('status'), 'none' if code is None else code, oom,
                                              ('; Docker says: %s' % container['error']) if container.get('error') else '', first,
                                              ('\nIts last error lines:%s' % _lines_text(lines)) if lines else '', name, host))
    if restarts > 0:
        problems.append(
            'The %s container %s on %s was restarted %d time%s by Docker since it was created: it exited that many times; read '
            '`docker logs %s` on %s for the reason.' % (kind, name, host, restarts, '' if restarts == 1 else 's', name, host))


def _vllm_cells_and_problems(vllm, head, served_model_name, problems, notes=None):
    """(health cell, model cell, summary line) for the head's row; appends the vLLM problems."""
    container = _container_of(vllm)
    if container is None:
        problems.append('vLLM on the head (%s) was not probed%s: start it with the serving role, or check why the status playbook could '
                        'not probe it.' % (head, _not_probed_reason(vllm)))
        return 'not probed', '-', 'vLLM: not probed'
    name = _name(container, 'the vLLM container')
    if not container.get('exists'):
        problems.append('The vLLM container does not exist on the head (%s): start serving with the serving role.' % head)
        return 'no container', '-', 'vLLM: no container on %s' % head
    health = vllm.get('health') or {}
    _container_problems('vLLM', head, container, vllm, problems, 10, healthy=health.get('status') == 200, notes=notes)
    url = vllm.get('url') or ((vllm.get('invocation') or {}).get('module_args') or {}).get('url')
    status = health.get('status')
    if vllm.get('health') is None:
        health_cell = 'not asked'
    elif status is None:
        health_cell = 'no answer'
    else:
        health_cell = str(status)
    if health_cell != 'not asked' and status != 200:
        answer = 'does not answer (%s)' % (health.get('error') or 'no error text') if status is None else 'answers HTTP %s' % status
        problems.append('vLLM /health on %s%s %s: %s.' % (
            head, ' (%s)' % url if url else '', answer,
            'the server is not up (still loading, or crashed: read `docker logs %s`)' % name if status is None
            else 'the engine is not healthy (an engine core died: read `docker logs %s` and restart serving)' % name))
    models = vllm.get('models')
    if models is None:
        model_cell = '-'
        if status == 200:
            problems.append('/v1/models on %s did not answer a list (HTTP %s%s): check the API key (api_key_file).' % (
                head, vllm.get('models_status'), ', %s' % vllm['models_error'] if vllm.get('models_error') else ''))
    elif served_model_name and served_model_name not in models:
        model_cell = '%s (expected %s)' % (', '.join(models) or 'none', served_model_name)
        problems.append('vLLM on %s lists %s in /v1/models, not %s: the served model name differs; set --served-model-name to %s '
                        '(and restart serving) or fix the expected name.' % (
                            head, ', '.join(models) or 'no model', served_model_name, served_model_name))
    elif not models:
        model_cell = 'none'
        problems.append('vLLM on %s lists no model in /v1/models.' % head)
    else:
        model_cell = ', '.join(models)
    chat = vllm.get('chat')
    chat_text = 'chat not asked'
    if chat is not None:
        if chat.get('status') == 200 and (chat.get('content') or '').strip():
            chat_text = 'chat answered: %s' % ' '.join(chat['content'].split())[:120]
        else:
            chat_text = 'chat failed'
            problems.append('A chat completion on %s failed (%s): the engine is up but cannot generate; read `docker logs %s`.' % (
                head, chat.get('error') or 'HTTP %s' % chat.get('status'), name))
    unauthorized = vllm.get('unauthorized_status')
    if unauthorized is not None and unauthorized != 401:
        problems.append('Without the API key, /v1/models on %s answers HTTP %s, not 401: the server does not enforce the key; start vLLM '
                        'with --api-key (or VLLM_API_KEY).' % (head, unauthorized))
    line = 'vLLM: container %s on %s %s; /health %s; model %s; %s' % (
        name, head, _container_cell(container), health_cell, model_cell, chat_text)
    return health_cell, model_cell, line


def _render(header, rows):
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    fmt = '  '.join('%%-%ds' % w for w in widths)
    lines = [(fmt % tuple(header)).rstrip(), (fmt % tuple('-' * w for w in widths)).rstrip()]
    lines.extend((fmt % tuple(r)).rstrip() for r in rows)
    return lines


def _firewall_problems(nodes, firewall, unreachable):
    """One sentence per node whose firewall table is not loaded as the firewall phase loaded it."""
    if firewall is None:
        return []
    if not isinstance(firewall, dict):
        raise ServingStatusError('firewall must map each host to its nft_table result, got %s' % type(firewall).__name__)
    problems = []
    for node in nodes:
        host = node['host']
        state = firewall.get(host)
        if host in unreachable or not isinstance(state, dict) or state.get('skipped'):
            continue
        problem = state.get('problem') or (state.get('msg') if state.get('failed') else None)
        if problem:
            problems.append('The firewall of %s: %s.' % (host, problem.rstrip('.')))
    return problems


def build_serving_status(plan, probes, vllm=None, membership=None, unreachable=None, now=None, served_model_name=None,
                         firewall=None, supervisor=None, release=None):
    """The status table and the problems.

    plan: the cluster plan (``nodes`` with ``host``, ``rank``, ``role``). probes: host -> serving_probe
    result of that node's Ray container (a missing host: not probed). vllm: the serving_probe result of
    the vLLM container on the head, with ``health``, ``models`` and ``chat``, or None. membership: the
    ray_membership result, or None when the head could not be asked. unreachable: hosts Ansible could
    not reach. now: the current time (epoch seconds, RFC 3339, or a UTC datetime) for the uptimes.
    served_model_name: the name /v1/models must list (default: the plan's ``served_model_name``, else
    the one the vLLM probe was given, else any model counts). A probe that did not run (null, {}, a
    skipped or failed task result) counts as not probed. firewall: host -> dgxspark.cluster.nft_table
    result for that node's firewall table (a missing host or null: not read, no problem said). supervisor: None (not
    read), or {"expected": bool, "report": the supervisor's report.json or None, "paused": whether its pause file is
    there now} (supervisor_status.py). release: the head's dgxspark.cluster.serving_release result (its line of the
    table: the current release, the previous one), or None.

    Returns ``ok``, ``table`` (text lines), ``problems`` (sentences) and ``rows`` (one dict per node).
    """
    nodes = _nodes(plan)
    if probes is None:
        probes = {}
    if not isinstance(probes, dict):
        raise ServingStatusError('probes must map each host to its serving_probe result, got %s' % type(probes).__name__)
    unreachable = list(unreachable or [])
    if membership is not None and (not isinstance(membership, dict) or 'alive' not in membership):
        raise ServingStatusError('membership must be the result of the dgxspark.cluster.ray_membership filter (or null), got %r' % (
            type(membership).__name__,))
    current = _now_seconds(now)
    served_model_name = served_model_name or plan.get('served_model_name') or (vllm or {}).get('served_model_name') or (
        ((vllm or {}).get('invocation') or {}).get('module_args') or {}).get('served_model_name')
    head = plan.get('head') or next((n['host'] for n in nodes if n['role'] == 'head'), nodes[0]['host'] if nodes else None)
    # Where the plan runs no Ray (vLLM's own multi-node backend, mp) each node's probe is of its vLLM rank's container.
    mp = not any('ray' in node['runs'] for node in plan['nodes'])
    kind = 'vLLM rank' if mp else 'Ray'
    problems = []

    for host in unreachable:
        problems.append('%s could not be reached by Ansible: its Ray and vLLM state is unknown; check that the node is up and that SSH '
                        'to it works.' % host)

    ray_state = {}
    if membership is not None:
        for item in membership.get('alive') or []:
            ray_state[item['host']] = 'alive, %s GPU%s' % (item['gpus'], '' if item['gpus'] == 1 else 's')
        for item in membership.get('missing') or []:
            ray_state[item['host']] = 'missing'
        for item in membership.get('dead') or []:
            if item.get('host'):
                ray_state[item['host']] = 'dead'

    vllm_health, vllm_model, vllm_line = '-', '-', None
    vllm_problems = []
    notes = []
    if head in unreachable:
        vllm_line = 'vLLM: unknown (%s unreachable)' % head
    else:
        vllm_health, vllm_model, vllm_line = _vllm_cells_and_problems(vllm, head, served_model_name, vllm_problems, notes)

    rows = []
    for node in nodes:
        host = node['host']
        if host in unreachable:
            container = None
            cell = 'unreachable'
        else:
            container = _container_of(probes.get(host))
            cell = _container_cell(container)
            if container is None:
                problems.append('The %s container of %s was not probed%s: check why the status playbook skipped it.' % (
                    kind, host, _not_probed_reason(probes.get(host))))
            elif not container.get('exists'):
                problems.append('The %s container does not exist on %s: start the cluster with the serving role.' % (kind, host))
            else:
                _container_problems(kind, host, container, probes.get(host), problems, 10,
                                    healthy=None if membership is None else ray_state.get(host, '').startswith('alive'), notes=notes)
        row = {
            'host': host, 'rank': node['rank'], 'role': node['role'], 'ray_container': cell,
            'ray': '-' if mp else ray_state.get(host, '?' if membership is None else 'missing'),
            'vllm_health': vllm_health if host == head else '-',
            'served_model': vllm_model if host == head else '-',
            'uptime': _uptime(container, current),
        }
        rows.append(row)

    if mp:
        pass  # no Ray: each rank's container above, and the engine's answer below
    elif membership is None:
        if head not in unreachable:
            problems.append('The Ray membership is unknown: the Ray node list could not be read on the head (%s); check its Ray container '
                            'and run `ray status` in it.' % head)
    else:
        problems.extend(membership.get('problems') or [])
    problems.extend(vllm_problems)
    problems.extend(_firewall_problems(nodes, firewall, unreachable))

    header = ('node', 'rank', 'role', 'rank container' if mp else 'ray container', 'Ray', 'vLLM health', 'served model', 'uptime')
    table = _render(header, [(r['host'], str(r['rank']), r['role'], r['ray_container'], r['ray'], r['vllm_health'], r['served_model'],
                              r['uptime']) for r in rows])
    if mp:
        master = plan.get('mp_master') or {}
        table.append("Ranks: vLLM's own multi-node backend (mp), %d nodes, rendezvous %s:%s" % (
            len(nodes), master.get('address', '?'), master.get('port', '?')))
    else:
        table.append('Ray: %s' % (membership.get('summary') if membership is not None else 'membership unknown'))
    if vllm_line:
        uptime = _uptime(_container_of(vllm), current) if vllm is not None and head not in unreachable else '-'
        table.append(vllm_line + ('; up %s' % uptime if uptime != '-' else ''))
    if supervisor is not None and head not in unreachable:
        line, supervisor_problems, supervisor_notes = supervisor_status(
            supervisor.get('report'), current, expected=supervisor.get('expected', True), head=head,
            paused=supervisor.get('paused'))
        if line:
            table.append(line)
        problems.extend(supervisor_problems)
        notes.extend(supervisor_notes)
    release_line = status_line(release) if head not in unreachable else None
    if release_line:
        table.append(release_line)
    return {'ok': not problems, 'table': table, 'problems': problems, 'rows': rows, 'notes': notes,
            'call': call_lines(plan.get('api')) if not problems else []}


def call_lines(api):
    """How a client calls the endpoint (the plan's api): printed under a healthy table, so that a deploy with nothing to
    do, or status.yml, says where the model is served and how to call it, as the first deploy did."""
    if not api:
        return []
    key = '<vllm_container_api_key>' if api.get('api_key_given') else '$(cat %s)' % api['api_key_file']
    tls = api.get('tls') or {}
    # a CA of the cluster's (generated, or the user's own) is named; a public CA's certificate needs nothing
    cacert = '--cacert %s ' % tls['controller']['ca_file'] if tls.get('enabled') and tls.get('ca_file') else ''
    return [
        'Endpoint: %s serving %s' % (api['url'], api['served_model_name']),
        '  curl -s %s%s/chat/completions -H "Authorization: Bearer %s" -H \'Content-Type: application/json\' \\' % (
            cacert, api['url'], key),
        '    -d \'{"model": "%s", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 64}\'' % api['served_model_name'],
    ]
