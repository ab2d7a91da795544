# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/init.yml end to end on the controller: four local "nodes" whose sysfs are GB10 trees in the kernel's layout
(test_cx7's), a Hugging Face cache, and the head's `docker image ls` replayed from a recorded listing. The draft it writes
must plan; a re-run changes nothing; an edited file is never replaced without consent."""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess
import sys

import pytest

from test_cx7 import make_gb10_sysfs
from test_inventory_draft import RECORDED_IMAGE_LINE
from test_plan_playbook import ANSIBLE_PLAYBOOK, ROOT, run_plan

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='run `make setup` first (.venv/bin/ansible-playbook)')
NODES = ['spark-01', 'spark-02', 'spark-03', 'spark-04']
REPO_DIR = 'models--Qwen--Qwen3.5-397B-A17B-FP8'


@pytest.fixture(name='site')
def fixture_site(tmp_path):
    """The source inventory (hosts only, local connections), each node's sysfs, the cache, and a replayed docker."""
    lines = ['all:', '  hosts:']
    for host in NODES:
        root = make_gb10_sysfs(tmp_path / 'sysfs' / host)
        lines += ['    %s:' % host, '      ansible_connection: local', '      ansible_python_interpreter: %s' % sys.executable,
                  '      dgxspark_cx7_sysfs_root: %s' % root]
    (tmp_path / 'source').mkdir()
    (tmp_path / 'source' / 'hosts.yml').write_text('\n'.join(lines) + '\n', encoding='utf-8')
    snapshot = tmp_path / 'hf' / 'hub' / REPO_DIR / 'snapshots' / '0123abcd'
    snapshot.mkdir(parents=True)
    (snapshot / 'config.json').write_text('{}', encoding='utf-8')
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (tmp_path / 'images.txt').write_text(RECORDED_IMAGE_LINE + '\n' + RECORDED_IMAGE_LINE.replace(
        '"Repository":"dgxspark-lab/node"', '"Repository":"nvcr.io/nvidia/vllm"').replace('"Tag":"22eaaf0cd066"', '"Tag":"26.10-py3"') + '\n')
    docker = bin_dir / 'docker'
    docker.write_text('#!/bin/sh\n# replays the recorded `docker image ls --format {{json .}}` listing\ncat %s\n' % (tmp_path / 'images.txt'))
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def run_init(site, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0',
               PATH='%s:%s' % (site / 'bin', os.environ['PATH']))
    return subprocess.run([ANSIBLE_PLAYBOOK, os.path.join('playbooks', 'init.yml'), '-i', str(site / 'source'),
                           '-e', 'dgxspark_model_dir=%s' % (site / 'hf')] + list(extra),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL)


def test_init_writes_a_draft_that_plans_and_keeps_edits(site):
    out = site / 'mine'
    first = run_init(site, '-e', 'dgxspark_init_dir=%s' % out, '-e', 'dgxspark_init_client_cidrs=10.20.0.0/24')
    assert first.returncode == 0, first.stdout + first.stderr
    group_vars = (out / 'group_vars' / 'all' / 'main.yml').read_text(encoding='utf-8')
    for text in ('dgxspark_model_profile: qwen3_5_397b_a17b_fp8', 'dgxspark_tensor_parallel_size: 4',
                 'interface: enP2p1s0f1np1', 'subnet: 192.168.101.0/24', 'dgxspark_api_allowed_cidrs: [10.20.0.0/24]',
                 'dgxspark_serving_image: nvcr.io/nvidia/vllm:26.10-py3', 'Its weights (Qwen/Qwen3.5-397B-A17B-FP8) are in',
                 '4 Sparks: behind a switch'):
        assert text in group_vars, (text, group_vars)
    assert 'head:\n      hosts:\n        spark-01:\n          ansible_host: spark-01' in (out / 'hosts.yml').read_text(encoding='utf-8')
    assert 'Next: ansible-playbook dgxspark.cluster.plan -i %s' % out in first.stdout

    planned = run_plan(str(out))
    assert planned.returncode == 0, planned.stdout + planned.stderr
    for text in ('TP 4 x PP 1 = 4 GPUs on 4 nodes', '3     spark-04', '192.168.101.13'):
        assert text in planned.stdout, (text, planned.stdout)

    again = run_init(site, '-e', 'dgxspark_init_dir=%s' % out, '-e', 'dgxspark_init_client_cidrs=10.20.0.0/24')
    assert again.returncode == 0 and 'changed=0' in again.stdout, again.stdout + again.stderr
    assert 'hosts.yml unchanged, group_vars/all/main.yml unchanged' in ' '.join(again.stdout.split())

    edited = group_vars.replace('dgxspark_mtu: 9000', 'dgxspark_mtu: 9000  # my switch')
    (out / 'group_vars' / 'all' / 'main.yml').write_text(edited, encoding='utf-8')
    refused = run_init(site, '-e', 'dgxspark_init_dir=%s' % out, '-e', 'dgxspark_init_client_cidrs=10.20.0.0/24')
    assert refused.returncode != 0
    assert 'main.yml was changed since init wrote it: nothing was written' in refused.stdout, refused.stdout
    assert '-e dgxspark_init_force=true --check --diff' in refused.stdout
    assert (out / 'group_vars' / 'all' / 'main.yml').read_text(encoding='utf-8') == edited

    checked = run_init(site, '-e', 'dgxspark_init_dir=%s' % out, '-e', 'dgxspark_init_client_cidrs=10.20.0.0/24',
                       '-e', 'dgxspark_init_force=true', '--check', '--diff')
    assert checked.returncode == 0 and 'changed=1' in checked.stdout, checked.stdout + checked.stderr
    assert '-dgxspark_mtu: 9000  # my switch\n+dgxspark_mtu: 9000\n' in checked.stdout, checked.stdout
    assert (out / 'group_vars' / 'all' / 'main.yml').read_text(encoding='utf-8') == edited
    forced = run_init(site, '-e', 'dgxspark_init_dir=%s' % out, '-e', 'dgxspark_init_client_cidrs=10.20.0.0/24',
                      '-e', 'dgxspark_init_force=true')
    assert forced.returncode == 0 and 'changed=1' in forced.stdout, forced.stdout + forced.stderr
    assert (out / 'group_vars' / 'all' / 'main.yml').read_text(encoding='utf-8') == group_vars


def test_init_without_a_client_network_says_so(site):
    # A user other than root (the local connection ignores it) is written with become.
    result = run_init(site, '-e', 'dgxspark_init_dir=%s' % (site / 'mine'), '-e', 'dgxspark_init_client_cidrs=',
                      '-e', 'ansible_user=nvidia')
    assert result.returncode == 0, result.stdout + result.stderr
    group_vars = (site / 'mine' / 'group_vars' / 'all' / 'main.yml').read_text(encoding='utf-8')
    assert 'dgxspark_api_allowed_cidrs: []' in group_vars and 'none given, so only the nodes and the rails can' in group_vars
    assert 'ansible_user: nvidia\nansible_become: true\n' in group_vars, group_vars
    planned = run_plan(str(site / 'mine'))
    assert planned.returncode == 0, planned.stdout + planned.stderr


@pytest.mark.parametrize('extra, broken_node, expected', [
    ([], None, 'Name where the draft goes: -e dgxspark_init_dir=~/my-cluster'),
    (['-e', 'dgxspark_init_dir={out}'], 'spark-03', 'spark-03 has no link on enp1s0f1np1, enP2p1s0f1np1, which the head spark-01 has'),
    (['-e', 'dgxspark_init_dir={out}', '-e', 'dgxspark_init_model_profile=qwen3_vl_235b_a22b_awq',
      '-e', 'dgxspark_init_client_cidrs=10.20.0.0/33'], None, "dgxspark_init_client_cidrs: '10.20.0.0/33' is not an IPv4 network"),
])
def test_init_refusals_write_nothing(site, extra, broken_node, expected):
    if broken_node:
        for netdev in ('enp1s0f1np1', 'enP2p1s0f1np1'):
            (site / 'sysfs' / broken_node / 'class' / 'net' / netdev / 'operstate').write_text('down\n', encoding='utf-8')
    out = site / 'mine'
    clients = [] if any('client' in part for part in extra) else ['-e', 'dgxspark_init_client_cidrs=']
    result = run_init(site, *[part.format(out=out) for part in extra], *clients)
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr, result.stdout + result.stderr
    assert not pathlib.Path(out).exists()
    if not extra:  # refused before any node was read
        assert 'PLAY [Read what every node reports]' not in result.stdout, result.stdout
