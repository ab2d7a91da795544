# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters monitoring_prometheus_config and monitoring_node_metrics_config (documented in their .yml files): the content
of the monitoring role's two configuration files, each written by one copy task."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.monitoring_config import node_metrics_config, prometheus_config
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import filter_call


def monitoring_prometheus_config(plan, settings):
    """prometheus.yml as data; see plugins/plugin_utils/monitoring_config.py."""
    return filter_call('monitoring_prometheus_config', prometheus_config, plan, settings)


def monitoring_node_metrics_config(host, plan, settings):
    """The textfile gauges' settings of one node; see plugins/plugin_utils/monitoring_config.py."""
    return filter_call('monitoring_node_metrics_config', node_metrics_config, host, plan, settings)


class FilterModule:
    """Filters of the monitoring role."""

    def filters(self):
        return {
            'monitoring_prometheus_config': monitoring_prometheus_config,
            'monitoring_node_metrics_config': monitoring_node_metrics_config,
        }
