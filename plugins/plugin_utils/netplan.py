# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Netplan configuration of the CX-7 rails of one node: render, validate, preflight and post-change checks.

Pure logic (no host is contacted), used by the filters of ``plugins/filter/cx7_netplan_config.py`` and the role
``dgxspark.cluster.cx7_netplan``. Inputs are the cluster plan (``dgxspark.cluster.cluster_plan``), the role's
variables and, for the checks, what the nodes report (``ansible.builtin.setup`` network facts and
``dgxspark.cluster.cx7_facts`` before the change; ``dgxspark.cluster.cx7_facts`` and ``dgxspark.cluster.fabric_probe``
after it).

The netplan file holds one ``ethernets`` entry per rail: the address from the plan, the MTU, no DHCP, no
IPv4/IPv6 link-local addresses, no router advertisements, and optional routes. The renderer, when one is
asked for, is set per interface (a top-level ``network.renderer`` would change the default renderer of every
other netplan file, management interface included).
"""

from __future__ import annotations

import ipaddress
import json
import re

import yaml


RENDERERS = ('networkd', 'NetworkManager')
MTU_MIN = 1280
MTU_MAX = 9216
DEFAULT_MTU = 9000
# Linux interface names: at most 15 bytes (IFNAMSIZ - 1), no '/', no whitespace, not '.' or '..'.
IFNAME_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,14}$')
ROUTE_KEYS = ('rail', 'to', 'via', 'metric')
SAFE_KEY_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.-]*$')
# Netplan device types whose definitions can name (or enslave) an ethernet interface.
NETPLAN_DEVICE_TYPES = ('ethernets', 'bonds', 'bridges', 'vlans', 'wifis', 'tunnels', 'vrfs', 'modems', 'nm-devices', 'dummy-devices',
                        'virtual-ethernets')

HEADER = ('# Managed by Ansible (role dgxspark.cluster.cx7_netplan) from the cluster plan: local changes are overwritten.\n'
          '# ConnectX-7 rails of {host} (rank {rank}): static addresses, MTU {mtu}, no DHCP, no link-local, IPv6 off.\n')
SYSCTL_HEADER = ('# Managed by Ansible (role dgxspark.cluster.cx7_netplan): IPv6 off on the ConnectX-7 rail interfaces of {host},\n'
                 '# so that their RoCE GID tables hold only the IPv4-mapped entries and GID indexes stay stable.\n'
                 '# systemd-udevd applies these per-interface keys again whenever an interface appears (boot, driver reload).\n')


class NetplanConfigError(ValueError):
    """The role's inputs (plan, variables) cannot give a valid rail configuration; ``problems`` lists every reason."""

    def __init__(self, problems):
        self.problems = list(problems)
        super(NetplanConfigError, self).__init__('\n'.join(self.problems))


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _ipv4(text):
    """IPv4Address of a bare address or of the address part of a CIDR string; None when not IPv4."""
    try:
        return ipaddress.IPv4Interface(str(text).strip()).ip
    except (ValueError, TypeError):
        return None


# --------------------------------------------------------------------------------------------- inputs

def validate_renderer(renderer):
    """Problems of cx7_netplan_renderer: empty/None (inherit), networkd or NetworkManager."""
    if renderer in (None, ''):
        return []
    if renderer in RENDERERS:
        return []
    return ['cx7_netplan_renderer is %r, which netplan does not know: use networkd or NetworkManager (exact spelling), '
            'or leave it empty ("") to inherit the renderer the other netplan files set.' % (renderer,)]


def validate_mtu(mtu):
    if not _is_int(mtu) or not MTU_MIN <= mtu <= MTU_MAX:
        return ['cx7_netplan_mtu (or dgxspark_mtu) is %r: give an integer from %d to %d (9000 for jumbo frames on the CX-7 fabric).' % (
            mtu, MTU_MIN, MTU_MAX)]
    return []


