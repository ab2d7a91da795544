# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters supervisor_config and supervisor_node_ctl_config (documented in their .yml files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.supervisor_config import (
    SupervisorConfigError, node_ctl_config, supervisor_config as build_supervisor_config)


def supervisor_config(plan, settings):
    """The supervisor's configuration; see plugins/plugin_utils/supervisor_config.py."""
    try:
        return build_supervisor_config(plan, settings)
    except (SupervisorConfigError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('supervisor_config: %s' % exc) from exc


def supervisor_node_ctl_config(host, plan, settings):
    """What the supervisor's node command may touch on a node; see plugins/plugin_utils/supervisor_config.py."""
    try:
        return node_ctl_config(host, plan, settings)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError('supervisor_node_ctl_config: %s' % exc) from exc


class FilterModule:
    """Filters of the supervisor role."""

    def filters(self):
        return {
            'supervisor_config': supervisor_config,
            'supervisor_node_ctl_config': supervisor_node_ctl_config,
        }
