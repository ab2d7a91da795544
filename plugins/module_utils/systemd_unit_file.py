# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A systemd unit the collection writes itself, running and enabled, or stopped and gone: the systemd_unit_file module.

Pure logic, stdlib only: which steps bring the unit from what the node has to what is asked."""

from __future__ import annotations

import re

UNIT_NAME_RE = re.compile(r'^[A-Za-z0-9:_.\\@-]+\.(service|timer|path|socket|mount|target)$')
# `systemctl is-active`: what counts as running (a oneshot unit with RemainAfterExit=yes stays active once it ran).
ACTIVE = ('active', 'reloading', 'activating')


def check_name(name):
    if not UNIT_NAME_RE.match(name or ''):
        raise ValueError('%r is not a systemd unit name (NAME.service, NAME.timer, ...)' % (name,))
    return name


def steps(name, state, before, content, enabled, active):
    """The steps, in order, from the node's unit (``before``: its file's text or None; ``enabled``/``active``: what
    `systemctl is-enabled`/`is-active` printed) to ``state``: 'write' and 'remove' act on the file, every other step is
    a systemctl argv tail. A unit whose file changed while it runs is restarted, so that it runs with the new file."""
    if state == 'absent':
        return [['disable', '--now', name], 'remove', ['daemon-reload']] if before is not None else []
    result = []
    written = before != content
    if written:
        result += ['write', ['daemon-reload']]
    if (enabled or '').strip() != 'enabled':
        result.append(['enable', name])
    if (active or '').strip() not in ACTIVE:
        result.append(['start', name])
    elif written:
        result.append(['restart', name])
    return result
