# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving groups of one inventory (issue 51): which hosts make each group, and what the groups must not share.

Pure logic, controller only. An inventory names its serving groups in ``dgxspark_serving_groups`` (group_vars/all): a
list of Ansible groups, each one cluster planned as the classic ``head``/``workers`` inventory is (cluster_plan.py),
its first host the head. Each group's cluster variables come from Ansible's own group_vars/<group>, so that every
value is shared (group_vars/all) or set per group. Without ``dgxspark_serving_groups`` the groups ``head`` and
``workers`` make the one group, planned exactly as before.

The fleet's own checks run over the groups' plans: no node in two groups, every node its own rail address on a shared
rail, no two groups on one API address, and one served model name for one model (the same name and model on two
groups are replicas).
"""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import api_tls

# The router (LiteLLM's proxy, docs/fleet-router.md): one OpenAI endpoint in front of two or more serving groups.
ROUTER_PORT_DEFAULT = 4000  # LiteLLM's own default, free of every port the plan gives a node by default
# The router's two instances (roles/fleet_router: a change starts the idle one and swaps the port to it, no connection
# refused), each on a port of its own: the router's port + 1 and + 2 (docs/fleet-router.md, "Reload").
ROUTER_INSTANCES = ('a', 'b')
# On the router's node: every group's CA in one file, which LiteLLM checks the groups' certificates with (ssl_verify).
ROUTER_UPSTREAM_CA = '/etc/dgxspark/router/upstream-ca.pem'


def serving_groups(declared, groups):
    """([(name, {'head': [host], 'workers': [hosts]})], problems) of the inventory.

    ``declared``: dgxspark_serving_groups as the inventory sets it (None: not set); ``groups``: Ansible's groups.
    Not set: one group (name None) of the groups head and workers, as before. Set: one group per named Ansible group,
    in the list's order, the group's first host its head.
    """
    groups = groups or {}
    if declared is None:
        return [(None, {'head': list(groups.get('head') or []), 'workers': list(groups.get('workers') or [])})], []
    if not isinstance(declared, (list, tuple)) or not declared or not all(isinstance(n, str) and n for n in declared):
        return [], ['dgxspark_serving_groups is %r: give a list of the inventory groups that serve, e.g. [fleet_a, fleet_b] '
                    '(each an Ansible group whose first host is its head), or remove it to serve the groups head and workers.'
                    % (declared,)]
    problems = []
    classic = [name for name in ('head', 'workers') if groups.get(name)]
    if classic:
        problems.append('dgxspark_serving_groups is set, but the inventory has hosts in group%s %s too: with serving groups, '
                        'each group names its own hosts (its first host is its head); move them into a serving group and '
                        'remove group%s %s.' % ('s' if len(classic) > 1 else '', ' and '.join(classic),
                                                's' if len(classic) > 1 else '', ' and '.join(classic)))
    found, member_of = [], {}
    for name in declared:
        if name in [group for group, _members in found]:
            problems.append('dgxspark_serving_groups names %s twice: name each serving group once.' % name)
            continue
        if name in ('all', 'ungrouped', 'head', 'workers'):
            problems.append('dgxspark_serving_groups names %s, which cannot be a serving group: give groups of your own '
                            '(e.g. fleet_a).' % name)
            continue
        if name == 'fleet':
            # the router's `group` label on Prometheus' series (monitoring_config.router_job): the whole fleet's
            problems.append('dgxspark_serving_groups names fleet, which cannot be a serving group: `group="fleet"` labels '
                            'the router\'s metrics, which are the whole fleet\'s; rename the group (e.g. fleet_a).')
            continue
        hosts = list(groups.get(name) or [])
        if not hosts:
            problems.append('dgxspark_serving_groups names %s, but the inventory has no host in group %s: add the group '
                            '(its first host is its head) or remove it from the list (groups: %s).' % (
                                name, name, ', '.join(sorted(g for g in groups if g not in ('all', 'ungrouped'))) or 'none'))
            continue
        for host in hosts:
            member_of.setdefault(host, []).append(name)
        found.append((name, {'head': hosts[:1], 'workers': hosts[1:]}))
    for host, names in member_of.items():
        if len(names) > 1:
            problems.append('Host %s is in serving groups %s: a node serves in one group only (its GPU is one rank of one '
                            'model); remove it from all but one of them.' % (host, ' and '.join(names)))
    return found, problems


def address_bases(found):
    """{group: the number of the fleet's nodes in the groups before it}: each group's rail addresses follow those of the
    groups before, so every node of the fleet has its own (one group: 0, its addresses as before)."""
    bases, count = {}, 0
    for name, members in found:
        bases[name] = count
        count += len(members['head']) + len(members['workers'])
    return bases


def fleet_problems(plans):
    """What the groups' plans ({group: plan}, in the fleet's order) must not share: a rail address on one subnet, an API
    address, a served model name for two models. Each problem names the groups, hosts and values, and the fix."""
    problems = []
    owners = {}
    for name, plan in plans.items():
        for node in plan['nodes']:
            for rail in plan['rails']:
                key = (rail['subnet'], node['rail_addresses'][rail['name']])
                owners.setdefault(key, []).append((name, node['host'], rail['name']))
    for (subnet, address), users in sorted(owners.items()):
        if len(set(u[0] for u in users)) > 1:
            problems.append('Rail address %s (subnet %s) is given to %s: on a shared rail every node of the fleet needs its own '
                            'address; remove dgxspark_rail_addresses there (the plan numbers the nodes across the groups) or pick '
                            'free addresses.' % (address, subnet, ' and '.join(
                                '%s of group %s (rail %s)' % (host, group, rail) for group, host, rail in users)))
    endpoints = {}
    for name, plan in plans.items():
        endpoints.setdefault((plan['api']['host'], str(plan['api']['port'])), []).append(name)
    for (host, port), names in sorted(endpoints.items()):
        if len(names) > 1:
            problems.append('Serving groups %s all serve their API at %s:%s: give each group its own head address (ansible_host) '
                            'or its own vllm_container_port in group_vars/<group>.' % (' and '.join(names), host, port))
    served = {}
    for name, plan in plans.items():
        served.setdefault(plan['api']['served_model_name'], []).append((name, _model(plan)))
    for served_name, users in sorted(served.items()):
        if len(set(model for _group, model in users)) > 1:
            problems.append('Serving groups %s serve the model name %s for different models (%s): one name is one model '
                            '(the same name on the same model makes replicas); set vllm_container_served_model_name in '
                            'group_vars/<group> to a name of its own, or serve the same model.' % (
                                ' and '.join(group for group, _model in users), served_name,
                                ', '.join('%s: %s@%s' % (n, m[0], m[1]) for n, m in users)))
    return problems


def _model(plan):
    return (plan['hf_repo'], plan['model_revision'])


def fleet_view(plans, hosts_by_group):
    """The fleet's summary (dgxspark_fleet): its groups, its models with their replicas, and the endpoint."""
    groups = []
    for name, plan in plans.items():
        groups.append({
            'name': name,
            'head': plan['head'],
            'hosts': list(hosts_by_group[name]),
            'model_profile': plan['model_profile'],
            'hf_repo': plan['hf_repo'],
            'model_revision': plan['model_revision'],
            'served_model_name': plan['api']['served_model_name'],
            'tensor_parallel_size': plan['tensor_parallel_size'],
            'pipeline_parallel_size': plan['pipeline_parallel_size'],
            'executor_backend': plan['executor_backend'],
            'api_url': plan['api']['url'],
        })
    models = []
    for group in groups:
        same = [m for m in models if m['served_model_name'] == group['served_model_name']]
        if same:
            same[0]['replicas'].append(group['name'])
            continue
        models.append({'served_model_name': group['served_model_name'], 'hf_repo': group['hf_repo'],
                       'model_revision': group['model_revision'], 'replicas': [group['name']]})
    return {'groups': groups, 'models': models, 'router': None, 'endpoint': {
        'router': None, 'url': groups[0]['api_url'] if len(groups) == 1 else None,
        'note': 'one group, no router: clients call %s' % groups[0]['api_url'] if len(groups) == 1 else
        'no router: clients call each group at its own address'}}


