# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The supervisor's configuration from the cluster plan (roles/supervisor): the serving group in start order, where
each node is reached, and what memory each node needs before the group starts again.

Pure logic, stdlib only. The group is every rank's container in rank order (the head's first: Ray's head must be up
before its workers join), then the engine on the head; with vLLM's own multi-node backend (mp) the workers' vLLM
containers (headless ranks), then the head's (rank 0, the engine). The supervisor reaches the other nodes over rail 1, the
network the group itself needs; the head is reached directly. Memory: the plan's per-node budget (vLLM's share of
the node's memory: weights, KV cache and overhead), the figure preflight checks before a deploy.
"""

from __future__ import annotations

KIB_PER_GIB = 1024 * 1024


class SupervisorConfigError(ValueError):
    """The plan or the settings cannot make a configuration."""


def _container_names(settings):
    """The container of each kind the plan's nodes[].runs name."""
    return {'ray': settings['rank_container'], 'vllm': settings['engine_container']}


def supervisor_config(plan, settings):
    """The JSON the supervisor reads. settings: rank_container, engine_container, the core's figures (interval_s,
    deadline_s, failures_to_restart, grace_s, stall_s, frozen_s, budget_restarts, budget_window_s, memory_wait_s), url,
    api_key_file, model, state_dir, node_ctl, ssh (key, known_hosts), memory_needed_gib (None: the plan's)."""
    nodes = sorted(plan.get('nodes') or [], key=lambda node: node['rank'])
    if not nodes or nodes[0]['host'] != plan.get('head'):
        raise SupervisorConfigError('the plan has no nodes, or its rank 0 is not its head')
    rail = (plan.get('rails') or [{}])[0].get('name')
    needed_gib = settings.get('memory_needed_gib')
    if needed_gib in (None, ''):
        needed_gib = (plan.get('memory') or {}).get('budget_gib')
    try:
        needed_gib = float(needed_gib or 0)
    except (TypeError, ValueError):
        raise SupervisorConfigError('memory_needed_gib must be a number of GiB, got %r' % (needed_gib,))
    if needed_gib <= 0:
        raise SupervisorConfigError('no memory figure: the plan has no memory budget and memory_needed_gib is not set')
    targets = {}
    for node in nodes:
        if node['host'] == plan['head']:
            targets[node['host']] = {'local': True}
            continue
        address = (node.get('rail_addresses') or {}).get(rail)
        if not address:
            raise SupervisorConfigError('node %s has no address on rail %s in the plan' % (node['host'], rail))
        targets[node['host']] = {'address': address}
    # Every node's containers as the plan runs them (nodes[].runs: with Ray, each node's Ray; with mp, the workers'
    # headless ranks), then the engine on the head (with the API) last.
    names = _container_names(settings)
    group = [{'node': node['host'], 'container': names[kind]} for node in nodes for kind in node['runs']
             if not (node['host'] == plan['head'] and kind == 'vllm')]
    group.append({'node': plan['head'], 'container': settings['engine_container'], 'engine': True})
    config = dict((key, settings[key]) for key in ('url', 'api_key_file', 'model', 'state_dir', 'node_ctl', 'ssh'))
    # With TLS (the plan's api.tls) the probe verifies the engine's certificate: the CA (None: the system's) and its name.
    tls = (plan.get('api') or {}).get('tls') or {}
    config['tls'] = {'ca_file': tls['ca_file'], 'server_name': tls['server_name']} if tls.get('enabled') else None
    for key in ('interval_s', 'deadline_s', 'failures_to_restart', 'grace_s', 'stall_s', 'frozen_s', 'budget_restarts',
                'budget_window_s', 'memory_wait_s', 'crash_budget_restarts', 'crash_backoff_s', 'crash_backoff_max_s'):
        try:
            config[key] = int(settings[key])
        except (TypeError, ValueError):
            raise SupervisorConfigError('%s must be a whole number, got %r' % (key, settings[key]))
    config.update(group=group, nodes=targets,
                  memory_needed_kib=dict((node['host'], int(needed_gib * KIB_PER_GIB)) for node in nodes))
    return config


def node_ctl_config(host, plan, settings):
    """What dgxspark_node_ctl.py may touch on `host`: its rank container, and the engine on the head (with mp, the
    vLLM container of every node, which is its rank)."""
    names = _container_names(settings)
    runs = next((node['runs'] for node in plan['nodes'] if node['host'] == host), None)
    if runs is None:
        raise SupervisorConfigError('%s is not a node of the plan' % host)
    return {'containers': [names[kind] for kind in runs], 'meminfo': settings['meminfo'], 'stop_timeout_s': int(settings['stop_timeout_s'])}