def validate_routes(routes, rails, own_addresses):
    """Problems of cx7_netplan_routes for one node.

    ``routes``: list of {rail, to, via (optional), metric (optional)}; ``rails``: the plan's rails;
    ``own_addresses``: rail name -> this node's address.
    """
    if routes in (None, ''):
        return []
    if not isinstance(routes, list):
        return ['cx7_netplan_routes is %r: give a list of {rail, to, via, metric} mappings (or [] for none).' % (routes,)]
    problems = []
    by_name = dict((r['name'], r) for r in rails)
    for index, route in enumerate(routes):
        where = 'cx7_netplan_routes[%d]' % index
        if not isinstance(route, dict):
            problems.append('%s is %r: give a mapping with keys rail, to and optionally via, metric.' % (where, route))
            continue
        unknown = sorted(set(route) - set(ROUTE_KEYS))
        if unknown:
            problems.append('%s has unknown keys %s: use only %s.' % (where, ', '.join(map(str, unknown)), ', '.join(ROUTE_KEYS)))
        rail = by_name.get(route.get('rail'))
        if rail is None:
            problems.append('%s.rail is %r: name one of the rails %s.' % (where, route.get('rail'), ', '.join(sorted(by_name)) or '(none)'))
            continue
        subnet = ipaddress.IPv4Network(rail['subnet'])
        own = own_addresses.get(rail['name'])
        to = route.get('to')
        if to == 'default':
            pass
        elif not isinstance(to, str) or '/' not in to:
            problems.append('%s.to is %r: give a destination network in CIDR form (e.g. 10.20.0.0/16) or "default".' % (where, to))
        else:
            try:
                destination = ipaddress.IPv4Network(to, strict=True)
            except ValueError as exc:
                problems.append('%s.to is %r, not an IPv4 network (%s): give e.g. 10.20.0.0/16 (host bits clear).' % (where, to, exc))
            else:
                if destination == subnet and 'via' in route:
                    problems.append('%s routes the rail subnet %s itself via %s: the kernel adds that route for the address on %s; '
                                    'remove this route.' % (where, subnet, route.get('via'), rail['interface']))
                elif destination == subnet:
                    problems.append('%s routes the rail subnet %s, which the kernel already reaches directly on %s; remove this route.' % (
                        where, subnet, rail['interface']))
        if 'via' in route:
            via = route.get('via')
            gateway = None
            try:
                gateway = ipaddress.IPv4Address(str(via))
            except ValueError:
                problems.append('%s.via is %r: give the IPv4 address of a gateway on rail %s (inside %s).' % (where, via, rail['name'], subnet))
            if gateway is not None:
                if gateway not in subnet:
                    problems.append('%s.via %s is outside the rail subnet %s: the gateway must be directly reachable on %s.' % (
                        where, gateway, subnet, rail['interface']))
                elif own is not None and str(gateway) == own:
                    problems.append('%s.via %s is this node\'s own address on rail %s: a route via yourself does nothing (seed 000\'s '
                                    'mistake); give another host\'s address as gateway or remove the route.' % (where, gateway, rail['name']))
                elif gateway in (subnet.network_address, subnet.broadcast_address):
                    problems.append('%s.via %s is the network or broadcast address of %s: give a host address.' % (where, gateway, subnet))
        elif to == 'default':
            problems.append('%s is a default route without via: give the gateway address (a default route over the fabric is rarely wanted; '
                            'the management network keeps the default route).' % where)
        if 'metric' in route and (not _is_int(route['metric']) or route['metric'] < 0):
            problems.append('%s.metric is %r: give a non-negative integer.' % (where, route['metric']))
    return problems