def with_router(fleet, router):
    """The fleet's summary with its router (router_plan): the endpoint every model is served at."""
    if not router:
        return fleet
    return dict(fleet, router=router, endpoint={
        'router': router['url'], 'url': router['url'],
        'note': '%s (the router on %s: every model above%s)' % (
            router['url'], router['host'], ', TLS with the certificate of %s' % router['tls']['server_name']
            if router['tls']['enabled'] else ', plain HTTP')})


def fleet_lines(fleet):
    """The plan's fleet summary as text lines, after the groups' tables."""
    lines = ['Fleet: %d serving groups, %d nodes, %d model%s' % (
        len(fleet['groups']), sum(len(g['hosts']) for g in fleet['groups']), len(fleet['models']),
        '' if len(fleet['models']) == 1 else 's')]
    for group in fleet['groups']:
        lines.append('  group %s: %s (%s), head %s, TP %d x PP %d, %s, %s' % (
            group['name'], group['served_model_name'], group['model_profile'], group['head'], group['tensor_parallel_size'],
            group['pipeline_parallel_size'], group['executor_backend'], group['api_url']))
    for model in fleet['models']:
        lines.append('  model %s (%s@%s): %d replica%s (%s)' % (
            model['served_model_name'], model['hf_repo'], model['model_revision'], len(model['replicas']),
            '' if len(model['replicas']) == 1 else 's', ', '.join(model['replicas'])))
    lines.append('  endpoint: %s' % fleet['endpoint']['note'])
    for model in (fleet.get('router') or {}).get('models', []):
        lines.append('  router: %s -> %s' % (model['served_model_name'], ', '.join(
            '%s (%s)' % (r['api_base'], r['group']) for r in model['replicas'])))
    return lines


