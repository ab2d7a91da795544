# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter serving_status: the status table of a serving cluster (documented in serving_status.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.serving_status import build_serving_status


def serving_status(plan, probes, vllm=None, membership=None, unreachable=None, now=None, served_model_name=None, firewall=None,
                   supervisor=None, release=None):
    """Status table and problems; see plugins/plugin_utils/serving_status.py build_serving_status."""
    try:
        return build_serving_status(plan, probes, vllm=vllm, membership=membership, unreachable=unreachable, now=now,
                                    served_model_name=served_model_name, firewall=firewall, supervisor=supervisor,
                                    release=release)
    except (ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('serving_status: %s' % exc) from exc


class FilterModule:
    """Filters for the status playbook."""

    def filters(self):
        return {
            'serving_status': serving_status,
        }
