# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory draft of playbooks/init.yml: rails, addresses, topology, model, image and the file states, over cx7_facts'
records of real GB10 `ibdev2netdev` and `ip -j -4 addr` output, a real `docker image ls` listing, and the plan itself."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.action.cluster_plan import BUILTIN_PROFILES_DIR, load_profiles
from ansible_collections.dgxspark.cluster.plugins.action.inventory_draft import choose_model
from ansible_collections.dgxspark.cluster.plugins.module_utils.cx7 import build_device_records, parse_ip_addr_json
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import inventory_draft as draft

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures')
PROFILES = load_profiles([BUILTIN_PROFILES_DIR])[0]
NODES4 = ['spark-01', 'spark-02', 'spark-03', 'spark-04']


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts), encoding='utf-8') as handle:
        return handle.read()


def gb10_devices(ibdev2netdev='gb10_ibdev2netdev.txt', ip_json=None, rank=None, replace=None):
    """One node's cx7 devices from the recorded GB10 output; ip_json with its addresses (.10 moved to .1<rank>)."""
    text = fixture('cx7', ibdev2netdev)
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    addresses = {}
    if ip_json:
        raw = fixture('cx7', ip_json)
        if rank is not None:
            raw = raw.replace('192.168.100.10"', '192.168.100.1%d"' % rank).replace('192.168.101.10"', '192.168.101.1%d"' % rank)
        addresses = parse_ip_addr_json(raw)
    return build_device_records(text, [], addresses)['devices']


def fresh(nodes):
    return dict((host, gb10_devices()) for host in nodes)


RAILS_DEFAULT = [
    {'name': 'rail1', 'interface': 'enp1s0f1np1', 'subnet': '192.168.100.0/24', 'address_offset': 10},
    {'name': 'rail2', 'interface': 'enP2p1s0f1np1', 'subnet': '192.168.101.0/24', 'address_offset': 10},
]


@pytest.mark.parametrize('ibdev2netdev', ['gb10_ibdev2netdev.txt', 'gb10_ibdev2netdev_nvidia_order.txt', 'gb10_ibdev2netdev_v.txt'])
def test_fresh_nodes_get_the_shipped_rails(ibdev2netdev):
    devices = dict((host, gb10_devices(ibdev2netdev)) for host in NODES4)
    rails, host_addresses, notes = draft.draft_rails(NODES4, devices)
    assert rails == RAILS_DEFAULT
    assert host_addresses == {} and notes == []


def test_addresses_the_nodes_have_are_kept_with_their_offset():
    devices = dict((host, gb10_devices(ip_json='ip_addr_gb10.json', rank=rank)) for rank, host in enumerate(NODES4))
    rails, host_addresses, notes = draft.draft_rails(NODES4, devices)
    assert [(r['subnet'], r['address_offset']) for r in rails] == [('192.168.100.0/24', 10), ('192.168.101.0/24', 10)]
    assert host_addresses == {}
    assert any('kept (192.168.100.0/24)' in note for note in notes), notes


def test_addresses_off_the_pattern_are_kept_per_node():
    devices = dict((host, gb10_devices(ip_json='ip_addr_gb10.json', rank=rank)) for rank, host in enumerate(NODES4))
    devices['spark-03'] = gb10_devices(ip_json='ip_addr_gb10.json', rank=7)
    rails, host_addresses = draft.draft_rails(NODES4, devices)[:2]
    assert rails[0]['address_offset'] == 10
    assert host_addresses['spark-03'] == {'rail1': '192.168.100.17', 'rail2': '192.168.101.17'}
    assert host_addresses['spark-01'] == {'rail1': '192.168.100.10', 'rail2': '192.168.101.10'}


def test_some_nodes_addressed_falls_back_to_a_free_subnet():
    devices = fresh(NODES4)
    devices['spark-01'] = gb10_devices(ip_json='ip_addr_gb10.json', rank=0)
    rails, host_addresses, notes = draft.draft_rails(NODES4, devices)
    # 192.168.100/101 are taken by spark-01's own addresses: the defaults move on, never onto a network a node uses.
    assert [r['subnet'] for r in rails] == ['192.168.102.0/24', '192.168.103.0/24']
    assert host_addresses == {} and any('not every node in one subnet' in note for note in notes)


@pytest.mark.parametrize('broken, replace, expected', [
    ('spark-03', {'enp1s0f1np1 (Up)': 'enp1s0f1np1 (Down)'},
     'spark-03 has no link on enp1s0f1np1, which the head spark-01 has (spark-03 has links on enP2p1s0f1np1)'),
    ('spark-02', {'(Up)': '(Down)'}, 'spark-02 has no link on enp1s0f1np1, enP2p1s0f1np1, which the head spark-01 has'),
    ('spark-01', {'(Up)': '(Down)'}, 'No ConnectX-7 port of the head spark-01 has a link (enP2p1s0f0np0 Down'),
])
def test_missing_links_name_the_node_and_port(broken, replace, expected):
    devices = fresh(NODES4)
    devices[broken] = gb10_devices(replace=replace)
    with pytest.raises(draft.InventoryDraftError) as caught:
        draft.draft_rails(NODES4, devices)
    assert any(expected in problem for problem in caught.value.problems), caught.value.problems


