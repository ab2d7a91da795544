# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter serving_container_env (documented in serving_container_env.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_env import NcclEnvError
from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_env import serving_container_env as _serving_container_env


def serving_container_env(layers, non_carry_over=None):
    """The environment of a node's serving containers, from its layers and the names never carried to other nodes."""
    try:
        return _serving_container_env(layers, non_carry_over)
    except NcclEnvError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """The serving containers' environment."""

    def filters(self):
        return {'serving_container_env': serving_container_env}
