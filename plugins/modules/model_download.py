#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_download
short_description: Download a model repository into a Hugging Face cache with the serving image's hf, the token there only for the download
version_added: 0.6.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Unless O(creates) exists, runs C(hf download) of O(repo) at O(revision) into O(hub_dir) (made 0755) in a container of
    O(image) through the Docker CLI (the Docker SDK for Python is not needed); an interrupted download resumes.
  - The container has the host's network, none of Docker's default capabilities and no privilege to gain.
  - O(token), when given, is written to O(token_path) (0600, in a 0700 directory) and given to hf as C(HF_TOKEN_PATH),
    never in the environment or the argv; the file is removed when the download ends, whether it worked or not, and so is
    one an earlier run left (also when nothing is downloaded).
  - A failed download fails the task with the last lines hf printed.
options:
  image:
    description: The image whose C(hf) downloads.
    type: str
    required: true
  repo:
    description: The Hugging Face repository.
    type: str
    required: true
  revision:
    description: The revision (a commit, branch or tag).
    type: str
    default: main
  hub_dir:
    description: The Hugging Face cache's C(hub) directory on the node.
    type: path
    required: true
  creates:
    description: Nothing is downloaded when this path exists (e.g. the manifest of a complete copy).
    type: path
  token:
    description: A Hugging Face token for a gated repository; never shown.
    type: str
    default: ''
  token_path:
    description: Where the token is for as long as the download.
    type: path
    default: /etc/dgxspark/secrets/distribute_hf_token
  env:
    description: More environment of the container (e.g. C(HF_ENDPOINT) of a mirror, C(HTTPS_PROXY)).
    type: dict
    default: {}
  volumes:
    description: More volumes of the container (C(HOST:CONTAINER[:ro]), e.g. a CA bundle for a proxy).
    type: list
    elements: str
    default: []
  name:
    description: The container's name (one of that name left by an interrupted run is removed first).
    type: str
    default: dgxspark-model-download
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
    details: Check mode says whether a download would run (or a token file be removed), and runs nothing.
  diff_mode:
    support: none
    details: A download is not shown as a diff.
"""

EXAMPLES = r"""
- name: Download the profile's repository on the head unless it holds a complete copy
  dgxspark.cluster.model_download:
    image: vllm/vllm-openai:v0.33.0
    repo: Qwen/Qwen3.5-397B-A17B-FP8
    revision: main
    hub_dir: /root/.cache/huggingface/hub
    creates: /root/.cache/huggingface/hub/models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/main/.dgxspark-manifest.json
    token: "{{ vaulted_hf_token }}"
"""

RETURN = r"""
output:
  description: The last lines hf printed (empty when nothing was downloaded).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils.model_download import download


def main():
    module = AnsibleModule(argument_spec=dict(
        image=dict(type='str', required=True),
        repo=dict(type='str', required=True),
        revision=dict(type='str', default='main'),
        hub_dir=dict(type='path', required=True),
        creates=dict(type='path'),
        token=dict(type='str', default='', no_log=True),
        token_path=dict(type='path', default='/etc/dgxspark/secrets/distribute_hf_token', no_log=False),
        env=dict(type='dict', default={}),
        volumes=dict(type='list', elements='str', default=[]),
        name=dict(type='str', default='dgxspark-model-download'),
        docker=dict(type='str', default='docker'),
    ), supports_check_mode=True)
    try:
        changed, failure, output = download(module.run_command, module.params, module.check_mode)
    except OSError as exc:
        module.fail_json(msg='model download: %s: %s' % (getattr(exc, 'filename', '') or '', exc.strerror or exc))
    if failure:
        module.fail_json(msg=failure, changed=changed, output=output)
    module.exit_json(changed=changed, output=output)


if __name__ == '__main__':
    main()
