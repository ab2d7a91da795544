# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""dgxspark-router-nat-watch.sh (roles/fleet_router/files), run with stand-ins for nft and systemctl: the router's table
(its port redirected to the serving instance) gone while its unit is active is loaded again from the file the last swap
loaded, without Ansible, as node_firewall's watch puts the firewall's table back (test_firewall_watch.py); a unit stopped
on purpose is left alone. Then the watch's units as the role renders them."""

from __future__ import annotations

import os
import re
import subprocess

import jinja2
import pytest
import yaml

from stand_ins import path_first, stand_in

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, 'roles', 'fleet_router')
SCRIPT = os.path.join(ROLE, 'files', 'dgxspark-router-nat-watch.sh')
LOG = 'echo "$(basename "$0") $*" >> "$WATCH_LOG"\n'
# nft: the table is there while $TABLE exists; `-f` loads it (creates $TABLE) when TABLE_LOADS is yes.
NFT = ('#!/bin/sh\n' + LOG + 'case "$1" in list) [ -e "$TABLE" ];; '
       '-f) [ "$TABLE_LOADS" = yes ] && [ -f "$2" ] && touch "$TABLE";; *) exit 2;; esac\n')
# systemctl is-active --quiet UNIT: whether the nat unit is active (UNIT_ACTIVE).
SYSTEMCTL = '#!/bin/sh\n' + LOG + '[ "$UNIT_ACTIVE" = yes ]\n'


@pytest.mark.parametrize('unit_active, table_there, file_there, table_loads, rc, loaded, says', [
    # the table is there: nothing to do
    ('yes', True, True, 'yes', 0, False, ''),
    # gone (nft flush ruleset): loaded again from the swap's file, the endpoint is back
    ('yes', False, True, 'yes', 0, True, 'the table inet dgxspark_router is gone; loading'),
    # gone and the file cannot be loaded (nft refuses it): said, and the unit's failure shows in systemctl
    ('yes', False, True, 'no', 1, True, 'cannot be loaded'),
    # gone and no file (no swap ever wrote it): nothing to load
    ('yes', False, False, 'yes', 1, False, 'is missing'),
    # the nat unit stopped on purpose (its ExecStop deleted the table): left as it is
    ('no', False, True, 'yes', 0, False, ''),
])
def test_a_table_gone_is_loaded_again_while_its_unit_is_active(
        tmp_path, unit_active, table_there, file_there, table_loads, rc, loaded, says):
    bindir = tmp_path / 'bin'
    for name, text in (('nft', NFT), ('systemctl', SYSTEMCTL)):
        stand_in(bindir, name, text)
    table, ruleset, log = tmp_path / 'table-loaded', tmp_path / 'dgxspark-router.nft', tmp_path / 'watch.log'
    if table_there:
        table.touch()
    if file_there:
        ruleset.write_text('table inet dgxspark_router {}\n')
    env = dict(os.environ, PATH=path_first(bindir), WATCH_LOG=str(log), TABLE=str(table), TABLE_LOADS=table_loads,
               UNIT_ACTIVE=unit_active)
    proc = subprocess.run(['sh', SCRIPT, 'nft', str(ruleset), 'dgxspark_router', 'dgxspark-router-nat.service'], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    assert says in proc.stdout + proc.stderr, (proc.stdout, proc.stderr)
    calls = log.read_text().splitlines()
    assert calls[0] == 'systemctl is-active --quiet dgxspark-router-nat.service'
    assert ('nft -f %s' % ruleset in calls) == loaded, calls
    assert ('nft list table inet dgxspark_router' in calls) == (unit_active == 'yes'), calls
    # the endpoint is back exactly when the watch loaded the table (or it never left)
    assert table.exists() == (table_there or (loaded and table_loads == 'yes' and unit_active == 'yes')), calls


def render(name):
    with open(os.path.join(ROLE, 'defaults', 'main.yml'), encoding='utf-8') as handle:
        defaults = yaml.safe_load(handle)
    with open(os.path.join(ROLE, 'vars', 'main.yml'), encoding='utf-8') as handle:
        role_vars = {key: value for key, value in yaml.safe_load(handle).items() if '{{' not in str(value)}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, 'templates')), undefined=jinja2.StrictUndefined)
    return env.get_template(name + '.j2').render(dict(defaults, ansible_managed='managed', **role_vars))


def test_the_watch_unit_runs_the_script_on_the_swaps_file_for_the_nat_unit():
    unit = render('dgxspark-router-nat-watch.service')
    exec_start = re.search(r'^ExecStart=(.*)$', unit, re.M).group(1).split()
    assert exec_start == ['/bin/sh', '/usr/local/lib/dgxspark/router/dgxspark-router-nat-watch.sh', '/usr/sbin/nft',
                          '/var/lib/dgxspark/router/dgxspark-router.nft', 'dgxspark_router', 'dgxspark-router-nat.service']
    assert 'After=dgxspark-router-nat.service' in unit and 'Type=oneshot' in unit
    # the nat unit loads the same file at boot and deletes the same table when stopped
    nat = render('dgxspark-router-nat.service')
    assert 'ExecStart=/usr/sbin/nft -f /var/lib/dgxspark/router/dgxspark-router.nft' in nat
    assert 'ExecStop=/usr/sbin/nft delete table inet dgxspark_router' in nat


def test_the_timer_looks_within_the_firewall_watchs_bound():
    """The endpoint is back within the node firewall's 60 s bound (roles/node_firewall/README.md), as often as its watch."""
    with open(os.path.join(ROLE, 'defaults', 'main.yml'), encoding='utf-8') as handle:
        interval = yaml.safe_load(handle)['fleet_router_nat_watch_interval_s']
    with open(os.path.join(ROOT, 'roles', 'node_firewall', 'defaults', 'main.yml'), encoding='utf-8') as handle:
        assert 0 < interval <= yaml.safe_load(handle)['node_firewall_watch_interval_s'] <= 60
    timer = render('dgxspark-router-nat-watch.timer')
    assert 'OnUnitActiveSec=%ds' % interval in timer and 'OnBootSec=%ds' % interval in timer and 'WantedBy=timers.target' in timer


def test_the_role_installs_and_starts_the_watch():
    with open(os.path.join(ROLE, 'tasks', 'install.yml'), encoding='utf-8') as handle:
        tasks = yaml.safe_load(handle)
    names = [task['name'] for task in tasks]
    copy = tasks[names.index("Install the watch that puts the router's table back")]['ansible.builtin.copy']
    assert copy['src'] == 'dgxspark-router-nat-watch.sh' and copy['dest'] == '{{ _fleet_router_nat_watch_script }}'
    start = tasks[names.index("Start the watch of the router's table")]['ansible.builtin.systemd_service']
    assert start['name'] == '{{ _fleet_router_unit_prefix }}-nat-watch.timer' and start['enabled'] is True
    # started once the redirect is loaded (the watch restores a table, it does not make the first one)
    assert names.index("Start the watch of the router's table") > names.index(
        'Keep the serving instance and the port\'s redirect started now and at every boot')
