# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keys merged into Docker's daemon.json, every other key kept: the docker_daemon_json module.

Pure logic, stdlib only."""

from __future__ import annotations

import json

_JSON_TYPES = {list: 'array', str: 'string', int: 'number', float: 'number', bool: 'boolean', type(None): 'null'}


class DaemonJsonError(ValueError):
    """The file is not a JSON object: it is never overwritten."""


def parse(text):
    """The object a daemon.json text holds ({} for an empty file); DaemonJsonError for anything but an object."""
    if text is None or not text.strip():
        return {}
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise DaemonJsonError(str(exc)) from exc
    if not isinstance(config, dict):
        raise DaemonJsonError('is a JSON %s, not an object' % _JSON_TYPES[type(config)])
    return config


def merged(config, keys):
    """``config`` with ``keys`` merged in: objects key by key at every depth, any other value replaced."""
    result = dict(config)
    for key, value in keys.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def render(config):
    """The file's text as the role has always written it (to_nice_json with indent 2, keys sorted)."""
    return json.dumps(config, indent=2, sort_keys=True, separators=(',', ': ')) + '\n'


def flag_names(key):
    """The dockerd flags that set daemon.json's ``key`` too: the key itself and, for a key that holds several values, its
    singular (default-ulimits: --default-ulimit, insecure-registries: --insecure-registry, labels: --label)."""
    names = ['--' + key]
    if key.endswith('ies'):
        names.append('--' + key[:-3] + 'y')
    elif key.endswith('s'):
        names.append('--' + key[:-1])
    return names


def flag_conflicts(exec_start, keys):
    """The flags of dockerd's command line (systemd's ExecStart, as `systemctl show` prints it) that set one of ``keys``
    too: dockerd refuses to start when a directive is both a flag and in daemon.json."""
    words = (exec_start or '').split()
    found = []
    for key in keys:
        for flag in flag_names(key):
            if flag not in found and any(word == flag or word.startswith(flag + '=') for word in words):
                found.append(flag)
    return found
