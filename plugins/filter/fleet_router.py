# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the fleet_router role (documented in their .yml files): the router's wheelhouse for its node, pip
download's arguments for it, and the proxy's configuration, command line and environment from the plan's router."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import fleet_router
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import filter_call


def fleet_router_wheelhouse(node, lock_digest):
    """The wheelhouse for the router's node; see plugins/plugin_utils/fleet_router.py wheelhouse."""
    return filter_call('fleet_router_wheelhouse', fleet_router.wheelhouse, node, lock_digest)


def fleet_router_download_args(house, requirements, dest, specs=()):
    """pip download's arguments for a wheelhouse; see plugins/plugin_utils/fleet_router.py download_args."""
    return filter_call('fleet_router_download_args', fleet_router.download_args, house, requirements, dest, specs)


def fleet_router_config(router):
    """LiteLLM's proxy config from the plan's router; see plugins/plugin_utils/fleet_router.py proxy_config."""
    return filter_call('fleet_router_config', fleet_router.proxy_config, router)


def fleet_router_in_rotation(router, out_of_rotation=()):
    """The router without the replicas of the groups taken out; see plugins/plugin_utils/fleet_router.py in_rotation."""
    return filter_call('fleet_router_in_rotation', fleet_router.in_rotation, router, out_of_rotation)


def fleet_router_args(router, config_file, tls_dir='${CREDENTIALS_DIRECTORY}', port=None, workers=1):
    """The proxy's arguments; see plugins/plugin_utils/fleet_router.py proxy_args (tls_dir: its credentials_dir)."""
    return filter_call('fleet_router_args', fleet_router.proxy_args, router, config_file, tls_dir, port, workers)


def fleet_router_environment(router):
    """The router unit's environment (no secret); see plugins/plugin_utils/fleet_router.py unit_environment."""
    return filter_call('fleet_router_environment', lambda _router: fleet_router.unit_environment(), router)


class FilterModule:
    """Filters of the fleet_router role."""

    def filters(self):
        return {
            'fleet_router_wheelhouse': fleet_router_wheelhouse,
            'fleet_router_download_args': fleet_router_download_args,
            'fleet_router_config': fleet_router_config,
            'fleet_router_in_rotation': fleet_router_in_rotation,
            'fleet_router_args': fleet_router_args,
            'fleet_router_environment': fleet_router_environment,
        }
