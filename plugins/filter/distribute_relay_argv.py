# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter distribute_relay_argv (documented in distribute_relay_argv.yml): the relay's command line from its options, as the
distribute role's command tasks give it. Who receives what and the chains are the role's action distribute_routes."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.distribute_plan import relay_argv
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import filter_call


def distribute_relay_argv(command, options, rails=None, ssh=None):
    """The relay's command line for one of its commands."""
    return filter_call('distribute_relay_argv', lambda: relay_argv(command, dict(options), rails=list(rails or []), ssh=ssh))


class FilterModule:
    """The filter of the distribute role."""

    def filters(self):
        return {'distribute_relay_argv': distribute_relay_argv}