def _plan_node(plan, host):
    if not isinstance(plan, dict) or not isinstance(plan.get('nodes'), list) or not isinstance(plan.get('rails'), list):
        raise NetplanConfigError(['dgxspark_plan is not a cluster plan (no nodes/rails): let the role build it with '
                                  'dgxspark.cluster.cluster_plan, or set it to that action\'s "plan" result.'])
    for node in plan['nodes']:
        if node.get('host') == host:
            return node
    raise NetplanConfigError(['Host %s is not a node of the cluster plan (nodes: %s): put it in inventory group head or workers, '
                              'or leave it out of the network play.' % (host, ', '.join(n.get('host', '?') for n in plan['nodes']))])


def node_config(plan, host, mtu=None, renderer=None, routes=None, optional=True):
    """The rail configuration of one node. Raises NetplanConfigError listing every problem of the inputs."""
    node = _plan_node(plan, host)
    problems = []
    if mtu is None or mtu == '':
        mtu = plan.get('mtu', DEFAULT_MTU)
    if isinstance(mtu, str) and mtu.strip().isdigit():
        mtu = int(mtu.strip())  # -e cx7_netplan_mtu=9000 arrives as a string
    problems.extend(validate_mtu(mtu))
    problems.extend(validate_renderer(renderer))
    if not plan['rails']:
        problems.append('The cluster plan has no rails (dgxspark_rails is empty): define at least one rail.')
    rails = []
    own = {}
    for rail in plan['rails']:
        name, interface = rail.get('name'), rail.get('interface')
        if not isinstance(interface, str) or not IFNAME_RE.match(interface) or interface in ('.', '..'):
            problems.append('dgxspark_rails[%s].interface is %r, not a Linux interface name: give the CX-7 netdev, e.g. enp1s0f1np1.' % (
                name, interface))
            continue
        address = (node.get('rail_addresses') or {}).get(name)
        try:
            subnet = ipaddress.IPv4Network(str(rail.get('subnet')), strict=True)
            ip = ipaddress.IPv4Address(str(address))
        except ValueError as exc:
            problems.append('Rail %s of host %s: subnet %r / address %r are not a valid IPv4 network and address (%s); fix dgxspark_rails '
                            'or dgxspark_rail_addresses.' % (name, host, rail.get('subnet'), address, exc))
            continue
        if ip not in subnet:
            problems.append('Rail %s of host %s: address %s is outside the rail subnet %s; fix dgxspark_rail_addresses.' % (name, host, ip, subnet))
            continue
        own[name] = str(ip)
        rails.append({'name': name, 'interface': interface, 'address': str(ip), 'cidr': '%s/%d' % (ip, subnet.prefixlen),
                      'subnet': str(subnet), 'prefixlen': subnet.prefixlen})
    if not problems:
        problems.extend(validate_routes(routes, plan['rails'], own))
    if problems:
        raise NetplanConfigError(problems)

    peers = []
    for other in plan['nodes']:
        if other.get('host') == host:
            continue
        for rail in rails:
            address = (other.get('rail_addresses') or {}).get(rail['name'])
            if address:
                peers.append({'host': other['host'], 'rail': rail['name'], 'interface': rail['interface'], 'address': address,
                              'source': rail['address']})
    document = render_document(rails, mtu, renderer or None, routes or [], optional)
    interfaces = [r['interface'] for r in rails]
    return {
        'host': host,
        'rank': node.get('rank'),
        'mtu': mtu,
        'ping_payload': mtu - 28,
        'renderer': renderer or None,
        'rails': rails,
        'interfaces': interfaces,
        'peers': peers,
        'document': document,
        'content': HEADER.format(host=host, rank=node.get('rank'), mtu=mtu) + render_yaml(document),
        'sysctl_content': render_sysctl(interfaces, host),
    }


# --------------------------------------------------------------------------------------------- rendering

