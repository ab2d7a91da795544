# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/plugin_utils/vllm_args.py and the vllm_args filter."""

from __future__ import annotations

import collections
import copy
import json

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.filter.vllm_args import FilterModule, vllm_args
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.vllm_args import (
    LIST_STYLES,
    VllmArgsError,
    executor,
    normalize_option,
    vllm_argv,
)

SEED_000_OPTIONS = {
    'model': 'Qwen/Qwen3.5-397B-A17B-FP8',
    'tensor_parallel_size': 4,
    'pipeline_parallel_size': 1,
    'gpu_memory_utilization': 0.85,
    'max_model_len': 131072,
    'max_num_batched_tokens': 4096,
    'block_size': 128,
    'language_model_only': True,
    'enable_prefix_caching': True,
    'reasoning_parser': 'qwen3',
    'tool_call_parser': 'qwen3_xml',
    'attention_backend': 'FLASHINFER',
}

SEED_000_ARGV = [
    '--model', 'Qwen/Qwen3.5-397B-A17B-FP8',
    '--attention-backend', 'FLASHINFER',
    '--block-size', '128',
    '--enable-prefix-caching',
    '--gpu-memory-utilization', '0.85',
    '--language-model-only',
    '--max-model-len', '131072',
    '--max-num-batched-tokens', '4096',
    '--pipeline-parallel-size', '1',
    '--reasoning-parser', 'qwen3',
    '--tensor-parallel-size', '4',
    '--tool-call-parser', 'qwen3_xml',
]


def test_seed_000():
    assert vllm_argv(SEED_000_OPTIONS) == SEED_000_ARGV


def test_seed_000_dash_spelling_and_order_independent():
    options = {k.replace('_', '-'): v for k, v in reversed(list(SEED_000_OPTIONS.items()))}
    assert vllm_argv(options) == SEED_000_ARGV


def test_seed_000_through_filter():
    assert FilterModule().filters()['vllm_args'](SEED_000_OPTIONS) == SEED_000_ARGV


def test_input_not_mutated():
    options = copy.deepcopy(SEED_000_OPTIONS)
    options['limit_mm_per_prompt'] = {'video': 0}
    before = copy.deepcopy(options)
    vllm_argv(options)
    assert options == before


# --- key normalization -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('key, option', [
    ('tensor_parallel_size', '--tensor-parallel-size'),
    ('tensor-parallel-size', '--tensor-parallel-size'),
    ('tensor_parallel-size', '--tensor-parallel-size'),
    ('--tensor-parallel-size', '--tensor-parallel-size'),
    ('--external_parameters', '--external_parameters'),  # kept as written
    ('limit_mm_per_prompt.video', '--limit-mm-per-prompt.video'),
    ('compilation_config.cudagraph_mode', '--compilation-config.cudagraph_mode'),  # JSON key after the dot kept
    ('model', '--model'),
    ('O', None),
    ('Model', None),
    ('-model', None),
    ('_private', None),
    ('.video', None),
    ('--', None),
    ('---x', None),
    ('tensor parallel', None),
    ('max_model_len=1', None),
    ('', None),
    ('--Model', None),
    ('--foo bar', None),
])
def test_normalize_option(key, option):
    if option is None:
        with pytest.raises(VllmArgsError) as exc:
            normalize_option(key)
        assert repr(key) in str(exc.value)
        assert 'not a valid vLLM option' in str(exc.value)
    else:
        assert normalize_option(key) == option


def test_option_name_not_a_string():
    with pytest.raises(VllmArgsError, match=r"option name 1 is a int"):
        vllm_argv({1: 'x'})


def test_two_keys_same_option():
    with pytest.raises(VllmArgsError) as exc:
        vllm_argv({'max_model_len': 1, 'max-model-len': 2})
    assert "'max_model_len'" in str(exc.value) and "'max-model-len'" in str(exc.value) and '--max-model-len' in str(exc.value)


# --- values ------------------------------------------------------------------------------------------------------------

