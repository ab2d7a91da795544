# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters serving_hosts, serving_batches, fleet_status: the node plays of a fleet, one serving group at a time
(documented in serving_hosts.yml, serving_batches.yml, fleet_status.yml)."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import fleet_operations
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import filter_call


def serving_hosts(groups, declared=None, selected=''):
    """A node play's hosts; see plugins/plugin_utils/fleet_operations.py serving_hosts."""
    return filter_call('serving_hosts', fleet_operations.serving_hosts, groups, declared, selected)


def serving_batches(groups, declared=None, selected='', limit=None):
    """A node play's serial: one batch per group; see plugins/plugin_utils/fleet_operations.py serving_batches."""
    return filter_call('serving_batches', fleet_operations.serving_batches, groups, declared, selected, limit)


def fleet_status(statuses, fleet=None, router=None):
    """The fleet's status from each group's; see plugins/plugin_utils/fleet_operations.py fleet_status."""
    return filter_call('fleet_status', fleet_operations.fleet_status, statuses, fleet, router)


class FilterModule:
    """Filters of a fleet's operations."""

    def filters(self):
        return {
            'serving_hosts': serving_hosts,
            'serving_batches': serving_batches,
            'fleet_status': fleet_status,
        }