def render_document(rails, mtu, renderer=None, routes=None, optional=True):
    """The netplan document (a dict) for the rails of one node."""
    ethernets = {}
    for rail in rails:
        entry = {}
        if renderer:
            entry['renderer'] = renderer
        entry['dhcp4'] = False
        entry['dhcp6'] = False
        entry['link-local'] = []
        entry['accept-ra'] = False
        entry['addresses'] = [rail['cidr']]
        entry['mtu'] = mtu
        if optional:
            entry['optional'] = True
        rail_routes = []
        for route in routes or []:
            if route.get('rail') != rail['name']:
                continue
            item = {'to': route['to']}
            if route.get('via') is not None:
                item['via'] = str(route['via'])
            if route.get('metric') is not None:
                item['metric'] = route['metric']
            rail_routes.append(item)
        if rail_routes:
            entry['routes'] = rail_routes
        ethernets[rail['interface']] = entry
    return {'network': {'version': 2, 'ethernets': ethernets}}


def _yaml_key(key):
    key = str(key)
    return key if SAFE_KEY_RE.match(key) else json.dumps(key)


def _yaml_scalar(value):
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if _is_int(value):
        return str(value)
    if value is None:
        return 'null'
    return json.dumps(str(value))


def _emit(value, indent, lines):
    pad = '  ' * indent
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append('%s%s:' % (pad, _yaml_key(key)))
                _emit(item, indent + 1, lines)
            elif isinstance(item, dict):
                lines.append('%s%s: {}' % (pad, _yaml_key(key)))
            elif isinstance(item, list):
                lines.append('%s%s: []' % (pad, _yaml_key(key)))
            else:
                lines.append('%s%s: %s' % (pad, _yaml_key(key), _yaml_scalar(item)))
    else:
        for item in value:
            if isinstance(item, dict) and item:
                nested = []
                _emit(item, indent + 1, nested)
                nested[0] = pad + '- ' + nested[0][len(pad) + 2:]
                lines.extend(nested)
            elif isinstance(item, (dict, list)):
                lines.append('%s- %s' % (pad, '{}' if isinstance(item, dict) else '[]'))
            else:
                lines.append('%s- %s' % (pad, _yaml_scalar(item)))


def render_yaml(document):
    """Deterministic block-style YAML of a document made of dicts, lists, str, int, bool (strings double-quoted)."""
    lines = []
    _emit(document, 0, lines)
    return '\n'.join(lines) + '\n'


def sysctl_key(interface):
    """The sysctl.d key that turns IPv6 off on an interface (slash form when the name has a dot, e.g. VLANs)."""
    if '.' in interface:
        return 'net/ipv6/conf/%s/disable_ipv6' % interface
    return 'net.ipv6.conf.%s.disable_ipv6' % interface


def render_sysctl(interfaces, host):
    return SYSCTL_HEADER.format(host=host) + ''.join('%s = 1\n' % sysctl_key(i) for i in interfaces)


# --------------------------------------------------------------------------------------------- observed state

def _fact(facts, name):
    """A fact by its ansible_facts name, or by the ansible_-prefixed name the setup module returns."""
    if name in facts:
        return facts[name]
    return facts.get('ansible_' + name)


def _setup_cidr(entry):
    address = entry.get('address')
    if not address:
        return None
    prefix = entry.get('prefix')
    if prefix in (None, '') and entry.get('netmask'):
        try:
            prefix = ipaddress.IPv4Network('0.0.0.0/%s' % entry['netmask']).prefixlen
        except ValueError:
            prefix = None
    return '%s/%s' % (address, prefix) if prefix not in (None, '') else '%s/32' % address