VALUE_CASES = [
    pytest.param({'enforce_eager': True}, ['--enforce-eager'], id='true-flag'),
    pytest.param({'enforce_eager': False}, [], id='false-omitted'),
    pytest.param({'enforce_eager': None}, [], id='null-omitted'),
    pytest.param({'no_enable_prefix_caching': True}, ['--no-enable-prefix-caching'], id='no-flag'),
    pytest.param({'seed': 0}, ['--seed', '0'], id='int-zero-kept'),
    pytest.param({'seed': -1}, ['--seed', '-1'], id='negative-int'),
    pytest.param({'max_model_len': 131072}, ['--max-model-len', '131072'], id='int'),
    pytest.param({'gpu_memory_utilization': 0.85}, ['--gpu-memory-utilization', '0.85'], id='float-0.85'),
    pytest.param({'gpu_memory_utilization': 0.1 + 0.2}, ['--gpu-memory-utilization', '0.30000000000000004'], id='float-exact'),
    pytest.param({'swap_space': 4.0}, ['--swap-space', '4.0'], id='float-whole'),
    pytest.param({'x': 1e-05}, ['--x', '1e-05'], id='float-small'),
    pytest.param({'x': 1e22}, ['--x', '1e+22'], id='float-large'),
    pytest.param({'x': 2 ** 70}, ['--x', '1180591620717411303424'], id='big-int'),
    pytest.param({'chat_template': ''}, ['--chat-template', ''], id='empty-string-kept'),
    pytest.param({'served_model_name': 'qwen'}, ['--served-model-name', 'qwen'], id='str'),
    pytest.param({'limit_mm_per_prompt': {'video': 0}}, ['--limit-mm-per-prompt', '{"video":0}'], id='dict'),
    pytest.param({'limit_mm_per_prompt': {'video': 0, 'image': 2}}, ['--limit-mm-per-prompt', '{"image":2,"video":0}'], id='dict-sorted'),
    pytest.param({'hf_overrides': {}}, ['--hf-overrides', '{}'], id='empty-dict'),
    pytest.param(
        {'speculative_config': {'method': 'ngram', 'num_speculative_tokens': 3, 'extra': [1, 2.5, None, True, {'b': 1, 'a': 'é'}]}},
        ['--speculative-config', '{"extra":[1,2.5,null,true,{"a":"é","b":1}],"method":"ngram","num_speculative_tokens":3}'],
        id='nested-dict'),
    pytest.param({'limit_mm_per_prompt.video': 0}, ['--limit-mm-per-prompt.video', '0'], id='dotted'),
    pytest.param({'served_model_name': []}, [], id='empty-list-omitted'),
    pytest.param({'served_model_name': ()}, [], id='empty-tuple-omitted'),
    pytest.param({'served_model_name': ['qwen', 'default']}, ['--served-model-name', 'qwen', 'default'], id='nargs-join'),
    pytest.param({'served_model_name': ('qwen',)}, ['--served-model-name', 'qwen'], id='tuple'),
    pytest.param({'lora_modules': ['a=/l/a', '{"name":"b","path":"/l/b"}']},
                 ['--lora-modules', 'a=/l/a', '{"name":"b","path":"/l/b"}'], id='lora-modules-join'),
    pytest.param({'cudagraph_capture_sizes': [1, 2, 4]}, ['--cudagraph-capture-sizes', '1', '2', '4'], id='int-list-join'),
    pytest.param({'middleware': ['a.b', 'c.d']}, ['--middleware', 'a.b', '--middleware', 'c.d'], id='append-repeat'),
    pytest.param({'allowed_origins': ['https://a', 'https://b']}, ['--allowed-origins', '["https://a","https://b"]'], id='json-list'),
    pytest.param({'allowed_methods': ['GET']}, ['--allowed-methods', '["GET"]'], id='json-list-methods'),
    pytest.param({'unknown_list_opt': ['a', 'b']}, ['--unknown-list-opt', 'a', 'b'], id='unknown-list-defaults-to-join'),
    pytest.param({'--middleware': ['x']}, ['--middleware', 'x'], id='dashed-key-uses-table'),
]


@pytest.mark.parametrize('options, argv', VALUE_CASES)
def test_values(options, argv):
    assert vllm_argv(options) == argv


def test_ordering_model_first_then_sorted():
    options = collections.OrderedDict([
        ('zeta', 1), ('served_model_name', ['m']), ('model', '/models/x'), ('alpha', True), ('--beta', 'b'), ('alpha.x', 2),
    ])
    assert vllm_argv(options) == [
        '--model', '/models/x', '--alpha', '--alpha.x', '2', '--beta', 'b', '--served-model-name', 'm', '--zeta', '1']


def test_model_spelled_with_dashes_is_first():
    assert vllm_argv({'a': 1, '--model': 'm'}) == ['--model', 'm', '--a', '1']


def test_model_false_omitted():
    assert vllm_argv({'model': None, 'a': 1}) == ['--a', '1']


@pytest.mark.parametrize('options', [None, {}])
def test_empty(options):
    assert vllm_argv(options) == []


