# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of the serving releases: the group's release id from every node's digest (release_id.yml), the
executor backend a recorded release ran with (release_backend.yml), and how its engine is asked whether it serves
(release_engine.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.release import ReleaseError
from ansible_collections.dgxspark.cluster.plugins.module_utils.release import backend as _backend
from ansible_collections.dgxspark.cluster.plugins.module_utils.release import engine as _engine
from ansible_collections.dgxspark.cluster.plugins.module_utils.release import release_id as _release_id


def release_id(node_digests):
    """{host: node digest} -> the cluster's release id."""
    if not isinstance(node_digests, dict):
        raise AnsibleFilterError('release_id: expects a mapping of host to node digest, not %s' % type(node_digests).__name__)
    try:
        return _release_id(node_digests)
    except ReleaseError as exc:
        raise AnsibleFilterError('release_id: %s' % exc) from exc


def release_backend(release):
    """A node's record of a release -> the executor backend it ran with (ray or mp)."""
    try:
        return _backend(release)
    except ReleaseError as exc:
        raise AnsibleFilterError('release_backend: %s' % exc) from exc


def release_engine(release):
    """A node's record of a release -> its engine (container, url, served_model_name) as its containers run it, or None
    on a node without the API; read from the containers, so that a record written before the url knew TLS reads right."""
    if not isinstance(release, dict) or not isinstance(release.get('containers'), list):
        raise AnsibleFilterError('release_engine: expects a release record with its list of containers')
    return _engine(release['containers'])


class FilterModule:
    """Filters of the serving releases."""

    def filters(self):
        return {'release_id': release_id, 'release_backend': release_backend, 'release_engine': release_engine}
