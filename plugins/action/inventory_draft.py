# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.inventory_draft: writes the inventory draft on the controller, contacts no host."""

from __future__ import annotations

import json
import os

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.action.cluster_plan import BUILTIN_PROFILES_DIR, load_profiles
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.cluster_plan import ClusterPlanError, build_plan
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import inventory_draft as draft_lib


def _plan_or_problems(order, values, host_addresses, profiles):
    """(plan, problems) of the draft's values on the nodes, as the cluster plan sees them."""
    hostvars = {}
    for host in order:
        hostvars[host] = dict(values)
        if host in host_addresses:
            hostvars[host]['dgxspark_rail_addresses'] = host_addresses[host]
    try:
        return build_plan({'head': order[:1], 'workers': order[1:]}, hostvars, profiles), []
    except ClusterPlanError as exc:
        return None, exc.problems


def choose_model(order, base_values, host_addresses, profiles, asked, repos_on_head):
    """(values, plan) of the first profile and shape that plan; InventoryDraftError with the first one's problems."""
    first_problems = None
    for name in draft_lib.profile_candidates(profiles, asked, repos_on_head):
        for tp, pp in draft_lib.shape_candidates(len(order)):
            values = dict(base_values, dgxspark_model_profile=name, dgxspark_tensor_parallel_size=tp,
                          dgxspark_pipeline_parallel_size=pp)
            plan, problems = _plan_or_problems(order, values, host_addresses, profiles)
            if plan is not None:
                return values, plan
            if first_problems is None:
                first_problems = ['%s with TP %d x PP %d: %s' % (name, tp, pp, problem) for problem in problems]
    raise draft_lib.InventoryDraftError(first_problems or ['No model profile was found (profiles/models/).'])