def _router_port(value):
    """The router's port as an int, or None when it is no TCP port (a bool is no port, though Python counts it an int)."""
    if isinstance(value, bool):
        return None
    try:
        port = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return port if 1 <= port <= 65535 and str(value).strip().isdigit() else None


def router_instance_ports(port):
    """{instance: its port}: the router's port + 1 and + 2, where its instances listen behind the router's port."""
    return dict((name, port + 1 + index) for index, name in enumerate(ROUTER_INSTANCES))


def _router_port_problems(port, host, plan, node_ports):
    """The router's port and its instances' ports (router_instance_ports) against every port the plan gives its node: the
    node's own (node_ports: role_networks.node_ports of it), the monitoring's where they run there, the mp rendezvous on
    a head, and Ray's worker range."""
    ports, workers = node_ports.get(host) or ([], None)
    taken = list(ports)
    serving = plan.get('serving') or {}
    if (serving.get('prometheus') or {}).get('host') == host:
        taken.append((serving.get('prometheus_port'), 'monitoring_prometheus_port (Prometheus)'))
    taken.append((serving.get('node_exporter_port'), 'monitoring_node_exporter_port (the node exporter)'))
    if plan.get('mp_master') and plan['head'] == host:
        taken.append((plan['mp_master'].get('port'), "dgxspark_mp_master_port (mp's rendezvous)"))
    own = [(port, 'dgxspark_router_port is %d' % port)] + [
        (number, 'dgxspark_router_port + %d (%d, the port of the router\'s instance %s)' % (number - port, number, name))
        for name, number in sorted(router_instance_ports(port).items())]
    problems = []
    for mine, said in own:
        if mine > 65535:
            problems.append('%s, beyond 65535: the router\'s instances listen on dgxspark_router_port + 1 and + 2; give '
                            'the router a lower port (default %d).' % (said, ROUTER_PORT_DEFAULT))
        problems += ['%s, the port of %s on %s: give the router a free port (default %d).'
                     % (said, what, host, ROUTER_PORT_DEFAULT) for number, what in taken if number == mine]
        if workers and workers[0] <= mine <= workers[1]:
            problems.append('%s, inside Ray\'s worker port range %d-%d on %s (ray_cluster_ports.min_worker/max_worker), '
                            'where a Ray worker may already listen: move it out of the range.'
                            % (said, workers[0], workers[1], host))
    return problems