def observed_interfaces(facts, probe=None):
    """{name: {ipv4: [cidr], ipv6: [address], mtu, state, operstate, cx7}} from setup network facts, cx7_facts and fabric_probe.

    A cx7_facts record (RDMA netdev) wins for state and MTU, its IPv4 addresses come first (both sources are kept);
    ``state`` is Up/Down from the carrier there, None for an interface that only ``setup`` knows. ``probe`` (the ``rails``
    result of dgxspark.cluster.fabric_probe, read last) wins for the addresses and MTU of the interfaces it read, and an
    interface it found missing is gone.
    """
    facts = facts or {}
    result = {}
    for name in _fact(facts, 'interfaces') or []:
        entry = _fact(facts, name.replace('-', '_').replace(':', '_')) or {}
        ipv4 = []
        primary = entry.get('ipv4')
        for item in ([primary] if isinstance(primary, dict) else []) + list(entry.get('ipv4_secondaries') or []):
            cidr = _setup_cidr(item or {})
            if cidr and cidr not in ipv4:
                ipv4.append(cidr)
        ipv6 = [i.get('address') for i in entry.get('ipv6') or [] if isinstance(i, dict) and i.get('address')]
        result[name] = {'ipv4': ipv4, 'ipv6': ipv6, 'mtu': entry.get('mtu'), 'state': None, 'operstate': None, 'cx7': False}
    cx7 = _fact(facts, 'cx7') or {}
    for device in cx7.get('devices') or []:
        name = device.get('netdev')
        if not name:
            continue
        item = result.setdefault(name, {'ipv4': [], 'ipv6': None, 'mtu': None, 'state': None, 'operstate': None, 'cx7': False})
        item['cx7'] = True
        item['state'] = device.get('state')
        item['operstate'] = device.get('operstate')
        if device.get('mtu') is not None:
            item['mtu'] = device.get('mtu')
        item['ipv4'] = list(device.get('ipv4') or []) + [a for a in item['ipv4'] if a not in (device.get('ipv4') or [])]
    for rail in (probe or {}).values():
        if not isinstance(rail, dict) or rail.get('probe_error') or not isinstance(rail.get('link'), dict) or not rail.get('interface'):
            continue
        name, link = rail['interface'], rail['link']
        if not link.get('present'):
            result.pop(name, None)
            continue
        item = result.setdefault(name, {'ipv4': [], 'ipv6': None, 'mtu': None, 'state': None, 'operstate': None, 'cx7': False})
        item['ipv4'] = list(link.get('ipv4') or [])
        if link.get('mtu') is not None:
            item['mtu'] = link['mtu']
        if link.get('ipv6') is not None:
            item['ipv6'] = list(link['ipv6'])
    return result


def connection_addresses(ssh_connection=None, ansible_host=None, resolved=None):
    """IPv4 addresses through which Ansible reaches the node.

    ``ssh_connection``: the node's SSH_CONNECTION ("client port server port"); ``ansible_host``: the
    inventory's ansible_host; ``resolved``: the controller's ``getent ahostsv4 <ansible_host>`` output.
    """
    found = []

    def add(text):
        ip = _ipv4(text)
        if ip is not None and not ip.is_loopback and str(ip) not in found:
            found.append(str(ip))

    parts = str(ssh_connection or '').split()
    if len(parts) >= 3:
        add(parts[2])
    if ansible_host and '/' not in str(ansible_host):
        add(ansible_host)
    for line in str(resolved or '').splitlines():
        words = line.split()
        if words:
            add(words[0])
    return found


def _where(host, rail):
    return '%s rail %s (%s)' % (host, rail['name'], rail['interface'])


def netplan_file_problems(host, interfaces, netplan_files):
    """Problems for netplan files this role does not own that configure a rail interface.

    ``netplan_files``: list of {path, document} (document: the parsed YAML, or None when unreadable).
    """
    problems = []
    for item in netplan_files or []:
        path, document = item.get('path'), item.get('document')
        if item.get('error'):
            problems.append('%s: netplan file %s cannot be parsed (%s): fix or remove it; netplan would reject the whole configuration.' % (
                host, path, item['error']))
            continue
        network = (document or {}).get('network') if isinstance(document, dict) else None
        if not isinstance(network, dict):
            continue
        for kind in NETPLAN_DEVICE_TYPES:
            definitions = network.get(kind)
            if not isinstance(definitions, dict):
                continue
            for device_id, definition in definitions.items():
                definition = definition if isinstance(definition, dict) else {}
                match = definition.get('match') if isinstance(definition.get('match'), dict) else {}
                names = set([device_id, definition.get('set-name'), match.get('name')])
                names.update(definition.get('interfaces') or [] if isinstance(definition.get('interfaces'), list) else [])
                if definition.get('link'):
                    names.add(definition.get('link'))
                for interface in interfaces:
                    if interface in names:
                        problems.append('%s: netplan file %s also configures rail interface %s (%s.%s): this role owns the rails and '
                                        'never edits files it does not own; remove %s from %s.' % (
                                            host, path, interface, kind, device_id, interface, path))
    return problems


