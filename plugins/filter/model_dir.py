# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter model_dir: where the model lives on a node (documented in model_dir.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import model_dir as resolve_model_dir


def model_dir(plan, model='', model_cache_dir='', explicit=''):
    """The model directory of the plan's model on a node."""
    try:
        return resolve_model_dir(plan['hf_repo'], model, model_cache_dir, explicit)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError('model_dir: the input must be the cluster plan (it has no hf_repo): %s' % exc) from exc


class FilterModule:
    """Filters about the model on the nodes."""

    def filters(self):
        return {'model_dir': model_dir}
