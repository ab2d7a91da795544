# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.cluster_plan: plans the cluster on the controller, contacts no host."""

from __future__ import annotations

import hashlib
import os

import yaml

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.cluster_plan import (
    ClusterPlanError,
    build_plan,
    render_plan_table,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.inventory_schema import (
    cluster_variable_names,
    host_variable_names,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.profile_schema import site_patches
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.secrets_dir import controller_secrets_dir, secrets_dir_problem
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import api_tls, role_inputs, role_networks
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import fleet_plan, serving_command
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.inventory_names import (
    known_names,
    unknown_variable_problems,
    variable_prefixes,
)

# Variables the roles' checks read besides the roles' own (the roles default to them).
ROLE_INPUT_EXTRAS = ('dgxspark_api_allowed_cidrs', 'dgxspark_monitoring_allowed_cidrs', 'dgxspark_vllm_site_args', 'ansible_port',
                     'ansible_host', 'dgxspark_model', 'dgxspark_model_download', 'dgxspark_distribute_model')

# plugins/action/cluster_plan.py -> the collection root is two directories above plugins/action.
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILTIN_PROFILES_DIR = os.path.join(COLLECTION_ROOT, 'profiles', 'models')
PLAYBOOKS_DIR = os.path.join(COLLECTION_ROOT, 'playbooks')


def playbook_presets(playbook, depth=0):
    """(presets, name, problems) that a playbook of the collection sets (its import's dgxspark_plan_presets): what
    plan.yml plans with for -e dgxspark_plan_playbook=deploy-397b.yml, so that it prints what that playbook would."""
    path = playbook if os.path.isabs(playbook) else os.path.join(PLAYBOOKS_DIR, playbook)
    name = os.path.basename(path)
    try:
        with open(path, 'r', encoding='utf-8') as handle:
            plays = yaml.safe_load(handle) or []
    except (OSError, yaml.YAMLError) as exc:
        known = sorted(f for f in os.listdir(PLAYBOOKS_DIR) if f.startswith('deploy') and f.endswith('.yml'))
        return {}, name, ['dgxspark_plan_playbook %s cannot be read (%s): name one of %s.' % (playbook, exc, ', '.join(known))]
    for play in plays if isinstance(plays, list) else []:
        presets = ((play or {}).get('vars') or {}).get('dgxspark_plan_presets') if isinstance(play, dict) else None
        if presets:
            return dict(presets), name, []
        imported = play.get('ansible.builtin.import_playbook') if isinstance(play, dict) else None
        if imported and imported != 'deploy.yml' and depth < 3:
            # A playbook kept under another name (deploy-397b.yml imports deploy_397b.yml): the presets of the one it imports.
            return playbook_presets(os.path.join(os.path.dirname(path), imported), depth + 1)
    return {}, name, []


def load_profiles(directories):
    """Load every <name>.yml of the directories (later ones override earlier). Returns (profiles, problems)."""
    profiles = {}
    problems = []
    for directory in directories:
        if not os.path.isdir(directory):
            problems.append('profiles_dir %s is not a directory: give a directory of <name>.yml model profiles.' % directory)
            continue
        for filename in sorted(os.listdir(directory)):
            if not filename.endswith('.yml'):
                continue
            path = os.path.join(directory, filename)
            try:
                with open(path, 'r', encoding='utf-8') as handle:
                    profiles[filename[:-4]] = yaml.safe_load(handle)
                if isinstance(profiles[filename[:-4]], dict):  # a profile's patch files are relative to its directory
                    profiles[filename[:-4]]['_dir'] = directory
            except (OSError, yaml.YAMLError) as exc:
                problems.append('model profile %s cannot be read (%s): fix the file.' % (path, exc))
    return profiles, problems


def role_variable_values(host_vars, names, prefixes):
    """{name: value} of a node's role variables (and the few others their checks read). A value that cannot be
    templated on the controller (it reads a fact of the node) is left to the role."""
    role_prefixes = tuple(p for p in prefixes if p != 'dgxspark_')
    values = {}
    for name in names:
        name = str(name)
        if not (name.startswith(role_prefixes) or name in ROLE_INPUT_EXTRAS):
            continue
        try:
            values[name] = host_vars[name]
        except Exception:  # pylint: disable=broad-except  # undefined on the controller: the role checks it on the node
            continue
    return values


def port_defaults(specs):
    """(Ray's ports, {single port variable: default}) as the roles' argument specs state them."""
    options = dict((name, spec) for role in specs.values() for name, spec in role.items())
    ray = dict((options.get('ray_cluster_ports') or {}).get('default') or {})
    single = dict((name, (options.get(name) or {}).get('default')) for name, _what in role_networks.SINGLE_PORTS)
    return ray, single


def inventory_sources(task_vars):
    """The inventory sources Ansible parsed (-i), as one line: the plan says which inventory it planned."""
    sources = task_vars.get('ansible_inventory_sources') or []
    if isinstance(sources, str):
        sources = [sources]
    return ', '.join(str(source) for source in sources) or '(none: give one with -i)'


class ActionModule(ActionBase):
    """Build the cluster plan from the inventory's groups and host variables."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(('profiles_dir', 'presets', 'presets_by', 'playbook'))

    def _head_value(self, hostvars, heads, task_vars, name):
        """A cluster variable as the head sees it: templated where inventory_dir and the inventory's other variables are
        defined (the controller's implicit localhost has no inventory_dir: `{{ inventory_dir }}/profiles` failed there)."""
        try:
            return hostvars[heads[0]].get(name)
        except (IndexError, KeyError):
            return self._templar.template(task_vars.get(name))

    def _key_dir(self, hostvars, head):
        """The controller's directory of the generated API key, as vllm_container's default makes it."""
        host_vars = hostvars[head]
        for name in ('vllm_container_controller_secrets_dir', 'dgxspark_secrets_dir'):
            if host_vars.get(name):
                return host_vars[name]
        return controller_secrets_dir(host_vars['inventory_dir']) if host_vars.get('inventory_dir') else '~/.config/dgxspark'

    def _api_tls(self, hostvars, plan, task_vars, group=None):
        """(the plan's api.tls, problems) from dgxspark_api_tls and its files: checked (files) or made once (generated)
        for the address clients call, the head's name and rail addresses, the loopback and dgxspark_api_tls_names; a
        fleet's group (group) gets a generated certificate of its own."""
        head, heads = plan['head'], [plan['head']]
        settings = dict((name, self._head_value(hostvars, heads, task_vars, 'dgxspark_api_tls_' + name) if name != 'mode'
                         else self._head_value(hostvars, heads, task_vars, 'dgxspark_api_tls'))
                        for name in ('mode', 'cert_file', 'key_file', 'ca_file', 'names'))
        extra = settings['names'] or []
        if not isinstance(extra, list):
            return None, ['dgxspark_api_tls_names must be a list of DNS names or addresses, got %r' % (extra,)]
        rails = list(plan['nodes'][0]['rail_addresses'].values())
        names = api_tls.client_names(plan['api']['host'], head, rails, extra)
        return api_tls.plan_tls(settings, plan['api']['host'], names, self._key_dir(hostvars, head), head, group=group)

    def _secrets_dir_problems(self, hostvars, heads):
        """The refusal for secrets still kept only in the directory shared by the inventory directory's name (the
        roles' default directory is per inventory now), unless the inventory names the directory itself."""
        try:
            host_vars = hostvars[heads[0]]
        except (IndexError, KeyError):
            return []
        if any(name == 'dgxspark_secrets_dir' or name.endswith('_controller_secrets_dir') for name in host_vars.keys()):
            return []
        problem = secrets_dir_problem(self._templar.template(host_vars['inventory_dir'])) if host_vars.get('inventory_dir') else ''
        return [problem] if problem else []

    @staticmethod
    def _templated_vars(host_vars):
        """(values, {name: why}) of a node's variables (the inventory's and -e): those that template here, and why the
        others do not (they read a fact of the node)."""
        found, failed = {}, {}
        for name in host_vars:
            try:
                found[name] = host_vars[name]
            except Exception as exc:  # pylint: disable=broad-except  # refused below when a command needs it
                failed[name] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return found, failed

    def _command_inputs(self, templated, hosts):
        """({host: {variable: value}}, problems): each serving role variable a command is made of, resolved as the role
        resolves it on the node: the inventory and -e first, else the role's default, templated with the node's variables
        (templated: {host: _templated_vars of its variables}). A secret input is kept only as whether it is set."""
        defaults = {}
        for role in serving_command.INPUTS:
            path = os.path.join(COLLECTION_ROOT, 'roles', role, 'defaults', 'main.yml')
            defaults.update(self._loader.load_from_file(path, trusted_as_template=True) or {})
        found, unresolved = {}, {}
        for host in hosts:
            variables = dict(defaults)
            given, failed = templated[host]
            variables.update(given)
            templar = self._templar.copy_with_new_env(available_variables=variables)
            values = found[host] = {}
            for name in (n for names in serving_command.INPUTS.values() for n in names):
                if name in failed:
                    unresolved.setdefault((name, failed[name]), []).append(host)
                    continue
                try:
                    values[name] = role_inputs.plain(templar.template(variables[name]))
                except Exception as exc:  # pylint: disable=broad-except  # said as the plan's problem, naming the variable
                    unresolved.setdefault((name, str(exc).splitlines()[0]), []).append(host)
            for name in serving_command.SECRET_INPUTS:
                values[name] = bool(values.get(name))
        # One line a problem, naming every node it concerns.
        problems = ['%s cannot be resolved on the controller on %s (%s): the plan makes the serving commands from it; '
                    'give it a value that needs no fact of the node.' % (name, ', '.join(where), why)
                    for (name, why), where in unresolved.items()]
        return found, problems

    def _fleet_value(self, hostvars, groups, task_vars, name):
        """A fleet-wide variable (group_vars/all) as the inventory's first host sees it, else as the controller does."""
        hosts = list(groups.get('all') or [])
        return self._head_value(hostvars, hosts[:1], task_vars, name) if hosts else self._templar.template(task_vars.get(name))

    def _router_settings(self, hostvars, groups, task_vars, members=None):
        """(settings, problems): dgxspark_router_host and dgxspark_router_port as each serving group's head sees them
        (members: {group: its hosts}; None: the one group of head and workers), which must agree (fleet_plan)."""
        heads = dict((name, hosts[:1]) for name, hosts in (members or {'': list(groups.get('head') or [])}).items())
        return fleet_plan.router_settings(dict(
            (name, dict((key, self._head_value(hostvars, head, task_vars, 'dgxspark_router_' + key)) for key in ('host', 'port')))
            for name, head in heads.items()))

    @staticmethod
    def _key_sources(hostvars, plans):
        """{group: its API key's source}: the generated key's file, or a digest of the key its head's variables give (the
        router needs one key for every group; the key itself is never kept)."""
        sources = {}
        for name, plan in plans.items():
            try:
                given = hostvars[plan['head']].get('vllm_container_api_key')
            except Exception:  # pylint: disable=broad-except  # not templated here: compared by where it comes from
                given = None
            sources[name] = ('given:%s' % hashlib.sha256(str(given).encode('utf-8')).hexdigest() if given
                             else 'file:%s' % plan['api']['api_key_file'])
        return sources

    @staticmethod
    def _host_groups(groups, members):
        """{host: its serving group} for every host of the inventory and the controller (localhost): a host outside every
        serving group (and the controller) gets the first group's plan, as every host did before serving groups."""
        first = next(iter(members), '')
        hosts = list(groups.get('all') or []) + ['localhost']
        return dict((host, next((name for name, names in members.items() if host in names), first)) for host in hosts)

    def _plan_fleet(self, result, found, problems, hostvars, groups, task_vars, presets, presets_by):
        """The action's result for serving groups: every group planned as one cluster (its nodes' rail addresses after
        those of the groups before), then the fleet's checks; the tables one a group, then the fleet's summary."""
        inventory = inventory_sources(task_vars)
        bases = fleet_plan.address_bases(found)
        plans, tables, failed, notes, ports = {}, [], [], [], {}
        members = dict((name, list(m['head']) + list(m['workers'])) for name, m in found)
        if not problems:
            for name, member_groups in found:
                one = self._plan_cluster(member_groups, hostvars, task_vars, presets, presets_by, [], bases[name],
                                         'group %s' % name, group=name)
                if one['problems']:
                    failed.extend('serving group %s (%s): %s' % (name, ', '.join(members[name]), p) for p in one['problems'])
                    notes.extend(n for n in one['notes'] if n not in notes)
                    continue
                plans[name] = one['result']['plan']
                ports.update(one['ports'])
                tables.extend(['Serving group %s (%s)' % (name, ', '.join(members[name]))] + one['result']['table'][1:])
        problems = problems + failed
        if not problems:
            problems = fleet_plan.fleet_problems(plans)
        settings, setting_problems = self._router_settings(hostvars, groups, task_vars, members)
        problems, router = problems or setting_problems, None
        if not problems:
            router, problems = fleet_plan.router_plan(
                plans, settings,
                dict((host, str(hostvars[host].get('ansible_host') or host)) for hosts in members.values() for host in hosts),
                ports, self._key_sources(hostvars, plans))
        if problems:
            result['failed'] = True
            result['msg'] = 'The fleet plan is invalid (%d problem%s) for the inventory %s: see the problems below.' % (
                len(problems), '' if len(problems) == 1 else 's', inventory)
            result['problems'] = ''.join('%s\n' % line for line in ['- %s' % p for p in problems] + notes)
            return result
        fleet = fleet_plan.with_router(fleet_plan.fleet_view(plans, members), router)
        first = found[0][0]
        result.update(plan=plans[first], group_plans=plans, host_groups=self._host_groups(groups, members), fleet=fleet,
                      table=['Inventory: %s' % inventory] + tables + fleet_plan.fleet_lines(fleet))
        return result

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        validation, args = self.validate_argument_spec(argument_spec=dict(
            profiles_dir=dict(type='path'),
            presets=dict(type='dict', default={}),
            presets_by=dict(type='str', default='the playbook'),
            playbook=dict(type='str'),
        ))
        del validation
        self._plan_args = args
        result['changed'] = False
        presets, presets_by, problems = args.get('presets') or {}, args.get('presets_by') or 'the playbook', []
        if args.get('playbook') and not presets:
            presets, presets_by, problems = playbook_presets(args['playbook'])

        groups = task_vars.get('groups') or {}
        hostvars = task_vars.get('hostvars') or {}
        declared = self._fleet_value(hostvars, groups, task_vars, 'dgxspark_serving_groups')
        found, group_problems = fleet_plan.serving_groups(declared, groups)
        if declared is None:
            # One group (head, workers): planned, printed and given exactly as before; no router to plan.
            problems = problems + fleet_plan.lone_router_problems(self._router_settings(hostvars, groups, task_vars)[0])
            one = self._plan_cluster(found[0][1], hostvars, task_vars, presets, presets_by, problems)
            result.update(one['result'])
            if 'plan' in one['result']:
                result.update(group_plans={'': one['result']['plan']}, host_groups=self._host_groups(groups, {}))
            return result
        return self._plan_fleet(result, found, group_problems + problems, hostvars, groups, task_vars, presets, presets_by)

    def _plan_cluster(self, plan_groups, hostvars, task_vars, presets, presets_by, problems, address_base=0,
                      hosts_where='groups head/workers', group=None):
        """{'result': the action's result for one serving group, 'problems', 'notes'}: the plan of the hosts of
        plan_groups ({'head': [host], 'workers': [hosts]}), checked against the roles' inputs, with its commands."""
        result = {}
        problems = list(problems)
        wanted = cluster_variable_names() + host_variable_names()
        node_hosts = list(plan_groups['head']) + list(plan_groups['workers'])
        node_vars = {}
        node_names = {}
        role_values = {}
        templated = {}
        for host in node_hosts:
            if host in node_vars:
                continue
            try:
                host_vars = hostvars[host]
            except KeyError:
                host_vars = {}
            node_vars[host] = dict((name, host_vars[name]) for name in wanted if name in host_vars)
            node_names[host] = list(host_vars.keys())
            templated[host] = self._templated_vars(host_vars)
            role_values[host] = role_variable_values(templated[host][0], node_names[host], variable_prefixes(COLLECTION_ROOT))

        directories = [BUILTIN_PROFILES_DIR]
        # The argument, else the inventory's or the command line's dgxspark_profiles_dir: every play that plans (the
        # roles' own fallbacks included) sees the user's profiles.
        profiles_dir = self._plan_args.get('profiles_dir') or self._head_value(hostvars, plan_groups['head'], task_vars, 'dgxspark_profiles_dir')
        if profiles_dir:
            directories.append(os.path.abspath(os.path.expanduser(str(profiles_dir))))
        profiles, profile_problems = load_profiles(directories)
        problems.extend(profile_problems)
        # A misspelled variable would be ignored and its default used: refuse it with the closest known name.
        problems.extend(unknown_variable_problems(node_names, known_names(COLLECTION_ROOT), variable_prefixes(COLLECTION_ROOT)))
        # The roles' variables: each against its role's argument spec, secrets in extra maps, ports, API networks.
        specs = role_inputs.role_specs(COLLECTION_ROOT)
        problems.extend(role_inputs.spec_problems(role_values, specs))
        problems.extend(role_inputs.value_problems(role_values))
        problems.extend(role_inputs.order_problems(role_values, role_inputs.spec_defaults(specs)))
        problems.extend(role_inputs.format_problems(role_values))
        problems.extend(role_inputs.download_problems(role_values))
        problems.extend(role_inputs.secret_problems(role_values))
        problems.extend(role_inputs.planned_option_problems(role_values))
        problems.extend(role_inputs.planned_environment_problems(role_values))
        problems.extend(role_inputs.api_key_problems(role_values, (plan_groups['head'] or [''])[0]))
        problems.extend(role_networks.port_problems(role_values, *port_defaults(specs)))
        network_problems, network_warnings = role_networks.allowed_network_problems(role_values)
        problems.extend(role_networks.prometheus_host_problems(role_values, node_hosts))
        problems.extend(network_problems)
        try:
            plan = build_plan(plan_groups, node_vars, profiles, presets=presets, presets_by=presets_by,
                              address_base=address_base, hosts_where=hosts_where)
            notes = []
        except ClusterPlanError as exc:
            problems.extend(exc.problems)
            notes = exc.notes
            plan = None
        if plan is not None:
            # The inventory's own patches (dgxspark_site_patches), applied before the profile's.
            site_dir = self._head_value(hostvars, plan_groups['head'], task_vars, 'dgxspark_site_patches_dir') or ''
            plan['patches'], site_problems = site_patches(
                self._templar.template(task_vars.get('dgxspark_site_patches') or []),
                os.path.abspath(os.path.expanduser(str(site_dir))) if site_dir else '', plan['patches'])
            problems.extend(site_problems)
            problems.extend(role_networks.management_overlap_problems(
                dict((host, values['ansible_host']) for host, values in role_values.items() if 'ansible_host' in values),
                plan['rails']))
            problems.extend(role_networks.allowed_network_rail_overlap_problems(role_values, plan['rails']))
            problems.extend(role_inputs.remote_code_problems(role_values, plan['model_revision'], plan['hf_repo']))
            # The backend and its rendezvous as the plan resolved them (inventory, overrides, defaults).
            problems.extend(role_inputs.backend_problems(role_values, plan['executor_backend']))
            problems.extend(role_networks.rendezvous_port_problems(role_values, plan['mp_master'], port_defaults(specs)[1]))
            plan['api'] = role_networks.api_endpoint(plan['head'], role_values.get(plan['head'], {}), plan['hf_repo'],
                                                     port_defaults(specs)[1]['vllm_container_port'], self._key_dir(hostvars, plan['head']))
            plan['api']['tls'], tls_problems = self._api_tls(hostvars, plan, task_vars, group)
            if group is not None:
                # A fleet's group plan names its group (the monitoring's `group` label); one group's plan stays as before.
                plan['serving_group'] = group
            problems.extend(tls_problems)
            problems.extend(role_networks.prometheus_tls_problems(role_values, plan['head'], plan['api']['tls']))
        problems.extend(self._secrets_dir_problems(hostvars, plan_groups['head']))
        if not presets and any(p.startswith('dgxspark_model_profile is not set') for p in problems):
            notes = notes + ['The model may come from the playbook you will run: plan with its presets, '
                             'playbooks/plan.yml -e dgxspark_plan_playbook=deploy-397b.yml (or that playbook with --tags plan).']
        if problems:
            # Ansible prints the message twice (its [ERROR] line, then the result): the message is one line, and the
            # problems are printed once, as one text block.
            result['failed'] = True
            result['msg'] = 'The cluster plan is invalid (%d problem%s) for the inventory %s: see the problems below.' % (
                len(problems), '' if len(problems) == 1 else 's', inventory_sources(task_vars))
            # Ending in a line break keeps it a block of lines in the output, one problem a line, never folded.
            result['problems'] = ''.join('%s\n' % line for line in ['- %s' % p for p in problems] + notes)
            return {'result': result, 'problems': problems, 'notes': notes}
        head = plan['head']
        inputs, input_problems = self._command_inputs(templated, [node['host'] for node in plan['nodes']])
        # The commands' inputs as each node resolves them (dgxspark_serving_image included), in the forms they need.
        input_problems.extend(role_inputs.format_problems(inputs))
        if not input_problems:
            try:
                plan['api'] = role_networks.api_with_tls(plan['api'], plan['api']['tls'], inputs[head].get('vllm_container_host'))
                plan['containers'] = serving_command.serving_containers(plan, inputs)
                plan['node_env'] = serving_command.planned_node_env(plan)
            except serving_command.ServingCommandError as exc:
                input_problems.append(str(exc))
        if input_problems:
            result.update(failed=True, problems=''.join('- %s\n' % p for p in input_problems),
                          msg='The serving commands cannot be planned for the inventory %s: see the problems below.'
                          % inventory_sources(task_vars))
            return {'result': result, 'problems': input_problems, 'notes': []}
        plan['serving'] = role_networks.serving_names(role_values.get(head, {}), specs, plan)
        plan['serving']['paths'] = dict(serving_command.PATHS)
        # Where Prometheus answers, and its TLS (the API's): what the monitoring role serves and every client queries.
        plan['serving']['prometheus'] = role_networks.prometheus_endpoint(head, role_values, plan['serving']['prometheus_port'],
                                                                          plan['api']['tls'])
        # The image the head serves with, which the distribution spreads and preflight and diagnose read.
        plan['serving']['image'] = plan['containers'][head]['vllm']['image']
        plan['node_os'] = role_inputs.node_os_settings(role_values.get(head, {}), specs)
        plan['warnings'] = role_inputs.input_warnings(
            plan['variables'], network_warnings + role_networks.api_reach_warnings(role_values, head)
            + role_networks.monitoring_reach_warnings(role_values, head, plan['api']['tls']['enabled']))
        result['plan'] = plan
        result['table'] = (render_plan_table(plan, inventory_sources(task_vars)) + api_tls.table_lines(plan['api'])
                           + [role_networks.prometheus_table_line(plan['serving']['prometheus'])]
                           + serving_command.command_lines(plan['containers']))
        # Every port each node opens, which the fleet's router must not take on its node.
        ports = dict((host, role_networks.node_ports(role_values.get(host, {}), *port_defaults(specs))) for host in node_hosts)
        return {'result': result, 'problems': [], 'notes': [], 'ports': ports}
