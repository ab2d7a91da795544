#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_release
short_description: Read the serving release of a node, record a proven one, or record that a rollback put one back
version_added: 0.5.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - A release of the serving group is what its containers are, node by node - the image by ID (never a moving tag),
    entrypoint, command (the vLLM options), environment, mounts, capabilities, restart policy and labels, read with
    C(docker inspect) and written in M(community.docker.docker_container)'s own parameters (a spec), so that a release can be
    put back exactly as it ran. The cluster's release id (C(dgxspark.cluster.release_id) filter) covers every node's digest.
  - Each node keeps the history of its proven releases, newest first, in O(history_path) (0600); a release enters it only
    once it served (deploy.yml records it after the vllm phase's readiness). Each kept release's image stays on the node
    under the tag C(dgxspark-release:<id>); a release that leaves the history (more than O(keep)) loses its tag, so Docker
    may remove its image.
  - Each release recorded with O(model_dir) keeps which model directory it served. When recording a release drops older
    ones (or the one C(rollback.yml) replaced), a model directory that they served and no kept release serves is removed
    where the distribution made it (the mark C(.dgxspark-copy), see M(dgxspark.cluster.model_manifest)); a directory
    without the mark (the head's source, a copy the user made) is never removed.
  - O(state=observed) (read-only) reads the node's serving containers and the history, and says which release
    C(rollback.yml) would put back.
  - O(state=recorded) records the running containers as release O(release_id) (refusing when they are not the ones whose
    O(node_digest) the controller computed the id from); recording the newest release again changes nothing.
  - O(state=rolled_back) records that the release before the newest serves again (after C(rollback.yml) recreated its
    containers); the newest leaves the history, and a second C(rollback.yml) then has nothing to do.
options:
  containers:
    description: The serving containers this node runs (with Ray, Ray's on every node and the engine's on the head; with
      vLLM's own multi-node backend, vLLM's rank on every node).
    type: list
    elements: str
    required: true
  state:
    description: V(observed) reads; V(recorded) records a proven release; V(rolled_back) records a finished rollback.
    type: str
    choices: [observed, recorded, rolled_back]
    default: observed
  release_id:
    description:
      - The cluster's id of the release to record (from the C(dgxspark.cluster.release_id) filter).
      - Required with O(state=recorded).
    type: str
  node_digest:
    description:
      - The digest of this node's containers that the id was computed from (RV(node_digest) of O(state=observed)).
      - Required with O(state=recorded).
    type: str
  keep:
    description: How many releases the history keeps (with their images), the current one included; at least 2.
    type: int
    default: 3
  model_dir:
    description:
      - The model directory the release serves on this node (the same path on every node), kept with the release.
      - Without it (or while a kept release was recorded without one) no model directory is removed.
    type: path
  history_path:
    description: The history file on the node.
    type: path
    default: /var/lib/dgxspark/release/history.json
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode reports whether the history would change, and writes and tags nothing.
  diff_mode:
    support: full
    details: The diff shows the release ids and dates of the history before and after, and the model copies removed.
"""

EXAMPLES = r"""
- name: Read the serving release of the node
  dgxspark.cluster.serving_release:
    containers: [dgxspark-ray, dgxspark-vllm]
  register: release

- name: Record the release that just proved itself
  dgxspark.cluster.serving_release:
    containers: [dgxspark-ray, dgxspark-vllm]
    state: recorded
    release_id: "{{ dict(ansible_play_batch | zip(ansible_play_batch | map('extract', hostvars, ['release', 'node_digest'])))
                    | dgxspark.cluster.release_id }}"
    node_digest: "{{ release.node_digest }}"
    model_dir: /root/.cache/huggingface/hub/models--Qwen--Qwen3.5-397B-A17B-FP8
