# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""logind's RemoveIPC through a drop-in, and whether the running logind must be restarted: the logind_remove_ipc module.

Pure logic, stdlib only."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils.preflight_facts import parse_busctl_bool

# The text the role has always written (a node converged before keeps its file byte for byte).
DROPIN = ('# Managed by dgxspark.cluster (os_hardening, tag os_logind): logind keeps the semaphores and shared memory of a\n'
          '# user whose last session ends, so that an engine started over SSH does not hang in its next collective.\n'
          '[Login]\n'
          'RemoveIPC=no\n')

BUSCTL_ARGV = ['--timeout=5', 'get-property', 'org.freedesktop.login1', '/org/freedesktop/login1',
               'org.freedesktop.login1.Manager', 'RemoveIPC']


def dropin_text(keep_ipc):
    """The drop-in's text, or None where it must not exist (systemd's default, RemoveIPC=yes, then holds)."""
    return DROPIN if keep_ipc else None


def running_remove_ipc(rc, output):
    """The running logind's RemoveIPC from `busctl get-property ...` (rc, stdout); None where busctl could not tell (no
    logind, no D-Bus)."""
    return parse_busctl_bool(output) if rc == 0 else None


def restart_needed(keep_ipc, running):
    """Whether logind runs with another RemoveIPC than its files now set; never where its value is unknown."""
    return running is not None and running != (not keep_ipc)