class ActionModule(ActionBase):
    """Draft the inventory from the nodes' facts, check it with the cluster plan, and write it (never over an edit)."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(('dest', 'nodes', 'devices', 'addresses', 'hub_configs', 'model_dir', 'head_images',
                             'client_cidrs', 'model_profile', 'profiles_dir', 'force', 'user'))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = self.validate_argument_spec(argument_spec=dict(
            dest=dict(type='path', required=True),
            nodes=dict(type='list', elements='str', required=True),
            devices=dict(type='dict', required=True),
            addresses=dict(type='dict', default={}),
            hub_configs=dict(type='list', elements='str', default=[]),
            model_dir=dict(type='str', default=''),
            head_images=dict(type='str', default=''),
            client_cidrs=dict(type='list', elements='str', default=[]),
            model_profile=dict(type='str', default=''),
            profiles_dir=dict(type='path'),
            force=dict(type='bool', default=False),
            user=dict(type='str', default=''),
        ))[1]
        # Plain types: the values reach yaml.safe_dump, which cannot represent Ansible's tagged strings.
        args = json.loads(json.dumps(args))
        order = list(args['nodes'])
        directories = [BUILTIN_PROFILES_DIR] + ([args['profiles_dir']] if args.get('profiles_dir') else [])
        profiles, problems = load_profiles(directories)
        try:
            if problems:
                raise draft_lib.InventoryDraftError(problems)
            texts, notes, values = self._draft(order, args, profiles)
        except draft_lib.InventoryDraftError as exc:
            result.update(failed=True, changed=False, msg='No inventory draft was written (%d problem%s): see the problems below.' % (
                len(exc.problems), '' if len(exc.problems) == 1 else 's'), problems=''.join('- %s\n' % p for p in exc.problems))
            return result
        result.update(notes=notes, values=values)
        return self._write(result, args, texts)

    def _draft(self, order, args, profiles):
        rails, host_addresses, notes = draft_lib.draft_rails(order, args['devices'])
        model_dir = args['model_dir'] or draft_lib.DEFAULT_MODEL_DIR
        repos = draft_lib.hub_repos(args['hub_configs'])
        image, image_found = draft_lib.choose_image(draft_lib.parse_image_list(args['head_images']))
        base = {'dgxspark_rails': rails, 'dgxspark_mtu': 9000, 'dgxspark_nccl_transport': 'rdma',
                'dgxspark_api_allowed_cidrs': draft_lib.client_networks(args['client_cidrs']), 'dgxspark_serving_image': image}
        if args['model_dir']:
            base['dgxspark_model_dir'] = args['model_dir']
        values, plan = choose_model(order, base, host_addresses, profiles, args['model_profile'], repos)
        notes += draft_lib.link_notes(order, args['devices'], rails, values['dgxspark_mtu'])
        hf_repo = plan['hf_repo']
        head = order[0]
        model_comment = ('Model profile (profiles/models/<name>.yml). Its weights (%s) are in %s/hub on the head.' % (hf_repo, model_dir)
                         if hf_repo in repos else
                         'Model profile (profiles/models/<name>.yml). Its weights (%s) are NOT in %s/hub on the head %s: download\n'
                         'them there (hf download %s --cache-dir %s/hub), or set dgxspark_model_download: true and a vaulted\n'
                         'dgxspark_hf_token (docs/inventory.md).' % (hf_repo, model_dir, head, hf_repo, model_dir))
        client_comment = ('Networks whose clients reach the API on the head (the firewall allows them).' if args['client_cidrs'] else
                          'Networks whose clients reach the API: none given, so only the nodes and the rails can (run init again\n'
                          'with -e dgxspark_init_client_cidrs=10.20.0.0/24, or set it here).')
        image_comment = ('The serving image, found on the head.' if image_found else
                         'The serving image: no vLLM image is on the head %s; pull it there (docker pull %s).' % (head, image))
        order_of_values = [
            (model_comment, 'dgxspark_model_profile'),
            ('TP x PP = %d nodes (one GPU each): the first shape the plan accepts for this model.' % len(order),
             'dgxspark_tensor_parallel_size'),
            (None, 'dgxspark_pipeline_parallel_size'),
            ('RoCE rails: the CX-7 netdevs with a link on every node; node address = subnet network + offset + rank.',
             'dgxspark_rails'),
            ('Jumbo frames on every rail (and every switch port, 9216).', 'dgxspark_mtu'),
            ('NCCL over RoCE (socket is the slow fallback).', 'dgxspark_nccl_transport'),
            (client_comment, 'dgxspark_api_allowed_cidrs'),
            (image_comment, 'dgxspark_serving_image'),
        ] + ([('The Hugging Face cache on every node.', 'dgxspark_model_dir')] if args['model_dir'] else [])
        draft = {
            'summary': '%d DGX Spark%s, head %s: %s, TP %d x PP %d, %d rail%s. Written by playbooks/init.yml from what the nodes '
                       'reported.' % (len(order), '' if len(order) == 1 else 's', head, values['dgxspark_model_profile'],
                                      values['dgxspark_tensor_parallel_size'], values['dgxspark_pipeline_parallel_size'],
                                      len(rails), '' if len(rails) == 1 else 's'),
            'notes': notes,
            'values': values,
            'order': order_of_values,
        }
        if args['user']:
            # The user init connected as; a user other than root needs sudo (become) for Docker and the system files.
            values.update(ansible_user=args['user'], **({'ansible_become': True} if args['user'] != 'root' else {}))
            draft['order'][:0] = [('How the controller logs in to every node.', 'ansible_user')] + (
                [(None, 'ansible_become')] if args['user'] != 'root' else [])
        hosts_vars = {}
        for host in order:
            hosts_vars[host] = {'ansible_host': args['addresses'].get(host) or host}
            if host in host_addresses:
                hosts_vars[host]['dgxspark_rail_addresses'] = host_addresses[host]
        texts = {'hosts.yml': draft_lib.with_header(draft_lib.render_hosts(order, hosts_vars)),
                 os.path.join('group_vars', 'all', 'main.yml'): draft_lib.with_header(draft_lib.render_group_vars(draft))}
        return texts, notes, values

    def _write(self, result, args, texts):
        dest = os.path.abspath(os.path.expanduser(args['dest']))
        files, refused, diffs = {}, [], []
        for relative in ('hosts.yml', os.path.join('group_vars', 'all', 'main.yml')):
            path = os.path.join(dest, relative)
            try:
                with open(path, 'r', encoding='utf-8') as handle:
                    current = handle.read()
            except FileNotFoundError:
                current = None
            state = draft_lib.existing_state(current)
            if current == texts[relative]:
                files[path] = 'unchanged'
            else:
                files[path] = 'kept' if state == 'edited' and not args['force'] else 'written'
                if files[path] == 'kept':
                    refused.append(path)
                diffs.append({'before_header': path, 'after_header': path, 'before': current or '', 'after': texts[relative]})
        if refused:
            result.update(failed=True, changed=False, files=files, msg=(
                '%s %s changed since init wrote %s: nothing was written. See what the draft would change with '
                '-e dgxspark_init_force=true --check --diff, then run init with -e dgxspark_init_force=true to replace %s, or '
                'write the draft elsewhere (-e dgxspark_init_dir=...).' % (
                    ', '.join(refused), 'was' if len(refused) == 1 else 'were', 'it' if len(refused) == 1 else 'them',
                    'it' if len(refused) == 1 else 'them')))
            return result
        if not self._task.check_mode:
            for path, state in files.items():
                if state == 'written':
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, 'w', encoding='utf-8') as handle:
                        handle.write(texts[os.path.relpath(path, dest)])
        result.update(changed=bool(diffs), files=files, dest=dest)
        if self._task.diff and diffs:
            result['diff'] = diffs
        result['msg'] = '%s: %s.' % (dest, ', '.join('%s %s' % (os.path.relpath(p, dest), s) for p, s in files.items()))
        return result
