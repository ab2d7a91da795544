#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_facts
short_description: Read what the preflight checks need from a DGX Spark node, changing nothing
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - One read-only pass over a node for the preflight phase of C(deploy.yml) (the checks themselves run on the controller,
    over every node at once, in the C(dgxspark.cluster.preflight_report) action).
  - "The GPU (C(nvidia-smi): name, driver and CUDA versions), memory (O(meminfo): MemTotal, MemAvailable, swap, and the
    processes holding the most memory with their container), Docker (server version, runtimes, CDI specs), every listening
    TCP port with the process or container that holds it, the clock, the OS and kernel, whether systemd-logind removes
    a user's IPC objects when the user's last session ends (C(RemoveIPC): its files and its running value), and the
    model directory O(model_dir) (file names and sizes, the sha256 of the safetensors index, free space)."
  - Every part that cannot be read is reported in its C(error), not raised, so that one run lists every problem.
options:
  meminfo:
    description: The meminfo file (a lab node reads a stand-in with a Spark's figures).
    type: path
    default: /proc/meminfo
  model_dir:
    description: The model directory on this node; empty skips the model.
    type: path
    default: ''
  index_name:
    description: The safetensors index file in O(model_dir).
    type: str
    default: model.safetensors.index.json
  controller_time:
    description: The controller's clock (epoch seconds) when the task was sent; the clock skew is measured against it.
    type: float
  top:
    description: How many of the largest memory consumers to report.
    type: int
    default: 5
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
  - dgxspark.cluster.attributes.READ_ONLY
"""

EXAMPLES = r"""
- name: Read this node for the preflight checks
  dgxspark.cluster.preflight_facts:
    model_dir: /root/.cache/huggingface/hub/models--Qwen--Qwen3.5-397B-A17B-FP8
    controller_time: "{{ now(utc=true).timestamp() }}"
  register: preflight
"""

RETURN = r"""
time:
  description: The node's clock (epoch seconds) when it was read.
  returned: always
  type: float
clock_offset_s:
  description: The node's clock minus O(controller_time) (includes the connection's delay, a fraction of a second).
  returned: when controller_time is given
  type: float
