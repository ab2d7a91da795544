#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_nccl_build
short_description: Read which NCCL library the serving engine's processes loaded on a node
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Read-only. Finds the processes of the given containers (by the container id in each process' cgroup), reads which
    C(libnccl) files they mapped (C(/proc/PID/maps)) and hashes each file through the process' own root, so that a path
    inside a container names the file that container sees.
  - Two NCCL builds can report the same version (the pip wheel's and the system's; one wedged under load, vLLM issue
    42354), and only the sha256 tells them apart. Compare the result across nodes with the P(dgxspark.cluster.nccl_builds#filter) filter.
  - A CPU build of vLLM maps no libnccl; then RV(libraries) is empty.
options:
  containers:
    description: The names of the containers whose processes are read; a container that does not run is left out.
    type: list
    elements: str
    required: true
  docker:
    description: The docker client.
    type: str
    default: docker
  proc:
    description: The proc filesystem (another path for tests only).
    type: path
    default: /proc
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
  - dgxspark.cluster.attributes.READ_ONLY
"""

EXAMPLES = r"""
- name: Read which NCCL library the engine's processes loaded on each node
  dgxspark.cluster.engine_nccl_build:
    containers: [dgxspark-ray, dgxspark-vllm]
  register: engine_nccl
"""

RETURN = r"""
libraries:
  description: The libnccl files mapped, each once, by path.
  returned: always
  type: list
  elements: dict
  contains:
    path: {description: The file's path as the process sees it., type: str}
    sha256: {description: The file's sha256., type: str}
  sample: [{path: /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2, sha256: 1c8618b8...}]
processes:
  description: How many of the containers' processes mapped a libnccl.
  returned: always
  type: int
  sample: 2
containers:
  description: The containers found running, by name.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.docker_inspect import inspect_containers
from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_identity import container_pids, loaded_by_processes


def main():
    module = AnsibleModule(
        argument_spec=dict(
            containers=dict(type='list', elements='str', required=True),
            docker=dict(type='str', default='docker'),
            proc=dict(type='path', default='/proc'),
        ),
        supports_check_mode=True,
    )
    docker = module.get_bin_path(module.params['docker'], required=True)
    records = inspect_containers(module.run_command, docker, module.params['containers'])
    running = dict((name, record['Id']) for name, record in records.items()
                   if (record.get('State') or {}).get('Running') and record.get('Id'))
    pids = container_pids(sorted(running.values()), module.params['proc'])
    loaded = loaded_by_processes(sorted(set(pid for found in pids.values() for pid in found)), module.params['proc'])
    module.exit_json(changed=False, containers=sorted(running),
                     libraries=[dict(path=path, sha256=sha) for sha, path in loaded['libraries']],
                     processes=loaded['processes'])


if __name__ == '__main__':
    main()