@pytest.mark.parametrize('value', [
    'two words',
    'it\'s "quoted"',
    '$(rm -rf /)',
    '`id`; echo pwned',
    '--not-an-option',
    'line1\nline2',
    '*',
    '{"looks": "like json"}',
])
def test_values_stay_single_untouched_argv_elements(value):
    assert vllm_argv({'chat_template': value}) == ['--chat-template', value]
    assert vllm_argv({'served_model_name': [value, 'b']}) == ['--served-model-name', value, 'b']
    assert vllm_argv({'middleware': [value]}) == ['--middleware', value]


def test_dict_with_shell_characters_is_one_element():
    argv = vllm_argv({'default_chat_template_kwargs': {'prompt': "it's $(x) \"y\""}})
    assert len(argv) == 2
    assert json.loads(argv[1]) == {'prompt': "it's $(x) \"y\""}


def test_all_elements_are_plain_str():
    class TaggedStr(str):
        pass

    class TaggedInt(int):
        pass

    argv = vllm_argv({'model': TaggedStr('m'), 'a': TaggedInt(3), 'b': [TaggedStr('x')], 'c': {'k': TaggedStr('v')}})
    assert argv == ['--model', 'm', '--a', '3', '--b', 'x', '--c', '{"k":"v"}']
    assert all(type(item) is str for item in argv)  # pylint: disable=unidiomatic-typecheck


def test_mapping_subclasses_accepted():
    options = collections.OrderedDict([('limit_mm_per_prompt', collections.OrderedDict([('video', 0)]))])
    assert vllm_argv(options) == ['--limit-mm-per-prompt', '{"video":0}']


# --- list_style --------------------------------------------------------------------------------------------------------

LIST_STYLE_CASES = [
    pytest.param({'served_model_name': ['a', 'b']}, {'served_model_name': 'repeat'},
                 ['--served-model-name', 'a', '--served-model-name', 'b'], id='override-join-to-repeat'),
    pytest.param({'middleware': ['a', 'b']}, {'middleware': 'join'}, ['--middleware', 'a', 'b'], id='override-repeat-to-join'),
    pytest.param({'my_opt': ['a', 'b']}, {'my-opt': 'json'}, ['--my-opt', '["a","b"]'], id='dash-spelling-in-style'),
    pytest.param({'my_opt': ['a', 'b']}, {'--my-opt': 'repeat'}, ['--my-opt', 'a', '--my-opt', 'b'], id='double-dash-in-style'),
    pytest.param({'my_opt': [{'a': 1}]}, {'my_opt': 'json'}, ['--my-opt', '[{"a":1}]'], id='json-list-of-dicts'),
    pytest.param({'my_opt': 'scalar'}, {'my_opt': 'repeat'}, ['--my-opt', 'scalar'], id='style-ignored-for-scalars'),
    pytest.param({'a': ['x']}, {'unused': 'join'}, ['--a', 'x'], id='style-for-absent-option'),
    pytest.param({'a': ['x']}, None, ['--a', 'x'], id='style-none'),
]


@pytest.mark.parametrize('options, list_style, argv', LIST_STYLE_CASES)
def test_list_style(options, list_style, argv):
    assert vllm_argv(options, list_style) == argv
    assert vllm_args(options, list_style) == argv


def test_list_style_table_values_valid():
    assert LIST_STYLES['middleware'] == 'repeat'
    assert LIST_STYLES['served-model-name'] == 'join'
    assert LIST_STYLES['allowed-origins'] == 'json'
    assert set(LIST_STYLES.values()) <= {'repeat', 'join', 'json'}
    for option in LIST_STYLES:
        assert normalize_option(option) == '--' + option


# --- errors ------------------------------------------------------------------------------------------------------------

class Opaque:
    pass


