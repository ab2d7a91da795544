# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which of some systemd unit names are installed, each as the unit it names (an alias such as gdm3.service resolved to
gdm.service): the installed_units module.

Pure logic, stdlib only."""

from __future__ import annotations


def show_argv(systemctl, names):
    """One `systemctl show` for every name: systemd answers with one block per name, in the order given."""
    return [systemctl, 'show', '--property=Id', '--property=LoadState'] + list(names)


def parse_show(text):
    """[{Id, LoadState}] of `systemctl show --property=Id --property=LoadState NAME...`: blocks separated by blank
    lines."""
    blocks, block = [], {}
    for line in text.splitlines() + ['']:
        if not line.strip():
            if block:
                blocks.append(block)
            block = {}
            continue
        key, dummy, value = line.partition('=')
        block[key] = value
    return blocks


def installed(names, text):
    """The units of ``names`` systemd can load (LoadState other than not-found), each once, in the order first named."""
    blocks = parse_show(text)
    if len(blocks) != len(names):
        raise ValueError('systemctl show answered %d units for %d names' % (len(blocks), len(names)))
    units = []
    for block in blocks:
        if block.get('LoadState') != 'not-found' and block.get('Id') and block['Id'] not in units:
            units.append(block['Id'])
    return units
