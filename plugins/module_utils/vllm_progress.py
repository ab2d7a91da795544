# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readiness of a vLLM server in a Docker container: Docker log parsing, vLLM's weight-loading
progress line, the lines that explain a failure, and the watch that decides, probe after probe,
whether the server is still coming up, ready, or failed (and why).

Pure logic, no Ansible objects, stdlib only: the serving_probe module runs ``docker inspect``,
``docker logs --timestamps`` and the HTTP checks on the node; the vllm_ready action feeds each
probe result to a ReadinessWatch and prints its progress report.

Decisions of the watch, in this order, on every probe:
  container missing                                   -> failed at once
  not running / restarting / restarted / exit code    -> failed at once, with the last error lines
  /health 200, served model listed, chat answered     -> ready
  server up but the key, the model name or chat fails -> failed after CONFIRMATIONS probes in a row
  overall timeout exceeded                            -> failed, with the last progress and lines
  no new log line and no new progress (stall_timeout) -> failed, naming the likely causes
  otherwise                                           -> waiting
"""

from __future__ import annotations

import calendar
import json
import re
import time
from collections import deque

from ansible_collections.dgxspark.cluster.plugins.module_utils.placement_wait import latest_placement_wait, placement_advice, placement_text

DEFAULT_TIMEOUT = 3600
DEFAULT_STALL_TIMEOUT = 900
DEFAULT_PROGRESS_INTERVAL = 30
# Probes in a row in which the server answers but refuses the key, lists other models or fails the
# chat request before the watch gives up (a server that has just come up may answer 503 once).
CONFIRMATIONS = 3
# Lines of the container log the watch keeps for error_lines and last_lines.
HISTORY_LINES = 5000
STALL_VARIABLE = 'vllm_container_stall_timeout'

_ANSI = re.compile(r'\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[@-Z\\-_]')
_CONTROL = re.compile(r'[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]')
_DOCKER_TS = re.compile(r'^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ?')
_RFC3339 = re.compile(r'^(?P<date>\d{4})-(?P<month>\d\d)-(?P<day>\d\d)[Tt ](?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<frac>\d+))?'
                      r'(?P<zone>[Zz]|[+-]\d\d:\d\d)$')
# vLLM's weight-loading bar (vllm/model_executor/model_loader/weight_utils.py, _BAR_FORMAT
# "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"),
# desc "Loading safetensors checkpoint shards" (also "Loading pt ...", "Loading np_cache ...",
# "Preloading safetensors ..."), optionally behind a process prefix such as "(EngineCore_DP0 pid=123)"
# or "(RayWorkerProc pid=345, ip=192.168.100.11)" (vLLM 0.32's Ray executor, as seen in the lab).
_PROGRESS = re.compile(r'(?P<desc>(?:Pre)?[Ll]oading [\w. -]*?checkpoint shards):\s*(?P<percent>\d{1,3})%\s*Completed\s*\|\s*'
                       r'(?P<done>\d+)/(?P<total>\d+)')
# A process prefix of a vLLM log line: (EngineCore_DP0 pid=312), (RayWorkerWrapper pid=401, ip=192.168.100.11).
_PREFIX = re.compile(r'\((?P<name>[A-Za-z_][\w]*) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[\d.:a-fA-F]+))?\)')
# pydantic's detail lines ("  Value error, Unknown quantization method: nvfp4 [type=value_error, ...]") carry vLLM's own
# message for a rejected option, under a ValidationError line that does not.
_ERROR_WORDS = re.compile(r'ERROR|Error|Traceback|raise |Exception|exited|error:|Killed|out of memory|[Ff]atal|Value error, |'
                          r'\[type=[a-z_]+')
FINAL_LINES = 5


class VllmProgressError(ValueError):
    """Input of the readiness logic (log text, timestamps, probe results, settings) of the wrong shape."""


# ---------------------------------------------------------------------------------- Docker logs

def strip_ansi(text):
    """``text`` without ANSI escape sequences (colours, cursor moves) and stray control characters (tabs kept)."""
    return _CONTROL.sub('', _ANSI.sub('', text))


def split_log_lines(text):
    """Split ``docker logs`` output into lines: ``[{ts, line}]``.

    Records end with ``\\n`` (``\\r\\n`` from a container with a TTY); within a record, tqdm rewrites its
    bar with ``\\r``, so every ``\\r`` also ends a line. ANSI sequences are removed, trailing blanks
    stripped, empty lines dropped. With ``docker logs --timestamps`` each record starts with
    ``2026-11-23T17:14:38.123456789Z ``: ``ts`` is that timestamp (shared by every piece of the
    record), else None.
    """
    if text is None:
        return []
    if isinstance(text, bytes):
        text = text.decode('utf-8', 'replace')
    if not isinstance(text, str):
        raise VllmProgressError('log text must be a string, got %s' % type(text).__name__)
    lines = []
    for record in text.split('\n'):
        record = strip_ansi(record)
        stamp = None
        match = _DOCKER_TS.match(record)
        if match:
            stamp = match.group(1)
            record = record[match.end():]
        for piece in record.split('\r'):
            piece = piece.rstrip()
            if piece.strip():
                lines.append({'ts': stamp, 'line': piece})
    return lines


def timestamp_key(stamp):
    """(UTC epoch seconds, nanoseconds) of an RFC 3339 timestamp such as Docker's
    ``2026-11-23T17:14:38.123456789Z``; raises VllmProgressError for anything else."""
    match = _RFC3339.match(stamp) if isinstance(stamp, str) else None
    if not match:
        raise VllmProgressError('%r is not an RFC 3339 timestamp such as 2026-11-23T17:14:38.123456789Z '
                                '(the form `docker logs --timestamps` prints)' % (stamp,))
    seconds = calendar.timegm((int(match.group('date')), int(match.group('month')), int(match.group('day')),
                               int(match.group('h')), int(match.group('m')), int(match.group('s')), 0, 0, 0))
    zone = match.group('zone')
    if zone not in ('Z', 'z'):
        offset = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
        seconds -= offset if zone[0] == '+' else -offset
    nanos = int(((match.group('frac') or '') + '000000000')[:9])
    return seconds, nanos


def timestamp_seconds(stamp):
    """An RFC 3339 timestamp as float UTC epoch seconds; None for None, empty, and Docker's zero time (year 1)."""
    if stamp in (None, '') or (isinstance(stamp, str) and stamp.startswith('0001-01-01')):
        return None
    seconds, nanos = timestamp_key(stamp)
    return seconds + nanos / 1e9


