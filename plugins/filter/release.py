# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release_id filter: the serving group's release id from every node's digest (release_id.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.release import ReleaseError, release_id as _release_id


def release_id(node_digests):
    """{host: node digest} -> the cluster's release id."""
    if not isinstance(node_digests, dict):
        raise AnsibleFilterError('release_id: expects a mapping of host to node digest, not %s' % type(node_digests).__name__)
    try:
        return _release_id(node_digests)
    except ReleaseError as exc:
        raise AnsibleFilterError('release_id: %s' % exc) from exc


class FilterModule:
    """Filters of the serving releases."""

    def filters(self):
        return {'release_id': release_id}
