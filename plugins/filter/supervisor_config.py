# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters supervisor_config and supervisor_node_ctl_config (documented in their .yml files): the content of the
supervisor role's two configuration files, each written by one copy task."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.supervisor_config import node_ctl_config
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.supervisor_config import supervisor_config as build_supervisor_config
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import filter_call


def supervisor_config(plan, settings):
    """The supervisor's configuration; see plugins/plugin_utils/supervisor_config.py."""
    return filter_call('supervisor_config', build_supervisor_config, plan, settings)


def supervisor_node_ctl_config(host, plan, settings):
    """What the supervisor's node command may touch on a node; see plugins/plugin_utils/supervisor_config.py."""
    return filter_call('supervisor_node_ctl_config', node_ctl_config, host, plan, settings)


class FilterModule:
    """Filters of the supervisor role."""

    def filters(self):
        return {
            'supervisor_config': supervisor_config,
            'supervisor_node_ctl_config': supervisor_node_ctl_config,
        }
