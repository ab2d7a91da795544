# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ray_start_args filter: the `ray start` arguments of one node (documented in ray_start_args.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.ray_start import RayStartError, ray_start_argv


def ray_start_args(ports, role, node_ip, head_ip, num_gpus=1, dashboard=False, client_server=True, object_store_memory=None):
    """Argv list after `ray start`; see plugins/plugin_utils/ray_start.py ray_start_argv."""
    try:
        return ray_start_argv(ports, role, node_ip, head_ip, num_gpus=num_gpus, dashboard=dashboard,
                              client_server=client_server, object_store_memory=object_store_memory)
    except RayStartError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """Filters that build Ray command lines."""

    def filters(self):
        return {"ray_start_args": ray_start_args}
