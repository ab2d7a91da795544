# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render a mapping of vLLM options to an argv list (never a shell string).

Rules (see plugins/filter/vllm_args.yml for the user-facing description):

* keys use ``_`` or ``-``; the part before the first ``.`` is normalized to kebab case
  (``limit_mm_per_prompt.video`` -> ``--limit-mm-per-prompt.video``, as vLLM's
  FlexibleArgumentParser does); a key that starts with ``--`` is kept as written;
* ``True`` -> bare flag, ``False`` / ``None`` / empty list -> omitted;
* int, float, str -> ``--opt value`` (floats through ``repr``: shortest exact form);
* dict -> one compact JSON argument with sorted keys;
* list -> depends on how vLLM declares the option (:data:`LIST_STYLES`), overridable.

List styles, from vLLM's argparse definitions (vllm/entrypoints/openai/cli_args.py and
vllm/engine/arg_utils.py):

* ``repeat``: ``action='append'`` -> ``--opt a --opt b`` (``--middleware``);
* ``join``: ``nargs='+'`` (every ``list[...]`` field of the engine/frontend config classes,
  e.g. ``--served-model-name``, ``--lora-modules``, ``--api-key``) -> ``--opt a b``;
* ``json``: ``type=json.loads`` without nargs -> ``--opt '["a","b"]'`` as one argument
  (``--allowed-origins``, ``--allowed-methods``, ``--allowed-headers``).

An option not in the table uses ``join``, because vLLM's generic rule turns every list-typed
config field into ``nargs='+'``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

OPTION_NAME_RE = re.compile(r'^[a-z0-9][a-z0-9._-]*$')

LIST_STYLE_REPEAT = 'repeat'
LIST_STYLE_JOIN = 'join'
LIST_STYLE_JSON = 'json'
LIST_STYLE_CHOICES = (LIST_STYLE_REPEAT, LIST_STYLE_JOIN, LIST_STYLE_JSON)

#: Default list style for options not in LIST_STYLES.
DEFAULT_LIST_STYLE = LIST_STYLE_JOIN

#: How vLLM's parser takes list values, by option name (without the leading --).
LIST_STYLES = {
    # action='append' (FrontendArgs special case)
    'middleware': LIST_STYLE_REPEAT,
    # type=json.loads, nargs removed (FrontendArgs special case)
    'allowed-origins': LIST_STYLE_JSON,
    'allowed-methods': LIST_STYLE_JSON,
    'allowed-headers': LIST_STYLE_JSON,
    # nargs='+' (list-typed config fields)
    'served-model-name': LIST_STYLE_JOIN,
    'lora-modules': LIST_STYLE_JOIN,
    'api-key': LIST_STYLE_JOIN,
    'allowed-media-domains': LIST_STYLE_JOIN,
    'cudagraph-capture-sizes': LIST_STYLE_JOIN,
    'cuda-graph-sizes': LIST_STYLE_JOIN,
    'ignore-patterns': LIST_STYLE_JOIN,
    'logits-processors': LIST_STYLE_JOIN,
}


class VllmArgsError(ValueError):
    """A vLLM option mapping that cannot be rendered to argv."""


def normalize_option(key):
    """Return the ``--option`` form of a key, or raise VllmArgsError."""
    if not isinstance(key, str):
        raise VllmArgsError(
            'vllm_args: option name %r is a %s; option names must be strings such as tensor_parallel_size.' % (key, type(key).__name__))
    if key.startswith('--'):
        name = key[2:]
    else:
        head, dot, tail = key.partition('.')
        name = head.replace('_', '-') + dot + tail
    if not OPTION_NAME_RE.match(name):
        raise VllmArgsError(
            'vllm_args: option name %r is not a valid vLLM option (after normalization %r must match %s: lower case '
            'letters, digits, ".", "_" and "-", starting with a letter or digit).' % (key, '--' + name, OPTION_NAME_RE.pattern))
    return '--' + name


def _type_name(value):
    """The user-facing name of a value's type (Ansible passes subclasses such as lazy template containers)."""
    if isinstance(value, Mapping):
        return 'dict'
    if isinstance(value, list):
        return 'list'
    if isinstance(value, str):
        return 'str'
    return type(value).__name__


def _scalar(key, value, where=''):
    """Render an int/float/str (the whole value, or the list item ``where``) to its argv text."""
    if isinstance(value, bool):
        raise VllmArgsError(
            'vllm_args: option %r%s is the boolean %r; booleans are only allowed as the whole value of an option '
            '(true gives a bare flag, false omits it).' % (key, where, value))
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise VllmArgsError('vllm_args: option %r%s is the float %r; NaN and infinity are not valid vLLM values.' % (key, where, value))
        return repr(float(value))
    if isinstance(value, str):
        return str(value)
    if where:
        raise VllmArgsError(
            'vllm_args: option %r%s is a %s; list items must be strings or numbers (give list_style json for this '
            'option to pass the list as one JSON argument).' % (key, where, _type_name(value)))
    raise VllmArgsError(
        'vllm_args: option %r has a value of type %s, which cannot be rendered; use a string, number, boolean, '
        'list of strings/numbers, or mapping.' % (key, _type_name(value)))


