#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_image_versions
short_description: Read the vLLM and Ray versions inside a serving image, once per image ID
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Looks the image up with C(docker image inspect) and, when it is present, reads the installed vllm and ray distributions'
    versions with the image's C(python3) (else runs C(vllm --version) and C(ray --version)) in throw-away containers of it
    (C(docker run --rm --network none), the image's entrypoint replaced), so that a profile patch
    written for one vLLM range is refused before any container of the cluster changes when the image carries another.
  - The answer is kept per image ID in O(cache_dir), so a re-run with the same image reads one small file instead of starting
    containers. A different image has a different ID, so the cache never answers for an image it did not see.
  - Read-only for the node's containers and images; it reports C(changed=false). Check mode reads the versions and writes no
    cache file.
options:
  image:
    description: The image reference (repository:tag or ID).
    type: str
    required: true
  cache_dir:
    description: Where the versions are kept, one JSON file per image ID.
    type: path
    default: /var/cache/dgxspark/image-versions
  volumes:
    description:
      - Mounts the serving containers also get (C(SRC:DEST[:ro])), given to the throw-away containers too, for an image whose
        vLLM lives on a volume (the lab's engine, a site's shared environment).
      - The cache stays keyed by image ID alone; an image built for one mounted environment names it (a label), so a changed
        environment comes with a new image.
    type: list
    elements: str
    default: []
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
    details: Reads the versions; writes no cache file.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Read the vLLM version of the serving image
  dgxspark.cluster.serving_image_versions:
    image: vllm/vllm-openai:v0.33.0
  register: image_versions

- name: Show it
  ansible.builtin.debug:
    msg: "{{ image_versions.image_id }} has vLLM {{ image_versions.vllm_version }} and Ray {{ image_versions.ray_version }}"
"""

RETURN = r"""
present:
  description: Whether the image is on the node. The other values are empty when it is not.
  returned: always
  type: bool
  sample: true
image_id:
  description: The image ID.
  returned: always
  type: str
  sample: sha256:9c08f16330df0d4b51e5c6f1b2b0e8d5a0b6d1f0f9c4a9e2b7c1d3e5f7a9b1c3
user:
  description: The user the image's containers run as (its C(USER)); empty for root, the default.
  returned: always
  type: str
  sample: ''
vllm_version:
  description: The installed vllm distribution's version (else what C(vllm --version) printed last), empty when both failed.
  returned: always
  type: str
  sample: 0.33.0
ray_version:
  description: The installed ray distribution's version (else the one C(ray --version) printed), empty when both failed.
  returned: always
  type: str
  sample: 2.60.0
errors:
  description: One line per command that failed in the image (the tool missing, say).
  returned: always
  type: list
  elements: str
  sample: []
cached:
  description: Whether the versions came from the cache.
  returned: always
  type: bool
  sample: false
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule

_RAY_VERSION = re.compile(r'version\s+(\S+)')


def parse_vllm_version(output):
    """The last non-empty line of `vllm --version` (vLLM may log before it), or ''."""
    lines = [line.strip() for line in (output or '').splitlines() if line.strip()]
    return lines[-1] if lines and re.match(r'^v?[0-9]', lines[-1]) else ''


def parse_ray_version(output):
    """'ray, version 2.60.0' -> '2.60.0', or ''."""
    match = _RAY_VERSION.search(output or '')
    return match.group(1) if match else ''


# The installed distributions' versions, read by the image's own Python in one throw-away container: importing vLLM to
# print its version takes a minute on a loaded machine, reading its metadata a fraction of a second, and every container
# start costs seconds on a busy node.
_METADATA = (
    'import importlib.metadata as m, json\n'
    'def version(name):\n'
    '    try:\n'
    '        return m.version(name)\n'
    '    except m.PackageNotFoundError:\n'
    '        return ""\n'
    'print(json.dumps({"vllm": version("vllm"), "ray": version("ray")}))\n'
)


def parse_metadata(output):
    """The JSON line the metadata script printed -> {'vllm': ..., 'ray': ...} (missing ones ''), or {} if none."""
    for line in reversed((output or '').splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return dict((tool, str(found.get(tool) or '')) for tool in ('vllm', 'ray'))
    return {}


def read_versions(module, docker, image, volumes=()):
    """Both versions from the image's metadata (one container); a tool the metadata lacks is asked with --version."""
    errors = []
    run = [docker, 'run', '--rm', '--network', 'none'] + [arg for volume in volumes for arg in ('--volume', volume)]
    rc, out, err = module.run_command(run + ['--entrypoint', 'python3', image, '-c', _METADATA])
    versions = parse_metadata(out) if rc == 0 else {}
    for tool, parse in (('vllm', parse_vllm_version), ('ray', parse_ray_version)):
        if versions.get(tool):
            continue
        # No python3 on PATH, or the tool installed otherwise: its own command says.
        rc, out, err = module.run_command(run + ['--entrypoint', tool, image, '--version'])
        versions[tool] = parse(out) if rc == 0 else ''
        if not versions[tool]:
            last = ((err or out).strip().splitlines() or [''])[-1]
            errors.append('%s --version in %s exited %d: %s' % (tool, image, rc, last))
    return versions, errors


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type='str', required=True),
            cache_dir=dict(type='path', default='/var/cache/dgxspark/image-versions'),
            volumes=dict(type='list', elements='str', default=[]),
            docker=dict(type='str', default='docker'),
        ),
        supports_check_mode=True,
    )
    image = module.params['image']
    docker = module.get_bin_path(module.params['docker'], required=True)
    result = dict(changed=False, present=False, image_id='', user='', vllm_version='', ray_version='', errors=[], cached=False)
    rc, out, err = module.run_command([docker, 'image', 'inspect', '--format', '{{.Id}} {{.Config.User}}', image])
    if rc != 0:
        if 'No such' in err or 'no such' in err:
            module.exit_json(**result)
        module.fail_json(msg='docker image inspect %s failed: %s' % (image, err.strip()), **result)
    image_id, _sep, user = out.strip().partition(' ')
    result.update(present=True, image_id=image_id, user=user.strip())
    cache_file = os.path.join(module.params['cache_dir'], image_id.replace(':', '_') + '.json')
    if os.path.isfile(cache_file):
        with open(cache_file, 'r') as handle:
            cached = json.load(handle)
        result.update(vllm_version=cached.get('vllm', ''), ray_version=cached.get('ray', ''), cached=True)
        module.exit_json(**result)
    versions, errors = read_versions(module, docker, image_id, module.params['volumes'])
    result.update(vllm_version=versions['vllm'], ray_version=versions['ray'], errors=errors)
    if not errors and not module.check_mode:
        os.makedirs(module.params['cache_dir'], mode=0o755, exist_ok=True)
        with open(cache_file + '.tmp', 'w') as handle:
            json.dump(versions, handle)
        os.replace(cache_file + '.tmp', cache_file)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
