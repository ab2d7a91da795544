#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_diagnostics
short_description: Read what a diagnostics bundle needs from one node, every known secret redacted
version_added: 0.2.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Read-only. Reads the node's versions (OS, kernel, GPU driver, Docker), its serving containers (state, exit code, starts,
    image, arguments, their NCCL/Gloo/UCX/vLLM/Ray environment, mounts), the last O(lines) lines of each container's log,
    of each unit's journal and of the kernel's ring buffer, its memory, its network, and the files named in O(files).
  - Before anything is returned, every secret the collection keeps on the node (the contents of O(secret_paths)) is
    replaced by C(<redacted:NAME>) wherever it appears, and so is anything shaped like a secret (a bearer header, an
    C(--api-key) argument, a Hugging Face token, a private key, a variable whose name says it holds one). The secrets
    themselves are never returned.
  - A command that fails or is missing becomes a line in its section; the module fails only on bad arguments.
options:
  containers:
    description: The serving containers to read (a missing one is said so).
    type: list
    elements: str
    default: [dgxspark-ray, dgxspark-vllm]
  units:
    description: The systemd units whose journal is read.
    type: list
    elements: str
    default: [dgxspark-supervisor.service, docker.service, prometheus-node-exporter.service, prometheus.service]
  lines:
    description: How many of the last lines of each log, journal and the kernel's ring buffer.
    type: int
    default: 200
  files:
    description: Files included as they are (redacted); a missing one is said so.
    type: list
    elements: path
    default:
      - /var/lib/dgxspark/supervisor/report.json
      - /etc/dgxspark/supervisor/config.json
      - /etc/dgxspark/monitoring/node_metrics.json
      - /etc/prometheus/prometheus.yml
      - /proc/meminfo
  secret_paths:
    description: Files, or directories of files, whose contents are secrets to redact (never returned themselves).
    type: list
    elements: path
    default: [/etc/dgxspark/secrets, /etc/prometheus/dgxspark_vllm_api_key, /etc/dgxspark/supervisor/id_ed25519]
  nvidia_smi:
    description: The nvidia-smi command.
    type: str
    default: nvidia-smi
  docker:
    description: The Docker CLI.
    type: str
    default: docker
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: It only reads; check mode reads the same.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Read this node's diagnostics, redacted
  dgxspark.cluster.node_diagnostics:
    lines: 300
  register: diagnostics

- name: Write them on the controller
  ansible.builtin.copy:
    content: "{{ item.value }}"
    dest: "bundle/{{ inventory_hostname }}/{{ item.key }}"
    mode: "0600"
  loop: "{{ diagnostics.sections | dict2items }}"
  delegate_to: localhost
"""

RETURN = r"""
sections:
  description: File name in the bundle -> its text, redacted.
  returned: always
  type: dict
  sample: {"versions.txt": "os: Ubuntu 24.04.3 LTS\n...", "logs/dgxspark-vllm.log": "..."}
redacted:
  description: The names of the secrets looked for by value (file names, never contents).
  returned: always
  type: list
  elements: str
  sample: [vllm_api_key, ray_token]
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.diagnostics import (
    redact, redact_env, secret_values, tail)


def read_secrets(paths):
    """{name: content} of every readable file of `paths` (a directory: its regular files)."""
    named = {}
    for path in paths:
        files = [path]
        if os.path.isdir(path):
            files = [os.path.join(path, entry) for entry in sorted(os.listdir(path))]
        for name in files:
            if os.path.isfile(name):
                try:
                    with open(name, encoding='utf-8', errors='replace') as handle:
                        named[os.path.basename(name)] = handle.read()
                except OSError:
                    continue
    return named


def run_timed(module, argv, timeout=30):
    """(rc, stdout, stderr) of argv under coreutils' timeout (rc 124 when it ran out): a hung driver or daemon is a
    line in the bundle, not a hung run."""
    return module.run_command(['timeout', str(timeout)] + argv, check_rc=False, environ_update={'LC_ALL': 'C'})


def command(module, argv, timeout=30):
    """(ok, text): stdout, or what went wrong, in one string."""
    if module.get_bin_path(argv[0]) is None and not os.path.isabs(argv[0]):
        return False, '%s is not installed\n' % argv[0]
    rc, out, err = run_timed(module, argv, timeout)
    if rc == 124:
        return False, '%s did not answer within %d s\n' % (' '.join(argv), timeout)
    if rc != 0:
        return False, '%s exited %d: %s%s\n' % (' '.join(argv), rc, err.strip(), (' ' + out.strip()) if out.strip() else '')
    return True, out


def logs(module, name, lines):
    """The container's last lines, stdout and stderr in time order (--timestamps: sorted lines are)."""
    rc, out, err = run_timed(module, [module.params['docker'], 'logs', '--timestamps', '--tail', str(lines), name])
    if rc != 0:
        return 'docker logs %s exited %d: %s\n' % (name, rc, err.strip())
    return tail(''.join(sorted(line if line.endswith('\n') else line + '\n' for line in (out + err).splitlines(True))),
                lines)


