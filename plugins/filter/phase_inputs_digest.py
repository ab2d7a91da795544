# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The phase_inputs_digest filter: one digest of a phase's inputs and of the collection code it runs (phase_inputs_digest.yml)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils import phase_state
from ansible_collections.dgxspark.cluster.plugins.module_utils.phase_state import (
    PhaseStateError, code_digest, digest, with_containers, without_model_inputs, without_reports)

#: Code every phase runs: the plugins, and the model profiles the plan reads.
ALWAYS = ('plugins', 'profiles')
_CACHE = {}


def phase_inputs_digest(data, code_paths=None, model_free=False, containers=None):
    """sha256 of the data (canonical JSON, less the plan's reports and the raw planned variables: without_reports) and of
    the collection files under code_paths, plugins/ and profiles/; with
    model_free, without the model's parts of the data (phase_state.MODEL_PLAN_KEYS, MODEL_VARIABLES) or profiles/; of
    the plan's serving containers, only the kinds named in containers."""
    always = tuple(p for p in ALWAYS if not (model_free and p == 'profiles'))
    paths = tuple(sorted(set(list(code_paths or []) + list(always))))
    try:
        data = with_containers(without_reports(data), containers)
        if model_free:
            data = without_model_inputs(data)
        if paths not in _CACHE:
            # The collection's root: plugins/module_utils/phase_state.py is two levels below it.
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(phase_state.__file__))))
            _CACHE[paths] = code_digest(root, paths)
        return digest({'data': data, 'code': _CACHE[paths]})
    except (PhaseStateError, OSError, TypeError, ValueError) as exc:
        raise AnsibleFilterError('phase_inputs_digest: %s' % exc) from exc


class FilterModule:
    """Filters of the phase stamps."""

    def filters(self):
        return {"phase_inputs_digest": phase_inputs_digest}
