# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ibdev2netdev filter: parse `ibdev2netdev` / `ibdev2netdev -v` output (documented in ibdev2netdev.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.cx7 import (
    Ibdev2netdevParseError,
    parse_ibdev2netdev,
)


def ibdev2netdev(text):
    """Records of ibdev2netdev output; see plugins/module_utils/cx7.py parse_ibdev2netdev."""
    try:
        return parse_ibdev2netdev(text)
    except Ibdev2netdevParseError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """Filters for ConnectX-7 / RDMA device discovery."""

    def filters(self):
        return {"ibdev2netdev": ibdev2netdev}