ERROR_CASES = [
    pytest.param({'x': b'bytes'}, None, ["'x'", 'bytes'], id='bytes'),
    pytest.param({'x': {1, 2}}, None, ["'x'", 'set'], id='set'),
    pytest.param({'x': frozenset()}, None, ["'x'", 'frozenset'], id='frozenset'),
    pytest.param({'x': Opaque()}, None, ["'x'", 'Opaque'], id='object'),
    pytest.param({'x': float('nan')}, None, ["'x'", 'nan', 'NaN and infinity'], id='nan'),
    pytest.param({'x': float('inf')}, None, ["'x'", 'inf'], id='inf'),
    pytest.param({'x': float('-inf')}, None, ["'x'", '-inf'], id='minus-inf'),
    pytest.param({'x': [{'a': 1}]}, None, ["'x' item [0] is a dict", 'list_style json'], id='list-of-dicts'),
    pytest.param({'x': [['a']]}, None, ["'x'", '[0]', 'list'], id='nested-list'),
    pytest.param({'x': ['a', None]}, None, ["'x'", '[1]', 'NoneType'], id='none-in-list'),
    pytest.param({'x': ['a', True]}, None, ["'x'", '[1]', 'boolean True'], id='bool-in-list'),
    pytest.param({'x': [float('nan')]}, None, ["'x'", '[0]', 'nan'], id='nan-in-list'),
    pytest.param({'x': {'a': float('nan')}}, None, ["'x'", 'value.a', 'NaN'], id='nan-in-dict'),
    pytest.param({'x': {'a': {1, 2}}}, None, ["'x'", 'set', 'value.a'], id='set-in-dict'),
    pytest.param({'x': {'a': b'z'}}, None, ["'x'", 'bytes', 'value.a'], id='bytes-in-dict'),
    pytest.param({'x': {1: 'a'}}, None, ["'x'", 'non-string key 1'], id='int-key-in-dict'),
    pytest.param({'x': ['a']}, {'x': 'comma'}, ["'x'", "'comma'", 'repeat, join, json'], id='bad-list-style'),
    pytest.param({'x': ['a']}, {'Bad Name': 'join'}, ["'Bad Name'", 'not a valid vLLM option'], id='bad-list-style-key'),
    pytest.param({'x': ['a']}, ['x'], ['list_style must be a mapping', 'list'], id='list-style-not-mapping'),
    pytest.param(['--model', 'x'], None, ['expected a mapping', 'got list'], id='not-a-mapping'),
    pytest.param('--model x', None, ['expected a mapping', 'str'], id='string-input'),
    pytest.param({'Tensor_Parallel_Size': 4}, None, ["'Tensor_Parallel_Size'", 'not a valid vLLM option'], id='upper-case-key'),
]


@pytest.mark.parametrize('options, list_style, fragments', ERROR_CASES)
def test_errors(options, list_style, fragments):
    with pytest.raises(VllmArgsError) as exc:
        vllm_argv(options, list_style)
    message = str(exc.value)
    assert isinstance(exc.value, ValueError)
    assert message.startswith('vllm_args: ')
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize('options, list_style, fragments', ERROR_CASES[:4])
def test_filter_raises_ansible_filter_error(options, list_style, fragments):
    with pytest.raises(AnsibleFilterError) as exc:
        vllm_args(options, list_style)
    for fragment in fragments:
        assert fragment in str(exc.value)


# ---------------------------------------------------------------- executor (issue 23)

def four_node_plan(backend, port=29501):
    nodes = [{'host': host, 'rank': rank, 'rail_addresses': {'rail1': '192.168.100.%d' % (10 + rank)}}
             for rank, host in enumerate(['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta'])]
    return {'executor_backend': backend, 'nodes': nodes, 'gpus': 4,
            'mp_master': {'address': '192.168.100.10', 'port': port} if backend == 'mp' else None}


@pytest.mark.parametrize('backend, host, argv', [
    ('ray', 'spark-alpha', ['--distributed-executor-backend', 'ray']),
    ('mp', 'spark-alpha', ['--distributed-executor-backend', 'mp', '--master-addr', '192.168.100.10', '--master-port', '29501',
                           '--nnodes', '4', '--node-rank', '0']),
    ('mp', 'spark-gamma', ['--distributed-executor-backend', 'mp', '--headless', '--master-addr', '192.168.100.10',
                           '--master-port', '29501', '--nnodes', '4', '--node-rank', '2']),
])
def test_the_executor_backend_gives_each_rank_its_options(backend, host, argv):
    assert vllm_args(executor(four_node_plan(backend), host)[0]) == argv


def test_a_host_outside_the_plan_has_no_rank():
    with pytest.raises(VllmArgsError, match='spark-omega is not a node of the plan'):
        executor(four_node_plan('mp'), 'spark-omega')


@pytest.mark.parametrize('backend, host, env', [
    ('ray', 'spark-alpha', {'DGXSPARK_VLLM_GPUS': '4'}),
    ('mp', 'spark-alpha', {'DGXSPARK_EXECUTOR': 'mp'}),
    ('mp', 'spark-delta', {'DGXSPARK_EXECUTOR': 'mp', 'DGXSPARK_RANK_WATCH': '192.168.100.10:29501'}),
])
def test_the_start_script_knows_the_backend_and_a_headless_rank_its_rendezvous(backend, host, env):
    assert executor(four_node_plan(backend), host)[1] == env
