#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: cx7_facts
short_description: Gather ConnectX-7 / RDMA device facts (RDMA device, netdev, state, MTU, IPv4, RoCE v2 GIDs)
version_added: 0.1.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Lists every RDMA device port that has a network interface and returns it as C(ansible_facts.cx7).
  - The device list comes from C(ibdev2netdev -v) when that tool is installed, otherwise from
    C(/sys/class/infiniband). Either way sysfs adds the link layer, operstate, MTU, speed and the GID table,
    and C(ip -j -4 addr show) adds the IPv4 addresses.
  - On DGX Spark (GB10) each physical QSFP port shows up as two netdevs ("twins", C(enp1s0f1np1) and
    C(enP2p1s0f1np1)); the facts name the physical port and the twin so that both can be used as rails.
  - A host without RDMA devices is not an error; it gets an empty device list.
  - The module only reads; it changes nothing.
options:
  sysfs_root:
    description:
      - Directory that holds the sysfs tree, C(class/infiniband) and C(class/net) below it.
      - Change it only to read a copy of a sysfs tree.
    type: path
    default: /sys
  use_ibdev2netdev:
    description:
      - Whether to run C(ibdev2netdev -v) when it is installed.
      - With V(false) the devices are read from sysfs alone, which needs no Mellanox/DOCA tools.
    type: bool
    default: true
  ibdev2netdev_path:
    description:
      - Path of the C(ibdev2netdev) program to run instead of the one found in E(PATH) and the sbin directories.
      - When set, the program must exist. Ignored when O(use_ibdev2netdev=false).
    type: path
  ip_path:
    description:
      - Path of the iproute2 C(ip) program to run instead of the one found in E(PATH) and the sbin directories.
      - When no C(ip) program is found and this option is not set, every device gets an empty C(ipv4) list.
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
  - dgxspark.cluster.attributes.POSIX
notes:
  - The order in which C(ibdev2netdev) prints devices is not fixed; the devices are returned sorted by netdev.
  - C(ibdev2netdev) derives Up/Down from the carrier; in sysfs mode the state is C(Up) when operstate is C(up).
seealso:
  - plugin: dgxspark.cluster.ibdev2netdev
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Gather CX-7 facts
  dgxspark.cluster.cx7_facts:

- name: Show the netdevs that can carry RoCE v2 traffic
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts.cx7.devices
         | selectattr('state', 'equalto', 'Up')
         | selectattr('roce_v2_ipv4_gid_indexes')
         | map(attribute='netdev') | list }}

- name: Read sysfs only, even where the Mellanox tools are installed
  dgxspark.cluster.cx7_facts:
    use_ibdev2netdev: false
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    cx7:
      description: ConnectX-7 / RDMA devices of the host.
      returned: always
      type: dict
      contains:
        source:
          description:
            - Where the device list came from, C(ibdev2netdev) (the tool ran), C(sysfs), or C(none) (no tool and no
              RDMA device in sysfs).
          returned: always
          type: str
          sample: ibdev2netdev
        devices:
          description: One entry per RDMA device port with a netdev, sorted by netdev.
          returned: always
          type: list
          elements: dict
          contains:
            rdma_device:
              description: RDMA device name.
              type: str
              sample: rocep1s0f1
            port:
              description: RDMA port number.
              type: int
              sample: 1
            netdev:
              description: Network interface name.
              type: str
              sample: enp1s0f1np1
            state:
              description: Netdev state as C(ibdev2netdev) prints it, C(Up) or C(Down).
              type: str
              sample: Up
            port_state:
              description: RDMA port state, C(ACTIVE), C(DOWN), C(INIT), C(ARMED) or C(POLLING); null if unknown.
              type: str
              sample: ACTIVE
            link_layer:
              description: Link layer of the RDMA port, C(Ethernet) (RoCE) or C(InfiniBand); null if unknown.
              type: str
              sample: Ethernet
            operstate:
              description: Operational state of the netdev from sysfs; null if unknown.
              type: str
              sample: up
            mtu:
              description: MTU of the netdev; null if unknown.
              type: int
              sample: 9000
            ipv4:
              description: IPv4 addresses of the netdev in CIDR form, in the order C(ip) lists them.
              type: list
              elements: str
              sample: ["192.168.100.10/24"]
            speed_mbps:
              description: Link speed in Mb/s; null when the link is down or the speed is unknown.
              type: int
              sample: 200000
            roce_v2_ipv4_gid_indexes:
              description: GID table indexes whose type is RoCE v2 and whose GID is an IPv4-mapped address.
              type: list
              elements: int
              sample: [3]
            physical_port:
              description: DGX Spark (GB10) physical QSFP port, 0 or 1; null for other netdev names.
              type: int
              sample: 1
            twin:
              description: DGX Spark (GB10) twin, C(a) for C(enp1s0f...), C(b) for C(enP2p1s0f...); null for other names.
              type: str
              sample: a
            pci_address:
              description: PCI address of the device; null if unknown.
              type: str
              sample: "0000:01:00.1"
            description:
              description: Device description printed by C(ibdev2netdev -v); null in sysfs mode.
              type: str
              sample: (MT4129 - NVIDIA ConnectX-7) ConnectX-7 adapter card
            firmware:
              description: Firmware version; null if unknown.
              type: str
              sample: 28.45.1020
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.cx7 import (
    build_device_records,
    parse_ip_addr_json,
    read_sysfs,
)


def _find_program(module, explicit_path, name):
    """The program to run: the explicit path (which must exist) or the one on the search path, else None."""
    if explicit_path:
        if not os.access(explicit_path, os.X_OK) or os.path.isdir(explicit_path):
            module.fail_json(msg="%s is not an executable file; fix or remove the option that points at %s." % (explicit_path, name))
        return explicit_path
    return module.get_bin_path(name)


def _run(module, argv):
    rc, stdout, stderr = module.run_command(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg="%s exited with status %d: %s" % (" ".join(argv), rc, (stderr or stdout).strip()), rc=rc, stdout=stdout, stderr=stderr)
    return stdout


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            use_ibdev2netdev=dict(type="bool", default=True),
            ibdev2netdev_path=dict(type="path"),
            ip_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )

    ibdev2netdev = None
    ibdev2netdev_text = None
    if module.params["use_ibdev2netdev"]:
        ibdev2netdev = _find_program(module, module.params["ibdev2netdev_path"], "ibdev2netdev")
        if ibdev2netdev:
            ibdev2netdev_text = _run(module, [ibdev2netdev, "-v"])

    ipv4_by_netdev = {}
    ip_program = _find_program(module, module.params["ip_path"], "ip")
    if ip_program:
        ip_output = _run(module, [ip_program, "-j", "-4", "addr", "show"])
        try:
            ipv4_by_netdev = parse_ip_addr_json(ip_output)
        except ValueError as exc:
            module.fail_json(msg=str(exc))

    try:
        cx7 = build_device_records(ibdev2netdev_text, read_sysfs(module.params["sysfs_root"]), ipv4_by_netdev)
    except ValueError as exc:
        module.fail_json(msg="%s (ran %s -v; set use_ibdev2netdev: false to read sysfs instead)" % (exc, ibdev2netdev))

    module.exit_json(changed=False, ansible_facts={"cx7": cx7})


if __name__ == "__main__":
    main()
