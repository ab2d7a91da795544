# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters diagnostics_bundle_files and diagnostics_secret_hits (documented in their .yml files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.diagnostics import bundle_files, node_view, secret_hits


def diagnostics_bundle_files(hostvars, nodes, plan, status):
    """The bundle's files from what diagnose.yml registered on each node; see plugins/module_utils/diagnostics.py."""
    try:
        views = dict((node, node_view(dict((key, hostvars[node].get(key)) for key in
                                           ('diagnose_node', 'diagnose_cx7', 'diagnose_image')))) for node in nodes)
        return bundle_files(views, list(nodes), plan, status)
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError('diagnostics_bundle_files: %s' % exc) from exc


def diagnostics_secret_hits(files, secrets):
    """The bundle's paths in which a secret appears; see plugins/module_utils/diagnostics.py."""
    try:
        return secret_hits(files, [str(secret) for secret in secrets or []])
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError('diagnostics_secret_hits: %s' % exc) from exc


class FilterModule:
    """Filters of playbooks/diagnose.yml."""

    def filters(self):
        return {
            'diagnostics_bundle_files': diagnostics_bundle_files,
            'diagnostics_secret_hits': diagnostics_secret_hits,
        }
