# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the distribute role over plugin_utils/distribute_plan.py (each documented in its own <name>.yml):
distribute_chain, distribute_image_targets, distribute_lacking_files, distribute_relay_argv,
distribute_senders."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.distribute_plan import chain, image_targets, lacking_files, relay_argv, senders


def distribute_chain(plan, targets, head=None, rail=None):
    """Rail addresses of the head (when given) and the targets, in rank order."""
    try:
        return chain(plan, targets, head=head, rail=rail)
    except (ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('distribute_chain: %s' % exc) from exc


def distribute_image_targets(hosts, head, hostvars, enabled=True):
    """The hosts whose serving image (fact _distribute_image_id) differs from the head's."""
    try:
        ids = dict((host, hostvars[host].get('_distribute_image_id') or '') for host in hosts)
        return image_targets(list(hosts), head, ids, enabled=boolean(enabled, strict=False))
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError('distribute_image_targets: %s' % exc) from exc


def distribute_lacking_files(comparisons):
    """The model paths some receiving node lacks or holds wrong (model_manifest results), each once."""
    try:
        return lacking_files(list(comparisons))
    except (TypeError, AttributeError) as exc:
        raise AnsibleFilterError('distribute_lacking_files: %s' % exc) from exc


def distribute_senders(plan, head, image_targets_, model_targets):
    """The hosts that send in the image and model chains (the only ones that need the node-to-node key)."""
    try:
        return senders(plan, head, list(image_targets_), list(model_targets))
    except (ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('distribute_senders: %s' % exc) from exc


def distribute_relay_argv(command, options, rails=None, ssh=None):
    """The relay's command line for one of its commands."""
    try:
        return relay_argv(command, dict(options), rails=list(rails or []), ssh=ssh)
    except (TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError('distribute_relay_argv: %s' % exc) from exc


class FilterModule:
    """Filters of the distribute role."""

    def filters(self):
        return {
            'distribute_chain': distribute_chain,
            'distribute_image_targets': distribute_image_targets,
            'distribute_lacking_files': distribute_lacking_files,
            'distribute_relay_argv': distribute_relay_argv,
            'distribute_senders': distribute_senders,
        }
