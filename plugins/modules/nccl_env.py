#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_env
short_description: Compute the NCCL, Gloo, UCX and Ray environment of one DGX Spark node
version_added: 0.1.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Computes the environment variables that NCCL, Gloo, TensorPipe, UCX, Open MPI, Ray and vLLM need on one node
    from the node's ConnectX-7 device records (what M(dgxspark.cluster.cx7_facts) returns in C(ansible_facts.cx7.devices)).
  - Pure computation; it changes nothing on any host and can run on the controller or on the node.
  - With O(transport=rdma), C(NCCL_IB_HCA) lists every Up RDMA device (netdev state Up and port ACTIVE when known) of every rail,
    both GB10 twins included, in rail order, as C(=dev:port,...) (exact match).
  - The bootstrap variables C(NCCL_SOCKET_IFNAME) (C(=<if>), exact match), C(GLOO_SOCKET_IFNAME), C(TP_SOCKET_IFNAME),
    C(UCX_NET_DEVICES) and C(OMPI_MCA_btl_tcp_if_include) name the first rail. C(VLLM_HOST_IP) is the first IPv4 address of the
    first rail. C(RAY_memory_monitor_refresh_ms=0) turns off Ray's memory monitor, which kills workers on unified memory.
  - C(NCCL_IB_GID_INDEX) is only set when O(gid_index) is given; NCCL 2.21+ picks the RoCE v2 GID per device by itself.
  - Fails with a message naming the node, the interface or option, and what to do, when a rail does not exist, has no IPv4 address,
    shares a subnet with another rail, has no Up RDMA device (O(transport=rdma)), or when an option is invalid.
options:
  devices:
    description:
      - The CX-7 device records of B(one) node, as M(dgxspark.cluster.cx7_facts) returns them in C(ansible_facts.cx7.devices).
      - Each record has at least C(netdev); C(rdma_device), C(port), C(state), C(port_state), C(link_layer), C(mtu), C(ipv4)
        and C(roce_v2_ipv4_gid_indexes) are used when present.
    type: list
    elements: dict
    required: true
  rails:
    description:
      - The rail interface names, bootstrap rail first, for example V(enp1s0f1np1) then V(enP2p1s0f1np1).
      - Must not be empty and must not repeat a name. Every rail must exist among O(devices), have an IPv4 address,
        and be on its own subnet.
    type: list
    elements: str
    required: true
  transport:
    description:
      - V(rdma) uses RoCE through the CX-7 RDMA devices (about 22 GB/s bus bandwidth).
      - V(socket) disables NCCL's IB transport and uses TCP sockets on the bootstrap rail (4 to 6 GB/s); a warning says so.
      - Any other value fails.
    type: str
    default: rdma
  gid_index:
    description:
      - RoCE GID index to pin with C(NCCL_IB_GID_INDEX), a non-negative integer or a string of digits. Booleans are rejected.
      - Leave it unset (the default), because pinned indexes have drifted after reboots. When given, a warning is issued if the index is
        not among a device's C(roce_v2_ipv4_gid_indexes).
    type: raw
  extra_env:
    description:
      - Variables merged last, overriding computed ones. Keys must be valid environment variable names.
      - Values are turned into strings (booleans become V(1) or V(0)); a null value removes a computed variable.
    type: dict
  node:
    description:
      - Name of the node, used in messages. Modules cannot see C(inventory_hostname), so pass it.
    type: str
  gpudirect:
    description:
      - Whether GPUDirect RDMA is available. GB10 does not support it, so by default (V(false)) the host-staged settings
        C(NCCL_NET_GDR_LEVEL=LOC), C(NCCL_DMABUF_ENABLE=0), C(NCCL_NET_GDR_C2C=0) and C(NCCL_NET_PLUGIN=none) are emitted
        with O(transport=rdma).
    type: bool
    default: false
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
notes:
  - vLLM's Ray executor copies C(VLLM_*), C(NCCL_*), C(UCX_*) and C(HF_*) variables from the head to every worker. The names in
    RV(per_host_keys) differ per node and must be written to C(ray_non_carry_over_env_vars.json) in C($VLLM_CONFIG_ROOT),
    or the workers get the head's values.
  - Set the variables when the container (or Ray) starts; Ray workers do not see variables exported later.
seealso:
  - module: dgxspark.cluster.cx7_facts
