# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter nccl_builds (nccl_builds.yml): whether the serving engine loaded the same NCCL build on every node."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_identity import compare_builds

_SUBJECT = "the engine's processes on this node"


def nccl_builds(results, hosts):
    """The engine_nccl_build results of the nodes (in the order of hosts) -> {'line': str, 'failures': [str]}."""
    if not isinstance(results, list) or not isinstance(hosts, list) or len(results) != len(hosts):
        raise AnsibleFilterError('nccl_builds: expects one engine_nccl_build result a host, in the order of the hosts')
    try:
        found = dict((host, {'version': None, 'libraries': [(lib['sha256'], lib['path']) for lib in result['libraries']]})
                     for host, result in zip(hosts, results) if result and not result.get('skipped'))
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError('nccl_builds: not an engine_nccl_build result: %s' % exc) from exc
    line, problems = compare_builds(found, list(hosts), subject=_SUBJECT)
    none_mapped = 'NCCL build: no engine process mapped a libnccl on %s (a CPU build, or no rank there)' % ', '.join(
        sorted(found))
    return {'line': line or none_mapped,
            'failures': ['%s: %s' % (problem['host'], problem['detail']) for problem in problems]}


class FilterModule:
    """Whether the serving engine loaded the same NCCL build on every node."""

    def filters(self):
        return {'nccl_builds': nccl_builds}
