# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric_check role's data: what its actions (fabric_readiness, fabric_report) and its filter compute from the role's results.

The parsers, the diagnosis and the report are in fabric.py; this module only gathers the role's per-host results.
"""

from __future__ import annotations

import base64
import binascii
import re

from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import (
    FabricInputError,
    node_order,
    nccl_test_max_bytes,
    ring_pairs,
)

# ------------------------------------------------------------------- the fabric_check role's data
# ``hostvars`` is Ansible's ``hostvars`` (or any mapping of host name to a mapping of that host's variables).

NCCL_CONTAINER_NAME = 'dgxspark-fabric-check-nccl'
_MEMAVAILABLE = re.compile(r'^MemAvailable:\s+(\d+) kB', re.MULTILINE)


def _hostvar(hostvars, host, name):
    """Variable ``name`` of ``host``, or None when the host or the variable is unknown."""
    if host not in hostvars:
        return None
    variables = hostvars[host]
    if name not in variables:
        return None
    return variables[name]


def probe_reusable(probe, plan, mtu, host=None):
    """Whether a probe another role kept (``cx7_netplan_fabric_probe``: ``{mtu, rails}``, rails as fabric_probe returns them) is what
    fabric_check would measure now: DF pings filling the same MTU, every rail of the plan on its interface, and, on every rail whose
    interface exists, a small and a jumbo ping to every other node of the plan."""
    order = node_order(plan)
    if not isinstance(probe, dict) or not isinstance(probe.get('rails'), dict):
        return False
    try:
        if int(probe.get('mtu')) != int(mtu):
            return False
    except (TypeError, ValueError):
        return False
    rails = probe['rails']
    if set(rails) != set(r['name'] for r in plan['rails']):
        return False
    peers = set(h for h in order if h != host)
    for rail in plan['rails']:
        entry = rails[rail['name']]
        if not isinstance(entry, dict) or entry.get('interface') != rail['interface']:
            return False
        if entry.get('probe_error') or not (entry.get('link') or {}).get('present'):
            continue
        pings = [p for p in entry.get('pings') or [] if isinstance(p, dict)]
        for kind in ('small', 'jumbo'):
            if set(p.get('peer') for p in pings if p.get('kind') == kind) != peers:
                return False
    return True


def collect_probes(hostvars, plan, probe_name, reused_name):
    """Every node's probe for the report: what fabric_check's own probe (registered as ``probe_name``) returned, or, where that task
    was skipped because another role's probe of this run could be reused, that probe (the fact ``reused_name``).

    Returns ``rails`` (host -> the ``rails`` result, None for a node that was not probed), ``reused`` (hosts whose probe was reused)
    and ``notes`` (a line for the report when any probe was reused).
    """
    rails = {}
    reused = []
    for host in node_order(plan):
        own = _hostvar(hostvars, host, probe_name)
        kept = _hostvar(hostvars, host, reused_name)
        if isinstance(own, dict) and isinstance(own.get('rails'), dict):
            rails[host] = own['rails']
        elif isinstance(own, dict) and own.get('skipped') and isinstance(kept, dict) and isinstance(kept.get('rails'), dict):
            rails[host] = kept['rails']
            reused.append(host)
        else:
            rails[host] = None
    notes = []
    if reused:
        notes.append('links and pings of %s: measured by the check cx7_netplan ran after changing the rails in this run (%s), '
                     'not measured again' % (', '.join(reused), reused_name))
    return {'rails': rails, 'reused': reused, 'notes': notes}


def rdma_readiness(hostvars, plan, play_hosts, devices_name, ib_write_bw_path):
    """Whether ib_write_bw can run: every node of the plan is in the play and has an RDMA device behind every rail interface
    (its ``devices_name`` variable: netdev -> RDMA device, set only where ib_write_bw exists).

    Returns ``ready``, ``missing`` (hosts, plan order) and ``notes`` (why the measurement is skipped, or nothing).
    """
    order = node_order(plan)
    interfaces = [r['interface'] for r in plan['rails']]
    ready = []
    for host in order:
        devices = _hostvar(hostvars, host, devices_name) if host in play_hosts else None
        if isinstance(devices, dict) and all(i in devices for i in interfaces):
            ready.append(host)
    missing = [h for h in order if h not in ready]
    notes = []
    if missing:
        notes.append('RDMA bandwidth not measured (skipped): %s lacks %s or an RDMA device behind every rail interface (%s)' % (
            ', '.join(missing), ib_write_bw_path, ', '.join(interfaces)))
    return {'ready': ready, 'missing': missing, 'notes': notes}


def ib_runs(client_results, pair, devices):
    """The ib_write_bw runs of one node pair for the report, from the async_status results of its clients.

    ``client_results``: the ``results`` of the "Wait for the clients" loop (each ``item.item`` is the rail of the plan);
    ``pair``: [server, client]; ``devices``: the client's netdev -> RDMA device.
    """
    runs = []
    for result in client_results or []:
        rail = result['item']['item']
        rc = result.get('rc', 1)
        text = str(result.get('stderr', '') or result.get('stdout', '') or result.get('msg', '')).strip()
        runs.append({
            'rail': rail['name'], 'server': pair[0], 'client': pair[1], 'device': devices[rail['interface']],
            'output': '%s\n%s' % (result.get('stdout', ''), result.get('stderr', '')),
            'error': None if rc == 0 else 'client exited %s: %s' % (result.get('rc', '?'), text[-300:]),
        })
    return runs


def meminfo_available_kib(text):
    """MemAvailable of a /proc/meminfo text, in KiB (0 when the line is missing)."""
    match = _MEMAVAILABLE.search(text or '')
    return int(match.group(1)) if match else 0


def _slurped_text(result):
    try:
        return base64.b64decode(result.get('content') or '').decode('utf-8', 'replace')
    except (binascii.Error, ValueError):
        return ''


def nccl_readiness(hostvars, plan, play_hosts, meminfo_name, collective='all_gather', fraction=0.5, gpu_device=None, image=None):
    """Whether the NCCL test can run, and its size.

    A node is ready when it is in the play and its ``meminfo_name`` variable (the slurp of /proc/meminfo, read only where the GPU
    device and the image exist) has content. Returns ``ready``, ``missing`` (plan order), ``max_bytes`` (sized to the least
    MemAvailable, see nccl_test_max_bytes; None when a node is missing or too little memory is free) and ``notes``.
    """
    order = node_order(plan)
    free = {}
    for host in order:
        meminfo = _hostvar(hostvars, host, meminfo_name) if host in play_hosts else None
        if isinstance(meminfo, dict) and 'content' in meminfo:
            free[host] = meminfo_available_kib(_slurped_text(meminfo))
    ready = [h for h in order if h in free]
    missing = [h for h in order if h not in free]
    max_bytes = None
    if not missing:
        max_bytes = nccl_test_max_bytes(min(free.values()) * 1024, len(order), collective=collective, fraction=float(fraction))
    notes = []
    if missing:
        notes.append('NCCL bandwidth not measured (skipped): %s lacks a GPU (%s) or the image %r' % (
            ', '.join(missing), gpu_device, str(image or '(fabric_check_nccl_image not set)')))
    elif not max_bytes:
        notes.append('NCCL bandwidth not measured (skipped): less than 64 MiB x 2 free per node (MemAvailable)')
    return {'ready': ready, 'missing': missing, 'max_bytes': max_bytes, 'notes': notes}


# The test container runs as root with the host's network and IPC: none of Docker's default capabilities but the one
# that registers RDMA memory (IPC_LOCK, as the serving containers), and no privilege gained through setuid files.
CONTAINER_HARDENING = ('--cap-drop=ALL', '--cap-add=IPC_LOCK', '--security-opt=no-new-privileges')


def nccl_argv(plan, host, image, docker_args, port, collective, max_bytes, env=None):
    """The ``docker run`` command line of the NCCL test on ``host``: rank = plan rank, rendezvous on the head's first rail address,
    NCCL_SOCKET_IFNAME = the first rail's interface; ``env`` adds or overrides variables."""
    order = node_order(plan)
    if host not in order:
        raise FabricInputError('%s is not a node of the cluster plan (nodes: %s)' % (host, ', '.join(order)))
    if not plan['rails']:
        raise FabricInputError('the cluster plan has no rails: the NCCL test needs the first rail for its rendezvous')
    first = plan['rails'][0]
    variables = [
        ('NCCL_SOCKET_IFNAME', first['interface']),
        ('MASTER_ADDR', plan['nodes'][0]['rail_addresses'][first['name']]),
        ('MASTER_PORT', str(port)),
        ('RANK', str(plan['nodes'][order.index(host)]['rank'])),
        ('WORLD_SIZE', str(len(order))),
        ('FABRIC_CHECK_COLLECTIVE', collective),
        ('FABRIC_CHECK_MAX_BYTES', str(max_bytes)),
        # NCCL's own version line, which the report compares across nodes with the libraries each rank mapped.
        ('NCCL_DEBUG', 'VERSION'),
    ]
    merged = dict(variables)
    merged.update(env or {})
    return (['docker', 'run', '--rm', '-i', '--name', NCCL_CONTAINER_NAME] + list(CONTAINER_HARDENING) + list(docker_args or [])
            + ['--env=%s=%s' % (key, value) for key, value in merged.items()] + [image, 'python3', '-'])


