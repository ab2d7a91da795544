# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory draft of playbooks/init.yml, from what the nodes report (controller only).

Pure functions over cx7_facts' device records, the Hugging Face cache's listing and `docker image ls`: the rails and
their addresses, the topology, the model found on the head, the serving image, and the two files' text. The action
plugin inventory_draft checks the draft with the cluster plan itself and writes it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re

import yaml

DEFAULT_IMAGE = 'vllm/vllm-openai:v0.33.0'
DEFAULT_MODEL_DIR = '/root/.cache/huggingface'
DEFAULT_ADDRESS_OFFSET = 10
# The first rail's default subnet is 192.168.100.0/24, the next 192.168.101.0/24, ... (the shipped inventories' layout).
DEFAULT_SUBNET_BASE = ipaddress.ip_network('192.168.100.0/24')
LINK_LOCAL = ipaddress.ip_network('169.254.0.0/16')
# Profiles tried, in this order, when none is asked for and no profile's weights are on the head.
PROFILE_PREFERENCE = ('qwen3_5_397b_a17b_fp8', 'qwen3_5_397b_a17b_int4_autoround', 'qwen3_vl_235b_a22b_awq')
DRAFT_HEADER = re.compile(r'^# dgxspark\.cluster init draft sha256:(?P<digest>[0-9a-f]{64})\n')
_HUB_CONFIG = re.compile(r'/models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/[^/]+/config\.json$')


class InventoryDraftError(Exception):
    """Raised with every problem found; nothing is written."""

    def __init__(self, problems):
        super().__init__('; '.join(problems))
        self.problems = list(problems)


def _port_key(device):
    port = device.get('physical_port')
    return (port is None, port or 0, device.get('twin') or '', device.get('netdev') or '')


def linked_netdevs(devices):
    """The netdevs of one node's CX-7 devices that have a link (netdev Up, RDMA port ACTIVE or unknown), port order."""
    linked = [d for d in devices or [] if d.get('state') == 'Up' and d.get('port_state') in (None, 'ACTIVE')]
    return [d['netdev'] for d in sorted(linked, key=_port_key)]


def _rail_addresses(order, devices_by_host, netdev):
    """{host: first IPv4 interface (not link-local) on netdev} of the nodes that have one."""
    found = {}
    for host in order:
        for device in devices_by_host.get(host) or []:
            if device.get('netdev') != netdev:
                continue
            for cidr in device.get('ipv4') or []:
                interface = ipaddress.ip_interface(cidr)
                if interface.ip not in LINK_LOCAL:
                    found[host] = interface
                    break
    return found


def _addressing(order, found, default_subnet):
    """(subnet, address_offset, host addresses, note) for one rail: the nodes' own addresses when every node has one in
    one subnet, else the default subnet (the network phase then gives each node network + offset + rank)."""
    networks = set(str(interface.network) for interface in found.values())
    if len(found) != len(order) or len(networks) != 1:
        note = None
        if found:
            note = 'some nodes have addresses there (%s), not every node in one subnet: init plans %s instead' % (
                ', '.join('%s %s' % (host, found[host]) for host in order if host in found), default_subnet)
        return str(default_subnet), DEFAULT_ADDRESS_OFFSET, {}, note
    network = ipaddress.ip_network(networks.pop())
    offsets = set(int(found[host].ip) - int(network.network_address) - rank for rank, host in enumerate(order))
    if len(offsets) == 1 and min(offsets) >= 1:
        return str(network), offsets.pop(), {}, 'the addresses the nodes have kept (%s)' % network
    return (str(network), DEFAULT_ADDRESS_OFFSET, dict((host, str(found[host].ip)) for host in order),
            'the addresses the nodes have kept, per node (they do not follow network + offset + rank)')


