# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who joined rank 0's rendezvous, under vLLM's own multi-node backend (mp).

Rank 0 (the head) opens torch's TCPStore on --master-addr:--master-port; every headless rank connects to it before the
model loads and keeps that connection for the life of the group (measured in the lab: the listener opens about a
minute after the head's container starts, the three other ranks connect within seconds, and stay). Ray has its own
membership check before vLLM starts (ray_membership); mp has only this rendezvous: a rank that never comes (its
container failed, a firewall, a route, an address on the wrong interface) leaves rank 0 waiting without a word, until
the stall watchdog, which cannot name the node.

parse_proc_net_tcp reads the kernel's socket tables (/proc/net/tcp and tcp6, as the serving_probe module reads them
on the head); rendezvous_view keeps the sockets of the rendezvous' port; RendezvousWatch decides, probe after probe,
whether a rank is missing for longer than join_timeout since the rendezvous opened. Pure logic, stdlib only.
"""

from __future__ import annotations

import ipaddress
import socket
import struct

# The states of /proc/net/tcp (include/net/tcp_states.h) the view needs.
TCP_ESTABLISHED = '01'
TCP_LISTEN = '0A'
DEFAULT_JOIN_TIMEOUT = 300


class RendezvousError(ValueError):
    """A socket table or an option that cannot be read."""


def _address(field):
    """(ip, port) of a /proc/net/tcp address field: little-endian 32-bit words of hex, then the port in hex."""
    try:
        raw, port = field.split(':')
        packed = b''.join(struct.pack('<I', int(raw[i:i + 8], 16)) for i in range(0, len(raw), 8))
        ip = ipaddress.ip_address(socket.inet_ntop(socket.AF_INET if len(packed) == 4 else socket.AF_INET6, packed))
        return (getattr(ip, 'ipv4_mapped', None) or ip), int(port, 16)
    except (ValueError, OSError, struct.error) as exc:
        raise RendezvousError('not an address of /proc/net/tcp: %r (%s)' % (field, exc)) from exc


def parse_proc_net_tcp(text):
    """The sockets of one /proc/net/tcp or /proc/net/tcp6 table: dicts of local, remote ((ip, port)) and state (hex)."""
    sockets = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4:
            continue
        sockets.append({'local': _address(fields[1]), 'remote': _address(fields[2]), 'state': fields[3].upper()})
    return sockets


def rendezvous_view(tables, port):
    """What the head's socket tables say of the rendezvous on ``port``: whether it listens, and the addresses of the
    peers connected to it (sorted, without the head's own connections to itself)."""
    sockets = [item for table in tables for item in parse_proc_net_tcp(table)]
    listening = any(s['state'] == TCP_LISTEN and s['local'][1] == port for s in sockets)
    peers = sorted({s['remote'][0] for s in sockets
                    if s['state'] == TCP_ESTABLISHED and s['local'][1] == port and s['remote'][0] != s['local'][0]},
                   key=lambda ip: (ip.version, int(ip)))
    return {'port': port, 'listening': listening, 'peers': [str(ip) for ip in peers]}


def _duration(seconds):
    seconds = int(round(seconds))
    return '%d s' % seconds if seconds < 120 else '%d min %d s' % divmod(seconds, 60)


class RendezvousWatch:
    """Fails when a rank has not joined rank 0's rendezvous join_timeout seconds after it opened.

    address: the rendezvous' address (for the message); peers: node -> the address its rank connects from (its rail-1
    address); container: the vLLM container's name. A rank that joined once counts as joined: a rank that stops later
    shows as its container's failure, which the head's readiness check reports on its own. A headless rank's watch
    (dgxspark_rank_watch.py) connects to the same port now and then, from the same address: seen, it counts too, and
    it can only be seen when the rank's container runs and reaches the head.
    """

    def __init__(self, address, port, peers, join_timeout=DEFAULT_JOIN_TIMEOUT, container='dgxspark-vllm',
                 variable='vllm_container_join_timeout'):
        if not isinstance(peers, dict) or not peers:
            raise RendezvousError('rendezvous peers must map each headless rank\'s node to its address, got %r' % (peers,))
        try:
            self.peers = dict((node, str(ipaddress.ip_address(peer))) for node, peer in peers.items())
        except ValueError as exc:
            raise RendezvousError('rendezvous peers: %s' % exc) from exc
        if not isinstance(join_timeout, (int, float)) or isinstance(join_timeout, bool) or join_timeout <= 0:
            raise RendezvousError('join_timeout must be a positive number of seconds, got %r' % (join_timeout,))
        self.address, self.port, self.join_timeout = address, port, join_timeout
        self.container, self.variable = container, variable
        self.opened_at = None
        self.joined = set()

    def missing(self):
        """The nodes whose rank has not joined yet, in the peers' order."""
        return [node for node, peer in self.peers.items() if peer not in self.joined]

    def observe(self, view, now):
        """Take one probe's rendezvous view at ``now`` (seconds); returns the failure message, or None."""
        if not view:
            return None
        if view.get('listening') and self.opened_at is None:
            self.opened_at = now
        self.joined.update(str(ipaddress.ip_address(peer)) for peer in view.get('peers') or [])
        missing = self.missing()
        if self.opened_at is None or not missing or now - self.opened_at < self.join_timeout:
            return None
        names = ', '.join('%s (%s)' % (node, self.peers[node]) for node in missing)
        which = ('the rank of %s has not joined it: its vLLM container is not running, or it cannot' if len(missing) == 1
                 else 'the ranks of %s have not joined it: their vLLM containers are not running, or they cannot') % names
        return ('Rank 0\'s rendezvous %s:%d has been open for %s (%s %s s), and %s reach %s port %d on rail 1 (a firewall '
                'rule, a route, the address on another interface). On each: `docker ps -a` and `docker logs %s`, then '
                '`nc -zv %s %d`. If a rank only starts slowly, raise %s.' % (
                    self.address, self.port, _duration(now - self.opened_at), self.variable, '%g' % self.join_timeout, which,
                    self.address, self.port, self.container, self.address, self.port, self.variable))

    def summary(self):
        """What the readiness result carries: the peers that joined and those still missing."""
        return {'address': self.address, 'port': self.port, 'opened': self.opened_at is not None,
                'joined': sorted(node for node, peer in self.peers.items() if peer in self.joined), 'missing': self.missing()}
