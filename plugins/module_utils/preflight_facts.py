# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers of what the preflight module reads on a node (nvidia-smi, /proc/meminfo, ss, cgroups, os-release).

Pure functions over the commands' real output formats, table-tested in tests/unit/test_preflight_facts.py.
"""
from __future__ import annotations

import re

_CUDA = re.compile(r'CUDA Version:\s*([0-9][0-9.]*)')
_DRIVER = re.compile(r'Driver Version:\s*([0-9][0-9.]*)')
# A Docker container's ID in a cgroup path: cgroup v2 (system.slice/docker-<id>.scope), v1 and nested Docker (/docker/<id>).
_CGROUP_CONTAINER = re.compile(r'(?:docker-|/docker/)([0-9a-f]{64})')
_SS_USER = re.compile(r'\("([^"]*)",pid=([0-9]+)')


def parse_nvidia_smi_query(output):
    """`nvidia-smi --query-gpu=name,driver_version --format=csv,noheader` -> [{'name', 'driver'}] (one per GPU)."""
    gpus = []
    for line in (output or '').splitlines():
        parts = [part.strip() for part in line.split(',')]
        if len(parts) >= 2 and parts[0]:
            gpus.append({'name': parts[0], 'driver': parts[1]})
    return gpus


# What preflight_facts asks nvidia-smi for the clock check (with --format=csv,noheader,nounits).
GPU_CLOCK_QUERY = 'clocks.sm,clocks.max.sm,utilization.gpu'


def parse_nvidia_smi_clocks(output):
    """`nvidia-smi --query-gpu=GPU_CLOCK_QUERY --format=csv,noheader,nounits` -> {'sm_mhz', 'max_sm_mhz',
    'utilization'} of the first GPU; None for a value nvidia-smi gives as [N/A] (or when it printed no row)."""
    row = next((line for line in (output or '').splitlines() if line.strip()), '')
    values = [part.strip() for part in row.split(',')]
    values = [int(float(v)) if re.match(r'^[0-9]+(\.[0-9]+)?$', v) else None for v in values] + [None] * 3
    return {'sm_mhz': values[0], 'max_sm_mhz': values[1], 'utilization': values[2]}


def parse_nvidia_smi_header(output):
    """The plain `nvidia-smi` table -> (driver version, CUDA version); '' for what it does not show."""
    driver = _DRIVER.search(output or '')
    cuda = _CUDA.search(output or '')
    return (driver.group(1) if driver else ''), (cuda.group(1) if cuda else '')


def parse_meminfo(text):
    """/proc/meminfo -> {name: kB} (MemTotal, MemAvailable, SwapTotal, SwapFree, ...)."""
    values = {}
    for line in (text or '').splitlines():
        name, _sep, rest = line.partition(':')
        fields = rest.split()
        if name and fields and fields[0].isdigit():
            values[name.strip()] = int(fields[0])
    return values


def parse_ss_listening(output):
    """`ss -Htlnp` -> [{'port', 'address', 'process', 'pid'}] (pid None when ss shows no process)."""
    sockets = []
    for line in (output or '').splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        local = fields[3]
        address, _sep, port = local.rpartition(':')
        if not port.isdigit():
            continue
        user = _SS_USER.search(line)
        sockets.append({'port': int(port), 'address': address, 'process': user.group(1) if user else '',
                        'pid': int(user.group(2)) if user else None})
    return sockets


def container_id_of_cgroup(text):
    """The Docker container ID in /proc/<pid>/cgroup, or '' when the process runs in no container. Nested Docker (a
    container's own dockerd) shows the outer ID first: the innermost, last one is the process's container."""
    found = _CGROUP_CONTAINER.findall(text or '')
    return found[-1] if found else ''


def parse_os_release(text):
    """/etc/os-release -> PRETTY_NAME (or NAME VERSION_ID)."""
    values = {}
    for line in (text or '').splitlines():
        key, sep, value = line.partition('=')
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return values.get('PRETTY_NAME') or ' '.join(v for v in (values.get('NAME'), values.get('VERSION_ID')) if v)


# What preflight_facts asks Docker for each network: its name, then its subnets.
DOCKER_NETWORK_FORMAT = '{{.Name}}{{range .IPAM.Config}} {{.Subnet}}{{end}}'


def parse_docker_networks(output):
    """`docker network inspect --format DOCKER_NETWORK_FORMAT ID...` -> {name: [subnet, ...]} (host and none: [])."""
    networks = {}
    for line in (output or '').splitlines():
        parts = line.split()
        if parts:
            networks[parts[0]] = parts[1:]
    return networks


def parse_docker_ps(output):
    """`docker ps --no-trunc --format '{{.ID}} {{.Names}}'` -> {id: name}."""
    containers = {}
    for line in (output or '').splitlines():
        parts = line.split()
        if len(parts) == 2:
            containers[parts[0]] = parts[1]
    return containers


# Where systemd-logind reads its configuration, highest priority first (logind.conf(5)).
LOGIND_DIRS = ('/etc/systemd', '/run/systemd', '/usr/local/lib/systemd', '/usr/lib/systemd')
_SYSTEMD_TRUE = ('1', 'yes', 'y', 'true', 't', 'on')
_SYSTEMD_FALSE = ('0', 'no', 'n', 'false', 'f', 'off')


def logind_files(mains, dropins):
    """The files logind reads, in its order: the first of the main logind.conf files found (``mains``, given in the
    order of LOGIND_DIRS), then every logind.conf.d/*.conf drop-in (``dropins``, any order) sorted by file name, a
    name in a higher directory hiding the same name in a lower one."""
    rank = dict((directory, index) for index, directory in enumerate(LOGIND_DIRS))
    chosen = {}
    for path in dropins:
        directory, name = path.rsplit('/logind.conf.d/', 1)
        if name not in chosen or rank.get(directory, len(rank)) < rank.get(chosen[name][0], len(rank)):
            chosen[name] = (directory, path)
    return list(mains[:1]) + [chosen[name][1] for name in sorted(chosen)]


def logind_remove_ipc(files):
    """[(path, text)] in logind's order -> {'remove_ipc', 'set_by'}: the last RemoveIPC= of a [Login] section wins;
    systemd's own default is yes ('set_by' is then '')."""
    found = {'remove_ipc': True, 'set_by': ''}
    for path, text in files:
        section = ''
        for line in (text or '').splitlines():
            line = line.strip()
            if line.startswith('['):
                section = line
            elif section == '[Login]' and not line.startswith(('#', ';')) and '=' in line:
                key, _sep, value = line.partition('=')
                value = value.strip().lower()
                if key.strip() == 'RemoveIPC' and value in _SYSTEMD_TRUE + _SYSTEMD_FALSE:
                    found = {'remove_ipc': value in _SYSTEMD_TRUE, 'set_by': path}
    return found


def parse_busctl_bool(output):
    """`busctl get-property ...` of a boolean ('b true') -> True/False; None for anything else."""
    fields = (output or '').split()
    if len(fields) == 2 and fields[0] == 'b' and fields[1] in ('true', 'false'):
        return fields[1] == 'true'
    return None
