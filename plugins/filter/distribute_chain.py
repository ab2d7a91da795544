# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter distribute_chain: the nodes a distribution flows along (documented in distribute_chain.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.distribute_plan import chain


def distribute_chain(plan, targets, head=None, rail=None):
    """Rail addresses of the head (when given) and the targets, in rank order."""
    try:
        return chain(plan, targets, head=head, rail=rail)
    except (ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('distribute_chain: %s' % exc) from exc


class FilterModule:
    """Filters of the distribute role."""

    def filters(self):
        return {'distribute_chain': distribute_chain}
