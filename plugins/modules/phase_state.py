#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: phase_state
short_description: Tell whether a deployment phase converged before on this node, or record that it did
version_added: 0.2.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - A deployment phase (network, os, ray, vllm) records, once it converged, a stamp on the node in O(stamp_dir)/<phase>.json
    with the digest of its inputs (O(inputs_digest), computed on the controller by the C(dgxspark.cluster.phase_inputs_digest)
    filter from the variables, the plan and the collection's code) and the state of what it manages (O(watch)).
  - With O(state=check) (read-only) it returns RV(converged)=true only when the stamp exists, its inputs digest is the one given,
    and what it manages is exactly as recorded, so a playbook can skip the phase; otherwise RV(reason) says what differs.
  - "What it watches, read on the node: files (sha256 of the content, mode and owner, or absent; a symlink's target), interfaces
    (C(ip -j addr): state, MTU, IPv4 and global IPv6 addresses), containers (C(docker inspect): id, image, running, restart count),
    kernel settings (the value under C(/proc/sys)) and nftables tables (C(nft list table), counters and handles left out).
    A container that Docker restarted after a crash, a file edited by hand, an address that went away or a table deleted
    makes the phase run again."
  - With O(state=recorded) it writes the stamp (mode 0600) when it differs; check mode and C(--diff) show the change.
options:
  phase:
    description: The phase's name (lower case), also the stamp's file name.
    type: str
    required: true
  inputs_digest:
    description: The digest of the phase's inputs, from the C(dgxspark.cluster.phase_inputs_digest) filter.
    type: str
    required: true
  watch:
    description:
      - What the phase manages, by kind; each a list of names.
      - C(files) (absolute paths), C(interfaces) (netdev names), C(containers) (Docker container names), C(sysctls)
        (paths under C(/proc/sys), e.g. V(/proc/sys/vm/swappiness)), C(nft_tables) (V(FAMILY NAME), e.g. V(inet dgxspark)),
        C(services) (systemd units, whether loaded, active and enabled).
    type: dict
    default: {}
  state:
    description: V(check) compares (read-only); V(recorded) writes the stamp.
    type: str
    choices: [check, recorded]
    default: check
  stamp_dir:
    description: Where the stamps live on the node.
    type: path
    default: /var/lib/dgxspark/phases
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: With O(state=recorded) check mode reports whether the stamp would be written, and writes nothing.
  diff_mode:
    support: full
    details: With O(state=recorded) the diff shows the stamp before and after.
"""

EXAMPLES = r"""
- name: See whether the ray phase has anything to do
  dgxspark.cluster.phase_state:
    phase: ray
    inputs_digest: "{{ {'plan': dgxspark_plan} | dgxspark.cluster.phase_inputs_digest(['roles/ray_cluster']) }}"
    watch:
      containers: [dgxspark-ray]
      files: [/etc/dgxspark/secrets/ray_token]
  register: ray_phase

- name: Record that the ray phase converged
  dgxspark.cluster.phase_state:
    phase: ray
    inputs_digest: "{{ {'plan': dgxspark_plan} | dgxspark.cluster.phase_inputs_digest(['roles/ray_cluster']) }}"
    watch:
      containers: [dgxspark-ray]
      files: [/etc/dgxspark/secrets/ray_token]
    state: recorded
"""

RETURN = r"""
converged:
  description: True when the phase converged before with the same inputs and what it manages is unchanged (always false after recording).
  returned: always
  type: bool
reason:
  description: Why the phase is (not) converged, in one sentence.
  returned: always
  type: str
  sample: the inputs of phase ray changed (variables, plan or collection code)
observed:
  description: What was read of the watched things, by kind and name (null for an absent one).
  returned: always
  type: dict
stamp_path:
  description: The stamp's path on the node.
  returned: always
  type: str
inputs_digest:
  description: The O(inputs_digest) it was given, so that the task that records the phase records the digest this check
    compared (computed once, before the phase's roles ran).
  returned: always
  type: str
"""

import hashlib
import json
import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.docker_inspect import inspect_containers
from ansible_collections.dgxspark.cluster.plugins.module_utils.nft_table import digest as nft_digest, read_table as read_nft_table
from ansible_collections.dgxspark.cluster.plugins.module_utils.private_file import write_private_file
from ansible_collections.dgxspark.cluster.plugins.module_utils.phase_state import (
    PhaseStateError,
    compare,
    container_state,
    interface_state,
    make_stamp,
    service_state,
    validate_phase,
    validate_watch,
)


def read_file_state(path):
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return {'link': os.readlink(path)}
    if not stat.S_ISREG(info.st_mode):
        return {'type': 'other', 'mode': '%o' % stat.S_IMODE(info.st_mode)}
    with open(path, 'rb') as handle:
        sha = hashlib.sha256(handle.read()).hexdigest()
    return {'sha256': sha, 'mode': '%o' % stat.S_IMODE(info.st_mode), 'uid': info.st_uid, 'gid': info.st_gid}


def read_interfaces(module, names):
    result = {}
    ip = module.get_bin_path('ip') if names else None
    for name in names:
        if not ip:
            result[name] = {'error': 'ip not found'}
            continue
        rc, out, _err = module.run_command([ip, '-j', 'addr', 'show', 'dev', name])
        result[name] = interface_state(out) if rc == 0 and out.strip() else None
    return result


def read_containers(module, names):
    if not names:
        return {}
    docker = module.get_bin_path('docker')
    if not docker:
        return dict((name, {'error': 'docker not found'}) for name in names)
    found = inspect_containers(module.run_command, docker, names)
    return dict((name, container_state(found[name]) if name in found else None) for name in names)


def read_sysctls(names):
    result = {}
    for path in names:
        try:
            with open(path, 'r') as handle:
                result[path] = ' '.join(handle.read().split())
        except OSError:
            result[path] = None
    return result


def read_nft_tables(module, names):
    """sha256 of each table's normalized listing (None when it is not loaded)."""
    nft = module.get_bin_path('nft') if names else None
    if names and not nft:
        return dict((name, {'error': 'nft not found'}) for name in names)
    return dict((name, nft_digest(read_nft_table(module.run_command, nft, name)[0])) for name in names)


def read_services(module, names):
    systemctl = module.get_bin_path('systemctl') if names else None
    if names and not systemctl:
        return dict((name, {'error': 'systemctl not found'}) for name in names)
    result = {}
    for name in names:
        _rc, out, _err = module.run_command([systemctl, 'show', '--property=LoadState,ActiveState,UnitFileState', name])
        result[name] = service_state(out)
    return result


def observe(module, watch):
    return {
        'files': dict((path, read_file_state(path)) for path in watch['files']),
        'interfaces': read_interfaces(module, watch['interfaces']),
        'containers': read_containers(module, watch['containers']),
        'sysctls': read_sysctls(watch['sysctls']),
        'nft_tables': read_nft_tables(module, watch['nft_tables']),
        'services': read_services(module, watch['services']),
    }


def read_stamp(path):
    try:
        with open(path, 'r') as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            phase=dict(type='str', required=True),
            inputs_digest=dict(type='str', required=True),
            watch=dict(type='dict', default={}),
            state=dict(type='str', choices=['check', 'recorded'], default='check'),
            stamp_dir=dict(type='path', default='/var/lib/dgxspark/phases'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        phase = validate_phase(params['phase'])
        watch = validate_watch(params['watch'])
    except PhaseStateError as exc:
        module.fail_json(msg=str(exc))
    path = os.path.join(params['stamp_dir'], phase + '.json')
    observed = observe(module, watch)
    stamp = read_stamp(path)
    converged, reason = compare(stamp, phase, params['inputs_digest'], observed)
    result = dict(changed=False, converged=converged, reason=reason, observed=observed, stamp_path=path,
                  inputs_digest=params['inputs_digest'])
    if params['state'] == 'recorded':
        result['converged'] = False
        if not converged:
            new = make_stamp(phase, params['inputs_digest'], observed)
            result['changed'] = True
            result['reason'] = 'recorded that phase %s converged (%s before)' % (phase, reason)
            if module._diff:
                result['diff'] = dict(before_header=path, after_header=path,
                                      before=json.dumps(stamp, indent=1, sort_keys=True) + '\n' if stamp else '',
                                      after=json.dumps(new, indent=1, sort_keys=True) + '\n')
            if not module.check_mode:
                try:
                    write_private_file(path, json.dumps(new, sort_keys=True))
                except OSError as exc:
                    module.fail_json(msg='cannot write the stamp %s of phase %s: %s' % (path, phase, exc))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
