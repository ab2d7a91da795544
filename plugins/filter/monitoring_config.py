# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters monitoring_prometheus_config and monitoring_node_metrics_config (documented in their .yml files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.monitoring_config import (
    MonitoringConfigError, node_metrics_config, prometheus_config)


def monitoring_prometheus_config(plan, settings):
    """prometheus.yml as data; see plugins/plugin_utils/monitoring_config.py."""
    try:
        return prometheus_config(plan, settings)
    except (MonitoringConfigError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('monitoring_prometheus_config: %s' % exc) from exc


def monitoring_node_metrics_config(host, plan, settings):
    """The textfile gauges' settings of one node; see plugins/plugin_utils/monitoring_config.py."""
    try:
        return node_metrics_config(host, plan, settings)
    except (MonitoringConfigError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('monitoring_node_metrics_config: %s' % exc) from exc


class FilterModule:
    """Filters of the monitoring role."""

    def filters(self):
        return {
            'monitoring_prometheus_config': monitoring_prometheus_config,
            'monitoring_node_metrics_config': monitoring_node_metrics_config,
        }
