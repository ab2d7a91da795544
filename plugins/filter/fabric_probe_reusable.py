# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter fabric_probe_reusable (documented in fabric_probe_reusable.yml): the condition of the fabric_check role's probe task.

The role's report and readiness are its actions (fabric_report, fabric_readiness); this one stays a filter because it is a
node's ``when:``.
"""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.fabric_role import probe_reusable
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import filter_call


def fabric_probe_reusable(probe, plan, mtu, host=None):
    """Whether a probe kept by cx7_netplan in this run (cx7_netplan_fabric_probe) answers what fabric_check would measure."""
    return filter_call('fabric_probe_reusable', probe_reusable, probe, plan, mtu, host=host)


class FilterModule:
    """The filter of the fabric_check role."""

    def filters(self):
        return {'fabric_probe_reusable': fabric_probe_reusable}
