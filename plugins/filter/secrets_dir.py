# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter controller_secrets_dir: the controller's directory of an inventory's secrets (documented in
controller_secrets_dir.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.secrets_dir import controller_secrets_dir as resolve


def controller_secrets_dir(inventory_dir):
    """The secrets directory of the inventory at ``inventory_dir``, under the controller's home."""
    if not inventory_dir:
        raise AnsibleFilterError('controller_secrets_dir: no inventory directory (set dgxspark_secrets_dir)')
    return resolve(inventory_dir)


class FilterModule:
    """Filters about the controller's secrets."""

    def filters(self):
        return {'controller_secrets_dir': controller_secrets_dir}
