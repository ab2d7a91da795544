#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_daemon_json
short_description: Merge keys into Docker's daemon.json, keeping every other key
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Reads O(path) (a missing or empty file is an empty object), merges O(merge) into it (objects key by key at every
    depth, any other value replaced) and writes it back, mode 0644, only when the result differs as data; an equal file
    in another layout is left untouched.
  - A file that is not a JSON object (unparsable, or an array) is refused and never overwritten.
  - With O(service), where that unit is not installed it does nothing (RV(installed) false), and it refuses, changing
    nothing, a key that the unit's command line (its C(ExecStart)) also gives dockerd as a flag (C(--KEY) or, for a key
    that holds several values, its singular, as C(--default-ulimit) for C(default-ulimits)), since dockerd refuses to
    start when a directive is both a flag and in daemon.json.
  - It does not restart Docker; notify a handler when it reports changed.
options:
  path:
    description: Docker's daemon configuration file.
    type: path
    default: /etc/docker/daemon.json
  merge:
    description: "The keys to merge in, for example C(default-ulimits) with its C(memlock) entry."
    type: dict
    required: true
  service:
    description: Docker's systemd unit (V(docker) or V(docker.service)); unset, the file is merged whether or not Docker is
      installed, and its command line is not read.
    type: str
  systemctl:
    description: The systemctl program (default the one on the PATH; another for tests only).
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode reports whether the file would change and writes nothing.
  diff_mode:
    support: full
    details: The diff shows the file before and after.
"""

EXAMPLES = r"""
- name: Give every container an unlimited memlock limit by default
  dgxspark.cluster.docker_daemon_json:
    service: docker
    merge:
      default-ulimits:
        memlock: {Name: memlock, Soft: -1, Hard: -1}
  notify: Restart Docker
"""

RETURN = r"""
installed:
  description: Whether O(service) is installed (true where O(service) is unset).
  returned: success
  type: bool
  sample: true
config:
  description: The configuration after the merge (what the file holds now, or would hold in check mode).
  returned: success, where O(service) is unset or installed
  type: dict
  sample: {"storage-driver": "overlay2", "default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}}}
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.docker_daemon_json import (
    DaemonJsonError, flag_conflicts, merged, parse, render)
from ansible_collections.dgxspark.cluster.plugins.module_utils.installed_units import parse_show


def read_text(path):
    try:
        with open(path, 'r') as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', default='/etc/docker/daemon.json'),
            merge=dict(type='dict', required=True),
            service=dict(type='str'),
            systemctl=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    path, service = module.params['path'], module.params['service']
    if service:
        unit = service if service.endswith('.service') else service + '.service'
        systemctl = module.params['systemctl'] or module.get_bin_path('systemctl', required=True)
        dummy, out, dummy = module.run_command([systemctl, 'show', '--property=LoadState', '--property=ExecStart', unit],
                                               check_rc=True)
        shown = (parse_show(out) or [{}])[0]
        if shown.get('LoadState', 'not-found') == 'not-found':
            module.exit_json(changed=False, installed=False)
        flags = flag_conflicts(shown.get('ExecStart'), module.params['merge'])
        if flags:
            module.fail_json(msg='%s starts dockerd with %s; dockerd refuses to start when a directive is both a flag and in '
                                 'daemon.json. Remove the flag (systemd drop-in) or do not merge it into %s. Docker\'s '
                                 'configuration was not changed.' % (unit, ', '.join(flags), path))
    text = read_text(path)
    try:
        current = parse(text)
    except DaemonJsonError as exc:
        module.fail_json(msg='%s is not a valid JSON object (%s). Fix or remove it: a file that cannot be parsed is never '
                             'overwritten; it was not changed.' % (path, exc))
    desired = merged(current, module.params['merge'])
    result = dict(changed=desired != current, installed=True, config=desired)
    if result['changed']:
        if module._diff:
            result['diff'] = dict(before_header=path, after_header=path, before=text or '', after=render(desired))
        if not module.check_mode:
            handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.daemon.json.')
            with os.fdopen(handle, 'w') as out:
                out.write(render(desired))
            module.atomic_move(temporary, path)
            # atomic_move keeps the old file's mode; the file is Docker's, readable by all, as the role always wrote it.
            os.chmod(path, 0o644)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
