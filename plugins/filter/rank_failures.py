# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter rank_failures (rank_failures.yml): the ranks of vLLM's mp backend that stopped, the first first."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.rank_failures import RankFailuresError, failures_text


def rank_failures(infos, logs, nodes, container):
    """The results of docker_container_info and of `docker logs` looped over the other ranks' hosts (item: the host),
    and the plan's nodes (host, rank) -> the paragraph naming the ranks that stopped ('' when none did)."""
    try:
        if not isinstance(infos, list) or not isinstance(logs, list) or not isinstance(nodes, list):
            raise RankFailuresError('expects the two loops\' results and the plan\'s nodes as lists')
        ranks_of = dict((node['host'], node.get('rank')) for node in nodes)
        log_of = dict((result.get('item'), result.get('stdout', '') + result.get('stderr', '')) for result in logs)
        ranks = [{'host': info.get('item'), 'rank': ranks_of.get(info.get('item')),
                  'inspect': [info['container']] if info.get('exists') else [], 'log': log_of.get(info.get('item'), '')}
                 for info in infos if not info.get('skipped')]
        return failures_text(ranks, container)
    except (RankFailuresError, KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError('rank_failures: %s' % exc) from exc


class FilterModule:
    """The ranks of vLLM's mp backend that stopped."""

    def filters(self):
        return {'rank_failures': rank_failures}
