# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""`docker inspect` of named containers, for the modules that read them (phase_state, serving_release)."""

from __future__ import annotations

import json


def inspect_containers(run_command, docker, names):
    """{name: its docker inspect record} of those of `names` that exist (run_command: AnsibleModule.run_command)."""
    if not names:
        return {}
    # A missing container makes docker inspect exit 1 and still print the others.
    _rc, out, _err = run_command([docker, 'inspect'] + list(names))
    try:
        records = json.loads(out) if out.strip() else []
    except ValueError:
        records = []
    found = {}
    for record in records:
        name = (record.get('Name') or '').lstrip('/')
        if name in names:
            found[name] = record
    return found
