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
    with the digest of its inputs (the variables, the plan and the collection's code) and the state of what it manages
    (O(watch)).
  - "With O(phases) and O(definitions) (the deployment's phases, C(playbooks/vars/phases.yml)) it checks several phases in
    one call: the action plugin computes each one's inputs digest on the controller from the task's variables, and the node
    reads what each watches. A re-run with nothing to do then costs one call for every phase."
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
    description: The phase's name (lower case), also the stamp's file name; with O(inputs_digest) and O(watch), one phase.
    type: str
  inputs_digest:
    description: The digest of the phase's inputs (RV(phases) of a check returns it, to record the digest the check compared).
    type: str
  phases:
    description:
      - The phases to check at once (O(state=check)), each defined in O(definitions); instead of O(phase).
    type: list
    elements: str
  from_phase:
    description:
      - With O(definitions) instead of O(phases) (O(state=check)), this phase and every phase defined after it (the order
        of O(definitions)), so that the first phase of a run checks them all in one call.
    type: str
  definitions:
    description:
      - What each phase takes as inputs and watches, by phase name (C(dgxspark_phase_definitions)). Keys V(roles) (the roles
        it runs), V(inputs_from) (roles whose variables and code are its inputs, default V(roles)), V(model_free) (leave the
        model's variables and plan keys out), V(containers) (the kinds of the plan's serving containers it runs, V(ray) or
        V(vllm)), V(unread) (cluster variables it never reads), V(watch) (as O(watch)).
      - Its inputs are the variables named C(dgxspark_*) or after a role of V(inputs_from), less facts the roles set while
        running, the deployment's bookkeeping (C(dgxspark_phase*), C(dgxspark_release_*), C(dgxspark_plan*)) and V(unread),
        with the plan (C(dgxspark_plan)) and the collection's code.
    type: dict
  checks:
    description:
      - Set by the action plugin from O(phases) and O(definitions) (each V(phase), V(inputs_digest), V(watch)); not set by hand.
    type: list
    elements: dict
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
  action:
    support: full
    description: Indicates this has a corresponding action plugin, so some parts of the options can be executed on the controller.
    details: Computes the inputs digests of O(phases) on the controller.
notes:
  - O(phase), O(phases) or O(from_phase) is required; O(phases) and O(from_phase) only with O(state=check).
"""

EXAMPLES = r"""
- name: See whether the ray and vllm phases have anything to do, in one call
  dgxspark.cluster.phase_state:
    phases: [ray, vllm]
    definitions:
      ray:
        roles: [ray_cluster]
        containers: [ray]
        watch: {containers: [dgxspark-ray], files: [/etc/dgxspark/secrets/ray_token]}
      vllm:
        roles: [vllm_container]
        containers: [vllm]
        watch: {containers: [dgxspark-vllm]}
  register: phase_checks

- name: Record that the ray phase converged, with the digest its check compared
  dgxspark.cluster.phase_state:
    phase: ray
    inputs_digest: "{{ phase_checks.phases.ray.inputs_digest }}"
    watch: {containers: [dgxspark-ray], files: [/etc/dgxspark/secrets/ray_token]}
    state: recorded
"""

RETURN = r"""
converged:
  description: >-
    True when the phase (with O(phases), every one) converged before with the same inputs and what it manages is
    unchanged (always false after recording).
  returned: always
  type: bool
reason:
  description: Why the phase is (not) converged, in one sentence.
  returned: with O(phase)
  type: str
  sample: the inputs of phase ray changed (variables, plan or collection code)
observed:
  description: What was read of the watched things, by kind and name (null for an absent one).
  returned: with O(phase)
  type: dict
stamp_path:
  description: The stamp's path on the node.
  returned: always
  type: str
inputs_digest:
  description: The O(inputs_digest) it was given.
  returned: with O(phase)
  type: str
phases:
  description: With O(phases), each phase's check by name (V(converged), V(reason), V(inputs_digest)), so that the task that
    records a phase records the digest its check compared (computed once, before the phase's roles ran).
  returned: with O(phases)
  type: dict
  sample: {ray: {converged: true, reason: phase ray converged before, inputs_digest: 9f2c...}}
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


def check_several(module, checks):
    """Each phase of checks against its stamp: {phase: {converged, reason, inputs_digest}}."""
    found = {}
    for check in checks:
        phase = validate_phase(check.get('phase'))
        observed = observe(module, validate_watch(check.get('watch') or {}))
        path = os.path.join(module.params['stamp_dir'], phase + '.json')
        converged, reason = compare(read_stamp(path), phase, check.get('inputs_digest'), observed)
        found[phase] = dict(converged=converged, reason=reason, inputs_digest=check.get('inputs_digest'))
    return found


def main():
    module = AnsibleModule(
        argument_spec=dict(
            phase=dict(type='str'),
            inputs_digest=dict(type='str'),
            phases=dict(type='list', elements='str'),
            from_phase=dict(type='str'),
            definitions=dict(type='dict'),
            checks=dict(type='list', elements='dict'),
            watch=dict(type='dict', default={}),
            state=dict(type='str', choices=['check', 'recorded'], default='check'),
            stamp_dir=dict(type='path', default='/var/lib/dgxspark/phases'),
        ),
        required_one_of=[('phase', 'checks')],
        required_together=[('phase', 'inputs_digest')],
        mutually_exclusive=[('phase', 'checks')],
        supports_check_mode=True,
    )
    params = module.params
    if params['checks'] is not None:
        if params['state'] != 'check':
            module.fail_json(msg='phase_state: several phases (phases) are only checked; record one phase at a time (phase)')
        try:
            found = check_several(module, params['checks'])
        except PhaseStateError as exc:
            module.fail_json(msg=str(exc))
        module.exit_json(changed=False, phases=found, converged=all(v['converged'] for v in found.values()))
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