def merge_log_streams(*streams):
    """Merge line lists of several streams (stdout, stderr) by timestamp; lines without one keep their place after the others."""
    merged = []
    for stream in streams:
        merged.extend(stream)
    order = []
    for index, item in enumerate(merged):
        key = timestamp_key(item['ts']) if item.get('ts') else (float('inf'), 0)
        order.append((key, index))
    order.sort()
    return [merged[index] for _key, index in order]


def newer_than(lines, since):
    """The lines whose timestamp is strictly after ``since`` (``docker logs --since`` also returns the record at ``since``)."""
    if not since:
        return list(lines)
    limit = timestamp_key(since)
    return [item for item in lines if item.get('ts') and timestamp_key(item['ts']) > limit]


def newest_timestamp(lines, default=None):
    """The newest timestamp of the lines, or ``default``."""
    best = default
    best_key = timestamp_key(default) if default else None
    for item in lines:
        stamp = item.get('ts')
        if stamp:
            key = timestamp_key(stamp)
            if best_key is None or key > best_key:
                best, best_key = stamp, key
    return best


def _text(item):
    if isinstance(item, dict):
        return item.get('line') or ''
    return item if isinstance(item, str) else ''


# ------------------------------------------------------------------------------------ progress

def parse_progress(line):
    """vLLM's weight-loading progress in a log line: ``{done, total, percent, line}``, or None.

    Accepts the line as text or as a ``{ts, line}`` item of split_log_lines.
    """
    text = _text(line)
    match = _PROGRESS.search(text)
    if not match:
        return None
    return {'done': int(match.group('done')), 'total': int(match.group('total')), 'percent': int(match.group('percent')),
            'line': text.strip()}


