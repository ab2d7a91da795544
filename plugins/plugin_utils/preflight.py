# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight verdict: every node's readings (preflight_facts, serving_image_versions, cx7_facts) against the plan.

``evaluate(plan, expect, nodes)`` returns one row per node (a short cell per check) and every problem at once, each
naming the node, what was found, what was expected and the fix; ``render(report)`` draws the table. Nothing here
contacts a host: tests/unit/test_preflight.py drives it with recorded readings.

``nodes``: {host: {'error': why the node could not be read (unreachable, no privilege escalation) or '',
'facts': preflight_facts' result, 'image': serving_image_versions' result, 'cx7': cx7_facts' ansible_facts.cx7}}.
``expect``: see EXPECT_DEFAULTS.
"""
from __future__ import annotations

import ipaddress

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.profile_schema import version_problems

CHECKS = ('ssh', 'gpu', 'memory', 'docker', 'image', 'model', 'fabric', 'ports', 'clock', 'ipc', 'os')
GIB_KIB = 1024 * 1024
EXPECT_DEFAULTS = {
    'gpu_name': 'NVIDIA GB10',
    'node_memory_gib': 121.7,
    'memory_tolerance': 0.03,       # MemTotal may be this share below dgxspark_node_memory_gib
    'needs_gpu_runtime': True,      # the serving containers get the GPU through Docker
    'image': '',
    'distribute_image': True,
    'distribute_model': True,
    'model_download': False,
    'reserve_bytes': 10 * 1000 ** 3,
    'link_speed_mbps': 200000,
    'ports': {},                    # port -> what uses it (e.g. 'Ray GCS')
    'own_containers': [],           # this collection's containers: their ports and memory are not a problem
    'max_clock_skew_s': 5.0,
    'logind_keep_ipc': True,        # os_hardening writes RemoveIPC=no before any engine starts (tag os_logind)
    'gpu_clocks_mhz': [],           # os_hardening_gpu_clocks_mhz: the SM clock range locked at boot ([] none)
    'busy_gpu_percent': 50,         # above it a GPU is under load (the DgxsparkGpuClockLow alert's threshold)
}


class Report(object):
    """Rows (host -> {check: cell}), problems and warnings, in node order."""

    def __init__(self, hosts):
        self.hosts = list(hosts)
        self.rows = dict((host, dict((check, '') for check in CHECKS)) for host in self.hosts)
        self.problems = []
        self.warnings = []

    def ok(self, host, check, cell):
        self.rows[host][check] = cell

    def problem(self, host, check, found, expected, fix):
        self.rows[host][check] = 'PROBLEM'
        self.problems.append('%s: %s: found %s; expected %s. Fix: %s' % (host, check, found, expected, fix))

    def warn(self, host, check, text):
        self.warnings.append('%s: %s: %s' % (host, check, text))

    def as_dict(self):
        return {'checks': list(CHECKS), 'rows': [dict(self.rows[h], node=h) for h in self.hosts],
                'problems': self.problems, 'warnings': self.warnings, 'ok': not self.problems}


def _gib(kib):
    return float(kib) / GIB_KIB


def _gpu(report, host, gpu, expect):
    if gpu.get('error'):
        report.problem(host, 'gpu', gpu['error'], 'nvidia-smi to list the %s' % expect['gpu_name'],
                       'install or repair the NVIDIA driver (nvidia-smi must answer), then reboot the node')
        return None
    names = sorted(set(g['name'] for g in gpu['gpus']))
    if names != [expect['gpu_name']]:
        report.problem(host, 'gpu', 'GPU %s' % ', '.join(names), 'one %s' % expect['gpu_name'],
                       'run on DGX Spark nodes, or set dgxspark_expected_gpu_name for this hardware')
        return None
    report.ok(host, 'gpu', '%s %s CUDA %s' % (expect['gpu_name'].replace('NVIDIA ', ''), gpu['driver'], gpu.get('cuda') or '?'))
    _gpu_clock(report, host, gpu, expect)
    return gpu['driver']


def _gpu_clock(report, host, gpu, expect):
    """A busy GPU below half its maximum SM clock is refused (as the DgxsparkGpuClockLow alert fires): a GB10 stuck at
    700-890 MHz stays there until its AC power is pulled (eugr #334). An idle GPU's clock says little, unless it is below
    the minimum the os phase locked."""
    sm, top, busy = gpu.get('sm_mhz'), gpu.get('max_sm_mhz'), gpu.get('utilization')
    if sm is None or not top:
        return
    lock = expect['gpu_clocks_mhz'] or []
    if busy is not None and busy > expect['busy_gpu_percent']:
        if sm < top * 0.5:
            report.problem(host, 'gpu', 'SM clock %d MHz at %d%% utilisation (maximum %d MHz)' % (sm, busy, top),
                           'at least %d MHz (half the maximum) under load' % (top // 2),
                           'pull the node\'s AC power for a minute (a reboot keeps a GPU stuck at low clocks, eugr #334); '
                           'os_hardening_gpu_clocks_mhz locks the clocks at boot')
    elif lock and lock[0] and sm < lock[0]:
        report.warn(host, 'gpu', 'SM clock %d MHz at idle, below the locked minimum %d MHz (os_hardening_gpu_clocks_mhz): the '
                    'lock is not applied (dgxspark-gpu-clocks.service) or the GPU is stuck; pull its AC power if it stays' % (sm, lock[0]))


def _memory(report, host, memory, plan, expect, serving_running):
    if memory.get('error'):
        report.problem(host, 'memory', memory['error'], 'a readable /proc/meminfo', 'check the node')
        return
    total, available = _gib(memory['total_kib']), _gib(memory['available_kib'])
    swap = 'swap %.0f GiB' % _gib(memory.get('swap_total_kib', 0)) if memory.get('swap_total_kib') else 'no swap'
    floor = expect['node_memory_gib'] * (1 - expect['memory_tolerance'])
    if total < floor:
        report.problem(host, 'memory', 'MemTotal %.1f GiB' % total, 'about %.1f GiB (dgxspark_node_memory_gib)' % expect['node_memory_gib'],
                       'this node has less memory than a DGX Spark (an OEM box?): set dgxspark_node_memory_gib to %.1f '
                       'so that the plan fits the model to it, or replace the node' % total)
        return
    need = (plan.get('memory') or {}).get('budget_gib')
    if need and available < need and not serving_running:
        consumers = ', '.join('%s (pid %d%s, %.1f GiB)' % (
            p['name'], p['pid'], ', container ' + p['container'] if p.get('container') else '', _gib(p['rss_kib']))
            for p in memory.get('top', [])[:3])
        report.problem(host, 'memory', 'MemAvailable %.1f GiB' % available,
                       'at least %.1f GiB free for vLLM (%.2f x %.1f GiB, the planned weights, KV cache and overhead)' % (
                           need, plan.get('gpu_memory_utilization', 0), (plan.get('memory') or {}).get('node_memory_gib', 0)),
                       'free memory on the node; the largest consumers are %s (a graphical session: systemctl isolate '
                       'multi-user.target; a leftover container: docker rm -f it)' % (consumers or 'unknown'))
        return
    report.ok(host, 'memory', '%.0f/%.0f GiB free, %s' % (available, total, swap))


def _docker(report, host, docker, expect, rails):
    if docker.get('error'):
        report.problem(host, 'docker', docker['error'], 'a running Docker daemon', 'systemctl enable --now docker')
        return False
    if expect['needs_gpu_runtime'] and 'nvidia' not in docker.get('runtimes', []) and not docker.get('cdi'):
        report.problem(host, 'docker', 'Docker %s without the nvidia runtime or CDI specs' % docker['version'],
                       'the NVIDIA Container Toolkit (runtime nvidia, or CDI specs in /etc/cdi)',
                       'install nvidia-container-toolkit and run nvidia-ctk runtime configure --runtime=docker, then restart Docker')
        return True
    overlaps = docker_network_overlaps(docker.get('networks') or {}, rails)
    if overlaps:
        report.problem(host, 'docker', '; '.join(
            'Docker network %s (%s) overlaps %s (%s)' % (name, subnet, rail['name'], rail['subnet']) for name, subnet, rail in overlaps),
            'no Docker network inside a rail subnet (the node would route rail traffic into it, and rail addresses are '
            'trusted with every port)',
            'docker network rm %s, or give Docker default-address-pools outside the rails in /etc/docker/daemon.json'
            % ' '.join(sorted(set(name for name, _subnet, _rail in overlaps))))
        return True
    report.ok(host, 'docker', docker['version'].split('+')[0])
    return True


def docker_network_overlaps(networks, rails):
    """[(network, subnet, rail)] for every Docker subnet that overlaps a rail's subnet (same IP version)."""
    found = []
    for name in sorted(networks):
        for subnet in networks[name]:
            try:
                net = ipaddress.ip_network(subnet, strict=False)
            except ValueError:
                continue
            for rail in (r for r in rails if r.get('subnet')):
                rail_net = ipaddress.ip_network(rail['subnet'], strict=False)
                if net.version == rail_net.version and net.overlaps(rail_net):
                    found.append((name, subnet, rail))
    return found


def _image_versions(report, host, image, expect, plan):
    refusals = []
    # Where the plan runs no Ray on the node (vLLM's own multi-node backend, mp), an image without it (NGC's) is fine.
    ray = any('ray' in node['runs'] for node in plan['nodes'] if node['host'] == host)
    errors = [e for e in image.get('errors') or [] if ray or not e.startswith('ray ')]
    if not errors and plan.get('patches'):
        try:
            refusals = version_problems(plan.get('model_profile'), plan['patches'], image.get('vllm_version'))
        except ValueError as exc:
            refusals = [str(exc)]
    if errors:
        report.problem(host, 'image', '; '.join(errors), '%s to answer in %s' % (
            '`ray --version` and `vllm --version`' if ray else '`vllm --version`', expect['image']),
            'use a serving image with %s (dgxspark_serving_image)' % ('Ray and vLLM' if ray else 'vLLM'))
    elif refusals:
        report.problem(host, 'image', 'vLLM %s' % image.get('vllm_version'), 'the vLLM the profile\'s patches were written for (%s)' % (
            '; '.join(refusals)), 'use an image whose vLLM the patches cover (dgxspark_serving_image), or a profile whose patches '
                                  'cover this vLLM (docs/profiles.md)')
    elif ray:
        report.ok(host, 'image', 'vLLM %s Ray %s' % (image.get('vllm_version'), image.get('ray_version')))
    else:
        report.ok(host, 'image', 'vLLM %s' % image.get('vllm_version'))


def _image(report, hosts, nodes, expect, head, plan):
    """The head is the source: a worker without its image ID is to be distributed, or a problem when distribution is off."""
    source = nodes[head].get('image') or {}
    for host in hosts:
        image = nodes[host].get('image') or {}
        if host == head and not image.get('present'):
            report.problem(host, 'image', 'no image %s' % expect['image'], 'the serving image on the head (the source of the distribution)',
                           'docker load (or pull) it on %s, or set dgxspark_serving_image to an image it has' % head)
        elif image.get('present') and (host == head or image.get('image_id') == source.get('image_id') or not source.get('present')):
            _image_versions(report, host, image, expect, plan)
        elif not source.get('present'):
            report.ok(host, 'image', 'missing (so is the source)')
        elif expect['distribute_image']:
            report.ok(host, 'image', 'to be distributed')
        else:
            found = 'with ID %s' % image.get('image_id', '')[:19] if image.get('present') else 'missing'
            report.problem(host, 'image', 'image %s %s' % (expect['image'], found),
                           'the head\'s image %s' % source.get('image_id', '')[:19],
                           'load the head\'s image on %s, or turn the distribution on (dgxspark_distribute_image: true)' % host)


def _model(report, hosts, nodes, expect, head):
    source = (nodes[head].get('facts') or {}).get('model') or {}
    if not source.get('exists') or not source.get('files'):
        if expect['model_download']:
            report.ok(head, 'model', 'to be downloaded')
        else:
            report.problem(head, 'model', 'no model files in the model directory', 'the model on the head (the source)',
                           'put the model on %s, or set dgxspark_model_download: true' % head)
        return
    for host in hosts:
        model = (nodes[host].get('facts') or {}).get('model')
        if model is None:
            continue
        if host == head:
            report.ok(host, 'model', '%d files %.1f GB' % (len(source['files']), sum(source['files'].values()) / 1e9))
            continue
        files = model.get('files') or {}
        missing = sorted(name for name in source['files'] if name not in files)
        different = sorted(name for name in source['files'] if name in files and files[name] != source['files'][name])
        index_differs = bool(model.get('index_sha256')) and model.get('index_sha256') != source.get('index_sha256')
        if not missing and not different and not index_differs:
            report.ok(host, 'model', 'as on head')
            continue
        lacking = sum(source['files'][name] for name in missing + different)
        free = model.get('free_bytes')
        what = ', '.join(['%d missing (%s)' % (len(missing), ', '.join(missing[:3]) + (' ...' if len(missing) > 3 else ''))] * bool(missing)
                         + ['%d of another size (%s)' % (len(different), ', '.join(different[:3]) + (' ...' if len(different) > 3 else ''))] * bool(different)
                         + ['a different safetensors index'] * index_differs)
        if not expect['distribute_model']:
            report.problem(host, 'model', what, 'the head\'s files and sizes',
                           'copy the model from %s, or turn the distribution on (dgxspark_distribute_model: true)' % head)
        elif free is not None and free - lacking < expect['reserve_bytes']:
            report.problem(host, 'model', '%s; %.1f GB free' % (what, free / 1e9),
                           'room for %.1f GB plus %.0f GB reserve' % (lacking / 1e9, expect['reserve_bytes'] / 1e9),
                           'free disk space on %s' % host)
        else:
            report.ok(host, 'model', 'to be distributed (%.1f GB)' % (lacking / 1e9))


def _fabric(report, host, cx7, plan, expect):
    devices = dict((d.get('netdev'), d) for d in (cx7 or {}).get('devices', []) if d.get('netdev'))
    bad = []
    for rail in plan.get('rails', []):
        dev = devices.get(rail['interface'])
        if dev is None:
            bad.append('%s missing' % rail['interface'])
        elif dev.get('operstate') != 'up':
            bad.append('%s %s' % (rail['interface'], dev.get('operstate')))
        elif expect['link_speed_mbps'] and dev.get('speed_mbps') != expect['link_speed_mbps']:
            bad.append('%s at %s Mb/s' % (rail['interface'], dev.get('speed_mbps')))
        elif plan.get('mtu') and dev.get('mtu') and dev['mtu'] != plan['mtu']:
            # The network phase sets it; said here so that a switch port without jumbo frames is not a surprise.
            report.warn(host, 'fabric', '%s has MTU %s now; the network phase sets %s (the switch ports must allow it)' % (
                rail['interface'], dev['mtu'], plan['mtu']))
    if bad:
        report.problem(host, 'fabric', ', '.join(bad), 'every rail of the plan (%s) up at %s Mb/s' % (
            ', '.join(r['interface'] for r in plan.get('rails', [])), expect['link_speed_mbps']),
            'check the cables and the interface names (playbooks/discover.yml shows them)')
    else:
        report.ok(host, 'fabric', '%d rails up' % len(plan.get('rails', [])))


def _ports(report, host, ports, expect):
    foreign = [p for p in ports if p.get('port') in expect['ports'] and p.get('container') not in expect['own_containers']]
    errors = [p['error'] for p in ports if p.get('error')]
    if errors:
        report.problem(host, 'ports', errors[0], 'ss to list the listening ports', 'install iproute2')
    elif foreign:
        report.problem(host, 'ports', ', '.join('%d (%s) held by %s%s' % (
            p['port'], expect['ports'][p['port']], p.get('process') or '?', ' pid %s' % p['pid'] if p.get('pid') else '') for p in foreign),
            'the Ray and vLLM ports free', 'stop what holds them, or move the collection\'s ports (ray_cluster_ports, vllm_container_port)')
    else:
        report.ok(host, 'ports', 'ours' if any(p.get('port') in expect['ports'] for p in ports) else 'free')


def _is_system_user(user):
    """Root (an image without USER) or a numeric system UID: logind never removes their IPC objects. A user name may be
    a regular user: without the image's passwd file it is taken as one."""
    return user in ('', 'root', '0') or (user.split(':')[0].isdigit() and int(user.split(':')[0]) < 1000)


def _ipc(report, host, logind, image, expect):
    """logind RemoveIPC=yes deletes the POSIX semaphores and shared memory of a regular user whose last session ends:
    an engine running as that user then blocks for ever in its next collective (eugr/spark-vllm-docker #352)."""
    if not logind or not logind.get('installed'):
        report.ok(host, 'ipc', 'no logind')
        return
    running = logind.get('running_remove_ipc')
    removes = logind.get('remove_ipc', True) if running is None else running
    user = (image or {}).get('user') or ''
    if not removes:
        report.ok(host, 'ipc', 'kept')
    elif expect['logind_keep_ipc']:
        report.ok(host, 'ipc', 'to be kept')
    elif _is_system_user(user):
        report.ok(host, 'ipc', 'spares %s' % (user or 'root'))
    else:
        report.problem(host, 'ipc', 'logind RemoveIPC=yes (%s) and an engine that runs as %s (the image\'s USER)' % (
            logind.get('set_by') or 'systemd\'s default', user),
            'RemoveIPC=no, or an engine that runs as root: logind deletes a regular user\'s semaphores and shared memory '
            'when the user\'s last session ends, and the engine then hangs in its next collective',
            'set os_hardening_logind_keep_ipc: true (the os phase writes RemoveIPC=no and restarts systemd-logind)')


def evaluate(plan, expect, nodes):
    """The verdict over every node; see the module docstring."""
    expect = dict(EXPECT_DEFAULTS, **(expect or {}))
    hosts = [n['host'] for n in plan['nodes']]
    head = plan['head']
    report = Report(hosts)
    readable = []
    for host in hosts:
        node = nodes.get(host) or {'error': 'no result (the node was not part of the run)'}
        if node.get('error'):
            report.problem(host, 'ssh', node['error'], 'SSH and privilege escalation (become) to work',
                           'check that the node is up, its management address, the SSH key and sudo')
            continue
        report.ok(host, 'ssh', 'ok')
        readable.append(host)
    drivers = {}
    for host in readable:
        facts = nodes[host]['facts']
        drivers[host] = _gpu(report, host, facts['gpu'], expect)
        serving = any(name in expect['own_containers'] for name in facts['docker'].get('containers', {}).values())
        _memory(report, host, facts['memory'], plan, expect, serving)
        _docker(report, host, facts['docker'], expect, plan.get('rails', []))
        _fabric(report, host, nodes[host].get('cx7'), plan, expect)
        _ports(report, host, facts.get('ports', []), expect)
        # The engine runs as the head's image's user on every node (the workers get the head's image).
        _ipc(report, host, facts.get('logind'), (nodes.get(head) or {}).get('image'), expect)
        # The kernel in the table; the OS and kernel of every node are compared below (warnings).
        report.ok(host, 'os', facts['os'].get('kernel') or '?')
    known = dict((h, d) for h, d in drivers.items() if d)
    if len(set(known.values())) > 1:
        counts = sorted(set(known.values()), key=lambda v: (-list(known.values()).count(v), v))
        for host, driver in sorted(known.items()):
            if driver != counts[0]:
                report.problem(host, 'gpu', 'driver %s' % driver, 'driver %s, as on %s' % (
                    counts[0], ', '.join(h for h, d in sorted(known.items()) if d == counts[0])),
                    'install the same driver on every node (seed 004 hung at layer 57 with 580.95.05 next to 580.142), then reboot')
    if head in readable:
        _image(report, readable, nodes, expect, head, plan)
        _model(report, readable, nodes, expect, head)
    _clock(report, readable, nodes, expect)
    for check, label in (('os', 'OS'), ('kernel', 'kernel')):
        values = dict((h, nodes[h]['facts']['os'].get('name' if check == 'os' else 'kernel')) for h in readable)
        if len(set(values.values())) > 1:
            report.warn(', '.join(sorted(values)), 'os', '%s versions differ: %s' % (
                label, '; '.join('%s %s' % (h, v) for h, v in sorted(values.items()))))
    return report.as_dict()


def _clock(report, hosts, nodes, expect):
    offsets = dict((h, nodes[h]['facts'].get('clock_offset_s')) for h in hosts if nodes[h]['facts'].get('clock_offset_s') is not None)
    if not offsets:
        return
    reference = sorted(offsets.values())[len(offsets) // 2]
    for host, offset in sorted(offsets.items()):
        skew = offset - reference
        if abs(skew) > expect['max_clock_skew_s']:
            report.problem(host, 'clock', 'clock %+.1f s from the other nodes' % skew,
                           'within %.0f s (Ray and NCCL time out on skewed clocks)' % expect['max_clock_skew_s'],
                           'enable time synchronisation (timedatectl set-ntp true; chrony) on every node')
        else:
            report.ok(host, 'clock', '%+.1f s' % skew)


def render(report):
    """The node-by-check table, then every problem and warning."""
    header = ['node'] + list(report['checks'])
    rows = [[row['node']] + [row[c] or '-' for c in report['checks']] for row in report['rows']]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = ['  '.join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header] + rows]
    lines.insert(1, '  '.join('-' * w for w in widths))
    if report['problems']:
        lines.append('%d problem%s (nothing was changed on any node):' % (len(report['problems']), '' if len(report['problems']) == 1 else 's'))
        lines.extend('- %s' % p for p in report['problems'])
    lines.extend('warning: %s' % w for w in report['warnings'])
    lines.append('%d checks on %d nodes: %d problem%s, %d warning%s' % (
        len(report['checks']) * len(report['rows']), len(report['rows']), len(report['problems']),
        '' if len(report['problems']) == 1 else 's', len(report['warnings']), '' if len(report['warnings']) == 1 else 's'))
    return lines
