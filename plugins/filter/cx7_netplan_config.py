# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the cx7_netplan role: one node's CX-7 rail netplan configuration and checks, and the data the role gathers across
nodes (each documented in its sidecar .yml: cx7_netplan_config.yml, cx7_netplan_by_host.yml, ...)."""

from __future__ import annotations

import base64

import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.netplan import (
    NetplanConfigError,
    by_host,
    changed_hosts,
    drift,
    file_state,
    generate_rejections,
    node_config,
    preflight_problems,
    preflight_summary,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.netplan_check import (
    fabric_problems,
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
                       facts=None, probe=None, fabric_results=None):
    """The node's rail configuration; with observed/netplan_files also ``problems``, with facts and/or probe also ``drift``,
    with fabric_results also ``fabric_problems``. See plugins/plugin_utils/netplan.py."""
    try:
        config = node_config(plan, host, mtu=mtu, renderer=renderer, routes=routes, optional=optional)
    except NetplanConfigError as exc:
        raise AnsibleFilterError('cx7_netplan_config: %s' % exc) from exc
    if observed is not None or netplan_files is not None:
        config['problems'] = preflight_problems(config, observed, _parse_netplan_files(netplan_files))
    if facts is not None or probe is not None:
        config['drift'] = drift(config, facts or {}, probe)
    if fabric_results is not None:
        config['fabric_problems'] = fabric_problems(fabric_results, plan)
    return config


def cx7_netplan_by_host(hostvars, hosts, name):
    """{host: that host's variable ``name``} for the hosts that have it."""
    try:
        return by_host(hostvars, hosts, name)
    except (TypeError, AttributeError) as exc:
        raise AnsibleFilterError('cx7_netplan_by_host needs hostvars, a list of hosts and a variable name: %s' % exc) from exc


def cx7_netplan_changed_hosts(hostvars, hosts, names):
    """The hosts on which any of the registered results ``names`` changed something."""
    try:
        return changed_hosts(hostvars, hosts, names)
    except (TypeError, AttributeError) as exc:
        raise AnsibleFilterError('cx7_netplan_changed_hosts needs hostvars, a list of hosts and result names: %s' % exc) from exc


def cx7_netplan_preflight_summary(problems_by_host, plan):
    """Every preflight problem of the cluster, the nodes missing from the play first."""
    try:
        return preflight_summary(problems_by_host, plan)
    except (TypeError, AttributeError) as exc:
        raise AnsibleFilterError('cx7_netplan_preflight_summary needs host -> problems and the cluster plan: %s' % exc) from exc


def cx7_netplan_rejections(results_by_host):
    """``host: message`` for every node whose netplan generate failed."""
    try:
        return generate_rejections(results_by_host)
    except (TypeError, AttributeError) as exc:
        raise AnsibleFilterError('cx7_netplan_rejections needs host -> command result: %s' % exc) from exc


def cx7_netplan_file_state(stat_result, content, mode, owner='root', group='root', current=None):
    """Whether a file the role owns must be written and read, and its previous content."""
    try:
        return file_state(stat_result, content, mode, owner=owner, group=group, current=current)
    except NetplanConfigError as exc:
        raise AnsibleFilterError('cx7_netplan_file_state: %s' % exc) from exc
    except (TypeError, AttributeError) as exc:
        raise AnsibleFilterError('cx7_netplan_file_state needs an ansible.builtin.stat result, the content and the mode: %s' % exc) from exc


class FilterModule:
    """Filters for the CX-7 rail netplan configuration."""

    def filters(self):
        return {
            'cx7_netplan_config': cx7_netplan_config,
            'cx7_netplan_by_host': cx7_netplan_by_host,
            'cx7_netplan_changed_hosts': cx7_netplan_changed_hosts,
            'cx7_netplan_preflight_summary': cx7_netplan_preflight_summary,
            'cx7_netplan_rejections': cx7_netplan_rejections,
            'cx7_netplan_file_state': cx7_netplan_file_state,
        }
