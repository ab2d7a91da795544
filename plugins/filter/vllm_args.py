# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm_args filter: a mapping of vLLM options to an argv list (documented in vllm_args.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.vllm_args import VllmArgsError, vllm_argv


def vllm_args(options, list_style=None):
    """Argv list of vLLM options; see plugins/plugin_utils/vllm_args.py vllm_argv."""
    try:
        return vllm_argv(options, list_style)
    except VllmArgsError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """Filters that build vLLM command lines."""

    def filters(self):
        return {"vllm_args": vllm_args}