def versions(module):
    parts = []
    try:
        with open('/etc/os-release', encoding='utf-8') as handle:
            pretty = [line.split('=', 1)[1].strip().strip('"') for line in handle if line.startswith('PRETTY_NAME=')]
        parts.append('os: %s\n' % (pretty[0] if pretty else 'unknown'))
    except OSError as exc:
        parts.append('os: /etc/os-release unreadable (%s)\n' % exc.strerror)
    parts.append('kernel: ' + command(module, ['uname', '-srvm'])[1])
    gpu = [module.params['nvidia_smi'], '--query-gpu=name,driver_version', '--format=csv,noheader']
    parts.append('gpu (name, driver): ' + command(module, gpu)[1])
    parts.append('docker: ' + command(module, [module.params['docker'], 'version', '--format',
                                               'client {{.Client.Version}}, server {{.Server.Version}}'])[1])
    return ''.join(parts)


def container_summary(inspected, name, secrets):
    if inspected is None:
        return '%s: not on this node\n' % name
    state = inspected.get('State') or {}
    config = inspected.get('Config') or {}
    lines = ['%s' % name,
             '  state: %s, exit code %s, started %s, finished %s, restarts %s, OOM killed %s' % (
                 state.get('Status'), state.get('ExitCode'), state.get('StartedAt'), state.get('FinishedAt'),
                 inspected.get('RestartCount'), state.get('OOMKilled')),
             '  image: %s (%s)' % (config.get('Image'), inspected.get('Image')),
             '  restart policy: %s' % ((inspected.get('HostConfig') or {}).get('RestartPolicy') or {}).get('Name'),
             '  command: %s' % redact(json.dumps((config.get('Entrypoint') or []) + (config.get('Cmd') or [])), secrets),
             '  mounts: %s' % ', '.join('%s:%s%s' % (m.get('Source'), m.get('Destination'), '' if m.get('RW') else ':ro')
                                        for m in inspected.get('Mounts') or []),
             '  environment (NCCL, Gloo, UCX, vLLM, Ray, ...):']
    lines += ['    ' + line for line in redact_env(config.get('Env'), secrets)]
    return '\n'.join(lines) + '\n'


def main():
    module = AnsibleModule(
        argument_spec=dict(
            containers=dict(type='list', elements='str', default=['dgxspark-ray', 'dgxspark-vllm']),
            units=dict(type='list', elements='str', default=[
                'dgxspark-supervisor.service', 'docker.service', 'prometheus-node-exporter.service', 'prometheus.service']),
            lines=dict(type='int', default=200),
            files=dict(type='list', elements='path', default=[
                '/var/lib/dgxspark/supervisor/report.json', '/etc/dgxspark/supervisor/config.json',
                '/etc/dgxspark/monitoring/node_metrics.json', '/etc/prometheus/prometheus.yml', '/proc/meminfo']),
            secret_paths=dict(type='list', elements='path', no_log=False, default=[
                '/etc/dgxspark/secrets', '/etc/prometheus/dgxspark_vllm_api_key', '/etc/dgxspark/supervisor/id_ed25519']),
            nvidia_smi=dict(type='str', default='nvidia-smi'),
            docker=dict(type='str', default='docker'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params['lines'] < 1:
        module.fail_json(msg='lines must be 1 or more, got %d' % params['lines'])
    named = read_secrets(params['secret_paths'])
    secrets = secret_values(named)
    sections = {'versions.txt': versions(module)}
    # A missing container makes `docker inspect` exit 1 with the others' JSON; a Docker that is down prints none.
    rc, out, err = run_timed(module, [params['docker'], 'inspect'] + params['containers'])
    try:
        found = dict((item.get('Name', '').lstrip('/'), item) for item in json.loads(out))
        summary = ''
    except ValueError:
        found, summary = {}, 'docker inspect exited %d: %s\n' % (rc, err.strip())
    summary += ''.join(container_summary(found.get(name), name, secrets) for name in params['containers'])
    sections['containers.txt'] = summary
    sections['docker-ps.txt'] = command(module, [params['docker'], 'ps', '--all', '--no-trunc', '--format',
                                                 '{{.Names}}\t{{.Image}}\t{{.Status}}'])[1]
    for name in params['containers']:
        if name in found:
            sections['logs/%s.log' % name] = logs(module, name, params['lines'])
    for unit in params['units']:
        journal = ['journalctl', '--unit', unit, '--lines', str(params['lines']), '--no-pager', '--output', 'short-iso']
        sections['journal/%s.log' % unit] = tail(command(module, journal)[1], params['lines'])
    sections['dmesg.txt'] = tail(command(module, ['dmesg', '--ctime'])[1], params['lines'])
    sections['network.txt'] = ''.join(command(module, argv)[1] for argv in (
        ['ip', '-brief', 'link'], ['ip', '-brief', 'address'], ['ip', 'route']))
    sections['memory.txt'] = command(module, ['free', '--bytes'])[1]
    for path in params['files']:
        try:
            with open(path, encoding='utf-8', errors='replace') as handle:
                text = handle.read()
        except OSError as exc:
            text = '%s: %s\n' % (path, exc.strerror)
        sections['files/%s' % path.strip('/').replace('/', '_')] = text
    sections = dict((name, redact(text, secrets)) for name, text in sections.items())
    module.exit_json(changed=False, sections=sections, redacted=sorted(named))


if __name__ == '__main__':
    main()
