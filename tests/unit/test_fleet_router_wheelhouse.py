# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet router's wheelhouse (plugin_utils/fleet_router.py wheelhouse, download_args; issue 51 item 2): named and
downloaded for the router node's own CPython and platform, as its Python reports them (roles/fleet_router's first task),
and the role's start script and unit naming what the proxy's config and command line expect."""

from __future__ import annotations

import os
import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter.fleet_router import fleet_router_download_args, fleet_router_wheelhouse
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import fleet_router

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, 'roles', 'fleet_router')
DIGEST = 'c96fc937cb9d' + '0' * 52
# What the role's first task prints on real nodes: the lab's Debian 12, DGX OS 7 (Ubuntu 24.04 on aarch64).
DEBIAN_12 = {'implementation': 'cpython', 'python': '3.11.2', 'machine': 'x86_64', 'glibc': '2.36'}
DGX_OS_7 = {'implementation': 'cpython', 'python': '3.12.3', 'machine': 'aarch64', 'glibc': '2.39'}


@pytest.mark.parametrize('node, name, version, newest, count', [
    (DEBIAN_12, 'wheelhouse-c96fc937cb9d-cp311-manylinux_2_36_x86_64', '3.11', 'manylinux_2_36_x86_64', 36 - 17 + 1),
    (DGX_OS_7, 'wheelhouse-c96fc937cb9d-cp312-manylinux_2_39_aarch64', '3.12', 'manylinux_2_39_aarch64', 39 - 17 + 1),
    (dict(DEBIAN_12, glibc='2.17'), 'wheelhouse-c96fc937cb9d-cp311-manylinux_2_17_x86_64', '3.11', 'manylinux_2_17_x86_64', 1),
    (dict(DEBIAN_12, python='3.13.0rc1'), 'wheelhouse-c96fc937cb9d-cp313-manylinux_2_36_x86_64', '3.13',
     'manylinux_2_36_x86_64', 20),
], ids=['debian-12-x86_64', 'dgx-os-7-aarch64', 'oldest-glibc', 'release-candidate'])
def test_the_wheelhouse_is_the_nodes_python_and_platform(node, name, version, newest, count):
    house = fleet_router.wheelhouse(node, DIGEST)
    assert house['name'] == name and house['python_version'] == version and house['implementation'] == 'cp'
    machine = node['machine']
    # every manylinux_2_N from the node's glibc down to 2_17, newest first, then manylinux2014 (pip adds 2010 and 1)
    assert house['platforms'][0] == newest and house['platforms'][-2] == 'manylinux_2_17_' + machine
    assert house['platforms'][-1] == 'manylinux2014_' + machine and len(house['platforms']) == count + 1


def test_another_lock_is_another_wheelhouse():
    assert fleet_router.wheelhouse(DEBIAN_12, 'ab' * 32)['name'] != fleet_router.wheelhouse(DEBIAN_12, DIGEST)['name']


@pytest.mark.parametrize('node, digest, message', [
    (dict(DEBIAN_12, implementation='pypy'), DIGEST, "Python is 'pypy', not CPython"),
    (dict(DEBIAN_12, python='3.8.10'), DIGEST, 'Python is 3.8: LiteLLM needs 3.9 or newer'),
    (dict(DEBIAN_12, python='three'), DIGEST, "Python is 'three', not a version of 2 numbers (as 3.11)"),
    (dict(DEBIAN_12, machine='armv7l'), DIGEST, "router node is 'armv7l': the router is installed on x86_64 or aarch64 only"),
    (dict(DEBIAN_12, glibc='2.12'), DIGEST, "glibc is 2.12: the lock's wheels need 2.17 or newer"),
    (dict(DEBIAN_12, glibc=None), DIGEST, "glibc is None, not a version of 2 numbers (as 2.36)"),
    (DEBIAN_12, 'not-a-digest', "the lock digest is 'not-a-digest', not a sha256 in hex"),
    (DEBIAN_12, '', "the lock digest is '', not a sha256 in hex"),
], ids=['pypy', 'old-python', 'no-version', 'armv7', 'old-glibc', 'no-glibc', 'bad-digest', 'no-digest'])
def test_a_node_the_wheels_cannot_fit_is_refused_clearly(node, digest, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        fleet_router.wheelhouse(node, digest)
    # the filter names itself in front of the same message
    with pytest.raises(AnsibleFilterError, match=re.escape('fleet_router_wheelhouse: ') + '.*' + re.escape(message)):
        fleet_router_wheelhouse(node, digest)


def test_download_is_wheels_only_pinned_for_the_node():
    house = fleet_router.wheelhouse(dict(DEBIAN_12, glibc='2.18'), DIGEST)
    assert fleet_router.download_args(house, ['/r/lock'], '/cache/house', ['pip==26.3']) == [
        'download', '--disable-pip-version-check', '--no-deps', '--only-binary=:all:', '--implementation', 'cp',
        '--python-version', '3.11', '--platform', 'manylinux_2_18_x86_64', '--platform', 'manylinux_2_17_x86_64',
        '--platform', 'manylinux2014_x86_64', '--dest', '/cache/house', '--requirement', '/r/lock', 'pip==26.3']


@pytest.mark.parametrize('spec', ['pip', 'pip>=26', 'pip~=26.3'])
def test_a_spec_that_is_no_pin_is_refused(spec):
    house = fleet_router.wheelhouse(DEBIAN_12, DIGEST)
    with pytest.raises(AnsibleFilterError, match=re.escape('fleet_router_download_args: %r is no exact pin' % spec)):
        fleet_router_download_args(house, ['/r/lock'], '/d', [spec])


def _read(*parts):
    with open(os.path.join(ROLE, *parts), encoding='utf-8') as handle:
        return handle.read()


def test_the_start_script_fills_the_variables_the_config_names():
    script = _read('templates', 'start.sh.j2')
    for name in (fleet_router.MASTER_KEY_ENV, fleet_router.UPSTREAM_KEY_ENV):
        assert re.search(r'^export .*\b%s\b' % name, script, re.M), name
    assert 'exec ' in script


def test_the_unit_and_the_script_name_files_only():
    unit, script = _read('templates', 'dgxspark-router@.service.j2'), _read('templates', 'start.sh.j2')
    # the TLS files where the tasks copy them, as the command line names them
    tasks = _read('tasks', 'install.yml')
    for name in fleet_router.TLS_CREDENTIALS.values():
        assert '_fleet_router_config_dir }}/%s"' % name in tasks, name
    assert "fleet_router_args(_fleet_router_config_file, _fleet_router_config_dir, '${port}', fleet_router_workers | int)" in script
    assert 'cat {{ _fleet_router_key_file }}' in script
    # no key in the unit: it names files only, and its user is not root
    assert not re.search(r'Environment=.*(KEY|key)=', unit) and 'User={{ _fleet_router_user }}' in unit