def preflight_problems(config, observed, netplan_files=None):
    """Every reason not to change anything, for the node of ``config`` (see node_config).

    ``observed``: host -> {facts: ansible_facts (setup network subset + cx7), ssh_connection, ansible_host, resolved}
    for every node of the cluster. Checks: rail interfaces exist, are CX-7 RDMA netdevs and have carrier; no rail
    interface carries the address Ansible connects through or the default route; no planned address is already
    configured on another interface or another node; no netplan file of someone else configures a rail.
    """
    host = config['host']
    if observed is None:
        return netplan_file_problems(host, config['interfaces'], netplan_files)
    problems = []
    mine = observed.get(host)
    if mine is None:
        return ['%s: no facts were gathered for this node: it must be reachable and part of this play.' % host]
    interfaces = observed_interfaces(mine.get('facts'))
    facts = mine.get('facts') or {}
    connection = connection_addresses(mine.get('ssh_connection'), mine.get('ansible_host'), mine.get('resolved'))
    default_interface = ((_fact(facts, 'default_ipv4') or {}).get('interface'))
    cx7_source = (_fact(facts, 'cx7') or {}).get('source')
    for rail in config['rails']:
        where = _where(host, rail)
        current = interfaces.get(rail['interface'])
        kernel_names = _fact(facts, 'interfaces')
        if kernel_names is not None and rail['interface'] not in kernel_names:
            current = None
        if current is None:
            cx7_names = sorted(n for n, i in interfaces.items() if i['cx7'])
            problems.append('%s: interface %s does not exist on this node (CX-7 netdevs here: %s): check the driver/cabling, or fix '
                            'dgxspark_rails (interface of rail %s).' % (where, rail['interface'], ', '.join(cx7_names) or 'none', rail['name']))
            continue
        if not current['cx7']:
            problems.append('%s: %s is not a ConnectX-7 RDMA netdev according to cx7_facts (source %s): rails must be CX-7 RoCE ports; '
                            'check the driver (ibdev2netdev) or cx7_netplan_cx7_sysfs_root.' % (where, rail['interface'], cx7_source))
        elif current['state'] != 'Up':
            problems.append('%s: the link is %s (no carrier; operstate %s): plug the cable in / check the switch port of this rail before '
                            'configuring it.' % (where, current['state'] or 'not Up', current['operstate']))
        for address in connection:
            if address in [c.split('/')[0] for c in current['ipv4']]:
                problems.append('%s: Ansible is connected to this node through %s, which is on %s: refusing to reconfigure the interface of '
                                'the connection; connect through the management network (ansible_host) instead.' % (where, address, rail['interface']))
            if address == rail['address']:
                problems.append('%s: the planned rail address %s is the address Ansible connects through: connect through the management '
                                'network (ansible_host) instead.' % (where, address))
        if default_interface and default_interface == rail['interface']:
            problems.append('%s: %s carries this node\'s default route (the management path): refusing to reconfigure it; check '
                            'dgxspark_rails.' % (where, rail['interface']))
        for other_host in sorted(observed):
            others = observed_interfaces((observed[other_host] or {}).get('facts'))
            for name in sorted(others):
                if other_host == host and name == rail['interface']:
                    continue
                if rail['address'] in [c.split('/')[0] for c in others[name]['ipv4']]:
                    problems.append('%s: the planned address %s is already in use on %s interface %s: remove it there, or give %s another '
                                    'address (dgxspark_rail_addresses / address_offset).' % (where, rail['address'], other_host, name, host))
    problems.extend(netplan_file_problems(host, config['interfaces'], netplan_files))
    return problems


