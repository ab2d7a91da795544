# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ray_membership: the Ray nodes against the cluster plan (documented in ray_membership.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.ray_membership import ray_membership as build_ray_membership


def ray_membership(ray_nodes, plan, gpus_per_node=1):
    """Alive, missing, dead and unexpected Ray nodes; see plugins/plugin_utils/ray_membership.py."""
    try:
        return build_ray_membership(ray_nodes, plan, gpus_per_node=gpus_per_node)
    except (ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('ray_membership: %s' % exc) from exc


class FilterModule:
    """Filters for the Ray cluster of the serving roles."""

    def filters(self):
        return {
            'ray_membership': ray_membership,
        }
