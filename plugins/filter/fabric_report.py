# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the fabric check: the summary report, the probes it reads, ib_write_bw pairs and results, NCCL test readiness,
command and result (each documented in its sidecar .yml: fabric_report.yml, fabric_probes.yml, ...)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import (
    build_fabric_report,
    ring_pairs,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.fabric_role import (
    collect_probes,
    ib_runs,
    nccl_argv,
    nccl_readiness,
    nccl_result,
    probe_reusable,
    rdma_readiness,
)


def _call(name, function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise AnsibleFilterError('%s: %s' % (name, exc)) from exc


def fabric_report(probes, plan, expectations, bandwidth=None, nccl=None, notes=None, roce=None, nccl_ranks=None):
    """Summary table and failures; see plugins/module_utils/fabric.py build_fabric_report."""
    return _call('fabric_report', build_fabric_report, plan, probes, expectations, bandwidth=bandwidth, nccl=nccl, notes=notes,
                 roce=roce, nccl_ranks=nccl_ranks)


def fabric_probe_reusable(probe, plan, mtu, host=None):
    """Whether a probe kept by cx7_netplan in this run (cx7_netplan_fabric_probe) answers what fabric_check would measure."""
    return _call('fabric_probe_reusable', probe_reusable, probe, plan, mtu, host=host)


def fabric_probes(hostvars, plan, probe_name, reused_name):
    """Every node's probe for the report (its own, or the one reused), which were reused, and the note saying so."""
    return _call('fabric_probes', collect_probes, hostvars, plan, probe_name, reused_name)


def fabric_rdma_readiness(hostvars, plan, play_hosts, devices_name, ib_write_bw_path):
    """Whether ib_write_bw can run on every node, and the note when it cannot."""
    return _call('fabric_rdma_readiness', rdma_readiness, hostvars, plan, play_hosts, devices_name, ib_write_bw_path)


def fabric_ib_runs(client_results, pair, devices):
    """The ib_write_bw runs of one node pair, from the async_status results of its clients."""
    return _call('fabric_ib_runs', ib_runs, client_results, pair, devices)


def fabric_ring_pairs(hosts):
    """[[server, client], ...] for ib_write_bw: every node serves the next one in rank order."""
    try:
        return [list(pair) for pair in ring_pairs(list(hosts))]
    except TypeError as exc:
        raise AnsibleFilterError('fabric_ring_pairs needs a list of host names: %s' % exc) from exc


def fabric_nccl_readiness(hostvars, plan, play_hosts, meminfo_name, collective='all_gather', fraction=0.5, gpu_device=None, image=None):
    """Whether the NCCL test can run on every node, its size, and the note when it cannot."""
    return _call('fabric_nccl_readiness', nccl_readiness, hostvars, plan, play_hosts, meminfo_name, collective=collective,
                 fraction=fraction, gpu_device=gpu_device, image=image)


def fabric_nccl_argv(plan, host, image, docker_args, port, collective, max_bytes, env=None):
    """The docker run command line of the NCCL test on one node."""
    return _call('fabric_nccl_argv', nccl_argv, plan, host, image, docker_args, port, collective, max_bytes, env=env)


def fabric_nccl_result(run, host, collective, max_bytes):
    """The NCCL test result for the report, from rank 0's command result."""
    return _call('fabric_nccl_result', nccl_result, run, host, collective, max_bytes)


class FilterModule:
    """Filters for the fabric_check role."""

    def filters(self):
        return {
            'fabric_report': fabric_report,
            'fabric_probe_reusable': fabric_probe_reusable,
            'fabric_probes': fabric_probes,
            'fabric_rdma_readiness': fabric_rdma_readiness,
            'fabric_ib_runs': fabric_ib_runs,
            'fabric_ring_pairs': fabric_ring_pairs,
            'fabric_nccl_readiness': fabric_nccl_readiness,
            'fabric_nccl_argv': fabric_nccl_argv,
            'fabric_nccl_result': fabric_nccl_result,
        }
