# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.profile_patch_files: reads the plan's patches and the role's two helper files on the
controller (each patch checked against the plan's sha256), then runs the module of the same name on the node."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.profile_schema import (
    PATCH_APPLY_SCRIPT,
    SITE_LOADER,
    file_sha256,
    patch_node_files,
)

ARGUMENT_SPEC = dict(
    directory=dict(type='path', required=True),
    patches=dict(type='list', elements='dict', default=[]),
)
# The role's own files (roles/ray_cluster/files), by their path in the node's patch directory.
ROLE_FILES = {PATCH_APPLY_SCRIPT: 'dgxspark-apply-patches.sh', SITE_LOADER: 'dgxspark-sitecustomize.py'}


def _text(path, what):
    try:
        with open(path, 'rb') as handle:
            return handle.read().decode('utf-8')
    except OSError as exc:
        raise AnsibleActionFail('profile_patch_files: cannot read %s %s: %s' % (what, path, exc)) from exc
    except UnicodeDecodeError as exc:
        raise AnsibleActionFail('profile_patch_files: %s %s is not UTF-8 text (%s); a patch is a Python file' % (what, path, exc)) from exc


def patch_contents(patches, find_role_file):
    """``{path under the patch directory: text}`` for the plan's patches (each source checked against its sha256) and
    the role's files they need; ``find_role_file(name)`` is the path of a file of the role."""
    files = {}
    for patch in patches:
        try:
            source, node_path, wanted = patch['source'], patch['node_path'], patch['sha256']
        except KeyError as exc:
            raise AnsibleActionFail('profile_patch_files: a patch of the plan lacks %s' % exc) from exc
        try:
            found = file_sha256(source)
        except OSError as exc:
            raise AnsibleActionFail('profile_patch_files: cannot read the patch %s: %s' % (source, exc)) from exc
        if found != wanted:
            raise AnsibleActionFail('profile_patch_files: the patch %s has sha256 %s, but the profile says %s: the file changed '
                                    'after the profile was written; check it and put its sha256 in the profile, or restore '
                                    'it. No file was written.' % (source, found, wanted))
        files[node_path] = _text(source, 'the patch')
    for node_path in patch_node_files(patches):
        if node_path not in files:
            files[node_path] = _text(find_role_file(ROLE_FILES[node_path]), 'the role file')
    return files


class ActionModule(ActionBase):
    """Read the patches on the controller; write them on the node."""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        files = patch_contents(args['patches'], lambda name: self._find_needle('files', name))
        result.update(self._execute_module(module_name='dgxspark.cluster.profile_patch_files', task_vars=task_vars,
                                           module_args={'directory': args['directory'], 'files': files}))
        return result