gpu:
  description: C(gpus) (each C(name), C(driver)), C(driver), C(cuda), C(sm_mhz), C(max_sm_mhz) and C(utilization) (the first
    GPU's SM clock, its maximum and its use in percent; null where nvidia-smi gives none), C(error).
  returned: always
  type: dict
memory:
  description: C(total_kib), C(available_kib), C(swap_total_kib), C(swap_free_kib), C(top) (each C(pid), C(name), C(rss_kib), C(container)), C(error).
  returned: always
  type: dict
docker:
  description: C(version), C(runtimes), C(cdi) (CDI spec files), C(containers) (running, id to name), C(networks) (name to
    its subnets), C(error).
  returned: always
  type: dict
ports:
  description: Every listening TCP port, each C(port), C(address), C(process), C(pid), C(container) (or one C(error)).
  returned: always
  type: list
  elements: dict
os:
  description: C(name) (PRETTY_NAME) and C(kernel).
  returned: always
  type: dict
logind:
  description: C(installed), C(files) (the configuration files logind reads, in its order), C(remove_ipc) (what they set;
    systemd's default is true), C(set_by) (the file that sets it, empty for the default), C(running_remove_ipc) (the
    running logind's value over D-Bus, null when it cannot be read).
  returned: always
  type: dict
model:
  description: C(exists), C(files) (relative path to size), C(index_sha256), C(free_bytes), C(error).
  returned: always
  type: dict
"""

import glob
import hashlib
import json
import os
import platform
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils import model_manifest
from ansible_collections.dgxspark.cluster.plugins.module_utils import preflight_facts as parse

_CDI_DIRS = ('/etc/cdi', '/var/run/cdi')


def read_text(path):
    try:
        with open(path, 'r') as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def run(module, argv):
    try:
        return module.run_command(argv)
    except (IOError, OSError) as exc:
        return 127, '', str(exc)


def gpu_facts(module):
    rc, out, err = run(module, ['nvidia-smi', '--query-gpu=name,driver_version', '--format=csv,noheader'])
    if rc != 0:
        return {'gpus': [], 'driver': '', 'cuda': '', 'error': 'nvidia-smi exited %d: %s' % (rc, (err or out).strip()[:300])}
    gpus = parse.parse_nvidia_smi_query(out)
    rc, plain, _err = run(module, ['nvidia-smi'])
    driver, cuda = parse.parse_nvidia_smi_header(plain if rc == 0 else '')
    rc, clocks, _err = run(module, ['nvidia-smi', '--query-gpu=' + parse.GPU_CLOCK_QUERY, '--format=csv,noheader,nounits'])
    facts = {'gpus': gpus, 'driver': driver or (gpus[0]['driver'] if gpus else ''), 'cuda': cuda,
             'error': '' if gpus else 'nvidia-smi lists no GPU'}
    facts.update(parse.parse_nvidia_smi_clocks(clocks if rc == 0 else ''))
    return facts


def container_of(pid, containers):
    cid = parse.container_id_of_cgroup(read_text('/proc/%d/cgroup' % pid))
    return containers.get(cid, cid[:12]) if cid else ''


def top_consumers(count, containers):
    procs = []
    for status_path in glob.glob('/proc/[0-9]*/status'):
        status = read_text(status_path) or ''
        values = parse.parse_meminfo(status)  # VmRSS: N kB has the same shape
        name = next((line.split(':', 1)[1].strip() for line in status.splitlines() if line.startswith('Name:')), '')
        if values.get('VmRSS'):
            procs.append((values['VmRSS'], int(status_path.split('/')[2]), name))
    procs.sort(reverse=True)
    return [{'pid': pid, 'name': name, 'rss_kib': rss, 'container': container_of(pid, containers)}
            for rss, pid, name in procs[:count]]


def memory_facts(path, count, containers):
    info = parse.parse_meminfo(read_text(path))
    if 'MemTotal' not in info:
        return {'error': 'cannot read MemTotal from %s' % path, 'top': []}
    return {'total_kib': info['MemTotal'], 'available_kib': info.get('MemAvailable', info.get('MemFree', 0)),
            'swap_total_kib': info.get('SwapTotal', 0), 'swap_free_kib': info.get('SwapFree', 0),
            'top': top_consumers(count, containers), 'error': ''}


def docker_facts(module):
    rc, out, err = run(module, ['docker', 'version', '--format', '{{.Server.Version}}'])
    if rc != 0:
        return {'version': '', 'runtimes': [], 'cdi': [], 'containers': {},
                'error': 'the Docker daemon does not answer (docker version exited %d: %s)' % (rc, (err or out).strip()[:300])}
    rc_info, info, _err = run(module, ['docker', 'info', '--format', '{{json .Runtimes}}'])
    try:
        runtimes = sorted(json.loads(info)) if rc_info == 0 else []
    except ValueError:
        runtimes = []
    _rc, ps, _err = run(module, ['docker', 'ps', '--no-trunc', '--format', '{{.ID}} {{.Names}}'])
    cdi = sorted(path for directory in _CDI_DIRS for path in glob.glob(os.path.join(directory, '*.[jy]*')))
    return {'version': out.strip(), 'runtimes': runtimes, 'cdi': cdi, 'containers': parse.parse_docker_ps(ps),
            'networks': network_facts(module), 'error': ''}


def network_facts(module):
    """Docker's networks and their subnets ({} when Docker cannot list them)."""
    rc, ids, _err = run(module, ['docker', 'network', 'ls', '-q'])
    if rc != 0 or not ids.split():
        return {}
    rc, out, _err = run(module, ['docker', 'network', 'inspect', '--format', parse.DOCKER_NETWORK_FORMAT] + ids.split())
    return parse.parse_docker_networks(out) if rc == 0 else {}


def port_facts(module, containers):
    rc, out, _err = run(module, ['ss', '-Htlnp'])
    if rc != 0:
        return [{'port': None, 'error': 'ss -Htlnp failed; cannot tell which ports are taken'}]
    taken = {}
    for sock in parse.parse_ss_listening(out):
        if sock['port'] not in taken:
            sock['container'] = container_of(sock['pid'], containers) if sock['pid'] else ''
            taken[sock['port']] = sock
    return [taken[port] for port in sorted(taken)]


def logind_facts(module):
    """What systemd-logind does with the IPC objects of a user whose last session ends (POSIX semaphores and shared
    memory that a worker started over SSH holds: eugr/spark-vllm-docker #352)."""
    mains = [os.path.join(d, 'logind.conf') for d in parse.LOGIND_DIRS if os.path.isfile(os.path.join(d, 'logind.conf'))]
    dropins = [path for d in parse.LOGIND_DIRS for path in glob.glob(os.path.join(d, 'logind.conf.d', '*.conf'))]
    files = parse.logind_files(mains, dropins)
    facts = parse.logind_remove_ipc([(path, read_text(path)) for path in files])
    rc, out, _err = run(module, ['busctl', '--timeout=5', 'get-property', 'org.freedesktop.login1', '/org/freedesktop/login1',
                                 'org.freedesktop.login1.Manager', 'RemoveIPC'])
    installed = any(os.path.exists(os.path.join(d, 'systemd-logind')) for d in ('/usr/lib/systemd', '/lib/systemd'))
    facts.update(installed=installed, files=files, running_remove_ipc=parse.parse_busctl_bool(out) if rc == 0 else None)
    return facts


def model_facts(model_dir, index_name):
    facts = {'exists': bool(model_dir) and os.path.isdir(model_dir), 'files': {}, 'index_sha256': '', 'free_bytes': None, 'error': ''}
    if not model_dir:
        return facts
    facts['free_bytes'] = model_manifest.free_bytes(model_dir)
    if not facts['exists']:
        return facts
    try:
        # The same walk as the distribution's manifest (its own files left out; links, such as a Hugging Face
        # snapshot's, listed apart).
        files, links = model_manifest.walk(model_dir)
    except (model_manifest.ManifestError, OSError) as exc:
        facts['error'] = str(exc)
        return facts
    facts['files'] = dict((rel, size) for rel, (size, _mtime) in files.items())
    index = sorted(rel for rel in list(files) + list(links) if rel.rsplit('/', 1)[-1] == index_name)
    if index:
        with open(os.path.join(model_dir, index[0]), 'rb') as handle:
            facts['index_sha256'] = hashlib.sha256(handle.read()).hexdigest()
    return facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            meminfo=dict(type='path', default='/proc/meminfo'),
            model_dir=dict(type='path', default=''),
            index_name=dict(type='str', default='model.safetensors.index.json'),
            controller_time=dict(type='float'),
            top=dict(type='int', default=5),
        ),
        supports_check_mode=True,
    )
    now = time.time()
    params = module.params
    docker = docker_facts(module)
    result = dict(
        changed=False,
        time=now,
        gpu=gpu_facts(module),
        memory=memory_facts(params['meminfo'], params['top'], docker['containers']),
        docker=docker,
        ports=port_facts(module, docker['containers']),
        logind=logind_facts(module),
        os={'name': parse.parse_os_release(read_text('/etc/os-release')), 'kernel': platform.release()},
        model=model_facts(params['model_dir'], params['index_name']),
    )
    if params['controller_time'] is not None:
        result['clock_offset_s'] = round(now - params['controller_time'], 3)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
