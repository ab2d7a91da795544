# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's configurations from the cluster plan: Prometheus' scrape configuration (every node's
exporter, the engine's /metrics with the API key, each rank's Ray metrics) and each node's textfile gauges' settings.

Pure logic, stdlib only. Prometheus reaches every target over rail 1 (the network the serving group itself uses,
which the firewall opens between the nodes only); every target carries the node's inventory name as label `node`,
which the alert rules and the dashboards use. In a fleet (issue 51: serving groups, each planned and monitored on its
own) every target also carries its group's name as label `group` (the plan's serving_group), and the router's the
label `group: fleet`; one group's plan has no serving_group, and its configuration no `group` label, as before.
"""

from __future__ import annotations

GIB = 2 ** 30
# The router's `group` label (no serving group can take the name: fleet_plan.serving_groups refuses it).
FLEET_GROUP_LABEL = 'fleet'


class MonitoringConfigError(ValueError):
    """The plan or the settings cannot make a configuration."""


def _nodes(plan):
    nodes = sorted(plan.get('nodes') or [], key=lambda node: node['rank'])
    if not nodes or nodes[0]['host'] != plan.get('head'):
        raise MonitoringConfigError('the plan has no nodes, or its rank 0 is not its head')
    rail = (plan.get('rails') or [{}])[0].get('name')
    addresses = {}
    for node in nodes:
        address = (node.get('rail_addresses') or {}).get(rail)
        if not address:
            raise MonitoringConfigError('node %s has no address on rail %s in the plan' % (node['host'], rail))
        addresses[node['host']] = address
    return nodes, addresses


def _port(settings, key):
    try:
        port = int(settings[key])
    except (TypeError, ValueError):
        raise MonitoringConfigError('%s must be a port number, got %r' % (key, settings[key]))
    if not 0 < port < 65536:
        raise MonitoringConfigError('%s must be a port number (1-65535), got %d' % (key, port))
    return port


def _seconds(settings, key):
    try:
        seconds = int(settings[key])
    except (TypeError, ValueError):
        seconds = 0
    if seconds <= 0:
        raise MonitoringConfigError('%s must be a whole number of seconds above 0, got %r' % (key, settings[key]))
    return '%ds' % seconds


def _labels(host, group):
    """A target's labels: its node, and its group's name in a fleet (none: one group, labelled as before)."""
    return {'node': host, 'group': group} if group else {'node': host}


def _job(name, targets, group=None, **extra):
    job = {'job_name': name, 'static_configs': [{'targets': [target], 'labels': _labels(host, group)}
                                                for host, target in targets]}
    job.update(extra)
    return job


def engine_tls(plan):
    """The engine job's scheme and tls_config when the API serves TLS (the plan's api.tls): the CA every node holds (none:
    the system's trust store) and the name the certificate is for, as Prometheus scrapes the head's rail-1 address."""
    tls = (plan.get('api') or {}).get('tls') or {}
    if not tls.get('enabled'):
        return {}
    config = {'server_name': tls['server_name'], 'insecure_skip_verify': False}
    if tls.get('ca_file'):
        config['ca_file'] = tls['ca_file']
    return {'scheme': 'https', 'tls_config': config}


def router_job(router, addresses, api_key_file):
    """The fleet router's job (issue 51: LiteLLM's /metrics/, behind the fleet's key) for the Prometheus of the group
    whose node runs it (addresses: that group's nodes' rail-1 addresses); none otherwise or without a router."""
    if not router or router.get('host') not in addresses:
        return []
    tls = router.get('tls') or {}
    extra = {}
    if tls.get('enabled'):
        config = {'server_name': tls['server_name'], 'insecure_skip_verify': False}
        if tls.get('ca_file'):
            config['ca_file'] = tls['ca_file']
        extra = {'scheme': 'https', 'tls_config': config}
    # /metrics answers a redirect to /metrics/ (1.110.2); the key as the bearer token, as for the engine.
    # Its series are the whole fleet's traffic (every model, every replica), not its node's group's: labelled with that
    # group, a Grafana user who picks one group would see the other groups' requests counted in it. `group: fleet` keeps
    # it out of every single group's view, in the view of all groups, and names it in a `by (group)` legend.
    return [_job('router', [(router['host'], '%s:%d' % (addresses[router['host']], int(router['port'])))],
                 group=FLEET_GROUP_LABEL, metrics_path='/metrics/',
                 authorization={'type': 'Bearer', 'credentials_file': api_key_file}, **extra)]


def prometheus_config(plan, settings):
    """prometheus.yml as data. settings: scrape_interval_s, evaluation_interval_s, node_exporter_port, vllm_port,
    ray_metrics_port, scrape_ray (bool: Ray's metrics, when the plan's executor backend is Ray), api_key_file, rules_files
    (list), cluster (the external label), router (the fleet's router, dgxspark_fleet.router; None or absent: none).
    The plan's serving_group (a fleet's group plan only) labels the group's targets `group`."""
    nodes, addresses = _nodes(plan)
    head = plan['head']
    group = plan.get('serving_group')
    node_port = _port(settings, 'node_exporter_port')
    jobs = [
        _job('node', [(n['host'], '%s:%d' % (addresses[n['host']], node_port)) for n in nodes], group),
        _job('vllm', [(head, '%s:%d' % (addresses[head], _port(settings, 'vllm_port')))], group,
             authorization={'type': 'Bearer', 'credentials_file': settings['api_key_file']}, **engine_tls(plan)),
    ]
    ray_nodes = [n['host'] for n in nodes if 'ray' in n['runs']]  # none with vLLM's own multi-node backend (mp)
    if settings.get('scrape_ray') and ray_nodes:
        ray_port = _port(settings, 'ray_metrics_port')
        jobs.append(_job('ray', [(host, '%s:%d' % (addresses[host], ray_port)) for host in ray_nodes], group))
    jobs += router_job(settings.get('router'), addresses, settings['api_key_file'])
    return {
        'global': {'scrape_interval': _seconds(settings, 'scrape_interval_s'),
                   'evaluation_interval': _seconds(settings, 'evaluation_interval_s'),
                   'external_labels': {'cluster': str(settings['cluster'])}},
        'rule_files': list(settings.get('rules_files') or []),
        'scrape_configs': jobs,
    }


def node_metrics_config(host, plan, settings):
    """What dgxspark_node_metrics.py reads on `host`. settings: rank_container, engine_container, supervisor_report
    (the head's report file, '' without a supervisor), phase_dir, output, nvidia_smi, memory_floor_share (of what the
    plan leaves outside vLLM's budget) or memory_floor_gib (a figure; None: the share)."""
    runs = dict((node['host'], node['runs']) for node in _nodes(plan)[0])
    if host not in runs:
        raise MonitoringConfigError('%s is not a node of the plan' % host)
    # The node's containers as the plan runs them: with Ray, Ray's on every node and vLLM's on the head; with mp every
    # node's vLLM container is its rank.
    names = {'ray': settings['rank_container'], 'vllm': settings['engine_container']}
    containers = [names[kind] for kind in runs[host]]
    floor_gib = settings.get('memory_floor_gib')
    if floor_gib in (None, ''):
        memory = plan.get('memory') or {}
        try:
            share = float(settings['memory_floor_share'])
            outside = float(memory['node_memory_gib']) - float(memory['budget_gib'])
        except (KeyError, TypeError, ValueError):
            raise MonitoringConfigError('no memory floor: the plan has no node memory and budget, or memory_floor_share '
                                        'is not a number (%r); set memory_floor_gib' % (settings.get('memory_floor_share'),))
        if not 0 < share <= 1:
            raise MonitoringConfigError('memory_floor_share must be above 0 and at most 1, got %s' % share)
        floor_gib = share * max(outside, 0.0)
    try:
        floor_bytes = int(float(floor_gib) * GIB)
    except (TypeError, ValueError):
        raise MonitoringConfigError('memory_floor_gib must be a number of GiB, got %r' % (floor_gib,))
    return {
        'node': host,
        'output': settings['output'],
        'containers': containers,
        'supervisor_report': settings['supervisor_report'] if host == plan['head'] else '',
        'phase_dir': settings['phase_dir'],
        'nvidia_smi': settings['nvidia_smi'],
        'memory_floor_bytes': floor_bytes,
    }
