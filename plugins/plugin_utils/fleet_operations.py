# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Operating a fleet's serving groups (issue 51): which nodes a play acts on, and in which batches.

Pure logic, controller only (the filters serving_hosts, serving_batches and fleet_status). Every node play of the
collection acts on one serving group at a time: its hosts are the serving groups' nodes, group after group, and its
``serial:`` makes each batch exactly one group, so that what a role does once (run_once) it does once per group, and
``ansible_play_batch`` is the group's nodes. An inventory without ``dgxspark_serving_groups`` is one group (the groups
head and workers) in one batch: every play behaves as before.
"""

from __future__ import annotations

import re

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import fleet_plan

# A limit pattern this module can read: names (groups or hosts), each maybe excluded with '!', joined by ',' or ':'.
_LIMIT_TERM = re.compile(r'^!?[A-Za-z0-9_.\-]+$')


class FleetOperationError(ValueError):
    """An operation asked for something the inventory does not have."""


def group_members(groups, declared=None):
    """[(name, [hosts, head first])] of the serving groups, in the inventory's order, as the plan finds them
    (fleet_plan.serving_groups; its problems are the plan's to refuse, first).

    ``groups``: Ansible's groups; ``declared``: dgxspark_serving_groups (None or empty: one group named '' of the groups
    head and workers, as before serving groups).
    """
    found, _problems = fleet_plan.serving_groups(declared or None, groups)
    return [(name or '', members['head'] + [h for h in members['workers'] if h not in members['head']])
            for name, members in found]


def selected_members(groups, declared=None, selected=''):
    """The serving groups to act on: every one, or the one named ``selected`` (dgxspark_serving_group)."""
    members = group_members(groups, declared)
    if not selected:
        return members
    names = [name for name, _hosts in members if name]
    if not names:
        raise FleetOperationError(
            'dgxspark_serving_group is %r, but this inventory has one serving group (head and workers, no '
            'dgxspark_serving_groups): leave dgxspark_serving_group out.' % (selected,))
    chosen = [(name, hosts) for name, hosts in members if name == selected]
    if not chosen:
        raise FleetOperationError(
            'dgxspark_serving_group is %r, which is no serving group of this inventory: name one of %s '
            '(dgxspark_serving_groups).' % (selected, ', '.join(names)))
    return chosen


def listed_declaration(value):
    """dgxspark_serving_groups as read for a listing (lookup inventory_serving_groups): a list of names as plain strings,
    or the value as it is (none: one group; anything else the plan refuses, and serving_hosts then lists no host)."""
    if isinstance(value, (list, tuple)):
        return [str(name) if isinstance(name, str) else name for name in value]
    return value


def serving_hosts(groups, declared=None, selected=''):
    """The hosts a node play acts on: the serving groups' nodes, group after group, each group's head first."""
    return [host for _name, hosts in selected_members(groups, declared, selected) for host in hosts]


def limited_hosts(groups, limit):
    """The set of hosts a simple --limit keeps (None: no limit), or raises when the pattern is not simple.

    Simple: group or host names, each maybe preceded by '!', joined by ',' or ':'. A name that is neither keeps nothing,
    as Ansible's own limit does.
    """
    if not limit:
        return None
    patterns = limit if isinstance(limit, (list, tuple)) else [limit]
    terms = [term.strip() for pattern in patterns for term in re.split(r'[,:]', str(pattern)) if term.strip()]
    odd = [term for term in terms if not _LIMIT_TERM.match(term)]
    if odd:
        raise FleetOperationError(
            'the limit %s has %s: with serving groups, --limit takes group or host names (maybe with !), joined by commas, '
            'so that each batch stays one group; or act on one group with -e dgxspark_serving_group=NAME.' % (
                ','.join(patterns), ', '.join(odd)))

    def hosts_of(name):
        return set(groups.get(name) or ([name] if name in (groups.get('all') or []) else []))

    keep = [hosts_of(term) for term in terms if not term.startswith('!')]
    drop = [hosts_of(term[1:]) for term in terms if term.startswith('!')]
    kept = set().union(*keep) if keep else set(groups.get('all') or [])
    return kept.difference(*drop) if drop else kept


def serving_batches(groups, declared=None, selected='', limit=None):
    """The play's ``serial:``: one batch per serving group, in order, each the group's nodes that the limit keeps.

    One group: one batch of all its nodes, whatever the limit (the play as before). A group the limit leaves out makes no
    batch; a limit that keeps no serving node gives the groups' full sizes (the play then has no host anyway).
    """
    members = selected_members(groups, declared, selected)
    sizes = [len(hosts) for _name, hosts in members]
    if len(members) < 2:
        return [max(sizes[0], 1) if sizes else 1]
    kept = limited_hosts(groups, limit)
    if kept is None:
        return sizes
    limited = [len([h for h in hosts if h in kept]) for _name, hosts in members]
    return [size for size in limited if size] or sizes


def _group_lines(name, status):
    lines = ['Serving group %s' % name if name else 'Serving group']
    lines.extend('  %s' % line for line in status.get('table') or [])
    problems = status.get('problems') or []
    lines.append('  ' + ('problems:' if problems else 'healthy'))
    lines.extend('    %s' % problem for problem in problems)
    lines.extend('  %s' % line for line in status.get('call') or [])
    notes = status.get('notes') or []
    if notes:
        lines.append('  notes:')
        lines.extend('    %s' % note for note in notes)
    return lines


def _router_lines(router):
    """(lines, problems) of the router's serving instance (the module router_instance's result; None: not read)."""
    if not router or router.get('line') is None:
        return [], []
    if not router.get('installed'):
        return ['  router: not set up on its node yet (deploy.yml --tags router)'], []
    problems = ['router: %s' % router['problem']] if router.get('problem') else []
    return ['  %s' % router['line']] + ['    %s' % problem for problem in problems], problems


def fleet_status(statuses, fleet=None, router=None):
    """{'table': lines, 'ok', 'problems', 'groups'}: the fleet's status from each group's (serving_status).

    ``statuses``: [{'name': group, 'status': that group's serving_status}] in the fleet's order; ``fleet``: the plan's
    dgxspark_fleet (its endpoint and models), or None with one group. A group's problems are prefixed with its name.
    ``router``: what router_instance read on the router's node (which instance its port leads to, whether it runs), or
    None where it was not read: a line under the endpoint's, and its problem the fleet's.
    """
    statuses = list(statuses or [])
    if not statuses:
        raise FleetOperationError('no serving group was read: nothing to show.')
    lines, problems, groups, router_problems = [], [], [], []
    if fleet and len(statuses) > 1:
        healthy = [entry['name'] for entry in statuses if entry['status'].get('ok')]
        lines.append('Fleet: %d serving groups, %d healthy%s' % (
            len(statuses), len(healthy), '' if len(healthy) == len(statuses) else ' (not: %s)' % ', '.join(
                entry['name'] for entry in statuses if not entry['status'].get('ok'))))
        for model in fleet.get('models') or []:
            lines.append('  model %s: replicas %s' % (model['served_model_name'], ', '.join(
                '%s (%s)' % (name, 'healthy' if name in healthy else 'NOT healthy') for name in model['replicas'])))
        endpoint = (fleet.get('endpoint') or {}).get('note')
        if endpoint:
            lines.append('  endpoint: %s' % endpoint)
        router_lines, router_problems = _router_lines(router)
        lines.extend(router_lines)
    for entry in statuses:
        name, status = entry['name'], entry['status']
        groups.append({'name': name, 'ok': bool(status.get('ok'))})
        if len(statuses) == 1:
            lines.extend(list(status.get('table') or []))
            lines.extend(['problems:'] + list(status.get('problems') or []) if status.get('problems') else ['healthy'])
            lines.extend(status.get('call') or [])
            if status.get('notes'):
                lines.extend(['notes:'] + list(status['notes']))
        else:
            lines.extend(_group_lines(name, status))
        problems.extend(('group %s: %s' % (name, p)) if len(statuses) > 1 else p for p in status.get('problems') or [])
    return {'table': lines, 'ok': all(g['ok'] for g in groups) and not router_problems, 'problems': router_problems + problems,
            'groups': groups}
