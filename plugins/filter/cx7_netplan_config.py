# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter of the cx7_netplan role (documented in its sidecar .yml): one node's rail configuration and its drift
(cx7_netplan_config, also the condition that waits for the rails after a change). The checks across nodes are the
role's action cx7_netplan_verdict; its files on the node are the module cx7_netplan_files."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.netplan import drift, node_config
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import filter_call


def _config(plan, host, mtu, renderer, routes, optional, facts, probe):
    config = node_config(plan, host, mtu=mtu, renderer=renderer, routes=routes, optional=optional)
    if facts is not None or probe is not None:
        config['drift'] = drift(config, facts or {}, probe)
    return config


def cx7_netplan_config(plan, host, mtu=None, renderer=None, routes=None, optional=True, facts=None, probe=None):
    """The node's rail configuration; with facts and/or probe also ``drift``. See plugins/plugin_utils/netplan.py."""
    return filter_call('cx7_netplan_config', _config, plan, host, mtu, renderer, routes, optional, facts, probe)


class FilterModule:
    """Filters for the CX-7 rail netplan configuration."""

    def filters(self):
        return {
            'cx7_netplan_config': cx7_netplan_config,
        }