def test_a_head_without_rdma_devices_is_refused():
    devices = fresh(NODES4)
    devices['spark-01'] = []
    with pytest.raises(draft.InventoryDraftError, match='reports no ConnectX-7'):
        draft.draft_rails(NODES4, devices)


def test_a_worker_link_the_head_lacks_is_a_note():
    devices = fresh(NODES4)
    devices['spark-04'] = gb10_devices(replace={'enp1s0f0np0 (Down)': 'enp1s0f0np0 (Up)'})
    rails, notes = draft.draft_rails(NODES4, devices)[::2]
    assert rails == RAILS_DEFAULT
    assert 'spark-04 also has a link on enp1s0f0np0, which the head has not: not used as a rail.' in notes
    assert any('spark-04: only one twin of port 0' in n for n in draft.link_notes(NODES4, devices, rails, 9000))


@pytest.mark.parametrize('nodes, link_local, expected', [
    (['a', 'b'], False, 'Two Sparks: a direct cable (port to the same port) or a switch'),
    (['a', 'b'], True, 'Two Sparks: one cable between them (link-local addresses'),
    (NODES4, False, '4 Sparks: behind a switch'),
])
def test_topology_notes(nodes, link_local, expected):
    devices = fresh(nodes)
    if link_local:
        for host in nodes:
            devices[host][1]['ipv4'] = ['169.254.12.%d/16' % (nodes.index(host) + 1)]
    rails = draft.draft_rails(nodes, devices)[0]
    assert any(note.startswith(expected) for note in draft.link_notes(nodes, devices, rails, 9000))


def test_low_mtu_and_speed_are_noted():
    devices = fresh(['a', 'b'])
    for host in devices:
        for device in devices[host]:
            device.update(mtu=1500, speed_mbps=100000)
    notes = draft.link_notes(['a', 'b'], devices, RAILS_DEFAULT, 9000)
    assert 'MTU below 9000 now (enp1s0f1np1 1500 on every node, enP2p1s0f1np1 1500 on every node): the network phase sets 9000.' in notes, notes
    devices['a'][3]['mtu'] = 9000  # enp1s0f1np1 of node a
    notes = draft.link_notes(['a', 'b'], devices, RAILS_DEFAULT, 9000)
    assert any(n.startswith('MTU below 9000 now (enp1s0f1np1 1500 on b, enP2p1s0f1np1 1500 on every node)') for n in notes), notes
    assert any('Links at 100000 Mb/s' in n for n in notes), notes


# `docker image ls --format '{{json .}}'`: the first line recorded from Docker 28.2 on this project's lab host (it escapes
# <none>); the others constructed in the same layout.
RECORDED_IMAGE_LINE = (
    '{"Containers":"N/A","CreatedAt":"2026-12-03 12:49:46 +0000 UTC","CreatedSince":"2 minutes ago","Digest":"\\u003cnone\\u003e",'
    '"ID":"54c01b02001c","Repository":"dgxspark-lab/node","SharedSize":"N/A","Size":"872MB","Tag":"22eaaf0cd066",'
    '"UniqueSize":"N/A","VirtualSize":"871.7MB"}')
IMAGE_LINES = RECORDED_IMAGE_LINE + '\n' + '\n'.join(json.dumps(entry) for entry in [
    {"Containers": "N/A", "CreatedAt": "2026-12-01 10:02:11 +0000 UTC", "CreatedSince": "2 days ago", "Digest": "<none>",
     "ID": "3f1c0d7b9a21", "Repository": "nvcr.io/nvidia/vllm", "SharedSize": "N/A", "Size": "21.4GB", "Tag": "26.10-py3",
     "UniqueSize": "N/A", "VirtualSize": "21.4GB"},
    {"Containers": "N/A", "CreatedAt": "2026-11-20 08:00:00 +0000 UTC", "CreatedSince": "2 weeks ago", "Digest": "<none>",
     "ID": "9d2e1f0a8b7c", "Repository": "<none>", "SharedSize": "N/A", "Size": "1.2GB", "Tag": "<none>",
     "UniqueSize": "N/A", "VirtualSize": "1.2GB"},
    {"Containers": "N/A", "CreatedAt": "2026-11-19 08:00:00 +0000 UTC", "CreatedSince": "2 weeks ago", "Digest": "<none>",
     "ID": "1a2b3c4d5e6f", "Repository": "ubuntu", "SharedSize": "N/A", "Size": "78MB", "Tag": "24.04",
     "UniqueSize": "N/A", "VirtualSize": "78MB"},
])


