#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: diagnostics_bundle
short_description: Write a diagnostics bundle as one tarball that only its owner can read
version_added: 0.5.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Writes the files of a diagnostics bundle (C(playbooks/diagnose.yml), from the C(dgxspark.cluster.diagnostics_bundle_files)
    filter) into one gzipped tarball at O(dest), each under the directory O(top), in one step - mode 0600 from its creation,
    its directories 0700 and its files 0600 inside, replaced atomically.
  - Refuses a file path that would leave O(top) (absolute, or with C(..)).
options:
  files:
    description: The bundle's files, each C(path) (relative) and C(content) (text).
    type: list
    elements: dict
    required: true
  dest:
    description: The tarball to write; its directory is made (0700) when missing, an existing one keeps its mode.
    type: path
    required: true
  top:
    description: The directory that holds every file inside the tarball (the bundle's name).
    type: str
    required: true
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode writes nothing and reports the bundle as to be written.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Pack the bundle into one tarball
  dgxspark.cluster.diagnostics_bundle:
    files: "{{ _diagnose_files }}"
    dest: /srv/diagnostics/dgxspark-diagnostics-20261127T101500Z.tar.gz
    top: dgxspark-diagnostics-20261127T101500Z
"""

RETURN = r"""
dest:
  description: The tarball written.
  returned: always
  type: str
files:
  description: How many files the bundle holds.
  returned: always
  type: int
bytes:
  description: The tarball's size (0 in check mode).
  returned: always
  type: int
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.diagnostics import write_bundle


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type='list', elements='dict', required=True),
            dest=dict(type='path', required=True),
            top=dict(type='str', required=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for item in params['files']:
        if not isinstance(item.get('path'), str) or not isinstance(item.get('content'), str):
            module.fail_json(msg='every bundle file needs a path and a text content, not %r' % sorted(item))
    size = 0
    if not module.check_mode:
        try:
            size = write_bundle(params['files'], params['dest'], params['top'], int(time.time()))
        except (ValueError, OSError) as exc:
            module.fail_json(msg='cannot write the bundle %s: %s' % (params['dest'], exc))
    module.exit_json(changed=True, dest=params['dest'], files=len(params['files']), bytes=size)


if __name__ == '__main__':
    main()
