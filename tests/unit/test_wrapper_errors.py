# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one error shape of the thin wrappers (plugins/plugin_utils/wrapper_errors.py): '<plugin>: <the logic's message>'."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleActionFail, AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.filter.monitoring_config import FilterModule as MonitoringFilters
from ansible_collections.dgxspark.cluster.plugins.filter.supervisor_config import FilterModule as SupervisorFilters
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import action_call, filter_call


def fails(error):
    def function(*_args, **_kwargs):
        raise error
    return function


@pytest.mark.parametrize('error, message', [
    (ValueError('node spark-beta has no address on rail rail1'), 'x: node spark-beta has no address on rail rail1'),
    (KeyError('rails'), "x: 'rails'"),
    (TypeError('bad'), 'x: bad'),
    (IndexError('list index out of range'), 'x: list index out of range'),
    (AttributeError('no get'), 'x: no get'),
])
@pytest.mark.parametrize('call, error_class', [(filter_call, AnsibleFilterError), (action_call, AnsibleActionFail)])
def test_an_input_error_names_the_wrapper(call, error_class, error, message):
    with pytest.raises(error_class) as raised:
        call('x', fails(error))
    assert raised.value.message == message and raised.value.__cause__ is error


def test_a_result_passes_and_another_error_is_not_an_input_error():
    assert filter_call('x', lambda a, b=0: a + b, 1, b=2) == 3
    with pytest.raises(RuntimeError):
        action_call('x', fails(RuntimeError('a bug')))


@pytest.mark.parametrize('filters, name, args', [
    (SupervisorFilters, 'supervisor_config', ({'nodes': []}, {})),
    (SupervisorFilters, 'supervisor_node_ctl_config', ('spark-alpha', {}, {})),
    (MonitoringFilters, 'monitoring_prometheus_config', ({}, {})),
    (MonitoringFilters, 'monitoring_node_metrics_config', ('spark-alpha', {}, {})),
])
def test_the_config_filters_name_themselves(filters, name, args):
    with pytest.raises(AnsibleFilterError, match='^%s: ' % name):
        filters().filters()[name](*args)
