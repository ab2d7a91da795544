# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run playbooks/plan.yml (controller only, contacts no host) against the example and seed inventories."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.secrets_dir import controller_secrets_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(ROOT, '.venv', 'bin', 'ansible-playbook')

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='run `make setup` first (.venv/bin/ansible-playbook)')


def run_plan(inventory, *extra, playbook=''):
    """plan.yml on INVENTORY, with the presets of PLAYBOOK when one is named (-e dgxspark_plan_playbook)."""
    extra = (['-e', 'dgxspark_plan_playbook=' + playbook] if playbook else []) + list(extra)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    return subprocess.run([ANSIBLE_PLAYBOOK, os.path.join('playbooks', 'plan.yml'), '-i', inventory] + list(extra),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize('inventory, expected', [
    ('inventories/4node', ['TP 4 x PP 1 = 4 GPUs on 4 nodes', '0     spark-alpha  head    192.168.100.10', '192.168.101.13',
                           'Decode roofline', 'tok/s']),
    ('inventories/3node', ['TP 1 x PP 3 = 3 GPUs on 3 nodes', 'spark-03', '192.168.100.12', 'KV cache room per node']),
    ('inventories/2node', ['TP 2 x PP 1 = 2 GPUs on 2 nodes', '0     spark-2  head    192.168.100.10', '192.168.101.11']),
    # The README's first command plans the lab: its connection variables must template for the implicit localhost too.
    ('inventories/lab', ['TP 4 x PP 1 = 4 GPUs on 4 nodes', '3     spark-delta', '192.168.101.13']),
])
def test_plan_accepts_example_inventories(inventory, expected):
    result = run_plan(inventory)
    assert result.returncode == 0, result.stdout + result.stderr
    for text in expected:
        assert text in result.stdout, (text, result.stdout)
    assert 'changed=0' in result.stdout and 'unreachable=0' in result.stdout


@pytest.mark.parametrize('inventory, expected', [
    ('tests/inventories/seed001', ['dgxspark_tensor_parallel_size x dgxspark_pipeline_parallel_size = 4 x 3 = 12 GPUs',
                                   'exactly one GPU', 'dgxspark_gpu_memory_utilization is 0.95']),
    ('tests/inventories/seed004_tp2', ['Weights do not fit', '113.0 GB of weights per node', 'dgxspark_model_profile']),
])
def test_plan_rejects_seed_inventories(inventory, expected):
    result = run_plan(inventory)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for text in expected:
        assert text in output, (text, output)


@pytest.mark.parametrize('inventory', ['inventories/4node', 'inventories/3node', 'inventories/2node',
                                       'tests/inventories/seed001', 'tests/inventories/seed004_tp2'])
def test_plan_syntax_check_and_hosts(inventory):
    result = run_plan(inventory, '--syntax-check')
    assert result.returncode == 0, result.stdout + result.stderr
    hosts = run_plan(inventory, '--list-hosts')
    assert hosts.returncode == 0, hosts.stdout + hosts.stderr
    assert 'hosts (1):' in hosts.stdout and 'localhost' in hosts.stdout


def run_playbook_plan_only(playbook, inventory, *extra):
    """The plan play of a deploy playbook, on the controller (--tags plan; a connection of local in case any task ran)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    return subprocess.run([ANSIBLE_PLAYBOOK, os.path.join('playbooks', playbook), '-i', inventory, '--tags', 'plan',
                           '-e', 'ansible_connection=local'] + list(extra),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize('playbook, inventory, expected', [
    ('deploy-397b.yml', 'inventories/4node', ['qwen3_5_397b_a17b_fp8', 'TP 4 x PP 1 = 4 GPUs on 4 nodes', 'Budget per node: 0.85 x']),
    ('deploy_397b_int4_3node.yml', 'inventories/3node', ['qwen3_5_397b_a17b_int4_autoround', 'TP 1 x PP 3 = 3 GPUs on 3 nodes']),
    ('deploy_vl235b_2node.yml', 'inventories/2node', [
        'qwen3_vl_235b_a22b_awq', 'TP 2 x PP 1 = 2 GPUs on 2 nodes', 'Budget per node: 0.75 x',
        'Patch applied at container start: cudnn_off_sitecustomize.py (sitecustomize']),
    ('deploy_397b_int4.yml', 'inventories/4node-int4', [
        'qwen3_5_397b_a17b_int4_autoround', 'TP 4 x PP 1 = 4 GPUs on 4 nodes', 'Budget per node: 0.78 x',
        'Patch applied at container start: qwen3_5_marlin_tp_in_proj_ba.py (python']),
])
def test_each_seed_playbook_plans_its_shape(playbook, inventory, expected):
    result = run_playbook_plan_only(playbook, inventory)
    assert result.returncode == 0, result.stdout + result.stderr
    for text in expected:
        assert text in result.stdout, (text, result.stdout)
    assert 'changed=0' in result.stdout and 'unreachable=0' in result.stdout and 'failed=0' in result.stdout


def test_seed_001_as_written_is_refused_by_its_alternative_playbook_too():
    """The seed's own inventory values (TP 4 x PP 3, 0.95) are the user's: the alternative playbook's presets never
    replace them in silence, so it refuses them, and says they are the user's, kept over its presets."""
    result = run_playbook_plan_only('deploy_397b_int4_3node.yml', 'tests/inventories/seed001')
    output = ' '.join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    for text in ['4 x 3 = 12 GPUs', 'dgxspark_gpu_memory_utilization is 0.95',
                 'Yours over the presets of deploy_397b_int4_3node.yml (inventory or -e): dgxspark_tensor_parallel_size=4 (preset 1)']:
        assert text in output, (text, output)


SHAPE_LINES = ('dgxspark_tensor_parallel_size:', 'dgxspark_pipeline_parallel_size:', 'dgxspark_enable_expert_parallel:')


def model_only_inventory(tmp_path):
    """inventories/4node without its shape (TP, PP, expert parallel): it names the model and utilization only."""
    source = os.path.join(ROOT, 'inventories', '4node')
    target = tmp_path / 'model_only'
    (target / 'group_vars').mkdir(parents=True)
    shutil.copy(os.path.join(source, 'hosts.yml'), str(target / 'hosts.yml'))
    with open(os.path.join(source, 'group_vars', 'all.yml'), encoding='utf-8') as handle:
        kept = [line for line in handle if not line.startswith(SHAPE_LINES)]
    (target / 'group_vars' / 'all.yml').write_text(''.join(kept), encoding='utf-8')
    return str(target)


PRESET_CASES = [
    # issue 48: `-e dgxspark_gpu_memory_utilization=0.7` planned the preset 0.78 without a word
    ('deploy_397b_int4.yml', 'inventories/4node-int4', ['-e', '{"dgxspark_gpu_memory_utilization": 0.7}'], 0,
     ['Budget per node: 0.70 x', 'Yours over the presets of deploy_397b_int4.yml (inventory or -e): '
      'dgxspark_gpu_memory_utilization=0.7 (preset 0.78)']),
    # an inventory that names the model and utilization only: the playbook's shape fills the rest, and says so
    ('deploy-397b.yml', 'MODEL_ONLY', [], 0,
     ['TP 4 x PP 1 = 4 GPUs on 4 nodes', 'Preset by deploy_397b.yml (the inventory does not set them): '
      'dgxspark_enable_expert_parallel=false, dgxspark_pipeline_parallel_size=1, dgxspark_tensor_parallel_size=4']),
    # the seed 004 playbook on the FP8 inventory: another model, refused (inventories/4node-int4 is its inventory)
    ('deploy_397b_int4.yml', 'inventories/4node', [], 2,
     ['deploy_397b_int4.yml deploys the model profile qwen3_5_397b_a17b_int4_autoround, but the inventory (or -e) '
      'sets dgxspark_model_profile to qwen3_5_397b_a17b_fp8']),
    # the user's shape over the playbook's: TP 2 x PP 2 on four nodes
    ('deploy-397b.yml', 'inventories/4node', ['-e', '{"dgxspark_tensor_parallel_size": 2, "dgxspark_pipeline_parallel_size": 2}'],
     0, ['TP 2 x PP 2 = 4 GPUs on 4 nodes', 'dgxspark_tensor_parallel_size=2 (preset 4)']),
    # a playbook never serves another model than its own
    ('deploy-397b.yml', 'inventories/2node', [], 2,
     ['deploy_397b.yml deploys the model profile qwen3_5_397b_a17b_fp8, but the inventory (or -e) sets '
      'dgxspark_model_profile to qwen3_vl_235b_a22b_awq: run playbooks/deploy.yml']),
]


@pytest.mark.parametrize('playbook, inventory, extra, rc, expected', PRESET_CASES,
                         ids=['yours-beats-the-preset', 'presets-shown', 'another-model-refused-int4', 'your-shape',
                              'another-model-refused'])
def test_a_seed_playbooks_presets_never_replace_a_users_value_in_silence(playbook, inventory, extra, rc, expected, tmp_path):
    result = run_playbook_plan_only(playbook, model_only_inventory(tmp_path) if inventory == 'MODEL_ONLY' else inventory, *extra)
    output = ' '.join((result.stdout + result.stderr).split())  # the callback folds long lines
    assert result.returncode == rc, output
    for text in expected:
        assert text in output, (text, output)


def plan_table(output):
    """The plan table of a run's output, from "Inventory:" up to the next task, whitespace folded."""
    text = ' '.join(output.split())
    start = text.index("Inventory: ")
    return text[start:text.index("TASK [", start)]


@pytest.mark.parametrize('playbook, inventory, preset', [
    ('deploy-397b.yml', 'MODEL_ONLY', 'Preset by deploy_397b.yml'),
    ('deploy_397b_int4.yml', 'inventories/4node-int4', ''),
])
def test_plan_yml_for_a_playbook_prints_what_that_playbook_plans(playbook, inventory, preset, tmp_path):
    inventory = model_only_inventory(tmp_path) if inventory == 'MODEL_ONLY' else inventory
    by_plan = run_plan(inventory, playbook=playbook)
    by_playbook = run_playbook_plan_only(playbook, inventory)
    assert by_plan.returncode == 0 and by_playbook.returncode == 0, by_plan.stdout + by_playbook.stdout
    assert preset in plan_table(by_plan.stdout)
    assert plan_table(by_plan.stdout) == plan_table(by_playbook.stdout)


def test_a_plan_without_a_model_names_the_playbook_way():
    result = run_plan('inventories/4node', '-e', '{"dgxspark_model_profile": null}')
    output = ' '.join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    assert 'dgxspark_model_profile is not set' in output, output
    assert 'playbooks/plan.yml -e dgxspark_plan_playbook=deploy-397b.yml' in output, output


def test_plan_refuses_misspelled_variables_with_the_closest_name():
    """A misspelled variable would be ignored and its default used: the plan names it, every one at once."""
    result = run_plan('inventories/4node', '-e', '{"dgxspark_tensor_paralel_size": 4, "ray_cluster_imgae": "x"}')
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for text in ['dgxspark_tensor_paralel_size is not a variable of dgxspark.cluster (did you mean '
                 'dgxspark_tensor_parallel_size?): set on every node',
                 'ray_cluster_imgae is not a variable of dgxspark.cluster (did you mean ray_cluster_image?): set on every node',
                 'The cluster plan is invalid (2 problems)']:
        assert text in output, (text, output)


def test_plan_refuses_remote_code_from_a_branch():
    """Seed 001's profile runs its repository's Python (trust_remote_code): never from main."""
    result = run_plan('inventories/4node', '-e', 'dgxspark_model_profile=qwen3_5_379b_nvfp4', playbook='')
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "dgxspark_model_revision is 'main', but profile qwen3_5_379b_nvfp4 sets trust_remote_code" in output, output
    accepted = run_plan('inventories/4node', '-e', 'dgxspark_model_profile=qwen3_5_379b_nvfp4',
                        '-e', 'dgxspark_model_revision=' + '0' * 40, playbook='')
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert 'Model revision: ' + '0' * 40 in accepted.stdout


def test_plan_refuses_remote_code_switched_on_in_the_extra_args_at_a_branch():
    """Issue 49: trust_remote_code given through vllm_container_extra_args runs the repository's Python as a profile's does."""
    extra = '{"vllm_container_extra_args": {"trust_remote_code": true}}'
    result = run_plan('inventories/4node', '-e', extra, playbook='deploy-397b.yml')
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert ("vllm_container_extra_args sets trust_remote_code, so vLLM runs the Python files of Qwen/Qwen3.5-397B-A17B-FP8 "
            "as root in every serving container, but the model revision is 'main'") in output, output
    accepted = run_plan('inventories/4node', '-e', extra, '-e', 'dgxspark_model_revision=' + '1' * 40, playbook='deploy-397b.yml')
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


def test_plan_refuses_an_extra_environment_that_moves_vllm_off_ray_s_node_address():
    """Issue 50 item 9: VLLM_HOST_IP other than Ray's node address pins the placement group to a node Ray does not have."""
    extra = '{"vllm_container_extra_env": {"VLLM_HOST_IP": "10.0.0.10"}}'
    result = run_plan('inventories/4node', '-e', extra, playbook='deploy-397b.yml')
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert ("vllm_container_extra_env sets VLLM_HOST_IP, which is set by the plan (each node's rail-1 address, which Ray "
            "registers the node with") in ' '.join(output.split()), output


def test_plan_names_the_host_of_a_misspelled_host_variable(tmp_path):
    """A second inventory source adds a variable to one node only: the problem names that node."""
    extra = tmp_path / 'extra.yml'
    extra.write_text('all:\n  children:\n    workers:\n      hosts:\n        spark-gamma:\n'
                     '          dgxspark_rail_adresses: {rail1: 192.168.100.50}\n', encoding='utf-8')
    result = run_plan('inventories/4node', '-i', str(extra))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert ('dgxspark_rail_adresses is not a variable of dgxspark.cluster (did you mean dgxspark_rail_addresses?): '
            'set on spark-gamma;') in output, output


def test_the_plan_names_the_inventory_it_planned():
    result = run_plan('inventories/4node')
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Inventory: %s' % os.path.join(ROOT, 'inventories', '4node') in result.stdout, result.stdout


def test_without_an_inventory_nothing_is_planned_and_the_plan_says_to_give_one():
    """ansible.cfg names no default inventory: forgetting -i used to plan the lab without a word (issue 48)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    env.pop('ANSIBLE_INVENTORY', None)
    result = subprocess.run([ANSIBLE_PLAYBOOK, os.path.join('playbooks', 'plan.yml')], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Inventory group 'head' is missing or empty" in output and 'give yours with -i' in output, output
    assert 'Cluster plan:' not in output and 'spark-alpha' not in output, output


@pytest.fixture(name='inventory_under_inventories')
def fixture_inventory_under_inventories():
    """A user's inventory where users put theirs, beside the shipped ones: a copy of inventories/4node with a typo."""
    path = os.path.join(ROOT, 'inventories', 'test-typo-%d' % os.getpid())
    shutil.copytree(os.path.join(ROOT, 'inventories', '4node'), path)
    with open(os.path.join(path, 'group_vars', 'all.yml'), 'a', encoding='utf-8') as handle:
        handle.write('dgxspark_pipline_parallel_size: 1\n')
    try:
        yield os.path.relpath(path, ROOT)
    finally:
        shutil.rmtree(path)


def test_a_typo_in_an_inventory_under_inventories_is_refused_too(inventory_under_inventories):
    """Known names come from what the collection declares, never from a scan of its inventories (issue 48)."""
    result = run_plan(inventory_under_inventories)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert ('dgxspark_pipline_parallel_size is not a variable of dgxspark.cluster (did you mean '
            'dgxspark_pipeline_parallel_size?): set on every node') in output, output


def user_profile(tmp_path, **changes):
    """A user's profile directory: the seed 000 profile under another name, with changes (None removes a field)."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(ROOT, 'profiles', 'models', 'qwen3_5_397b_a17b_fp8.yml'), encoding='utf-8') as handle:
        profile = yaml.safe_load(handle)
    profile.update(changes)
    profile = dict((k, v) for k, v in profile.items() if v is not None)
    (tmp_path / 'my_model.yml').write_text(yaml.safe_dump(profile))
    return str(tmp_path)


def test_plan_playbook_takes_a_user_profile_directory(tmp_path):
    directory = user_profile(tmp_path, hf_repo='example/my-model', description='a user profile')
    result = run_plan('inventories/4node', '-e', '{"dgxspark_profiles_dir": "%s", "dgxspark_model_profile": "my_model"}' % directory,
                      playbook='')
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Cluster plan: my_model (example/my-model), 4 nodes' in result.stdout


def test_a_bad_user_profile_lists_every_problem_at_once(tmp_path):
    directory = user_profile(tmp_path, head_dim='128', num_hidden_layers=None, num_key_value_head=2)
    result = run_plan('inventories/4node', '-e', '{"dgxspark_profiles_dir": "%s", "dgxspark_model_profile": "my_model"}' % directory,
                      playbook='')
    output = result.stdout + result.stderr
    assert result.returncode != 0
    for text in ('model profile my_model: field num_hidden_layers is missing (an integer)',
                 "model profile my_model: field head_dim must be an integer (got '128')",
                 'model profile my_model: unknown field num_key_value_head (did you mean num_key_value_heads?)'):
        assert text in output, (text, output)


def test_plan_refuses_bad_role_variables_all_at_once():
    """Role variables reach the nodes: the plan checks them with the roles' specs and its own cross-checks (issue 25)."""
    import json  # pylint: disable=import-outside-toplevel
    bad = {'vllm_container_extra_args': {'api-key': 'sk-not-real'}, 'ray_cluster_extra_env': {'RAY_AUTH_TOKEN': 'tok-not-real'},
           'fabric_check_nccl_port': 6379, 'dgxspark_api_allowed_cidrs': ['10.1.2.3'], 'vllm_container_ready_timeout': 'soon',
           'dgxspark_rails': [{'name': 'rail1', 'interface': 'enp1s0f1np1; reboot', 'subnet': '192.168.100.0/24'}]}
    result = run_plan('inventories/4node', '-e', json.dumps(bad))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for text in ['The cluster plan is invalid (6 problems)',
                 'vllm_container_extra_args sets api-key, a secret', 'ray_cluster_extra_env sets RAY_AUTH_TOKEN, a secret',
                 'port 6379 is given to ray_cluster_ports.gcs and fabric_check_nccl_port (the NCCL test\'s rendezvous)',
                 'dgxspark_api_allowed_cidrs has 10.1.2.3, a single address',
                 "vllm_container_ready_timeout: must be an integer, got the string 'soon'",
                 "dgxspark_rails[0] (rail1).interface is 'enp1s0f1np1; reboot', not a Linux interface name"]:
        assert text in output, (text, output)
    assert 'sk-not-real' not in output and 'tok-not-real' not in output


def test_the_rules_the_roles_asserted_late_are_the_plans_now():
    """Issue 47: what the supervisor, monitoring, firewall, netplan and serving roles asserted on the node, after earlier
    phases had changed it, the plan refuses before any host is contacted, every problem at once."""
    import json  # pylint: disable=import-outside-toplevel
    bad = {'supervisor_deadline_s': 45, 'monitoring_scrape_interval_s': 0, 'monitoring_prometheus_host': 'grafana',
           'dgxspark_monitoring_allowed_cidrs': ['10.9.8.7'], 'cx7_netplan_file_name': '40-cx7.yml',
           'vllm_container_stall_timeout': 4000}
    result = run_plan('inventories/4node', '-e', json.dumps(bad))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for text in ['The cluster plan is invalid (6 problems)',
                 'supervisor_deadline_s is 45, above supervisor_interval_s 30',
                 'monitoring_scrape_interval_s is 0: use at least 1',
                 "monitoring_prometheus_host is 'grafana', not a node of the cluster",
                 'dgxspark_monitoring_allowed_cidrs has 10.9.8.7, a single address',
                 "cx7_netplan_file_name is '40-cx7.yml': not a plain file name ending in .yaml",
                 'vllm_container_stall_timeout is 4000, above vllm_container_ready_timeout 3600']:
        assert text in output, (text, output)


def test_an_empty_serving_image_is_refused_as_each_node_resolves_it():
    result = run_plan('inventories/4node', '-e', '{"dgxspark_serving_image": ""}')
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "ray_cluster_image is '': not an image reference (empty or with spaces): set dgxspark_serving_image" in output
    assert "vllm_container_image is '': not an image reference" in output


def test_a_deploy_for_the_mp_backend_with_bad_options_is_refused_by_the_plan_before_any_node_is_touched():
    """Issue 23: the options mp cannot take are refused with every other problem; the deploy stops at the plan (the recap
    has the controller alone: no task ran on any node; --check and a local connection in case one did)."""
    import json  # pylint: disable=import-outside-toplevel
    bad = {'dgxspark_executor_backend': 'mp', 'dgxspark_mp_master_port': 8000,
           'vllm_container_extra_args': {'ray_workers_use_nsight': True, 'distributed-executor-backend': 'mp'}}
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    result = subprocess.run([ANSIBLE_PLAYBOOK, os.path.join('playbooks', 'deploy-397b.yml'), '-i', 'inventories/4node',
                             '--check', '-e', 'ansible_connection=local', '-e', json.dumps(bad)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for text in ['The cluster plan is invalid (3 problems)',
                 'dgxspark_mp_master_port is 8000, the port of vllm_container_port (the vLLM API)',
                 "vllm_container_extra_args sets ray_workers_use_nsight, an option of vLLM's Ray executor",
                 'vllm_container_extra_args sets distributed-executor-backend, which dgxspark_executor_backend (mp) sets']:
        assert text in output, (text, output)
    recap = output[output.index('PLAY RECAP'):]
    assert 'localhost' in recap and not any(host in recap for host in ('spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta')), recap


def test_plan_refuses_api_clients_inside_a_rail_subnet():
    """Issue 20: the rails are trusted with every port, so the API's clients must not share their network."""
    import json  # pylint: disable=import-outside-toplevel
    result = run_plan('inventories/4node', '-e', json.dumps({'dgxspark_api_allowed_cidrs': ['192.168.0.0/16']}))
    output = ' '.join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    assert 'The cluster plan is invalid (2 problems)' in output
    for rail, subnet in (('rail1', '192.168.100.0/24'), ('rail2', '192.168.101.0/24')):
        assert "dgxspark_api_allowed_cidrs has 192.168.0.0/16, which overlaps %s's subnet %s" % (rail, subnet) in output


def test_plan_table_says_risky_choices_out_loud():
    import json  # pylint: disable=import-outside-toplevel
    risky = {'dgxspark_api_allowed_cidrs': ['0.0.0.0/0'], 'dgxspark_nccl_transport': 'socket'}
    result = run_plan('inventories/4node', '-e', json.dumps(risky))
    assert result.returncode == 0, result.stdout + result.stderr
    table = ' '.join(result.stdout.split())  # the callback folds the table's long lines
    assert 'Warning: dgxspark_api_allowed_cidrs has 0.0.0.0/0: the vLLM API is open to every address' in table
    assert 'Warning: dgxspark_nccl_transport is socket: NCCL runs over TCP' in table


def test_plan_refuses_secrets_left_in_the_directory_shared_by_the_inventorys_name(tmp_path, monkeypatch):
    # Releases before 0.3.0 kept ~/.config/dgxspark/4node for every inventory called 4node: moved by the user,
    # never generated anew (a new API key for every client), and nothing is created before the user decides.
    monkeypatch.setenv('HOME', str(tmp_path))
    shared = tmp_path / '.config' / 'dgxspark' / '4node'
    shared.mkdir(parents=True)
    (shared / 'vllm_api_key').write_text('key\n')
    result = run_plan('inventories/4node')
    assert result.returncode != 0
    own = controller_secrets_dir(os.path.join(ROOT, 'inventories/4node'), home=str(tmp_path))
    assert 'run `mv %s %s`' % (shared, own) in result.stdout, result.stdout[-3000:]
    assert sorted(os.listdir(str(tmp_path / '.config' / 'dgxspark'))) == ['4node']
    shared.rename(own)
    assert run_plan('inventories/4node').returncode == 0
    # An inventory that names its secrets directory is not asked.
    os.rename(own, str(shared))
    assert run_plan('inventories/4node', '-e', 'dgxspark_secrets_dir=%s' % shared).returncode == 0


def test_profiles_kept_with_the_inventory_as_docs_profiles_md_says(tmp_path):
    """docs/profiles.md: `dgxspark_profiles_dir: "{{ inventory_dir }}/profiles"` failed ('inventory_dir' is undefined on the
    controller's localhost), and the folder as -i warned about every profile key."""
    inventory = tmp_path / 'mine'
    (inventory / 'group_vars').mkdir(parents=True)
    (inventory / 'profiles').mkdir()
    shutil.copy(os.path.join(ROOT, 'inventories', '4node', 'hosts.yml'), str(inventory / 'hosts.yml'))
    shutil.copy(os.path.join(ROOT, 'profiles', 'models', 'qwen3_5_397b_a17b_fp8.yml'), str(inventory / 'profiles' / 'my_model.yml'))
    with open(os.path.join(ROOT, 'inventories', '4node', 'group_vars', 'all.yml'), encoding='utf-8') as handle:
        lines = [line for line in handle if not line.startswith('dgxspark_model_profile:')]
    lines += ['dgxspark_model_profile: my_model\n', 'dgxspark_profiles_dir: "{{ inventory_dir }}/profiles"\n']
    (inventory / 'group_vars' / 'all.yml').write_text(''.join(lines), encoding='utf-8')
    result = run_plan(str(inventory / 'hosts.yml'))
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Cluster plan: my_model (Qwen/Qwen3.5-397B-A17B-FP8), 4 nodes' in result.stdout, result.stdout
    assert '[WARNING]' not in result.stdout + result.stderr, result.stdout + result.stderr


def test_a_refusal_prints_each_problem_once_in_the_inventorys_words():
    """issue 48: every refusal printed three times ([ERROR], msg, problems) with Ansible's type names
    ("got _AnsibleTaggedStr '8'", "_AnsibleTaggedList cannot be converted to a dict")."""
    result = run_plan('inventories/4node', '-e', 'dgxspark_tensor_parallel_size=8', '-e', 'vllm_container_port=abc',
                      '-e', '{"vllm_container_extra_args": [1]}')
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for text in ["dgxspark_tensor_parallel_size must be an integer, got the string '8'",
                 "vllm_container_port: must be an integer, got the string 'abc'",
                 'vllm_container_extra_args: must be a mapping, got the list;']:
        assert output.count(text) == 1, (text, output)
    for internal in ('_AnsibleTagged', '<class ', 'we were unable to convert'):
        assert internal not in output, (internal, output)


def test_the_plan_prints_each_nodes_serving_containers_with_the_users_extras_in_them():
    result = run_plan('inventories/4node', '-e', '{"vllm_container_extra_args": {"max_num_seqs": 32}}', playbook='deploy-397b.yml')
    assert result.returncode == 0, result.stdout + result.stderr
    out = ' '.join(result.stdout.split())
    assert 'Serving containers, as the deploy runs them (<from the node>:' in out
    for node in ('spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta'):
        assert '%s dgxspark-ray: image vllm/vllm-openai:v0.33.0' % node in out
    assert 'command: vllm-serve.sh serve Qwen/Qwen3.5-397B-A17B-FP8 ' in out and '--max-num-seqs 32' in out
    assert 'NCCL_IB_HCA=<from the node>' in out and 'VLLM_HOST_IP=192.168.100.13' in out


def test_a_serving_input_the_controller_cannot_resolve_is_refused_by_name():
    result = run_plan('inventories/4node', '-e', 'vllm_container_image={{ ansible_facts.missing }}', playbook='deploy-397b.yml')
    output = ' '.join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert 'vllm_container_image cannot be resolved on the controller on spark-alpha, spark-beta, spark-gamma, spark-delta' in output, output[-3000:]
    assert 'The serving commands cannot be planned for the inventory' in output


def test_plan_refuses_an_api_key_from_the_docs_without_printing_it():
    """Issue 49: vLLM's docs' example key (token-abc123) is known to everyone who read them."""
    result = run_plan('inventories/4node', '-e', 'vllm_container_api_key=token-abc123', playbook='deploy-397b.yml')
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert 'vllm_container_api_key (on spark-alpha) is an example key from documentation' in output, output
    assert 'token-abc123' not in output.replace('vllm_container_api_key=token-abc123', '')


def test_plan_makes_the_cluster_ca_once_and_refuses_a_users_certificate_for_another_name(tmp_path):
    secrets = str(tmp_path / 'secrets')
    first = run_plan('inventories/2node', '-e', 'dgxspark_api_tls=generated', '-e', 'dgxspark_secrets_dir=' + secrets)
    assert first.returncode == 0, first.stdout + first.stderr
    ca = os.path.join(secrets, 'api_tls', 'ca.crt')
    assert 'API: https://spark-2:8000/v1 (TLS generated' in first.stdout and '--cacert %s' % ca in first.stdout
    assert '--ssl-certfile /run/dgxspark/tls/api.crt' in first.stdout
    assert ("Prometheus: https://spark-2:9090 on spark-2 (TLS with the API's certificate, for spark-2)"
            in ' '.join(first.stdout.split()).replace("''", "'"))  # the table as YAML prints it: folded, quotes doubled
    made = dict((name, os.stat(os.path.join(secrets, 'api_tls', name)).st_mtime_ns) for name in os.listdir(os.path.join(secrets, 'api_tls')))
    assert run_plan('inventories/2node', '-e', 'dgxspark_api_tls=generated', '-e', 'dgxspark_secrets_dir=' + secrets).returncode == 0
    assert made == dict((name, os.stat(os.path.join(secrets, 'api_tls', name)).st_mtime_ns) for name in made)
    # that certificate as the user's own, for an address clients do not call
    refused = run_plan('inventories/2node', '-e', 'dgxspark_api_tls=files', '-e', 'ansible_host=10.9.9.9',
                       '-e', 'dgxspark_api_tls_cert_file=%s/api_tls/api.crt' % secrets,
                       '-e', 'dgxspark_api_tls_key_file=%s/api_tls/api.key' % secrets, '-e', 'dgxspark_api_tls_ca_file=' + ca)
    assert refused.returncode != 0
    assert 'is not for 10.9.9.9, the address clients call' in refused.stdout, refused.stdout[-3000:]


def test_plan_refuses_prometheus_away_from_the_head_when_it_serves_the_apis_certificate(tmp_path):
    """Issue 49: with the API's TLS Prometheus serves HTTPS with the API's certificate (the head's names, its key kept on
    the head): on a worker the plan refuses it, before any node is touched; without TLS the worker is fine."""
    secrets = str(tmp_path / 'secrets')
    refused = run_plan('inventories/2node', '-e', 'dgxspark_api_tls=generated', '-e', 'dgxspark_secrets_dir=' + secrets,
                       '-e', 'monitoring_prometheus_host=spark-3')
    assert refused.returncode != 0
    assert ("monitoring_prometheus_host is spark-3, but with dgxspark_api_tls generated Prometheus serves HTTPS with the "
            "API's certificate, which is for the head's names (spark-2, localhost, 192.168.100.10") in ' '.join(refused.stdout.split())
    plain = run_plan('inventories/2node', '-e', 'monitoring_prometheus_host=spark-3')
    assert plain.returncode == 0, plain.stdout[-3000:]
    assert 'Prometheus: http://spark-3:9090 on spark-3 (plain HTTP' in ' '.join(plain.stdout.split())