def latest_progress(lines):
    """The last progress line among the lines (None when there is none)."""
    for item in reversed(list(lines)):
        found = parse_progress(item)
        if found:
            return found
    return None


# A Python exception's own line, after vLLM's log prefix (`(EngineCore pid=1) ERROR 11-27 17:59:02 [core.py:1510] `,
# error level only) or none: `pkg.SomeError: message`, or Ray's `ray.exceptions.RayTaskError(SomeError): ray::...
# (pid=596, ip=192.168.100.13, ...)`, which names the worker's node.
_EXCEPTION_LINE = re.compile(r'^(?:\([^)]*\)\s+)?(?:ERROR \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\]\s+)?'
                             r'((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?:\([\w.]+\))?: \S.*)$')


def _check_limit(limit):
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise VllmProgressError('limit must be a positive integer, got %r' % (limit,))


def first_exceptions(lines, limit=3):
    """The first ``limit`` distinct exception lines of a log, in log order, without vLLM's log prefix: where the cause
    is, when the last lines show only the shutdown that followed it (a rank that failed to load its weights: the
    engine's cleanup then fails on every other rank's actor). Accepts text lines or ``{ts, line}`` items."""
    _check_limit(limit)
    found = []
    for item in lines or []:
        match = _EXCEPTION_LINE.match(_text(item).strip())
        if match and match.group(1) not in found:
            found.append(match.group(1))
            if len(found) == limit:
                break
    return found


def error_lines(lines, limit=15):
    """The lines that explain a failure, in log order, at most ``limit``, the most relevant last.

    The final lines (up to 5) are always kept; the rest of the room goes to the latest lines that
    carry ERROR, Error, Traceback, ``raise ``, Exception, ``exited`` (or error:, Killed, out of memory,
    fatal, pydantic's ``Value error,`` and ``[type=...]`` details), each text once (its last occurrence). Accepts text lines or ``{ts, line}`` items.
    """
    _check_limit(limit)
    texts = [t for t in (_text(item) for item in lines or []) if t.strip()]
    count = len(texts)
    final = list(range(max(0, count - min(FINAL_LINES, limit)), count))
    seen = set(texts[i] for i in final)
    room = limit - len(final)
    picked = []
    for index in range(count - len(final) - 1, -1, -1):
        if room <= 0:
            break
        text = texts[index]
        if text in seen or not _ERROR_WORDS.search(text):
            continue
        seen.add(text)
        picked.append(index)
        room -= 1
    return [texts[i] for i in sorted(picked) + final]


# ----------------------------------------------------------------------- docker inspect, HTTP

