#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: profile_patch_files
short_description: Make a node's patch directory hold exactly the cluster plan's patches, their apply script and loader
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - The patch files of the C(dgxspark.cluster.ray_cluster) role, in one task. An action plugin reads, on the controller, each
    patch of O(patches) (its C(source)) and refuses one whose sha256 is not the plan's C(sha256); it adds the role's
    C(dgxspark-apply-patches.sh) when there is any patch and its sitecustomize loader C(dgxspark-sitecustomize.py), as
    C(site/sitecustomize.py), when there is a C(sitecustomize) patch. It then runs this module on the node with their contents
    (O(files)).
  - On the node, each file whose content, owner or mode differ is written atomically (owner root, mode 0644; the directories
    0755), and every other file under O(directory) - the patches of an earlier profile - is removed.
  - The start scripts of the containers check each patch's sha256 again before they apply it.
options:
  directory:
    description: The node's patch directory (mounted read-only into the serving containers).
    type: path
    required: true
  patches:
    description:
      - The cluster plan's patches (C(_ray_cluster_plan.patches)), each with C(source) (its file on the controller),
        C(node_path) (its path under O(directory)), C(kind) (V(sitecustomize) or V(python)) and C(sha256).
      - Empty, the directory is emptied.
    type: list
    elements: dict
    default: []
  files:
    description: Set by the action - the path under O(directory) and the text of each file the directory holds.
    type: dict
    default: {}
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Reports what would be written and removed; writes nothing.
  diff_mode:
    support: full
    details: Each file written or removed, before and after.
notes:
  - Needs root (the files are owned by root). Patches are small text files (UTF-8).
seealso:
  - module: dgxspark.cluster.cluster_plan
"""

EXAMPLES = r"""
- name: Write the profile's patches with their apply script and loader; remove the patches of an earlier profile
  dgxspark.cluster.profile_patch_files:
    directory: /etc/dgxspark/patches
    patches: "{{ _ray_cluster_plan.patches }}"
"""

RETURN = r"""
written:
  description: The files written (in check mode - that would be), sorted.
  returned: always
  type: list
  elements: str
  sample: [/etc/dgxspark/patches/dgxspark-apply-patches.sh, /etc/dgxspark/patches/sitecustomize/cudnn_off_sitecustomize.py]
removed:
  description: The files removed, left from an earlier profile.
  returned: always
  type: list
  elements: str
  sample: [/etc/dgxspark/patches/old_patch.py]
directories:
  description: The directories created or given mode 0755 and owner root.
  returned: always
  type: list
  elements: str
  sample: [/etc/dgxspark/patches/site]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.profile_patch_files import PatchFilesError, sync


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directory=dict(type='path', required=True),
            patches=dict(type='list', elements='dict', default=[]),
            files=dict(type='dict', default={}),
        ),
        supports_check_mode=True,
    )
    if module.params['patches'] and not module.params['files']:
        module.fail_json(msg='dgxspark.cluster.profile_patch_files reads the patches through its action plugin on the controller; '
                             'call it as a task with the collection installed.')
    try:
        result = sync(module.params['directory'], module.params['files'], check_mode=module.check_mode)
    except PatchFilesError as exc:
        module.fail_json(msg=str(exc), **dict(exc.result, changed=bool(exc.result.get('written') or exc.result.get('removed'))))
    if not module._diff:
        result.pop('diff')
    module.exit_json(**result)


if __name__ == '__main__':
    main()