def drift(config, facts, probe=None):
    """How the node's rails differ from the configuration: missing address, wrong MTU, no carrier, IPv6 still on.

    ``facts``: ansible_facts with ``cx7`` (and setup network facts); ``probe``: the ``rails`` result of fabric_probe (see
    observed_interfaces). After a change, give only what was read after it (cx7_facts and fabric_probe).
    """
    host = config['host']
    interfaces = observed_interfaces(facts, probe)
    problems = []
    for rail in config['rails']:
        where = _where(host, rail)
        current = interfaces.get(rail['interface'])
        if current is None:
            problems.append('%s: the interface is gone.' % where)
            continue
        if current['cx7'] and current['state'] != 'Up':
            problems.append('%s: the link is %s (no carrier; operstate %s).' % (where, current['state'], current['operstate']))
        if rail['cidr'] not in current['ipv4']:
            problems.append('%s: address %s is not up (addresses: %s).' % (where, rail['cidr'], ', '.join(current['ipv4']) or 'none'))
        if current['mtu'] != config['mtu']:
            problems.append('%s: MTU is %s, expected %s.' % (where, current['mtu'], config['mtu']))
        if current['ipv6']:
            problems.append('%s: IPv6 addresses are still present (%s).' % (where, ', '.join(current['ipv6'])))
    return problems


# --------------------------------------------------------------------------------------------- the role's data across nodes
# What the role's tasks hand to one filter each instead of computing it in Jinja. ``hostvars`` is Ansible's ``hostvars``
# (or any mapping of host name to a mapping of that host's variables).

def by_host(hostvars, hosts, name):
    """{host: value of the variable ``name``} for each of ``hosts`` (in that order) that has it."""
    result = {}
    for host in hosts or []:
        if host in hostvars and name in hostvars[host]:
            result[host] = hostvars[host][name]
    return result


def preflight_summary(problems_by_host, plan):
    """Every preflight problem of the cluster: first the nodes of the plan that are not in the play (their checks could not
    run), then each node's problems (``problems_by_host``: host -> list, in the order of the play)."""
    problems_by_host = problems_by_host or {}
    missing = [n.get('host') for n in (plan or {}).get('nodes') or [] if n.get('host') not in problems_by_host]
    summary = ['%s: not in this play or unreachable: run the network play on every node of the cluster at once (no --limit), so that '
               'addresses can be checked across nodes and peers pinged.' % host for host in missing]
    for problems in problems_by_host.values():
        summary.extend(problems or [])
    return summary


def generate_rejections(results_by_host):
    """``host: what netplan said`` for every node whose ``netplan generate`` (a command result) exited non-zero."""
    lines = []
    for host, result in (results_by_host or {}).items():
        if not isinstance(result, dict) or result.get('rc') is None or result.get('rc') == 0:
            continue
        lines.append('%s: %s' % (host, str(result.get('stderr', '')).strip() or result.get('msg', '')))
    return lines


def parse_netplan_files(files):
    """A node's other netplan files as preflight_problems takes them, from the ``{path, content}`` mappings the module
    cx7_netplan_files returns; a file that is not YAML keeps its ``error``."""
    parsed = []
    for item in files or []:
        path = item.get('path') if isinstance(item, dict) else None
        if not path:
            raise NetplanConfigError(['netplan_files must be a list of {path, content} mappings, got %r.' % (item,)])
        try:
            document = yaml.safe_load(item.get('content') or '')
        except yaml.YAMLError as exc:
            parsed.append({'path': path, 'document': None, 'error': str(exc).replace('\n', ' ')})
            continue
        parsed.append({'path': path, 'document': document})
    return parsed