def container_state(inspect_output):
    """The state of a container from ``docker inspect`` output (JSON text or the parsed list/dict).

    Returns ``exists`` (True), ``name``, ``status``, ``running`` (false while Docker restarts or pauses it),
    ``restarting``, ``exit_code`` (null while the container runs: Docker resets it to 0 on every start), ``restart_count``, ``started_at``,
    ``finished_at`` (null before the first exit), ``oom_killed``, ``error`` (Docker's own error, such as a
    failed start; null when empty) and ``image_id``.
    """
    data = inspect_output
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise VllmProgressError('`docker inspect` did not print JSON (%s); is this the Docker CLI?' % exc)
    if isinstance(data, list):
        if not data:
            return missing_container()
        data = data[0]
    if not isinstance(data, dict) or not isinstance(data.get('State'), dict):
        raise VllmProgressError('`docker inspect` output has no State object: inspect a container, not an image or a volume.')
    state = data['State']
    # Docker keeps Running true while it restarts a container (status "restarting", ExitCode the last exit's)
    # and while it is paused (status "paused"): neither serves.
    restarting = bool(state.get('Restarting'))
    running = bool(state.get('Running')) and not restarting and not state.get('Paused')
    finished = state.get('FinishedAt')
    return {
        'exists': True,
        'name': (data.get('Name') or '').lstrip('/') or None,
        'status': state.get('Status'),
        'running': running,
        'restarting': restarting,
        'exit_code': None if running else state.get('ExitCode'),
        'restart_count': int(data.get('RestartCount') or 0),
        'started_at': state.get('StartedAt') if not (state.get('StartedAt') or '0001').startswith('0001') else None,
        'finished_at': finished if finished and not finished.startswith('0001') else None,
        'oom_killed': bool(state.get('OOMKilled')),
        'error': state.get('Error') or None,
        'image_id': data.get('Image'),
    }


def missing_container():
    """The container record of a container that does not exist."""
    return {'exists': False, 'name': None, 'status': None, 'running': False, 'restarting': False, 'exit_code': None,
            'restart_count': 0, 'started_at': None, 'finished_at': None, 'oom_killed': False, 'error': None, 'image_id': None}


def model_ids(body):
    """The model ids of an OpenAI ``/v1/models`` answer (JSON text or parsed)."""
    data = _json(body, '/v1/models')
    entries = data.get('data') if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise VllmProgressError('/v1/models answered without a "data" list: %s' % _snippet(body))
    return [e['id'] for e in entries if isinstance(e, dict) and isinstance(e.get('id'), str)]


def chat_answer(body):
    """``{content, finish_reason, completion_tokens}`` of an OpenAI chat completion (JSON text or parsed). A reasoning
    model that spent every token thinking answers with ``reasoning_content`` (or ``reasoning``) only: that counts.
    ``completion_tokens`` is the answer's ``usage`` (None when the server gave none): what the engine generated, read
    even where the text is noise (a model with random weights)."""
    data = _json(body, '/v1/chat/completions')
    choices = data.get('choices') if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise VllmProgressError('/v1/chat/completions answered without "choices": %s' % _snippet(body))
    message = choices[0].get('message') or {}
    content = message.get('content') or message.get('reasoning_content') or message.get('reasoning')
    tokens = (data.get('usage') or {}).get('completion_tokens')
    return {'content': content if isinstance(content, str) else None, 'finish_reason': choices[0].get('finish_reason'),
            'completion_tokens': tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None}


def _json(body, what):
    if isinstance(body, (str, bytes)):
        try:
            return json.loads(body)
        except ValueError:
            raise VllmProgressError('%s did not answer JSON: %s' % (what, _snippet(body)))
    return body


def _snippet(body, size=200):
    if isinstance(body, bytes):
        body = body.decode('utf-8', 'replace')
    text = body if isinstance(body, str) else repr(body)
    text = ' '.join(text.split())
    return text if len(text) <= size else text[:size] + '...'


# ---------------------------------------------------------------------------------- the watch

def format_duration(seconds):
    """45s, 2m41s, 1h03m, 3d04h."""
    seconds = int(round(max(0.0, float(seconds))))
    if seconds < 60:
        return '%ds' % seconds
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return '%dm%02ds' % (minutes, sec)
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return '%dh%02dm' % (hours, minutes)
    days, hours = divmod(hours, 24)
    return '%dd%02dh' % (days, hours)


def _progress_text(progress):
    return '%d/%d (%d%%)' % (progress['done'], progress['total'], progress['percent'])


def _short(text, size=160):
    text = text or ''
    return text if len(text) <= size else text[:size - 3] + '...'


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise VllmProgressError('%s must be a positive number of seconds, got %r' % (name, value))
    return value