def _upstream_address(plan):
    """Where the router calls a group's API: its head's address on the first rail, which the firewall opens to every node
    of the fleet (the management address takes only dgxspark_api_allowed_cidrs), or the one address vLLM binds."""
    local = str(plan['api'].get('local_url') or '').rsplit('://', maxsplit=1)[-1].rsplit(':', 1)[0]
    if local and local != '127.0.0.1':
        return local
    return plan['nodes'][0]['rail_addresses'][plan['rails'][0]['name']]


def _router_tls(plans, group, host, address):
    """(the router's tls, problems). With the API's TLS on every group, the router serves HTTPS with its node's API
    certificate, so its node is a head (the key never leaves a head) and clients call it at that head's address, which
    the certificate names; it checks each group's certificate with the groups' CAs at the address it calls."""
    enabled = dict((name, bool((plan['api'].get('tls') or {}).get('enabled'))) for name, plan in plans.items())
    if len(set(enabled.values())) > 1:
        return None, ['dgxspark_api_tls is on for %s but off for %s: the router serves one scheme and would carry the API '
                      'key in clear to a group without TLS; set dgxspark_api_tls in group_vars/all, the same for every '
                      'group.' % (', '.join(n for n, on in enabled.items() if on), ', '.join(n for n, on in enabled.items() if not on))]
    off = {'enabled': False, 'server_name': None, 'cert_file': None, 'key_file': None, 'ca_file': None,
           'controller': {'cert_file': None, 'key_file': None, 'ca_file': None}, 'upstream_ca_file': None,
           'upstream_ca_files': [], 'upstream_system_trust': False}
    if not any(enabled.values()):
        return off, []
    heads = dict((plan['head'], name) for name, plan in plans.items())
    if host not in heads:
        return None, ['dgxspark_router_host is %s, but with dgxspark_api_tls %s the router serves HTTPS with the API '
                      'certificate of a head, whose key never leaves that head: name one of the heads (%s), or set '
                      'dgxspark_api_tls: off.' % (host, plans[group]['api']['tls']['mode'], ', '.join(heads))]
    problems = []
    for name, plan in plans.items():
        tls, called = plan['api']['tls'], _upstream_address(plan)
        if not api_tls.name_matches(called, tls['names']):
            problems.append('the API certificate of serving group %s is for %s, but the router calls that group at %s (its '
                            'head\'s first rail, which the firewall opens to the fleet): make a certificate whose '
                            'subjectAltName includes %s too, or use dgxspark_api_tls: generated, which does.'
                            % (name, ', '.join(tls['names']), called, called))
    own = plans[group]['api']['tls']
    cas = [plan['api']['tls']['controller']['ca_file'] for plan in plans.values()]
    return dict(off, enabled=True, server_name=address, cert_file=own['cert_file'], key_file=own['key_file'],
                ca_file=own['ca_file'], controller=dict(own['controller']), upstream_ca_file=ROUTER_UPSTREAM_CA,
                upstream_ca_files=sorted(set(c for c in cas if c)),
                # a group with a public CA's certificate: the system's trust store joins the bundle
                upstream_system_trust=any(not c for c in cas)), problems


def router_settings(values_by_group):
    """(the router's settings {'host', 'port'}, problems) from each group's view of dgxspark_router_host and
    dgxspark_router_port (values_by_group: {group: {'host', 'port'}}, None where not set). The fleet has one router, so
    a value set in group_vars/<group> only, or differently per group, is refused rather than one of them taken."""
    settings, problems = {'host': None, 'port': None}, []
    for name in ('host', 'port'):
        seen = [(group, values.get(name)) for group, values in values_by_group.items()]
        if len(set(repr(value) for _group, value in seen)) > 1:
            given = ', '.join('%s: %s' % (group, 'not set' if value is None else repr(value)) for group, value in seen)
            problems.append('dgxspark_router_%s differs between the serving groups (%s): the fleet has one router; set it in '
                            'group_vars/all only.' % (name, given))
        elif seen:
            settings[name] = seen[0][1]
    return settings, problems