def nccl_result(run, host, collective, max_bytes):
    """The NCCL test for the report, from the command result of rank 0 (``host``): ``output`` or ``error``."""
    run = run or {}
    rc = run.get('rc', 1)
    return {
        'collective': collective,
        'max_bytes': max_bytes,
        'output': run.get('stdout', ''),
        'error': None if rc == 0 else 'rank 0 on %s exited %s: %s' % (host, run.get('rc', '?'), str(run.get('stderr', '')).strip()[-400:]),
    }


# ------------------------------------------------------------------- what the role's two actions compute
# The variables the role's tasks register, which its actions (fabric_readiness, fabric_report) read.
PROBE_VAR = '_fabric_check_probe'
REUSED_PROBE_VAR = 'cx7_netplan_fabric_probe'
RDMA_DEVICES_VAR = '_fabric_check_rdma_devices'
MEMINFO_VAR = '_fabric_check_meminfo'
ROCE_PORTS_VAR = '_fabric_check_roce_ports'
NCCL_RUN_VAR = '_fabric_check_nccl_run'
IB_RESULTS_VAR = '_fabric_check_ib_results'
RDMA_READINESS_VAR = '_fabric_check_rdma'
NCCL_READINESS_VAR = '_fabric_check_nccl_ready'


def ib_write_bw_readiness(hostvars, plan, play_hosts, ib_write_bw_path):
    """rdma_readiness over the role's ``_fabric_check_rdma_devices``, with the node ``pairs`` [[server, client], ...] that
    ib_write_bw measures: every node serves the next one in plan order."""
    readiness = rdma_readiness(hostvars, plan, play_hosts, RDMA_DEVICES_VAR, ib_write_bw_path)
    readiness['pairs'] = [list(pair) for pair in ring_pairs(node_order(plan))]
    return readiness