class ReadinessWatch:
    """Decides, one serving_probe result at a time, whether vLLM is ``waiting``, ``ready`` or ``failed``.

    node, container: names for the messages. served_model_name: the model /v1/models must list.
    chat: whether a chat completion must answer. timeout: overall seconds; stall_timeout: seconds
    without a new log line and without new progress; progress_interval: the longest time between two
    progress reports. clock: a monotonic clock in seconds (injected by tests). The clock starts when
    the watch is made.
    """

    WAITING = 'waiting'
    READY = 'ready'
    FAILED = 'failed'

    def __init__(self, node, container, served_model_name, chat=True, timeout=DEFAULT_TIMEOUT, stall_timeout=DEFAULT_STALL_TIMEOUT,
                 progress_interval=DEFAULT_PROGRESS_INTERVAL, clock=time.monotonic, url=None, stall_variable=STALL_VARIABLE):
        if not isinstance(served_model_name, str) or not served_model_name:
            raise VllmProgressError('served_model_name must name the model vLLM serves (--served-model-name), got %r' % (served_model_name,))
        self.node = node
        self.container = container
        self.served_model_name = served_model_name
        self.chat = bool(chat)
        self.timeout = _positive('timeout', timeout)
        self.stall_timeout = _positive('stall_timeout', stall_timeout)
        self.progress_interval = _positive('progress_interval', progress_interval)
        self.clock = clock
        self.url = url
        self.stall_variable = stall_variable
        self.started = clock()
        self.state = self.WAITING
        self.message = None
        self.probes = 0
        self.baseline_restarts = None
        self.lines = deque(maxlen=HISTORY_LINES)
        self.last_line_at = self.started
        self.last_activity_at = self.started
        self.progress = None
        self.progress_history = []
        self.last_report_at = None
        self.last_report_done = None
        self.last_probe = None
        self.answered_not_ready = 0
        self.models = None
        self.chat_result = None

    # -- feeding

    def elapsed(self):
        """Seconds since the watch was made."""
        return self.clock() - self.started

    def observe(self, probe):
        """Take one serving_probe result; returns the state (``waiting``, ``ready`` or ``failed``)."""
        if self.state != self.WAITING:
            return self.state
        if not isinstance(probe, dict) or not isinstance(probe.get('container'), dict):
            raise VllmProgressError('a probe must be the result of dgxspark.cluster.serving_probe (a mapping with "container"), got %r'
                                    % (type(probe).__name__,))
        now = self.clock()
        self.probes += 1
        self.last_probe = probe
        self._take_lines(probe, now)
        container = probe['container']
        if not container.get('exists'):
            return self._fail('The vLLM container %s does not exist on %s: it was never started, or it was removed (a container run with '
                              '--rm disappears when it exits). Run `docker ps -a` on %s, and start the serving role again.' % (
                                  self.container, self.node, self.node))
        restarts = int(container.get('restart_count') or 0)
        if self.baseline_restarts is None:
            self.baseline_restarts = restarts
        if (not container.get('running') or container.get('restarting') or restarts > self.baseline_restarts
                or container.get('exit_code') is not None):
            return self._fail(self._container_failure(container, restarts))
        if self._is_ready(probe):
            self.state = self.READY
            self.models = probe.get('models')
            self.chat_result = probe.get('chat')
            self.message = 'vLLM on %s is ready after %s: it serves %s%s%s.' % (
                self.node, format_duration(now - self.started), self.served_model_name,
                (' at %s' % self.url) if self.url else '', ' and answered a chat request' if self.chat else '')
            return self.state
        refusal = self._refusal(probe)
        if refusal:
            self.answered_not_ready += 1
            if self.answered_not_ready >= CONFIRMATIONS:
                return self._fail(refusal)
        else:
            self.answered_not_ready = 0
        if now - self.started >= self.timeout:
            return self._fail(self._timeout_message(probe, now))
        if now - self.last_activity_at >= self.stall_timeout:
            return self._fail(self._stall_message(now))
        return self.state

    def _take_lines(self, probe, now):
        new = [item for item in probe.get('logs') or [] if _text(item).strip()]
        if new:
            self.last_line_at = now
            self.last_activity_at = now
            self.lines.extend(_text(item) for item in new)
        found = latest_progress(new) or probe.get('progress')
        if found and (self.progress is None or (found['done'], found['total']) != (self.progress['done'], self.progress['total'])):
            self.progress_history.append({'t': round(now - self.started, 1), 'done': found['done'], 'total': found['total']})
            self.last_activity_at = now
        if found:
            self.progress = found

    def _is_ready(self, probe):
        health = probe.get('health') or {}
        if health.get('status') != 200:
            return False
        if self.served_model_name not in (probe.get('models') or []):
            return False
        if not self.chat:
            return True
        chat = probe.get('chat') or {}
        return chat.get('status') == 200 and bool((chat.get('content') or '').strip())

    def _refusal(self, probe):
        """What is wrong when the server is up and answers, but not as it should (None when nothing is)."""
        health = probe.get('health') or {}
        if health.get('status') != 200:
            return None
        status = probe.get('models_status')
        where = 'vLLM on %s (container %s%s)' % (self.node, self.container, ', %s' % self.url if self.url else '')
        if status in (401, 403):
            return ('%s answers /health but refuses the API key on /v1/models (HTTP %d) %d times in a row: the key in api_key_file is not '
                    'the one the server was started with (--api-key or VLLM_API_KEY); write the same key to both and restart the '
                    'container.' % (where, status, CONFIRMATIONS))
        models = probe.get('models')
        if status == 200 and isinstance(models, list) and self.served_model_name not in models:
            return ('%s serves %s, not %s (/v1/models, %d times in a row): the served model name differs; set --served-model-name '
                    '(the role\'s served model name) and served_model_name of the readiness check to the same name.' % (
                        where, ', '.join(models) or 'no model', self.served_model_name, CONFIRMATIONS))
        if self.chat and status == 200 and isinstance(models, list) and self.served_model_name in models:
            chat = probe.get('chat') or {}
            if chat.get('status') == 200:
                what = 'answered with empty content'
            elif chat.get('status') is not None:
                what = 'answered HTTP %s' % chat['status']
            else:
                what = 'got no answer'
            return ('%s lists %s but a chat completion %s %d times in a row%s: the engine is up but cannot generate; read the '
                    'container log (`docker logs %s` on %s) for the request\'s error.' % (
                        where, self.served_model_name, what, CONFIRMATIONS,
                        (' (%s)' % _short(chat.get('error'), 300)) if chat.get('error') else '', self.container, self.node))
        return None

    def fail(self, message):
        """Fail for what a probe's container and API do not show (with mp, a rank that never joined rank 0)."""
        return self._fail('vLLM on %s (container %s) waits for a rank that does not come. %s' % (self.node, self.container, message))

    def _fail(self, message):
        self.state = self.FAILED
        self.message = message
        return self.state

    # -- messages

    def _lines_block(self, lines):
        if not lines:
            return ' It printed no log line.'
        return '\n' + '\n'.join('  | %s' % _short(line, 400) for line in lines)

    def _container_failure(self, container, restarts):
        code = container.get('exit_code')
        if container.get('restarting'):
            what = 'is restarting (Docker restarts it after every exit: a crash loop)'
        elif not container.get('running'):
            what = 'is not running (status %s)' % (container.get('status') or 'unknown')
        elif restarts > self.baseline_restarts:
            what = 'was restarted by Docker while the readiness check waited (restart count %d -> %d): vLLM exited and came back' % (
                self.baseline_restarts, restarts)
        else:
            what = 'has exit code %s' % code
        facts = 'exit code %s, restart count %d%s%s' % (
            'none' if code is None else code, restarts, ', killed for lack of memory (OOMKilled)' if container.get('oom_killed') else '',
            ('; Docker says: %s' % container['error']) if container.get('error') else '')
        if container.get('oom_killed') or code == 137:
            advice = ('Exit code 137 is a SIGKILL: with OOMKilled, or the kernel OOM killer in `dmesg` on %s, the node ran out of memory: '
                      'lower gpu_memory_utilization (dgxspark_gpu_memory_utilization) or max_model_len; otherwise something stopped the '
                      'container (docker kill / docker stop).' % self.node)
        elif code == 2:
            advice = 'Exit code 2: vllm rejected its command line (the "error:" line above names the option); fix the vLLM arguments.'
        elif code == 139:
            advice = 'Exit code 139: vLLM crashed with a segmentation fault; check that the image matches the GPU driver and CUDA.'
        else:
            advice = ('The Traceback and ERROR lines above name the cause (an unsupported option, quantization or model, a Ray or NCCL '
                      'error); fix it and start the serving role again.')
        lines = list(self.lines)
        first = first_exceptions(lines)
        return 'The vLLM container %s on %s %s: %s.%s Its last error lines:%s\n%s Read the whole log with `docker logs %s` on %s.' % (
            self.container, self.node, what, facts, (' Its first exceptions:%s\n' % self._lines_block(first)) if first else '',
            self._lines_block(error_lines(lines)), advice, self.container, self.node)

    def _last_progress_text(self):
        if not self.progress:
            return 'no weight-loading progress line yet'
        return '%s, "%s"' % (_progress_text(self.progress), _short(self.progress['line'], 200))

    def _py_spy(self):
        """Where to run py-spy: the innermost process prefix of the last progress line (the process that loads) names its pid."""
        prefixes = _PREFIX.findall(self.progress['line']) if self.progress else []
        if not prefixes:
            return 'run `docker exec %s py-spy dump --pid <PID>` on %s, with the pid of the EngineCore or RayWorkerWrapper prefix of ' \
                   'the log lines,' % (self.container, self.node)
        name, pid, address = prefixes[-1]
        if address:
            return 'run `py-spy dump --pid %s` in the Ray container of the node with address %s (the %s that printed it)' % (pid, address, name)
        return 'run `docker exec %s py-spy dump --pid %s` on %s (the %s that printed it)' % (self.container, pid, self.node, name)

    def _stall_message(self, now):
        still = now - self.last_activity_at
        where = 'none yet' if not self.progress else '%d/%d' % (self.progress['done'], self.progress['total'])
        lines = list(self.lines)[-FINAL_LINES:]
        return (
            'vLLM on %s (container %s) has been still for %s (stall_timeout %s s): no new log line and no new loading progress. '
            'Last progress: %s. Last lines:%s\n'
            'Likely causes:\n'
            '(a) a weight load that stops at the same shard on every try, with every thread in futex_wait (the "layer 57" hang of seed '
            '004): compare this last progress line (%s) with the previous try\'s; if it stops at the same place again, %s to see '
            'where each thread waits;\n'
            '(b) a Ray worker or an NCCL peer died or cannot be reached: read the Ray container log of every node (`docker logs`) and run '
            '`ray status` in the head\'s Ray container; a missing node, or an NCCL error or timeout in a log, points at that node or its '
            'rail;\n'
            '(c) memory exhausted on a node: check MemAvailable (/proc/meminfo) and `dmesg` for the OOM killer on every node; lower '
            'gpu_memory_utilization (dgxspark_gpu_memory_utilization);\n'
            '(d) on 8 or more nodes, a load without --safetensors-load-strategy prefetch (vLLM issue 40988) can stall: add '
            'safetensors_load_strategy: prefetch to the vLLM options.\n'
            'If the load is only slow (cold page cache, network storage), raise %s (now %s s).%s' % (
                self.node, self.container, format_duration(still), _number(self.stall_timeout), self._last_progress_text(),
                self._lines_block(lines), where, self._py_spy(), self.stall_variable, _number(self.stall_timeout), self._placement()))

    def _missing_text(self, probe):
        health = probe.get('health') or {}
        if health.get('status') != 200:
            if health.get('status') is None:
                return '/health does not answer (%s)' % (health.get('error') or 'not asked: no url')
            return '/health answers HTTP %s' % health['status']
        if self.served_model_name not in (probe.get('models') or []):
            return '/v1/models does not list %s (HTTP %s)' % (self.served_model_name, probe.get('models_status'))
        return 'the chat request is not answered (%s)' % ((probe.get('chat') or {}).get('error') or 'no content')

    def _timeout_message(self, probe, now):
        return ('vLLM on %s (container %s) is not ready after %s (timeout %s s): %s. Last progress: %s. Last lines:%s\n'
                'If it is still loading, raise the timeout of dgxspark.cluster.vllm_ready; if not, the lines above say where it stopped.%s' % (
                    self.node, self.container, format_duration(now - self.started), _number(self.timeout), self._missing_text(probe),
                    self._last_progress_text(), self._lines_block(list(self.lines)[-10:]), self._placement()))

    def _placement_wait(self):
        # Only while the wait is among vLLM's last lines, before any weight: a placed group is followed by many more.
        return None if self.progress else latest_placement_wait(list(self.lines)[-FINAL_LINES:])

    def _placement(self):
        """The placement advice, when vLLM's last word before loading was that its Ray placement group waits."""
        wait = self._placement_wait()
        return ('\n' + placement_advice(wait)) if wait else ''

    # -- reports

    def report_due(self):
        """Whether a progress report should be printed now: never yet, ``progress_interval`` since the last one, or k changed."""
        if self.state != self.WAITING:
            return False
        if self.last_report_at is None:
            return True
        if self.progress is not None and self.progress['done'] != self.last_report_done:
            return True
        return self.clock() - self.last_report_at >= self.progress_interval

    def report(self, mark=True):
        """The one-line progress report (and, with ``mark``, remember that it was printed)."""
        now = self.clock()
        parts = []
        if self.progress:
            parts.append('weights %s' % _progress_text(self.progress))
        health = (self.last_probe or {}).get('health') or {}
        if health.get('status') == 200:
            parts.append('/health 200, %s' % self._missing_text(self.last_probe))
        wait = self._placement_wait()
        if wait:
            parts.append(placement_text(wait))
        parts.append('%s elapsed' % format_duration(now - self.started))
        parts.append('last new log line %s ago' % format_duration(now - self.last_line_at) if self.lines else 'no log line yet')
        if self.lines and (not self.progress or self.progress['done'] >= self.progress['total']):
            parts.append('last line: %s' % _short(self.lines[-1], 160))
        if mark:
            self.last_report_at = now
            self.last_report_done = self.progress['done'] if self.progress else None
        return '%s %s: waiting for vLLM: %s' % (self.node, self.container, ', '.join(parts))

    def summary(self, last=20):
        """What the action returns: state, message, elapsed_s, progress, progress_history, last_lines, models, chat, restart_count."""
        container = (self.last_probe or {}).get('container') or {}
        return {
            'state': self.state,
            'message': self.message,
            'elapsed_s': round(self.elapsed(), 1),
            'progress': self.progress,
            'progress_history': list(self.progress_history),
            'last_lines': list(self.lines)[-last:],
            'models': self.models if self.models is not None else (self.last_probe or {}).get('models'),
            'chat': self.chat_result,
            'restart_count': container.get('restart_count'),
            'probes': self.probes,
        }


def _number(value):
    return ('%d' % value) if float(value) == int(value) else ('%g' % value)
