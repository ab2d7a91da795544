# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over a plan's profile patches (documented in patch_refusals.yml and patch_node_files.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import profile_schema


def patch_refusals(patches, vllm_version, profile_name):
    """A refusal line per patch whose vLLM range excludes the image's vLLM version."""
    try:
        return profile_schema.version_problems(profile_name, patches, vllm_version)
    except ValueError as exc:
        raise AnsibleFilterError('patch_refusals: %s (the image of profile %s)' % (exc, profile_name)) from exc


def patch_node_files(patches, base_dir=''):
    """The files a node's patch directory holds for the plan's patches."""
    try:
        return profile_schema.patch_node_files(patches, base_dir)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError('patch_node_files: a patch lacks %s' % exc) from exc


class FilterModule:
    """Filters for the profile patches of the serving containers."""

    def filters(self):
        return {
            'patch_refusals': patch_refusals,
            'patch_node_files': patch_node_files,
        }
