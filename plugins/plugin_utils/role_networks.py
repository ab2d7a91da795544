# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the services of a node expose, checked by the plan on the controller before any host is contacted: every port of
every service on a node (no two on one port, none inside Ray's worker range), the networks allowed to reach each service
(they parse as the firewall takes them, and stay off the rails), interface names, and what the roles agree on about
the serving containers (their names, ports and the API's endpoint, kept in the plan).

The value rules of each variable are in role_inputs.py; every function here returns every problem at once, each naming
the variable, the hosts when not every node, and the fix.
"""

from __future__ import annotations

import ipaddress
import os
import re

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.inventory_schema import plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.role_inputs import _merge
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.vllm_args import executor_rendezvous

# The TCP ports each node opens, by the variable that sets them (ray_cluster_ports is a map of its own).
SINGLE_PORTS = (
    ('vllm_container_port', 'the vLLM API'),
    ('fabric_check_nccl_port', "the NCCL test's rendezvous"),
    ('fabric_check_ib_base_port', "ib_write_bw's first port"),
)
RAY_WORKER_RANGE = ('min_worker', 'max_worker')
API_CIDR_VARIABLES = ('dgxspark_api_allowed_cidrs', 'node_firewall_api_allowed_cidrs')
# Every variable that lets a network reach a service of the nodes, and the service, as the firewall takes them.
ALLOWED_NETWORKS = dict([(name, ('the vLLM API', 'API clients')) for name in API_CIDR_VARIABLES] + [
    (name, ('Prometheus', "Prometheus's clients")) for name in (
        'dgxspark_monitoring_allowed_cidrs', 'node_firewall_monitoring_allowed_cidrs', 'monitoring_allowed_cidrs')])
# Prometheus' own copies of the API's certificate and key on its node (the key 0600, the prometheus user's: Prometheus
# reads it as that user, and the head's copy stays root's).
PROMETHEUS_TLS_CERT = '/etc/prometheus/dgxspark-tls.crt'
PROMETHEUS_TLS_KEY = '/etc/prometheus/dgxspark-tls.key'
# Linux: IFNAMSIZ 16 with the NUL; written into netplan files, nft rules and NCCL_SOCKET_IFNAME, so nothing to quote.
INTERFACE_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$')


def _port(value):
    """An int port or None (the spec check reports a value of the wrong type)."""
    try:
        port = int(value)
    except (TypeError, ValueError):
        return None
    return port if str(value).strip().lstrip('+').isdigit() else None


def ray_ports_problems(given, ray_defaults):
    """What is wrong with a ray_cluster_ports map the inventory gives: the role takes every key, each a port."""
    if not isinstance(given, dict):
        return []  # the spec check says it is no map
    problems = []
    missing = sorted(set(ray_defaults) - set(given))
    unknown = sorted(set(given) - set(ray_defaults))
    if missing:
        problems.append('ray_cluster_ports lacks %s: the map replaces the role\'s whole default, so give every key (%s)'
                        % (', '.join(missing), ', '.join('%s: %s' % (k, ray_defaults[k]) for k in sorted(ray_defaults))))
    if unknown:
        problems.append('ray_cluster_ports has %s, which Ray does not take here: the keys are %s'
                        % (', '.join(str(k) for k in unknown), ', '.join(sorted(ray_defaults))))
    for key in sorted(set(given) & set(ray_defaults)):
        if _port(given[key]) is None:
            problems.append('ray_cluster_ports.%s is %r, not a port number: use 1 to 65535' % (key, given[key]))
    return problems


def node_ports(values, ray_defaults, single_defaults):
    """[(port, what)] a node opens, and (min, max) of Ray's worker range (or None): its values, else the defaults."""
    ports = []
    ray = values.get('ray_cluster_ports') if isinstance(values.get('ray_cluster_ports'), dict) else dict(ray_defaults)
    for key in sorted(ray):
        if key in RAY_WORKER_RANGE:
            continue
        port = _port(ray[key])
        if port is not None:
            ports.append((port, 'ray_cluster_ports.%s' % key))
    for variable, what in SINGLE_PORTS:
        port = _port(values.get(variable, single_defaults.get(variable)))
        if port is not None:
            ports.append((port, '%s (%s)' % (variable, what)))
    ssh = values.get('node_firewall_ssh_port', values.get('ansible_port', 22))
    if _port(ssh) is not None:
        ports.append((_port(ssh), 'SSH (node_firewall_ssh_port, else ansible_port)'))
    low, high = _port(ray.get('min_worker')), _port(ray.get('max_worker'))
    return ports, ((low, high) if low is not None and high is not None else None)


def port_problems(values_by_host, ray_defaults, single_defaults):
    """Per node: ports outside 1-65535, two services on one port, a fixed port inside Ray's worker range."""
    found = {}
    for host, values in values_by_host.items():
        for text in ray_ports_problems(values.get('ray_cluster_ports'), ray_defaults):
            found.setdefault(text, set()).add(host)
        for text in firewall_mismatches(values, single_defaults):
            found.setdefault(text, set()).add(host)
        ports, workers = node_ports(values, ray_defaults, single_defaults)
        by_port = {}
        for port, what in ports:
            if not 1 <= port <= 65535:
                found.setdefault('%s is %d, not a TCP port: use 1 to 65535' % (what, port), set()).add(host)
            by_port.setdefault(port, []).append(what)
        for port, users in sorted(by_port.items()):
            if len(users) > 1:
                text = 'port %d is given to %s: give each service its own port' % (port, ' and '.join(users))
                found.setdefault(text, set()).add(host)
        if workers:
            low, high = workers
            if low > high:
                found.setdefault('ray_cluster_ports: min_worker %d is above max_worker %d: give a range low to high'
                                 % (low, high), set()).add(host)
            for port, what in ports:
                if low <= port <= high:
                    text = ('%s is %d, inside Ray\'s worker port range %d-%d (ray_cluster_ports.min_worker/max_worker), '
                            'where a Ray worker may already listen: move it out of the range' % (what, port, low, high))
                    found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def rendezvous_port_problems(values_by_host, mp_master, single_defaults):
    """Under mp (the plan's mp_master, None under Ray), a rendezvous port that another service of a node has."""
    found = {}
    master_port = _port((mp_master or {}).get('port'))
    for host, values in values_by_host.items():
        for variable, what in SINGLE_PORTS if master_port is not None else ():
            if _port(values.get(variable, single_defaults.get(variable))) == master_port:
                text = ('dgxspark_mp_master_port is %s, the port of %s (%s): give the mp rendezvous its own port'
                        % (master_port, variable, what))
                found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def firewall_mismatches(values, single_defaults):
    """The firewall's own copies of the ports (they default to the serving roles') set apart from what is served."""
    problems = []
    served = _port(values.get('vllm_container_port', single_defaults.get('vllm_container_port')))
    guarded = values.get('node_firewall_api_port')
    if guarded is not None and _port(guarded) != served:
        problems.append('node_firewall_api_port is %s but vLLM listens on vllm_container_port %s: the firewall would guard '
                        'the wrong port; remove node_firewall_api_port (it follows vllm_container_port)' % (guarded, served))
    return problems


def _allowed_network_lists(values_by_host):
    """(host, variable, value) for every allowed-network variable a host sets (ALLOWED_NETWORKS)."""
    for host, values in values_by_host.items():
        for variable in sorted(ALLOWED_NETWORKS):
            if values.get(variable) is not None:
                yield host, variable, values[variable]


def allowed_network_problems(values_by_host):
    """Allowed networks (of the API, of Prometheus) that do not parse as the firewall takes them (IPv4 networks, no host
    bits); returns (problems, warnings): a network open to the world is legal, and said."""
    problems, warnings = {}, {}
    for host, variable, given in _allowed_network_lists(values_by_host):
        if isinstance(given, str) or not isinstance(given, (list, tuple)):
            problems.setdefault('%s is %r: give a list of IPv4 networks like [10.0.0.0/24]' % (variable, given),
                                set()).add(host)
            continue
        for item in given:
            text = _network_problem(variable, item)
            if text:
                problems.setdefault(text, set()).add(host)
            elif ipaddress.ip_network(str(item)).prefixlen == 0:
                warnings.setdefault('%s has %s: %s is open to every address that reaches the nodes'
                                    % (variable, item, ALLOWED_NETWORKS[variable][0]), set()).add(host)
    return _merge(problems, values_by_host), _merge(warnings, values_by_host)


def _network_problem(variable, item):
    """Why one API network is refused, or None. The firewall role takes IPv4 networks of two or more addresses."""
    text = str(item).strip()
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return '%s has %r, not an IPv4 network: write it like 10.0.0.0/24' % (variable, item)
    if net.version != 4:
        return '%s has %s, an IPv6 network: the firewall takes IPv4 networks only' % (variable, text)
    if '/' not in text or net.prefixlen == 32:
        return '%s has %s, a single address: write the network it belongs to, like %s' % (
            variable, text, ipaddress.ip_network(text.split('/', 1)[0] + '/24', strict=False))
    if str(net) != text:
        return '%s has %s, which has host bits set: did you mean %s?' % (variable, text, net)
    return None


def management_overlap_problems(management_by_host, rails):
    """A node whose management address (ansible_host, when it is an address) lies in a rail's subnet: the rails need
    subnets of their own, or the kernel routes Ansible, Ray and NCCL over whichever interface it meets first."""
    problems = []
    for host, address in sorted(management_by_host.items()):
        try:
            ip = ipaddress.ip_address(str(address))
        except ValueError:
            continue  # a name: resolved on the way, nothing to compare here
        for rail in rails:
            if ip.version == 4 and ip in ipaddress.ip_network(rail['subnet']):
                problems.append('%s: its management address %s (ansible_host) is inside %s\'s subnet %s: give the rails '
                                'subnets no other network of the nodes uses (dgxspark_rails)'
                                % (host, ip, rail['name'], rail['subnet']))
    return problems


def allowed_network_rail_overlap_problems(values_by_host, rails):
    """An allowed network (of the API, of Prometheus) that overlaps a rail's subnet: the firewall opens every port to
    the rails (Ray, NCCL, the distribution's SSH key), so clients inside a rail subnet, or a rail inside the clients'
    network, reach all of that, not only their service. A world-open network (/0) is the warning allowed_network_problems gives, not this."""
    found = {}
    for host, variable, given in _allowed_network_lists(values_by_host):
        # A value that is no list, or an item that is no network, is refused on its own by allowed_network_problems.
        valid = [item for item in given if not _network_problem(variable, item)] if isinstance(given, (list, tuple)) else []
        for net in (ipaddress.ip_network(str(item).strip()) for item in valid):
            for subnet, name in ((ipaddress.ip_network(rail['subnet']), rail['name']) for rail in rails):
                if net.prefixlen and net.overlaps(subnet):
                    found.setdefault('%s has %s, which overlaps %s\'s subnet %s: the rails are trusted with every '
                                     'port (Ray, NCCL, the distribution key), so %s must be on another network '
                                     '(or the rails on subnets of their own: dgxspark_rails)'
                                     % (variable, net, name, subnet, ALLOWED_NETWORKS[variable][1]), set()).add(host)
    return _merge(found, values_by_host)


def interface_name_problem(where, name):
    """Why a netdev name cannot be a Linux interface written into files and command lines, or None."""
    if INTERFACE_NAME.match(str(name or '')):
        return None
    return ('%s is %r, not a Linux interface name: 1 to 15 letters, digits, _ . - (starting with a letter or digit), '
            'as `ip link` shows it' % (where, name))


def serving_names(head_values, specs, plan):
    """What the roles agree on about the serving containers, as the inventory (the head's values) or the serving roles'
    argument specs set it: the containers' names, the API port, Ray's ports, and which containers make a node's
    release under the plan's backend (Ray: Ray's on every node and the engine's on the head; mp: vLLM's on every node).
    Every role and playbook reads these from the plan instead of another role's variables."""
    options = dict((name, spec) for role in specs.values() for name, spec in role.items())

    def value(name):
        return plain(head_values[name]) if name in head_values else (options.get(name) or {}).get('default')

    engine, rank = value('vllm_container_name'), value('ray_cluster_container_name')
    ray_ports = dict((options.get('ray_cluster_ports') or {}).get('default') or {})
    if isinstance(head_values.get('ray_cluster_ports'), dict):
        ray_ports.update(plain(head_values['ray_cluster_ports']))
    # The plan's nodes[].runs name the kinds of container each node runs (Ray's, vLLM's), in start order.
    names = {'ray': rank, 'vllm': engine}
    return {
        'engine_container': engine,
        'ray_container': rank,
        # the container every node runs: its vLLM rank with mp, Ray's otherwise
        'node_container': names[plan['nodes'][-1]['runs'][0]],
        'api_port': _port(value('vllm_container_port')),
        'ray_ports': ray_ports,
        # the engine's readiness deadlines (the supervisor's grace after a start), the monitoring's ports (the firewall's)
        'ready_timeout': value('vllm_container_ready_timeout'),
        'stall_timeout': value('vllm_container_stall_timeout'),
        'prometheus_port': _port(value('monitoring_prometheus_port')),
        'node_exporter_port': _port(value('monitoring_node_exporter_port')),
        'release_containers': dict((node['host'], [names[kind] for kind in node['runs']]) for node in plan['nodes']),
        # Under mp, rank 0's rendezvous as the head's readiness check watches it; None under Ray.
        'rendezvous': executor_rendezvous(plan),
    }


def api_endpoint(head, head_values, hf_repo, port_default, key_dir):
    """Where clients call the API and how (the deploy and status.yml print it): the head's address (ansible_host, else
    its name), the port, the served name, and the file the controller keeps the generated key in, unless the inventory
    gives the key itself (vllm_container_api_key)."""
    address = head_values.get('ansible_host') or head
    port = head_values.get('vllm_container_port', port_default)
    return {
        'host': str(address),
        'port': _port(port) if _port(port) is not None else port,
        'url': 'http://%s:%s/v1' % (address, port),
        'served_model_name': str(head_values.get('vllm_container_served_model_name') or hf_repo),
        # the generated key's file on the controller; unused when the inventory gives the key (vllm_container_api_key)
        'api_key_file': os.path.join(str(key_dir), 'vllm_api_key'),
        'api_key_given': bool(head_values.get('vllm_container_api_key')),
    }


def api_with_tls(api, tls, bind_host):
    """The endpoint with its TLS (api_tls.plan_tls): the scheme of the url clients call, and local_url, where the probes
    on the head reach the API (127.0.0.1 unless vLLM binds one address, vllm_container_host)."""
    scheme = 'https' if (tls or {}).get('enabled') else 'http'
    local = '127.0.0.1' if str(bind_host or '') in ('0.0.0.0', '', '::') else str(bind_host)
    return dict(api, tls=tls, scheme=scheme, url='%s://%s:%s/v1' % (scheme, api['host'], api['port']),
                local_url='%s://%s:%s' % (scheme, local, api['port']))


def api_reach_warnings(values_by_host, head):
    """The API networks the head's firewall lets in: none means that only the nodes and the rails reach the API, so the
    curl line the deploy prints and benchmark.yml from the controller would be dropped."""
    values = values_by_host.get(head) or {}
    allowed = values.get('node_firewall_api_allowed_cidrs', values.get('dgxspark_api_allowed_cidrs', []))
    if isinstance(allowed, (list, tuple)) and not allowed:
        return ['dgxspark_api_allowed_cidrs is empty: only the nodes and the rails reach the vLLM API, so a client on '
                'your network (and the curl line the deploy prints, or benchmark.yml from this controller) is dropped by '
                'the firewall; set it to your clients\' network, e.g. [10.0.0.0/24]']
    return []


def prometheus_host_problems(values_by_host, nodes):
    """monitoring_prometheus_host names a node of the cluster (head or workers), or is empty: the head."""
    found = {}
    for host, values in values_by_host.items():
        chosen = values.get('monitoring_prometheus_host')
        if chosen and str(chosen) not in nodes:
            text = ('monitoring_prometheus_host is %r, not a node of the cluster (%s): name one of them, or leave it empty '
                    'for the head' % (chosen, ', '.join(nodes)))
            found.setdefault(text, set()).add(host)
    return _merge(found, values_by_host)


def monitoring_reach_warnings(values_by_host, head, tls_enabled=False):
    """Prometheus opened to a network: it asks for its password (basic auth), but over plain HTTP the password crosses
    that network in clear (with the API's TLS it does not), and whoever has it reads every metric, the engine's
    included."""
    values = values_by_host.get(head) or {}
    allowed = values.get('node_firewall_monitoring_allowed_cidrs', values.get('dgxspark_monitoring_allowed_cidrs', []))
    if isinstance(allowed, (list, tuple)) and allowed and not tls_enabled:
        return ['dgxspark_monitoring_allowed_cidrs opens Prometheus to %s: it asks for its password (basic auth, '
                'prometheus_password in the controller\'s secrets directory), which plain HTTP carries in clear over '
                'those networks, and with it every metric can be read, the engine\'s included (requests, tokens, the '
                'model); keep it to the networks of your monitoring, or turn on dgxspark_api_tls (Prometheus then serves '
                'HTTPS too)' % ', '.join(str(c) for c in allowed)]
    return []


def prometheus_node(values_by_host, head):
    """The node Prometheus runs on: the head's monitoring_prometheus_host (prometheus_host_problems checks it), else
    the head."""
    chosen = (values_by_host.get(head) or {}).get('monitoring_prometheus_host')
    return str(chosen) if chosen else head


def prometheus_tls_problems(values_by_host, head, tls):
    """With the API's TLS, Prometheus serves HTTPS with the API's certificate, whose names are the head's and whose key
    stays on the head: Prometheus on a worker would make every client refuse the certificate (it names the head), and
    copying the key there would give a worker what lets it pose as the API."""
    node = prometheus_node(values_by_host, head)
    if not (tls or {}).get('enabled') or node == head:
        return []
    return ['monitoring_prometheus_host is %s, but with dgxspark_api_tls %s Prometheus serves HTTPS with the API\'s '
            'certificate, which is for the head\'s names (%s) and whose key never leaves the head (%s): leave '
            'monitoring_prometheus_host empty to run Prometheus on the head, or set dgxspark_api_tls: off'
            % (node, tls.get('mode'), ', '.join(tls.get('names') or [tls.get('server_name')]), head)]


def prometheus_endpoint(head, values_by_host, port, tls):
    """Where Prometheus answers and how, as everything that queries it reads it (the monitoring role, the printed line,
    the tests): its node, that node's address (ansible_host, else its name), the port, the scheme (https when the API
    has TLS: prometheus_tls_problems keeps Prometheus on the head then), url, local_url (from its own node) and tls:
    its own copies of the API's certificate and key (the key 0600, the prometheus user's), the CA and the name clients
    check. Off: the same keys, empty but the copies' paths."""
    node = prometheus_node(values_by_host, head)
    values = values_by_host.get(node) or {}
    address = str(values.get('ansible_host') or node)
    listen = str(values.get('monitoring_prometheus_listen_address') or '0.0.0.0')
    local = '127.0.0.1' if listen in ('0.0.0.0', '::') else listen
    enabled = bool((tls or {}).get('enabled'))
    scheme = 'https' if enabled else 'http'
    controller = (tls or {}).get('controller') or {}
    return {
        'host': node,
        'address': address,
        'port': port,
        'scheme': scheme,
        'url': '%s://%s:%s' % (scheme, address, port),
        'local_url': '%s://%s:%s' % (scheme, local, port),
        'tls': {
            'enabled': enabled,
            'server_name': tls['server_name'] if enabled else None,
            # where Prometheus' copies lie; the role removes them when TLS is off
            'cert_file': PROMETHEUS_TLS_CERT,
            'key_file': PROMETHEUS_TLS_KEY,
            'ca_file': tls.get('ca_file') if enabled else None,
            'controller': dict((name, controller.get(name) if enabled else None) for name in ('cert_file', 'key_file', 'ca_file')),
        },
    }


def prometheus_table_line(prometheus):
    """The plan table's line about Prometheus: where it answers and whether its password crosses the network in clear."""
    tls = prometheus['tls']
    how = ("TLS with the API's certificate, for %s" % tls['server_name']) if tls['enabled'] else (
        'plain HTTP: its password crosses the network in clear; dgxspark_api_tls turns TLS on for it too')
    return 'Prometheus: %s on %s (%s)' % (prometheus['url'], prometheus['host'], how)