@pytest.mark.parametrize('text, expected', [
    (IMAGE_LINES, ('nvcr.io/nvidia/vllm:26.10-py3', True)),
    (IMAGE_LINES + '\n' + json.dumps({'Repository': 'vllm/vllm-openai', 'Tag': 'v0.33.0'}), (draft.DEFAULT_IMAGE, True)),
    (RECORDED_IMAGE_LINE, (draft.DEFAULT_IMAGE, False)),
    (IMAGE_LINES.split('\n')[3], (draft.DEFAULT_IMAGE, False)),
    ('', (draft.DEFAULT_IMAGE, False)),
    ('Cannot connect to the Docker daemon at unix:///var/run/docker.sock.', (draft.DEFAULT_IMAGE, False)),
])
def test_image_on_the_head(text, expected):
    assert draft.choose_image(draft.parse_image_list(text)) == expected


def test_image_list_keeps_tagged_images_only():
    assert draft.parse_image_list(IMAGE_LINES) == ['dgxspark-lab/node:22eaaf0cd066', 'nvcr.io/nvidia/vllm:26.10-py3', 'ubuntu:24.04']


def test_hub_repos_need_a_snapshot_config():
    paths = ['/root/.cache/huggingface/hub/models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/1f2e3d/config.json',
             '/root/.cache/huggingface/hub/models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/aaaa/config.json',
             '/root/.cache/huggingface/hub/models--org--half/blobs/config.json',
             '/root/.cache/huggingface/hub/datasets--x--y/snapshots/1/config.json']
    assert draft.hub_repos(paths) == ['Qwen/Qwen3.5-397B-A17B-FP8']


@pytest.mark.parametrize('nodes, repos, asked, expected', [
    (4, [], '', ('qwen3_5_397b_a17b_fp8', 4, 1)),
    (8, [], '', ('qwen3_5_397b_a17b_fp8', 8, 1)),
    # 397B FP8 does not fit 3 nodes and TP 3 does not divide 32 heads: int4 over 3 pipeline stages (the 3node inventory).
    (3, [], '', ('qwen3_5_397b_a17b_int4_autoround', 1, 3)),
    (2, [], '', ('qwen3_vl_235b_a22b_awq', 2, 1)),
    # Weights already on the head come first.
    (4, ['QuantTrio/Qwen3-VL-235B-A22B-Instruct-AWQ'], '', ('qwen3_vl_235b_a22b_awq', 4, 1)),
    (4, [], 'qwen3_5_397b_a17b_int4_autoround', ('qwen3_5_397b_a17b_int4_autoround', 4, 1)),
])
def test_the_model_and_shape_are_the_first_that_plan(nodes, repos, asked, expected):
    order = ['spark-%02d' % i for i in range(1, nodes + 1)]
    rails, host_addresses = draft.draft_rails(order, fresh(order))[:2]
    values, plan = choose_model(order, {'dgxspark_rails': rails}, host_addresses, PROFILES, asked, repos)
    assert (values['dgxspark_model_profile'], values['dgxspark_tensor_parallel_size'],
            values['dgxspark_pipeline_parallel_size']) == expected
    assert plan['head'] == 'spark-01' and len(plan['nodes']) == nodes


def test_a_model_that_cannot_plan_says_why():
    with pytest.raises(draft.InventoryDraftError) as caught:
        choose_model(['solo'], {'dgxspark_rails': RAILS_DEFAULT}, {}, PROFILES, 'qwen3_5_397b_a17b_fp8', [])
    assert caught.value.problems and all(p.startswith('qwen3_5_397b_a17b_fp8 with TP 1 x PP 1: ') for p in caught.value.problems)
    assert any('do not fit' in p for p in caught.value.problems), caught.value.problems


@pytest.mark.parametrize('nodes, expected', [
    (1, [(1, 1)]), (2, [(2, 1), (1, 2)]), (3, [(3, 1), (1, 3)]), (8, [(8, 1), (1, 8), (4, 2), (2, 4)]),
    (6, [(6, 1), (1, 6), (3, 2), (2, 3)]),
])
def test_shape_candidates(nodes, expected):
    assert draft.shape_candidates(nodes) == expected


@pytest.mark.parametrize('text, expected', [
    (None, 'absent'),
    (draft.with_header('---\na: 1\n'), 'draft'),
    (draft.with_header('---\na: 1\n').replace('a: 1', 'a: 2'), 'edited'),
    ('---\na: 1\n', 'edited'),
    ('', 'edited'),
])
def test_existing_state(text, expected):
    assert draft.existing_state(text) == expected