"""

RETURN = r"""
specs:
  description: The specs of the serving containers running now (docker_container's parameters), Ray's before the engine's.
  returned: always
  type: list
  elements: dict
missing:
  description: The containers of O(containers) that do not exist on the node.
  returned: always
  type: list
  elements: str
node_digest:
  description: The digest of the node's serving containers as they are now.
  returned: always
  type: str
current:
  description: The newest release of the history (null when none was recorded).
  returned: always
  type: dict
running_is_current:
  description: Whether the containers running now are exactly the newest recorded release.
  returned: always
  type: bool
rollback_target:
  description: The release C(rollback.yml) would put back (null when there is none; RV(rollback_reason) says why).
  returned: always
  type: dict
rolled_back:
  description: The release that C(rollback.yml) replaced last, with when (null when the newest release was deployed since).
  returned: always
  type: dict
rollback_reason:
  description: Why there is no release to roll back to (empty when there is one).
  returned: always
  type: str
pruned_model_dirs:
  description: The model copies removed (or, in check mode, that would be) because no kept release serves them.
  returned: always
  type: list
  elements: str
history_path:
  description: The history file.
  returned: always
  type: str
"""

import datetime
import json
import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.docker_inspect import inspect_containers
from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import COPY_MARK
from ansible_collections.dgxspark.cluster.plugins.module_utils.private_file import write_private_file
from ansible_collections.dgxspark.cluster.plugins.module_utils.release import (
    ReleaseError,
    after_rollback,
    container_spec,
    dumps,
    image_tag,
    model_dirs_to_prune,
    named_namespaces,
    node_digest,
    record,
    restore_order,
    rollback_target,
    validate_history,
)


def read_specs(module, docker, names):
    found = inspect_containers(module.run_command, docker, names)
    specs = named_namespaces([container_spec(found[n]) for n in names if n in found], list(found.values()))
    return restore_order(specs), [n for n in names if n not in found]


def read_history(path):
    try:
        with open(path, 'r') as handle:
            data = json.load(handle)
    except FileNotFoundError:
        data = None
    except (OSError, ValueError) as exc:
        raise ReleaseError('cannot read the release history %s: %s' % (path, exc)) from exc
    return validate_history(data, path)


def outline(history):
    """The history as the diff shows it: ids and dates, not every container's spec."""
    lines = ['%s deployed %s' % (r['id'], r.get('deployed_at', '?')) for r in history['releases']]
    if history.get('rolled_back'):
        lines.append('rolled back: %s at %s' % (history['rolled_back']['id'], history['rolled_back']['at']))
    return '\n'.join(lines) + '\n'


def tag_images(module, docker, new_releases, dropped):
    """Tag a new release's images (they stay while the release is kept) and untag the dropped ones' (an image that no
    tag and no container holds any more is Docker's to remove)."""
    for release in new_releases:
        for spec in release['containers']:
            rc, _out, err = module.run_command([docker, 'tag', spec['image'], image_tag(release)])
            if rc != 0:
                module.fail_json(msg='cannot tag the image %s of release %s: %s' % (spec['image'], release['id'], err.strip()))
    for release in dropped:
        module.run_command([docker, 'image', 'rm', '--no-prune', image_tag(release)])


def distributed_copies(paths):
    """The paths that are model directories the distribution made (never a user's own, nor a link to one)."""
    return [p for p in paths if not os.path.islink(p) and os.path.isfile(os.path.join(p, COPY_MARK))]


def remove_copies(module, paths):
    """Remove the model copies no kept release serves. The release is recorded already: a copy that cannot be removed
    is a warning, not a failed deploy."""
    for path in paths:
        try:
            shutil.rmtree(path)
        except OSError as exc:
            module.warn('cannot remove the model copy %s, which no kept release serves: %s' % (path, exc))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            containers=dict(type='list', elements='str', required=True),
            state=dict(type='str', choices=['observed', 'recorded', 'rolled_back'], default='observed'),
            release_id=dict(type='str'),
            node_digest=dict(type='str'),
            keep=dict(type='int', default=3),
            model_dir=dict(type='path'),
            history_path=dict(type='path', default='/var/lib/dgxspark/release/history.json'),
        ),
        required_if=[('state', 'recorded', ('release_id', 'node_digest'))],
        supports_check_mode=True,
    )
    params = module.params
    path = params['history_path']
    docker = module.get_bin_path('docker', required=True)
    try:
        specs, missing = read_specs(module, docker, params['containers'])
        history = read_history(path)
        digest = node_digest(specs)
        target, reason = rollback_target(history)
        current = history['releases'][0] if history['releases'] else None
        result = dict(changed=False, specs=specs, missing=missing, node_digest=digest, current=current,
                      running_is_current=bool(current and current['node_digest'] == digest and not missing),
                      rollback_target=target, rollback_reason=reason, rolled_back=history['rolled_back'],
                      pruned_model_dirs=[], history_path=path)
        if params['state'] == 'observed':
            module.exit_json(**result)
        now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')
        if missing:
            module.fail_json(msg='cannot record a release: %s not on this node' % ', '.join(missing), **result)
        dropped = []
        if params['state'] == 'recorded':
            if digest != params['node_digest']:
                module.fail_json(msg='the serving containers changed since they were read: release %s not recorded'
                                 % params['release_id'], **result)
            new, dropped = record(history, params['release_id'], specs, now, params['keep'], params['model_dir'])
            result['pruned_model_dirs'] = distributed_copies(model_dirs_to_prune(history, new, dropped))
        else:
            # In check mode the containers were not put back: nothing to verify.
            if target is None or (target['node_digest'] != digest and not module.check_mode):
                module.fail_json(msg='the containers running are not the release to roll back to (%s)'
                                 % (reason or target['id']), **result)
            new = after_rollback(history, now)
            dropped = [history['releases'][0]]
    except ReleaseError as exc:
        module.fail_json(msg=str(exc))
    if new != history:
        result['changed'] = True
        result['current'] = new['releases'][0]
        if module._diff:
            after = outline(new) + ''.join('model copy removed: %s\n' % d for d in result['pruned_model_dirs'])
            result['diff'] = dict(before_header=path, after_header=path, before=outline(history), after=after)
        if not module.check_mode:
            tag_images(module, docker, new['releases'][:1] if params['state'] == 'recorded' else [], dropped)
            try:
                write_private_file(path, dumps(new))
            except OSError as exc:
                module.fail_json(msg='cannot write the release history %s: %s' % (path, exc))
            remove_copies(module, result['pruned_model_dirs'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
