#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_report
short_description: Build the fabric check's summary table and the diagnosis of every failure
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - An action plugin of the M(dgxspark.cluster.fabric_check) role; it runs on the controller, once, after every node was probed, and
    reads what the role's tasks registered on every node of the play.
  - "The probes: each node's M(dgxspark.cluster.fabric_probe) result (C(_fabric_check_probe)), or, where that task was skipped to
    reuse it, the probe M(dgxspark.cluster.cx7_netplan) kept after changing the rails in this run (C(cx7_netplan_fabric_probe)),
    with a note saying so. A node that was not probed (unreachable) counts as a failure of that node."
  - "The measurements, where they ran: ib_write_bw between node pairs (C(_fabric_check_ib_results), each node's
    C(_fabric_check_rdma_devices)); each rail's RDMA port MTU (C(_fabric_check_roce_ports), ibv_devinfo's C(active_mtu): a port
    below what the rail's MTU allows, 4096 for 4200 and more, is a failure naming it); the NCCL test (C(_fabric_check_nccl_run):
    rank 0's bus bandwidth, and every rank's NCCL version and library build, which must be one); and the notes of
    M(dgxspark.cluster.fabric_readiness) (C(_fabric_check_rdma), C(_fabric_check_nccl_ready)) saying what was skipped and why."
  - Returns one row per node and rail (address, MTU, speed, peers reached, RDMA bandwidth) and the list of failures, each naming the
    node, rail, interface and the likely cause (cabling / link down, switch MTU, subnet/address, speed negotiated 100G, MTU, RDMA
    or NCCL bandwidth). It never fails on what it found; the role's last task does, where C(fabric_check_fail) asks for it.
options:
  plan:
    description: The cluster plan (C(nodes), C(rails)) from M(dgxspark.cluster.cluster_plan).
    type: dict
    required: true
  expect:
    description: The figures every node must reach.
    type: dict
    required: true
    suboptions:
      mtu:
        description: The MTU of every rail interface (and the payload of the don't-fragment pings).
        type: int
        required: true
      speed_mbps:
        description: The link speed of every rail interface, Mb/s; 0 skips the check.
        type: int
        required: true
      ib_min_gbps:
        description: The least ib_write_bw bandwidth per twin, Gb/s.
        type: float
        required: true
      nccl_min_busbw_gbs:
        description: The least average NCCL bus bandwidth, GB/s.
        type: float
        required: true
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
attributes:
  platform:
    support: full
    platforms: controller
    description: Runs on the controller only.
"""

EXAMPLES = r"""
- name: Build the fabric report
  dgxspark.cluster.fabric_report:
    plan: "{{ dgxspark_plan }}"
    expect:
      mtu: 9000
      speed_mbps: 200000
      ib_min_gbps: 85.0
      nccl_min_busbw_gbs: 21.875
  register: fabric
  run_once: true

- name: Print it
  ansible.builtin.debug:
    msg: "{{ fabric.table + fabric.failure_lines }}"
  run_once: true
"""

RETURN = r"""
rows:
  description:
    - One per node and rail, with C(host), C(rail), C(interface), C(address), C(state), C(mtu), C(speed_mbps), C(peers_reached),
      C(peers), C(bandwidth_gbps).
  returned: always
  type: list
  elements: dict
failures:
  description: Each with C(host), C(rail), C(interface), C(peer), C(cause) and C(detail).
  returned: always
  type: list
  elements: dict
failure_lines:
  description: The failures as text lines.
  returned: always
  type: list
  elements: str
table:
  description: The summary table as text lines, then the notes.
  returned: always
  type: list
  elements: str
ok:
  description: Whether there is no failure.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        plan=dict(type='dict', required=True),
        expect=dict(type='dict', required=True, options=dict(
            mtu=dict(type='int', required=True),
            speed_mbps=dict(type='int', required=True),
            ib_min_gbps=dict(type='float', required=True),
            nccl_min_busbw_gbs=dict(type='float', required=True),
        )),
    ), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.fabric_report runs as an action plugin on the controller')


if __name__ == '__main__':
    main()
