# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup inventory_serving_groups: dgxspark_serving_groups read from the inventory itself, for a play's hosts when
Ansible only lists (--list-hosts, --syntax-check) and gives no hostvars."""

from __future__ import annotations

DOCUMENTATION = r"""
name: inventory_serving_groups
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
short_description: The serving groups an inventory declares, read without hostvars
description:
  - Returns C(dgxspark_serving_groups) as the inventory's first host sees it (its group_vars and host_vars, as
    C(hostvars[groups.all[0]]) gives it once a play ran), read by loading the inventory sources again.
  - For the hosts of a play when Ansible only lists (C(--list-hosts), C(--syntax-check)), where it gives a play no
    C(hostvars) and a fleet's node plays would otherwise list the groups C(head) and C(workers), which a fleet has not.
  - Returns none (one serving group, the groups head and workers) when the inventory has no host, does not set the
    variable, or cannot be read again.
options:
  _terms:
    description: The inventory sources; none for the ones this run was given (C(ansible_inventory_sources)).
    type: list
    elements: str
    required: false
"""

EXAMPLES = r"""
- name: A node play that lists a fleet's serving nodes
  hosts: >-
    {{ groups | dgxspark.cluster.serving_hosts(lookup('dgxspark.cluster.inventory_serving_groups')) }}
  tasks: []
"""

RETURN = r"""
_raw:
  description: One element, C(dgxspark_serving_groups) of the inventory's first host, or none where it is not set.
  type: list
  elements: raw
"""

from ansible.errors import AnsibleError
from ansible.inventory.manager import InventoryManager
from ansible.plugins.lookup import LookupBase
from ansible.template import Templar
from ansible.utils.display import Display
from ansible.vars.manager import VariableManager

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import fleet_operations

display = Display()

# A play's hosts are templated for every play of a run: the inventory is read again once per sources.
_READ = {}


def _read_declared(loader, sources):
    inventory = InventoryManager(loader=loader, sources=list(sources))
    hosts = inventory.get_groups_dict().get('all') or []
    if not hosts:
        return None
    manager = VariableManager(loader=loader, inventory=inventory)
    variables = manager.get_vars(host=inventory.get_host(hosts[0]), include_hostvars=False)
    if 'dgxspark_serving_groups' not in variables:
        return None
    return Templar(loader=loader, variables=variables).template(variables['dgxspark_serving_groups'])


class LookupModule(LookupBase):
    """The inventory's dgxspark_serving_groups, read again from its sources."""

    def run(self, terms, variables=None, **kwargs):
        sources = tuple(terms or (variables or {}).get('ansible_inventory_sources') or ())
        if isinstance(sources, str):
            sources = (sources,)
        if not sources:
            return [None]
        if sources not in _READ:
            try:
                _READ[sources] = fleet_operations.listed_declaration(_read_declared(self._loader, sources))
            except AnsibleError as error:
                # listing only: a source that cannot be read again lists the groups head and workers, as before
                display.warning('inventory_serving_groups: %s; listing the groups head and workers' % error)
                _READ[sources] = None
        return [_READ[sources]]
