# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every container the collection starts drops Docker's default capabilities and gains no privilege (issue 49): the
serving containers, the model download and the NCCL test alike. Read from this checkout's task files (a container task
with an image, its block's module_defaults included) and from the NCCL test's command line."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.module_utils.model_download import download_argv
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.fabric_role import nccl_argv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = 'community.docker.docker_container'


def container_tasks(tasks, path, defaults=None):
    """(file, task name, its arguments with the enclosing blocks' module_defaults) of every docker_container task."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        inherited = dict(defaults or {})
        inherited.update((task.get('module_defaults') or {}).get(MODULE) or {})
        for key in ('block', 'rescue', 'always'):
            yield from container_tasks(task.get(key), path, inherited)
        if isinstance(task.get(MODULE), dict):
            yield path, task.get('name'), dict(inherited, **task[MODULE])


def starting_tasks():
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, 'roles', '*', 'tasks', '*.yml'))
                       + glob.glob(os.path.join(ROOT, 'playbooks', 'tasks', '*.yml'))):
        with open(path, encoding='utf-8') as handle:
            tasks = yaml.safe_load(handle)
        found.extend(t for t in container_tasks(tasks, os.path.relpath(path, ROOT))
                     if t[2].get('image') and t[2].get('state', 'started') in ('started', 'present'))
    return found


TASKS = starting_tasks()


def test_the_scan_finds_every_kind_of_container_the_collection_starts():
    names = ' | '.join('%s: %s' % (path, name) for path, name, _args in TASKS)
    for expected in ('ray_cluster/tasks/container.yml', 'vllm_container/tasks/container.yml',
                     'playbooks/tasks/release_container.yml'):
        assert expected in names, names


@pytest.mark.parametrize('path, name, args', TASKS, ids=['%s: %s' % (t[0], t[1]) for t in TASKS])
def test_each_container_drops_every_default_capability_and_gains_no_privilege(path, name, args):
    assert args.get('cap_drop') in (['ALL'], '{{ _dgxspark_release_spec.cap_drop }}'), (path, name, args.get('cap_drop'))
    assert args.get('security_opts') in (['no-new-privileges'], '{{ _dgxspark_release_spec.security_opts }}'), (path, name)
    assert not args.get('privileged'), (path, name)


def test_the_download_container_is_hardened_whatever_env_and_volumes_it_is_given():
    argv = download_argv('docker', 'dgxspark-model-download', 'img', 'o/r', 'main', '/hub', '/token', {'A': 'b'}, ['/x:/x'])
    image = argv.index('img')
    assert argv[argv.index('--cap-drop') + 1] == 'ALL' and argv[argv.index('--security-opt') + 1] == 'no-new-privileges'
    assert '--privileged' not in argv[:image] and '--cap-add' not in argv[:image]


def test_the_nccl_test_container_is_hardened_whatever_docker_args_it_is_given():
    plan = {'nodes': [{'host': 'a', 'rank': 0, 'rail_addresses': {'rail1': '192.168.100.10'}},
                      {'host': 'b', 'rank': 1, 'rail_addresses': {'rail1': '192.168.100.11'}}],
            'rails': [{'name': 'rail1', 'interface': 'enp1s0f0np0'}]}
    argv = nccl_argv(plan, 'b', 'img', ['--ipc=host', '--network=host'], 29533, 'all_reduce', 1024)
    image = argv.index('img')
    assert {'--cap-drop=ALL', '--cap-add=IPC_LOCK', '--security-opt=no-new-privileges'} <= set(argv[:image])
