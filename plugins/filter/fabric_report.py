# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the fabric check: the summary report, ib_write_bw pairs, NCCL test sizing (documented in the sidecar .yml files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import (
    build_fabric_report,
    nccl_test_max_bytes,
    ring_pairs,
)


def fabric_report(probes, plan, expectations, bandwidth=None, nccl=None, notes=None):
    """Summary table and failures; see plugins/module_utils/fabric.py build_fabric_report."""
    try:
        return build_fabric_report(plan, probes, expectations, bandwidth=bandwidth, nccl=nccl, notes=notes)
    except (ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('fabric_report: %s' % exc) from exc


def fabric_ring_pairs(hosts):
    """[[server, client], ...] for ib_write_bw: every node serves the next one in rank order."""
    try:
        return [list(pair) for pair in ring_pairs(list(hosts))]
    except TypeError as exc:
        raise AnsibleFilterError('fabric_ring_pairs needs a list of host names: %s' % exc) from exc


def fabric_nccl_max_bytes(free_bytes, nodes, collective='all_gather', fraction=0.5):
    """Largest power-of-two nccl-tests size that fits the free memory, or None."""
    try:
        return nccl_test_max_bytes(int(free_bytes), int(nodes), collective=collective, fraction=float(fraction))
    except (ValueError, TypeError) as exc:
        raise AnsibleFilterError('fabric_nccl_max_bytes: %s' % exc) from exc


class FilterModule:
    """Filters for the fabric_check role."""

    def filters(self):
        return {
            'fabric_report': fabric_report,
            'fabric_ring_pairs': fabric_ring_pairs,
            'fabric_nccl_max_bytes': fabric_nccl_max_bytes,
        }