def lone_router_problems(settings):
    """The router's variables set where there is one serving group (the classic head/workers inventory, or one group
    listed): nothing to route, and a variable left set there would be silently ignored."""
    given = ['dgxspark_router_%s' % name for name in ('host', 'port') if settings.get(name) is not None]
    if not given:
        return []
    return ['%s %s set, but the inventory has one serving group: the router stands in front of two or more '
            '(dgxspark_serving_groups), and clients call one group at its own address; remove %s.'
            % (' and '.join(given), 'are' if len(given) > 1 else 'is', 'them' if len(given) > 1 else 'it')]


def router_plan(plans, settings, addresses, node_ports, key_sources):
    """(the fleet's router, problems): None with fewer than two serving groups (one group is called at its own address).

    plans: {group: its plan}, in the fleet's order; settings: {'host', 'port'} as the inventory sets
    dgxspark_router_host and dgxspark_router_port (None: not set); addresses: {host: its ansible_host, else its name};
    node_ports: {host: role_networks.node_ports of it}; key_sources: {group: what its API key is (its generated key's
    file, or a digest of the key the inventory gives)}, which must be one key: the router checks clients against it and
    sends it to every group."""
    if len(plans) < 2:
        return None, lone_router_problems(settings)
    members = dict((host, name) for name, plan in plans.items() for host in (n['host'] for n in plan['nodes']))
    first = next(iter(plans))
    host = plans[first]['head'] if settings.get('host') is None else settings['host']
    if not isinstance(host, str) or host not in members:
        return None, ['dgxspark_router_host is %r, not a node of a serving group (%s): name one of them (default: %s, the '
                      'first group\'s head); the router calls the groups over the rails, which only their nodes have.'
                      % (host, ', '.join(members), plans[first]['head'])]
    port = ROUTER_PORT_DEFAULT if settings.get('port') is None else _router_port(settings['port'])
    if port is None:
        return None, ['dgxspark_router_port is %r, not a TCP port: use 1 to 65535 (default %d).'
                      % (settings['port'], ROUTER_PORT_DEFAULT)]
    group = members[host]
    problems = _router_port_problems(port, host, plans[group], node_ports)
    tls, tls_problems = _router_tls(plans, group, host, addresses.get(host) or host)
    problems.extend(tls_problems)
    if len(set(key_sources.values())) > 1:
        problems.append('the serving groups do not share one API key (%s): the router takes one key from clients and sends '
                        'it to every group; give vllm_container_api_key in group_vars/all only, or leave it unset '
                        'everywhere (the generated key in the controller\'s secrets directory).'
                        % '; '.join('%s: %s' % (name, 'its own vllm_container_api_key' if source.startswith('given')
                                                else 'the generated key') for name, source in key_sources.items()))
    if problems:
        return None, problems
    scheme = 'https' if tls['enabled'] else 'http'
    address = addresses.get(host) or host
    models = []
    for name, plan in plans.items():
        replica = {'group': name, 'head': plan['head'], 'api_url': plan['api']['url'],
                   'api_base': '%s://%s:%s/v1' % (plan['api'].get('scheme', 'http'), _upstream_address(plan), plan['api']['port'])}
        same = [m for m in models if m['served_model_name'] == plan['api']['served_model_name']]
        if same:
            same[0]['replicas'].append(replica)
        else:
            models.append({'served_model_name': plan['api']['served_model_name'], 'replicas': [replica]})
    api = plans[first]['api']
    return {
        'host': host,
        'group': group,
        'address': address,
        'port': port,
        'scheme': scheme,
        'url': '%s://%s:%s/v1' % (scheme, address, port),
        'local_url': '%s://127.0.0.1:%s' % (scheme, port),
        # where each instance listens; the router's port is redirected to the serving one (roles/fleet_router)
        'instances': router_instance_ports(port),
        'tls': tls,
        # the key clients give the router and the router gives every group: the groups' one key
        'api_key_file': api['api_key_file'],
        'api_key_given': api['api_key_given'],
        'models': models,
    }, []
