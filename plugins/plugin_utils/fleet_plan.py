# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving groups of one inventory (issue 51): which hosts make each group, and what the groups must not share.

Pure logic, controller only. An inventory names its serving groups in ``dgxspark_serving_groups`` (group_vars/all): a
list of Ansible groups, each one cluster planned as the classic ``head``/``workers`` inventory is (cluster_plan.py),
its first host the head. Each group's cluster variables come from Ansible's own group_vars/<group>, so that every
value is shared (group_vars/all) or set per group. Without ``dgxspark_serving_groups`` the groups ``head`` and
``workers`` make the one group, planned exactly as before.

The fleet's own checks run over the groups' plans: no node in two groups, every node its own rail address on a shared
rail, no two groups on one API address, and one served model name for one model (the same name and model on two
groups are replicas).
"""

from __future__ import annotations

# The router that will serve every group's models behind one address is not planned yet (issue 51 item 2).
ROUTER_PLACEHOLDER = 'none yet: the router is issue 51 item 2; clients call each group at its own address'


def serving_groups(declared, groups):
    """([(name, {'head': [host], 'workers': [hosts]})], problems) of the inventory.

    ``declared``: dgxspark_serving_groups as the inventory sets it (None: not set); ``groups``: Ansible's groups.
    Not set: one group (name None) of the groups head and workers, as before. Set: one group per named Ansible group,
    in the list's order, the group's first host its head.
    """
    groups = groups or {}
    if declared is None:
        return [(None, {'head': list(groups.get('head') or []), 'workers': list(groups.get('workers') or [])})], []
    if not isinstance(declared, (list, tuple)) or not declared or not all(isinstance(n, str) and n for n in declared):
        return [], ['dgxspark_serving_groups is %r: give a list of the inventory groups that serve, e.g. [fleet_a, fleet_b] '
                    '(each an Ansible group whose first host is its head), or remove it to serve the groups head and workers.'
                    % (declared,)]
    problems = []
    classic = [name for name in ('head', 'workers') if groups.get(name)]
    if classic:
        problems.append('dgxspark_serving_groups is set, but the inventory has hosts in group%s %s too: with serving groups, '
                        'each group names its own hosts (its first host is its head); move them into a serving group and '
                        'remove group%s %s.' % ('s' if len(classic) > 1 else '', ' and '.join(classic),
                                                's' if len(classic) > 1 else '', ' and '.join(classic)))
    found, member_of = [], {}
    for name in declared:
        if name in [group for group, _members in found]:
            problems.append('dgxspark_serving_groups names %s twice: name each serving group once.' % name)
            continue
        if name in ('all', 'ungrouped', 'head', 'workers'):
            problems.append('dgxspark_serving_groups names %s, which cannot be a serving group: give groups of your own '
                            '(e.g. fleet_a).' % name)
            continue
        hosts = list(groups.get(name) or [])
        if not hosts:
            problems.append('dgxspark_serving_groups names %s, but the inventory has no host in group %s: add the group '
                            '(its first host is its head) or remove it from the list (groups: %s).' % (
                                name, name, ', '.join(sorted(g for g in groups if g not in ('all', 'ungrouped'))) or 'none'))
            continue
        for host in hosts:
            member_of.setdefault(host, []).append(name)
        found.append((name, {'head': hosts[:1], 'workers': hosts[1:]}))
    for host, names in member_of.items():
        if len(names) > 1:
            problems.append('Host %s is in serving groups %s: a node serves in one group only (its GPU is one rank of one '
                            'model); remove it from all but one of them.' % (host, ' and '.join(names)))
    return found, problems


def address_bases(found):
    """{group: the number of the fleet's nodes in the groups before it}: each group's rail addresses follow those of the
    groups before, so every node of the fleet has its own (one group: 0, its addresses as before)."""
    bases, count = {}, 0
    for name, members in found:
        bases[name] = count
        count += len(members['head']) + len(members['workers'])
    return bases


def fleet_problems(plans):
    """What the groups' plans ({group: plan}, in the fleet's order) must not share: a rail address on one subnet, an API
    address, a served model name for two models. Each problem names the groups, hosts and values, and the fix."""
    problems = []
    owners = {}
    for name, plan in plans.items():
        for node in plan['nodes']:
            for rail in plan['rails']:
                key = (rail['subnet'], node['rail_addresses'][rail['name']])
                owners.setdefault(key, []).append((name, node['host'], rail['name']))
    for (subnet, address), users in sorted(owners.items()):
        if len(set(u[0] for u in users)) > 1:
            problems.append('Rail address %s (subnet %s) is given to %s: on a shared rail every node of the fleet needs its own '
                            'address; remove dgxspark_rail_addresses there (the plan numbers the nodes across the groups) or pick '
                            'free addresses.' % (address, subnet, ' and '.join(
                                '%s of group %s (rail %s)' % (host, group, rail) for group, host, rail in users)))
    endpoints = {}
    for name, plan in plans.items():
        endpoints.setdefault((plan['api']['host'], str(plan['api']['port'])), []).append(name)
    for (host, port), names in sorted(endpoints.items()):
        if len(names) > 1:
            problems.append('Serving groups %s all serve their API at %s:%s: give each group its own head address (ansible_host) '
                            'or its own vllm_container_port in group_vars/<group>.' % (' and '.join(names), host, port))
    served = {}
    for name, plan in plans.items():
        served.setdefault(plan['api']['served_model_name'], []).append((name, _model(plan)))
    for served_name, users in sorted(served.items()):
        if len(set(model for _group, model in users)) > 1:
            problems.append('Serving groups %s serve the model name %s for different models (%s): one name is one model '
                            '(the same name on the same model makes replicas); set vllm_container_served_model_name in '
                            'group_vars/<group> to a name of its own, or serve the same model.' % (
                                ' and '.join(group for group, _model in users), served_name,
                                ', '.join('%s: %s@%s' % (n, m[0], m[1]) for n, m in users)))
    return problems


def _model(plan):
    return (plan['hf_repo'], plan['model_revision'])


def fleet_view(plans, hosts_by_group):
    """The fleet's summary (dgxspark_fleet): its groups, its models with their replicas, and the endpoint."""
    groups = []
    for name, plan in plans.items():
        groups.append({
            'name': name,
            'head': plan['head'],
            'hosts': list(hosts_by_group[name]),
            'model_profile': plan['model_profile'],
            'hf_repo': plan['hf_repo'],
            'model_revision': plan['model_revision'],
            'served_model_name': plan['api']['served_model_name'],
            'tensor_parallel_size': plan['tensor_parallel_size'],
            'pipeline_parallel_size': plan['pipeline_parallel_size'],
            'executor_backend': plan['executor_backend'],
            'api_url': plan['api']['url'],
        })
    models = []
    for group in groups:
        same = [m for m in models if m['served_model_name'] == group['served_model_name']]
        if same:
            same[0]['replicas'].append(group['name'])
            continue
        models.append({'served_model_name': group['served_model_name'], 'hf_repo': group['hf_repo'],
                       'model_revision': group['model_revision'], 'replicas': [group['name']]})
    return {'groups': groups, 'models': models, 'endpoint': {'router': None, 'note': ROUTER_PLACEHOLDER}}


def fleet_lines(fleet):
    """The plan's fleet summary as text lines, after the groups' tables."""
    lines = ['Fleet: %d serving groups, %d nodes, %d model%s' % (
        len(fleet['groups']), sum(len(g['hosts']) for g in fleet['groups']), len(fleet['models']),
        '' if len(fleet['models']) == 1 else 's')]
    for group in fleet['groups']:
        lines.append('  group %s: %s (%s), head %s, TP %d x PP %d, %s, %s' % (
            group['name'], group['served_model_name'], group['model_profile'], group['head'], group['tensor_parallel_size'],
            group['pipeline_parallel_size'], group['executor_backend'], group['api_url']))
    for model in fleet['models']:
        lines.append('  model %s (%s@%s): %d replica%s (%s)' % (
            model['served_model_name'], model['hf_repo'], model['model_revision'], len(model['replicas']),
            '' if len(model['replicas']) == 1 else 's', ', '.join(model['replicas'])))
    lines.append('  endpoint: %s' % fleet['endpoint']['note'])
    return lines
