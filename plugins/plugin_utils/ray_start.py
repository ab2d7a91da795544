# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `ray start` arguments of one node: every port fixed, so that a host firewall can name them.

Pure computation; errors are :class:`RayStartError` with the variable to fix.
"""

from __future__ import annotations

import ipaddress

from collections.abc import Mapping

#: Every port `ray start` opens, by the name used in ray_cluster_ports, with its `ray start` option.
#: Unset ones would be random (Ray's default), which no firewall rule can name.
PORT_OPTIONS = (
    ('gcs', '--port'),
    ('node_manager', '--node-manager-port'),
    ('object_manager', '--object-manager-port'),
    ('runtime_env_agent', '--runtime-env-agent-port'),
    ('dashboard_agent_grpc', '--dashboard-agent-grpc-port'),
    ('dashboard_agent_listen', '--dashboard-agent-listen-port'),
    ('metrics_export', '--metrics-export-port'),
    ('dashboard', '--dashboard-port'),
    ('client_server', '--ray-client-server-port'),
    ('min_worker', '--min-worker-port'),
    ('max_worker', '--max-worker-port'),
)
PORT_NAMES = tuple(name for name, _option in PORT_OPTIONS)
#: Options only the head takes.
HEAD_ONLY = ('gcs', 'dashboard', 'client_server')
ROLES = ('head', 'worker')
#: The dashboard, when asked for, listens on loopback only (reach it through an SSH tunnel): an open
#: dashboard lets anyone who reaches it run code on every node (CVE-2023-48022).
DASHBOARD_HOST = '127.0.0.1'


class RayStartError(ValueError):
    """Inputs that cannot make a safe `ray start` command."""


def _port(ports, name):
    value = ports.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise RayStartError('ray_cluster_ports.%s is %r: give a TCP port number from 1 to 65535.' % (name, value))
    return int(value)


def validate_ports(ports):
    """Return the ports as {name: int}; every known name is required, unknown names and clashes are refused."""
    if not isinstance(ports, Mapping):
        raise RayStartError('ray_cluster_ports must be a mapping of port names (%s) to numbers, got %s.'
                            % (', '.join(PORT_NAMES), type(ports).__name__))
    unknown = sorted(str(key) for key in ports if key not in PORT_NAMES)
    if unknown:
        raise RayStartError('ray_cluster_ports has unknown name(s) %s; the names are %s.' % (', '.join(unknown), ', '.join(PORT_NAMES)))
    missing = [name for name in PORT_NAMES if name not in ports]
    if missing:
        raise RayStartError('ray_cluster_ports lacks %s: give every port (an unset Ray port is random and no firewall rule can '
                            'name it).' % ', '.join(missing))
    result = dict((name, _port(ports, name)) for name in PORT_NAMES)
    low, high = result['min_worker'], result['max_worker']
    if low >= high:
        raise RayStartError('ray_cluster_ports.min_worker (%d) must be below max_worker (%d).' % (low, high))
    seen = {}
    for name in PORT_NAMES:
        if name in ('min_worker', 'max_worker'):
            continue
        port = result[name]
        if port in seen:
            raise RayStartError('ray_cluster_ports.%s and ray_cluster_ports.%s are both %d: every Ray port must differ.'
                                % (seen[port], name, port))
        if low <= port <= high:
            raise RayStartError('ray_cluster_ports.%s (%d) lies in the worker port range %d-%d: move it or the range.'
                                % (name, port, low, high))
        seen[port] = name
    return result


def _ipv4(value, what):
    try:
        return str(ipaddress.IPv4Address(str(value)))
    except ValueError:
        raise RayStartError('%s is %r, not an IPv4 address (the node\'s rail-1 address from the cluster plan).' % (what, value)) from None


def ray_start_argv(ports, role, node_ip, head_ip, num_gpus=1, dashboard=False, client_server=True, object_store_memory=None):
    """Arguments of `ray start` (after the command itself) for one node.

    :arg ports: every port of :data:`PORT_NAMES`.
    :arg role: ``head`` or ``worker``.
    :arg node_ip: this node's rail-1 address (``--node-ip-address``).
    :arg head_ip: the head's rail-1 address (workers join ``head_ip:gcs``).
    :arg num_gpus: GPUs this node offers to Ray (one per DGX Spark).
    :arg dashboard: start the dashboard (bound to 127.0.0.1) on the head.
    :arg client_server: start the Ray Client server on the head (needs ``ray[client]`` in the image).
    :arg object_store_memory: bytes for the object store, or None for Ray's default.
    """
    if role not in ROLES:
        raise RayStartError('role is %r: use head or worker.' % (role,))
    checked = validate_ports(ports)
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 0:
        raise RayStartError('ray_cluster_num_gpus is %r: give the number of GPUs of the node (1 on a DGX Spark).' % (num_gpus,))
    argv = ['--block', '--node-ip-address=%s' % _ipv4(node_ip, 'the node address'), '--num-gpus=%d' % num_gpus,
            '--disable-usage-stats']
    if role == 'head':
        argv += ['--head', '--include-dashboard=%s' % ('true' if dashboard else 'false')]
        if dashboard:
            argv.append('--dashboard-host=%s' % DASHBOARD_HOST)
    else:
        argv.append('--address=%s:%d' % (_ipv4(head_ip, 'the head address'), checked['gcs']))
    for name, option in PORT_OPTIONS:
        if name in HEAD_ONLY and role != 'head':
            continue
        if (name == 'dashboard' and not dashboard) or (name == 'client_server' and not client_server):
            continue
        argv.append('%s=%d' % (option, checked[name]))
    if object_store_memory is not None:
        if isinstance(object_store_memory, bool) or not isinstance(object_store_memory, int) or object_store_memory < 78643200:
            raise RayStartError('ray_cluster_object_store_memory is %r: give bytes (at least 78643200, Ray\'s minimum) or null for '
                                'Ray\'s default.' % (object_store_memory,))
        argv.append('--object-store-memory=%d' % object_store_memory)
    return argv


def ray_ports_in_use(ports, dashboard=False, client_server=True):
    """The TCP ports a node's Ray listens on ({name: port}, worker range as min_worker/max_worker), for firewalls and checks."""
    checked = validate_ports(ports)
    return dict((name, port) for name, port in checked.items()
                if not (name == 'dashboard' and not dashboard) and not (name == 'client_server' and not client_server))
