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