def _plain_json(key, value, path):
    """Copy a JSON-able value into plain dict/list/str/int/float/bool/None, or raise."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise VllmArgsError('vllm_args: option %r has the float %r at %s; NaN and infinity cannot be written as JSON.' % (key, value, path))
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        result = {}
        for sub_key in value:
            if not isinstance(sub_key, str):
                raise VllmArgsError(
                    'vllm_args: option %r has the non-string key %r (%s) at %s; JSON object keys must be strings.'
                    % (key, sub_key, _type_name(sub_key), path))
            result[str(sub_key)] = _plain_json(key, value[sub_key], '%s.%s' % (path, sub_key))
        return result
    if isinstance(value, (list, tuple)):
        return [_plain_json(key, item, '%s[%d]' % (path, index)) for index, item in enumerate(value)]
    raise VllmArgsError(
        'vllm_args: option %r has a value of type %s at %s, which cannot be written as JSON.' % (key, _type_name(value), path))


def _to_json(key, value):
    return json.dumps(_plain_json(key, value, 'value'), sort_keys=True, separators=(',', ':'), ensure_ascii=False, allow_nan=False)


def _validate_list_style(list_style):
    if list_style is None:
        return {}
    if not isinstance(list_style, Mapping):
        raise VllmArgsError(
            'vllm_args: list_style must be a mapping of option name to one of %s, got %s.' % (', '.join(LIST_STYLE_CHOICES), _type_name(list_style)))
    styles = {}
    for key, style in list_style.items():
        option = normalize_option(key)
        if style not in LIST_STYLE_CHOICES:
            raise VllmArgsError(
                'vllm_args: list_style for %r is %r; use one of %s (repeat: --opt a --opt b, join: --opt a b, '
                'json: --opt \'["a","b"]\').' % (key, style, ', '.join(LIST_STYLE_CHOICES)))
        styles[option] = str(style)
    return styles


def _render(option, key, value, styles):
    """Return the argv elements of one option (possibly empty)."""
    if value is None or value is False:
        return []
    if value is True:
        return [option]
    if isinstance(value, Mapping):
        return [option, _to_json(key, value)]
    if isinstance(value, (list, tuple)):
        if not value:
            return []
        style = styles.get(option) or LIST_STYLES.get(option[2:], DEFAULT_LIST_STYLE)
        if style == LIST_STYLE_JSON:
            return [option, _to_json(key, value)]
        items = [_scalar(key, item, ' item [%d]' % index) for index, item in enumerate(value)]
        if style == LIST_STYLE_REPEAT:
            argv = []
            for item in items:
                argv.extend([option, item])
            return argv
        return [option] + items
    return [option, _scalar(key, value)]


def vllm_argv(options, list_style=None):
    """Render a mapping of vLLM options to a list of argv strings.

    :arg options: mapping of option name to value.
    :arg list_style: optional mapping of option name to ``repeat``, ``join`` or ``json``,
        overriding :data:`LIST_STYLES` for list values.
    :returns: list of str, ``--model X`` first when ``model`` is given, then the other options
        sorted by their normalized name.
    """
    if options is None:
        return []
    if not isinstance(options, Mapping):
        raise VllmArgsError('vllm_args: expected a mapping of vLLM options, got %s.' % _type_name(options))
    styles = _validate_list_style(list_style)

    normalized = {}
    for key in options:
        option = normalize_option(key)
        if option in normalized:
            raise VllmArgsError(
                'vllm_args: keys %r and %r both name the option %s; give it once.' % (normalized[option][0], key, option))
        normalized[option] = (key, options[key])

    argv = []
    model = normalized.pop('--model', None)
    if model is not None:
        argv.extend(_render('--model', model[0], model[1], styles))
    for option in sorted(normalized):
        key, value = normalized[option]
        argv.extend(_render(option, key, value, styles))
    return argv


def executor(plan, host):
    """(options, environment) of ``host``'s vLLM rank that the plan's executor backend decides. With Ray: the backend
    alone (the head's vLLM places every rank through Ray), and for vllm-serve.sh the GPUs to wait for. With mp: the
    group's size, the host's rank, rank 0's rendezvous and, on every node but the head, --headless; vllm-serve.sh gets
    the backend, and a headless rank rank 0's rendezvous that its watch connects to (dgxspark_rank_watch.py, vLLM
    #32136)."""
    if plan['executor_backend'] == 'ray':
        return {'distributed_executor_backend': 'ray'}, {'DGXSPARK_VLLM_GPUS': str(plan['gpus'])}
    ranks = dict((node['host'], node['rank']) for node in plan['nodes'])
    if host not in ranks:
        raise VllmArgsError('executor: %s is not a node of the plan (%s)' % (host, ', '.join(sorted(ranks))))
    master = plan['mp_master']
    options = {'distributed_executor_backend': 'mp', 'nnodes': len(ranks), 'node_rank': ranks[host],
               'master_addr': master['address'], 'master_port': master['port'], 'headless': ranks[host] != 0}
    env = {'DGXSPARK_EXECUTOR': 'mp'}
    if options['headless']:
        env['DGXSPARK_RANK_WATCH'] = '%s:%d' % (master['address'], int(master['port']))
    return options, env


def executor_rendezvous(plan):
    """Under mp, rank 0's rendezvous as the head's readiness check watches it: its address and port, and each other
    node mapped to the address its rank connects from (its rail-1 address); None under Ray (Ray's membership check
    runs before vLLM starts)."""
    try:
        master = plan['mp_master']
        if not master:
            return None
        rail = plan['rails'][0]['name']
        peers = dict((node['host'], node['rail_addresses'][rail]) for node in plan['nodes'] if node['host'] != plan['head'])
        return {'address': master['address'], 'port': int(master['port']), 'peers': peers}
    except (KeyError, IndexError, TypeError) as exc:
        raise VllmArgsError('executor_rendezvous: the plan lacks %s (a plan of dgxspark.cluster.cluster_plan has it)' % exc) from exc