"""

EXAMPLES = r"""
- name: Gather the CX-7 devices
  dgxspark.cluster.cx7_facts:

- name: Compute the NCCL environment of this node
  dgxspark.cluster.nccl_env:
    devices: "{{ ansible_facts.cx7.devices }}"
    rails: "{{ dgxspark_rails | map(attribute='interface') | list }}"
    transport: "{{ dgxspark_nccl_transport | default('rdma') }}"
    node: "{{ inventory_hostname }}"
  register: nccl

- name: Compute it on the controller from literal records, with debug logging
  dgxspark.cluster.nccl_env:
    devices:
      - {rdma_device: rocep1s0f1, port: 1, netdev: enp1s0f1np1, state: Up, port_state: ACTIVE, mtu: 9000, ipv4: [192.168.100.10/24]}
      - {rdma_device: roceP2p1s0f1, port: 1, netdev: enP2p1s0f1np1, state: Up, port_state: ACTIVE, mtu: 9000, ipv4: [192.168.101.10/24]}
    rails: [enp1s0f1np1, enP2p1s0f1np1]
    node: spark-1
    extra_env:
      NCCL_DEBUG: INFO
  delegate_to: localhost
  register: nccl_literal

- name: Write the names that must not be copied from the head
  ansible.builtin.copy:
    content: "{{ nccl.per_host_keys | to_json }}"
    dest: /root/.config/vllm/ray_non_carry_over_env_vars.json
    mode: "0644"
"""

RETURN = r"""
env:
  description: Environment variables to set when the node's container or Ray starts; every value is a string.
  returned: success
  type: dict
  sample:
    NCCL_IB_HCA: "=rocep1s0f1:1,roceP2p1s0f1:1"
    NCCL_IB_DISABLE: "0"
    NCCL_SOCKET_IFNAME: "=enp1s0f1np1"
    GLOO_SOCKET_IFNAME: enp1s0f1np1
    TP_SOCKET_IFNAME: enp1s0f1np1
    UCX_NET_DEVICES: enp1s0f1np1
    OMPI_MCA_btl_tcp_if_include: enp1s0f1np1
    VLLM_HOST_IP: 192.168.100.10
    RAY_memory_monitor_refresh_ms: "0"
    NCCL_NET_GDR_LEVEL: LOC
    NCCL_DMABUF_ENABLE: "0"
    NCCL_NET_GDR_C2C: "0"
    NCCL_NET_PLUGIN: none
per_host_keys:
  description:
    - Sorted names in RV(env) whose value depends on the node (interface names, HCA list, host IP, GID index).
    - List them in vLLM's C(ray_non_carry_over_env_vars.json) so the Ray executor does not overwrite them with the head's values.
  returned: success
  type: list
  elements: str
  sample: [GLOO_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_SOCKET_IFNAME, OMPI_MCA_btl_tcp_if_include, TP_SOCKET_IFNAME, UCX_NET_DEVICES, VLLM_HOST_IP]
nccl_warnings:
  description:
    - The warnings of the computation (MTU below 9000, non-Ethernet link layer, GID index not a RoCE v2 IPv4 GID, socket transport),
      as plain strings. They are also issued as Ansible warnings.
    - Not named C(warnings), which Ansible reserves for its own warning list.
  returned: success
  type: list
  elements: str
  sample: ["node spark-1: interface enp1s0f1np1 has MTU 1500, below 9000; set dgxspark_mtu to 9000 ..."]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_env import NcclEnvError, compute_nccl_env


def main():
    module = AnsibleModule(
        argument_spec=dict(
            devices=dict(type='list', elements='dict', required=True),
            rails=dict(type='list', elements='str', required=True),
            transport=dict(type='str', default='rdma'),
            gid_index=dict(type='raw'),
            extra_env=dict(type='dict'),
            node=dict(type='str'),
            gpudirect=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = compute_nccl_env(
            devices=params['devices'],
            rails=params['rails'],
            transport=params['transport'],
            gid_index=params['gid_index'],
            extra_env=params['extra_env'],
            node=params['node'],
            gpudirect=params['gpudirect'],
        )
    except NcclEnvError as exc:
        module.fail_json(msg=str(exc))

    for warning in result['warnings']:
        module.warn(warning)
    module.exit_json(changed=False, env=result['env'], per_host_keys=result['per_host_keys'], nccl_warnings=result['warnings'])


if __name__ == '__main__':
    main()