def draft_rails(order, devices_by_host):
    """(rails, host addresses {host: {rail: address}}, notes) for the nodes in rank order (the head first).

    Raises InventoryDraftError when the head has no linked port or a node lacks a link that the head has."""
    head = order[0]
    problems, notes = [], []
    head_links = linked_netdevs(devices_by_host.get(head))
    if not devices_by_host.get(head):
        problems.append('The head %s reports no ConnectX-7 (RDMA) device at all: check that it is a DGX Spark and that the '
                        'mlx5 driver is loaded (ibdev2netdev, /sys/class/infiniband).' % head)
    elif not head_links:
        problems.append('No ConnectX-7 port of the head %s has a link (%s): cable port 1 of every Spark, to the switch or, '
                        'for two Sparks, to each other, and run init again.' % (
                            head, ', '.join('%s %s' % (d['netdev'], d.get('state')) for d in devices_by_host[head])))
    for host in order[1:]:
        links = linked_netdevs(devices_by_host.get(host))
        missing = [netdev for netdev in head_links if netdev not in links]
        if missing:
            problems.append('%s has no link on %s, which the head %s has (%s has links on %s): seat its cable in the same port '
                            'as on the head.' % (host, ', '.join(missing), head, host, ', '.join(links) or 'no port'))
        extra = [netdev for netdev in links if netdev not in head_links]
        if extra:
            notes.append('%s also has a link on %s, which the head has not: not used as a rail.' % (host, ', '.join(extra)))
    if problems:
        raise InventoryDraftError(problems)
    rails, host_addresses = [], dict((host, {}) for host in order)
    taken = set()
    for index, netdev in enumerate(head_links):
        name = 'rail%d' % (index + 1)
        default_subnet = _free_subnet(taken, devices_by_host)
        subnet, offset, per_host, note = _addressing(order, _rail_addresses(order, devices_by_host, netdev), default_subnet)
        taken.add(subnet)
        rails.append({'name': name, 'interface': netdev, 'subnet': subnet, 'address_offset': offset})
        for host, address in per_host.items():
            host_addresses[host][name] = address
        if note:
            notes.append('%s (%s): %s.' % (name, netdev, note))
    return rails, dict((host, values) for host, values in host_addresses.items() if values), notes


def _free_subnet(taken, devices_by_host):
    """The first default rail subnet that no rail took and no node's interface is in."""
    used = set(taken)
    for devices in devices_by_host.values():
        for device in devices or []:
            used.update(str(ipaddress.ip_interface(cidr).network) for cidr in device.get('ipv4') or [])
    subnet = DEFAULT_SUBNET_BASE
    while str(subnet) in used:
        subnet = ipaddress.ip_network('%s/24' % (subnet.network_address + 256))
    return subnet


def link_notes(order, devices_by_host, rails, mtu):
    """What the links say: the topology, the MTU and speed now (the network phase sets the MTU), one twin alone."""
    notes = []
    interfaces = [rail['interface'] for rail in rails]
    linked = [(host, d) for host in order for d in devices_by_host.get(host) or [] if d.get('netdev') in interfaces]
    link_local = any(ipaddress.ip_interface(cidr).ip in LINK_LOCAL for _host, d in linked for cidr in d.get('ipv4') or [])
    if len(order) == 2:
        notes.append('Two Sparks: %s' % ('one cable between them (link-local addresses, as NVIDIA\'s two-Spark guide sets '
                                         'up); the rails get static addresses instead.' if link_local else
                                         'a direct cable (port to the same port) or a switch; both work.'))
    elif len(order) > 2:
        notes.append('%d Sparks: behind a switch (three or more need one); set its ports to MTU 9216 and 200G.' % len(order))
    low_mtu = {}
    for host, device in linked:
        if (device.get('mtu') or 0) < mtu:
            low_mtu.setdefault((interfaces.index(device['netdev']), device['netdev'], device.get('mtu')), []).append(host)
    if low_mtu:
        notes.append('MTU below %d now (%s): the network phase sets %d.' % (mtu, ', '.join(
            '%s %s on %s' % (netdev, now, 'every node' if len(hosts) == len(order) else ', '.join(hosts))
            for (_index, netdev, now), hosts in sorted(low_mtu.items(), key=lambda item: (item[0][0], str(item[0][2])))), mtu))
    speeds = sorted(set(d.get('speed_mbps') for _host, d in linked if d.get('speed_mbps')))
    if speeds and max(speeds) < 200000:
        notes.append('Links at %s Mb/s, below a CX-7 port\'s 200000: check the cable and the switch port.' %
                     '/'.join(str(s) for s in speeds))
    for host in order:
        ports = {}
        for device in devices_by_host.get(host) or []:
            if device.get('physical_port') is not None:
                ports.setdefault(device['physical_port'], set()).add(device['netdev'] in linked_netdevs([device]))
        for port, states in sorted(ports.items()):
            if states == {True, False}:
                notes.append('%s: only one twin of port %d has a link; each twin carries half of the port\'s 200G.' % (host, port))
    return notes