def nccl_test_readiness(hostvars, plan, play_hosts, image, docker_args, port, collective='all_gather', fraction=0.5, gpu_device=None,
                        env=None):
    """nccl_readiness over the role's ``_fabric_check_meminfo``, with the ``collective`` and, where the test can run (nothing
    missing, a size), ``argv``: each node of the plan -> its ``docker run`` command line (nccl_argv); else ``argv`` is empty."""
    readiness = nccl_readiness(hostvars, plan, play_hosts, MEMINFO_VAR, collective=collective, fraction=fraction,
                               gpu_device=gpu_device, image=image)
    readiness['collective'] = collective
    readiness['argv'] = {}
    if not readiness['missing'] and readiness['max_bytes'] is not None:
        readiness['argv'] = dict((host, nccl_argv(plan, host, image, docker_args, port, collective, readiness['max_bytes'], env=env))
                                 for host in node_order(plan))
    return readiness


def report_inputs(hostvars, plan, play_hosts, rdma=None, nccl=None, ib_results=None):
    """The keyword arguments of build_fabric_report (all but plan and expectations) from what the role's tasks registered.

    ``hostvars``: every node's probe (its own ``_fabric_check_probe``, or cx7_netplan's ``cx7_netplan_fabric_probe`` where the
    probe was skipped to reuse it), its ibv_devinfo loop (``_fabric_check_roce_ports``), its NCCL test run
    (``_fabric_check_nccl_run``) and its RDMA devices; ``rdma``, ``nccl``: the results of fabric_readiness (None where that
    measurement was not asked for); ``ib_results``: [{pair, clients: the async_status results of the pair's clients}, ...]
    as rdma_pair.yml keeps them (None where no pair ran).
    """
    probes = collect_probes(hostvars, plan, PROBE_VAR, REUSED_PROBE_VAR)
    notes = list((rdma or {}).get('notes') or []) + list((nccl or {}).get('notes') or []) + probes['notes']
    bandwidth = None
    if ib_results is not None:
        bandwidth = []
        for entry in ib_results:
            bandwidth += ib_runs(entry['clients'], entry['pair'], _hostvar(hostvars, entry['pair'][1], RDMA_DEVICES_VAR))
    nccl_run = None
    if nccl and not nccl.get('missing') and nccl.get('max_bytes') is not None:
        head = node_order(plan)[0]
        nccl_run = nccl_result(_hostvar(hostvars, head, NCCL_RUN_VAR) or {}, head, nccl['collective'], nccl['max_bytes'])
    return {
        'bandwidth': bandwidth,
        'nccl': nccl_run,
        'notes': notes,
        # each node's ibv_devinfo of its rails' ports (a loop's results) and its NCCL test output (the NCCL build it loaded);
        # none where it did not run
        'roce': dict((host, (_hostvar(hostvars, host, ROCE_PORTS_VAR) or {}).get('results', [])) for host in play_hosts),
        'nccl_ranks': dict((host, (_hostvar(hostvars, host, NCCL_RUN_VAR) or {}).get('stdout', '')) for host in play_hosts),
        'probes': probes['rails'],
    }
