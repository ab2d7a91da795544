# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cx7_netplan_config filter: one node's CX-7 rail netplan configuration and checks (documented in cx7_netplan_config.yml)."""

from __future__ import annotations

import base64

import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.netplan import (
    NetplanConfigError,
    drift,
    fabric_problems,
    node_config,
    preflight_problems,
)


def _parse_netplan_files(files):
    parsed = []
    for item in files or []:
        if isinstance(item, dict) and item.get('skipped'):
            continue
        path = (item.get('path') or item.get('source')) if isinstance(item, dict) else None
        if not path:
            raise AnsibleFilterError('cx7_netplan_config: netplan_files must be a list of {path, content} mappings '
                                     '(or ansible.builtin.slurp results), got %r.' % (item,))
        content = item.get('content') or ''
        try:
            if item.get('encoding') == 'base64':
                content = base64.b64decode(content).decode('utf-8')
            document = yaml.safe_load(content)
        except (yaml.YAMLError, ValueError) as exc:
            parsed.append({'path': path, 'document': None, 'error': str(exc).replace('\n', ' ')})
            continue
        parsed.append({'path': path, 'document': document})
    return parsed


def cx7_netplan_config(plan, host, mtu=None, renderer=None, routes=None, optional=True, observed=None, netplan_files=None,
                       facts=None, fabric_results=None):
    """The node's rail configuration; with observed/netplan_files also ``problems``, with facts also ``drift``,
    with fabric_results also ``fabric_problems``. See plugins/module_utils/netplan.py."""
    try:
        config = node_config(plan, host, mtu=mtu, renderer=renderer, routes=routes, optional=optional)
    except NetplanConfigError as exc:
        raise AnsibleFilterError('cx7_netplan_config: %s' % exc) from exc
    if observed is not None or netplan_files is not None:
        config['problems'] = preflight_problems(config, observed, _parse_netplan_files(netplan_files))
    if facts is not None:
        config['drift'] = drift(config, facts)
    if fabric_results is not None:
        config['fabric_problems'] = fabric_problems(fabric_results, plan)
    return config


class FilterModule:
    """Filters for the CX-7 rail netplan configuration."""

    def filters(self):
        return {'cx7_netplan_config': cx7_netplan_config}