def client_networks(cidrs):
    """The client networks as the firewall takes them (a.b.c.d/n); InventoryDraftError naming each one that is not."""
    networks, problems = [], []
    for cidr in cidrs or []:
        try:
            networks.append(str(ipaddress.IPv4Network(str(cidr), strict=True)))
        except ValueError as exc:
            problems.append('dgxspark_init_client_cidrs: %r is not an IPv4 network (%s): give networks such as 10.20.0.0/24, '
                            'comma-separated.' % (cidr, exc))
    if problems:
        raise InventoryDraftError(problems)
    return networks


def hub_repos(config_paths):
    """Hugging Face repositories with a snapshot's config.json, from the paths under <cache>/hub."""
    repos = []
    for path in config_paths or []:
        match = _HUB_CONFIG.search(str(path))
        if match:
            repo = '%s/%s' % (match.group('org'), match.group('name'))
            if repo not in repos:
                repos.append(repo)
    return repos


def profile_candidates(profiles, asked, repos_on_head):
    """Profile names to try, best first: the one asked for; else those whose weights the head has; else the preference."""
    if asked:
        return [asked]
    present = sorted(name for name, profile in profiles.items()
                     if isinstance(profile, dict) and profile.get('hf_repo') in repos_on_head)
    published = [name for name in PROFILE_PREFERENCE if name in profiles]
    published += sorted(name for name, profile in profiles.items()
                        if isinstance(profile, dict) and profile.get('published') and name not in published)
    return present + [name for name in published if name not in present]


def shape_candidates(node_count):
    """(TP, PP) pairs with TP x PP = node_count, tensor parallel over all nodes first, then pipeline, then the rest."""
    pairs = [(node_count, 1), (1, node_count)]
    pairs += [(tp, node_count // tp) for tp in range(node_count - 1, 1, -1) if node_count % tp == 0]
    return list(dict.fromkeys(pairs))


def parse_image_list(text):
    """['repository:tag', ...] from `docker image ls --format '{{json .}}'` (one JSON object a line), untagged left out."""
    images = []
    for line in (text or '').splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        repository, tag = entry.get('Repository'), entry.get('Tag')
        if repository and repository != '<none>' and tag and tag != '<none>':
            images.append('%s:%s' % (repository, tag))
    return images


def choose_image(images):
    """(image, found): the default image when the head has it, else the head's first vLLM image, else the default."""
    if DEFAULT_IMAGE in images:
        return DEFAULT_IMAGE, True
    vllm = [image for image in images if 'vllm' in image.split(':')[0].lower()]
    return (vllm[0], True) if vllm else (DEFAULT_IMAGE, False)


def _yaml(value):
    """A value as YAML on one line (PyYAML ends a plain scalar's document with `...`)."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000).strip()
    return text[:-3].strip() if text.endswith('\n...') else text


def render_hosts(order, hosts_vars):
    """hosts.yml: the head and the workers in rank order, each with its ansible_host."""
    lines = ['---', '# The nodes in rank order: rank 0 is the head (vLLM serves there), then the workers as listed.',
             'all:', '  children:']
    for group, members in (('head', order[:1]), ('workers', order[1:])):
        lines += ['    %s:' % group, '      hosts:']
        for host in members:
            lines.append('        %s:' % host)
            for name, value in (hosts_vars.get(host) or {}).items():
                lines.append('          %s: %s' % (name, _yaml(value)))
    return '\n'.join(lines) + '\n'


def render_group_vars(draft):
    """group_vars/all.yml of the draft: every value with the reason init chose it."""
    lines = ['---', '# %s' % draft['summary'], '']
    for note in draft['notes']:
        lines.append('# - %s' % note)
    if draft['notes']:
        lines.append('')
    for comment, name in draft['order']:
        if comment:
            lines += ['# %s' % part for part in comment.split('\n')]
        value = draft['values'][name]
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append('%s:' % name)
            for item in value:
                lines.append('  - ' + '\n    '.join('%s: %s' % (k, _yaml(v)) for k, v in item.items()))
        else:
            lines.append('%s: %s' % (name, _yaml(value)))
    return '\n'.join(lines) + '\n'


def with_header(body):
    """The file text: a header holding the body's digest, so that init can tell its own draft from an edited file."""
    return '# dgxspark.cluster init draft sha256:%s\n%s' % (hashlib.sha256(body.encode('utf-8')).hexdigest(), body)


def existing_state(text):
    """'absent', 'draft' (init's own, unedited) or 'edited' (anything else) for a file's current text (None: absent)."""
    if text is None:
        return 'absent'
    match = DRAFT_HEADER.match(text)
    if match and hashlib.sha256(text[match.end():].encode('utf-8')).hexdigest() == match.group('digest'):
        return 'draft'
    return 'edited'
