# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped inventories plan byte-for-byte as recorded (issue 51: a one-group inventory plans as before).

Each case runs playbooks/plan.yml (controller only, contacts no host) through fixtures/plans/dump_plan.yml and compares
the plan (JSON, sorted keys) and the printed table with fixtures/plans/<case>.json and <case>.txt. The values that
depend on the machine (this checkout's path, the controller's secrets directory) are replaced by placeholders before the
comparison, never left out. Record again (only for an intended change of the plan, said in its commit):
  GOLDEN_PLAN_RECORD=1 .venv/bin/python -m pytest -p no:cacheprovider tests/unit/test_plan_golden.py
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.secrets_dir import controller_secrets_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(ROOT, '.venv', 'bin', 'ansible-playbook')
FIXTURES = os.path.join(ROOT, 'tests', 'unit', 'fixtures', 'plans')
RECORDED_FROM = 'main; recorded again for each intended change of the plan, said in its commit (git log -- tests/unit/fixtures/plans)'

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='run `make setup` first (.venv/bin/ansible-playbook)')

# (case, inventory, the seed playbook whose presets plan.yml applies, as test_plan_playbook.py plans them)
CASES = [
    ('2node', 'inventories/2node', ''),
    ('2node_vl235b', 'inventories/2node', 'deploy_vl235b_2node.yml'),
    ('3node', 'inventories/3node', ''),
    ('3node_397b_int4', 'inventories/3node', 'deploy_397b_int4_3node.yml'),
    ('4node', 'inventories/4node', ''),
    ('4node_397b', 'inventories/4node', 'deploy-397b.yml'),
    ('4node-int4_397b_int4', 'inventories/4node-int4', 'deploy_397b_int4.yml'),
    ('lab', 'inventories/lab', ''),
]
# What inventories/lab reads of a running lab (lab/labctl.py writes lab.json), fixed for the recorded plan.
LAB_STATE = {'serving_image': 'dgxspark-lab/serving:0123456789ab', 'mgmt_subnet': '172.31.240.0/24'}


def plan_dump(inventory, playbook, dump_path):
    """What plan.yml gives on INVENTORY (with PLAYBOOK's presets): {plan, table, fleet, hosts: {host: its plan}}."""
    extra = ['-e', 'dgxspark_plan_playbook=' + playbook] if playbook else []
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    # The lab inventory reads a running lab's state (lab.json: the serving image's tag, the management subnet), which a
    # lab that is up or down, or built from other inputs, changes: it plans over a state of its own, recorded here.
    state = env['DGXSPARK_LAB_STATE'] = lab_state(os.path.dirname(str(dump_path)))
    result = subprocess.run([ANSIBLE_PLAYBOOK, os.path.join('tests', 'unit', 'fixtures', 'plans', 'dump_plan.yml'), '-i', inventory,
                             '-e', 'golden_plan_dump=' + str(dump_path)] + extra,
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    with open(str(dump_path), encoding='utf-8') as handle:
        return dict(json.load(handle), lab_state=state)


def lab_state(folder):
    """A lab state directory for inventories/lab as labctl writes it, with a fixed serving image tag (labctl's is a digest
    of the lab's build inputs)."""
    state = os.path.join(folder, 'lab-state')
    os.makedirs(state, exist_ok=True)
    with open(os.path.join(state, 'lab.json'), 'w', encoding='utf-8') as handle:
        json.dump(LAB_STATE, handle)
    return state


def normalised(text, inventory, lab_state_dir=None):
    """TEXT with the machine's paths as placeholders: the lab's state directory, the controller's secrets directory of
    INVENTORY, then the checkout."""
    if lab_state_dir:
        text = text.replace(lab_state_dir, '<lab state dir>')
    text = text.replace(controller_secrets_dir(os.path.join(ROOT, inventory)), '<controller secrets dir>')
    return text.replace(ROOT, '<checkout>')


def plan_json(plan, inventory, lab_state_dir):
    return normalised(json.dumps(plan, sort_keys=True, indent=1), inventory, lab_state_dir) + '\n'


def table_text(table, inventory, lab_state_dir):
    return normalised('\n'.join(table), inventory, lab_state_dir) + '\n'


def recorded(case):
    """(plan JSON text, table text) of CASE as recorded; the label lines are the files' first lines."""
    with open(os.path.join(FIXTURES, case + '.json'), encoding='utf-8') as handle:
        plan = json.load(handle)['plan']
    with open(os.path.join(FIXTURES, case + '.txt'), encoding='utf-8') as handle:
        table = handle.read().split('\n', 1)[1]
    return json.dumps(plan, sort_keys=True, indent=1) + '\n', table


def record(case, inventory, playbook, dump):
    with open(os.path.join(FIXTURES, case + '.json'), 'w', encoding='utf-8') as handle:
        handle.write(normalised(json.dumps({'recorded_from': RECORDED_FROM, 'inventory': inventory, 'presets_of': playbook,
                                            'plan': dump['plan']}, sort_keys=True, indent=1), inventory, dump['lab_state']) + '\n')
    with open(os.path.join(FIXTURES, case + '.txt'), 'w', encoding='utf-8') as handle:
        handle.write('# recorded from %s: plan.yml -i %s%s\n' % (
            RECORDED_FROM, inventory, ' -e dgxspark_plan_playbook=' + playbook if playbook else ''))
        handle.write(table_text(dump['table'], inventory, dump['lab_state']))


@pytest.mark.parametrize('case, inventory, playbook', CASES, ids=[c[0] for c in CASES])
def test_a_one_group_inventory_plans_byte_for_byte_as_recorded(case, inventory, playbook, tmp_path):
    dump = plan_dump(inventory, playbook, tmp_path / 'plan.json')
    if os.environ.get('GOLDEN_PLAN_RECORD') == '1':
        record(case, inventory, playbook, dump)
    plan, table = recorded(case)
    assert plan_json(dump['plan'], inventory, dump['lab_state']) == plan
    assert table_text(dump['table'], inventory, dump['lab_state']) == table
    # Every host of the inventory (and the controller) gets that plan, and no fleet view: one group is no fleet.
    assert dump['fleet'] is None and 'fleet' not in dump['plan'] and 'serving_group' not in dump['plan']
    assert sorted(dump['hosts']) == sorted(node['host'] for node in dump['plan']['nodes'])
    for host, host_plan in dump['hosts'].items():
        assert plan_json(host_plan, inventory, dump['lab_state']) == plan, host
