"""Table tests for the preflight verdict (plugins/plugin_utils/preflight.py): each bad reading names the node, what was
found, what was expected and the fix; every problem is listed at once; healthy readings pass."""
import copy

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import preflight
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.cluster_plan import serving_kinds

HOSTS = ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta']
PLAN = {
    'head': 'spark-alpha',
    'nodes': [{'host': h, 'rank': i, 'runs': serving_kinds('ray', i)} for i, h in enumerate(HOSTS)],
    'rails': [{'name': 'rail1', 'interface': 'enp1s0f1np1', 'subnet': '192.168.100.0/24'},
              {'name': 'rail2', 'interface': 'enP2p1s0f1np1', 'subnet': '192.168.101.0/24'}],
    'mtu': 9000,
    'gpu_memory_utilization': 0.85,
    'memory': {'budget_gib': 103.4, 'node_memory_gib': 121.7},
    'variables': {'dgxspark_node_memory_gib': 121.7},
}


def with_backend(backend):
    """PLAN with the containers each node runs under ``backend`` (the plan's nodes[].runs)."""
    return dict(PLAN, nodes=[dict(node, runs=serving_kinds(backend, node['rank'])) for node in PLAN['nodes']])


EXPECT = {'image': 'vllm/vllm-openai:v0.33.0', 'ports': {6379: 'Ray gcs', 8000: 'vLLM API'},
          'own_containers': ['dgxspark-ray', 'dgxspark-vllm'], 'link_speed_mbps': 200000}
GIB = 1024 * 1024
FILES = {'config.json': 1000, 'model.safetensors.index.json': 5000, 'model-00001-of-00002.safetensors': 5 * 10 ** 9,
         'model-00002-of-00002.safetensors': 4 * 10 ** 9}


def healthy_node(offset=0.1):
    return {
        'error': '',
        'facts': {
            'clock_offset_s': offset,
            'gpu': {'gpus': [{'name': 'NVIDIA GB10', 'driver': '580.95.05'}], 'driver': '580.95.05', 'cuda': '13.0', 'error': '',
                    'sm_mhz': 850, 'max_sm_mhz': 3003, 'utilization': 0},
            'memory': {'total_kib': int(121.7 * GIB), 'available_kib': int(117 * GIB), 'swap_total_kib': 0, 'swap_free_kib': 0,
                       'top': [{'pid': 900, 'name': 'Xorg', 'rss_kib': 3 * GIB, 'container': ''},
                               {'pid': 1500, 'name': 'python3', 'rss_kib': 20 * GIB, 'container': 'old-sglang'}], 'error': ''},
            'docker': {'version': '28.3.3', 'runtimes': ['io.containerd.runc.v2', 'nvidia', 'runc'], 'cdi': [], 'containers': {},
                       'error': ''},
            'ports': [{'port': 22, 'address': '0.0.0.0', 'process': 'sshd', 'pid': 57, 'container': ''}],
            'os': {'name': 'Ubuntu 24.04.3 LTS', 'kernel': '6.11.0-1016-nvidia'},
            # A fresh DGX OS: logind's file comments RemoveIPC out, so systemd's default (yes) runs.
            'logind': {'installed': True, 'files': ['/etc/systemd/logind.conf'], 'remove_ipc': True, 'set_by': '',
                       'running_remove_ipc': True},
            'model': {'exists': True, 'files': dict(FILES), 'index_sha256': 'a' * 64, 'free_bytes': 500 * 10 ** 9, 'error': ''},
        },
        'image': {'present': True, 'image_id': 'sha256:' + 'c' * 64, 'vllm_version': '0.33.0', 'ray_version': '2.60.0', 'errors': []},
        'cx7': {'devices': [{'netdev': 'enp1s0f1np1', 'operstate': 'up', 'speed_mbps': 200000, 'mtu': 9000},
                            {'netdev': 'enP2p1s0f1np1', 'operstate': 'up', 'speed_mbps': 200000, 'mtu': 9000}]},
    }


def nodes(**changes):
    """Healthy readings with changes: {host: function(node) that alters it}."""
    readings = dict((h, healthy_node()) for h in HOSTS)
    for host, change in changes.items():
        change(readings[host.replace('_', '-')])
    return readings


def evaluate(readings, **expect):
    return preflight.evaluate(PLAN, dict(EXPECT, **expect), readings)


def setter(path, value):
    def change(node):
        target = node
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def test_healthy_cluster_passes_with_one_row_per_node():
    report = evaluate(nodes())
    assert report['ok'] and report['problems'] == [] and report['warnings'] == []
    assert [row['node'] for row in report['rows']] == HOSTS
    assert report['rows'][0]['gpu'] == 'GB10 580.95.05 CUDA 13.0'
    assert report['rows'][1]['model'] == 'as on head'
    lines = preflight.render(report)
    assert lines[0].split() == ['node'] + list(preflight.CHECKS) and len(lines) == 7
    assert lines[-1] == '44 checks on 4 nodes: 0 problems, 0 warnings'


@pytest.mark.parametrize('changes,expect,fragments', [
    ({'spark_gamma': lambda n: n.update(error='unreachable (ssh: connect to host 10.0.0.12 port 22: Connection timed out)')}, {},
     ['spark-gamma: ssh: found unreachable (ssh: connect to host 10.0.0.12', 'check that the node is up']),
    ({'spark_delta': setter(['facts', 'gpu', 'driver'], '580.142')}, {},
     ['spark-delta: gpu: found driver 580.142; expected driver 580.95.05, as on spark-alpha, spark-beta, spark-gamma',
      'seed 004 hung at layer 57']),
    ({'spark_beta': setter(['facts', 'gpu'], {'gpus': [], 'driver': '', 'cuda': '', 'error': 'nvidia-smi exited 9: NVIDIA-SMI has failed'})},
     {}, ['spark-beta: gpu: found nvidia-smi exited 9', 'install or repair the NVIDIA driver']),
    ({'spark_beta': setter(['facts', 'gpu', 'gpus'], [{'name': 'NVIDIA RTX 6000', 'driver': '580.95.05'}])}, {},
     ['spark-beta: gpu: found GPU NVIDIA RTX 6000; expected one NVIDIA GB10']),
    ({'spark_beta': setter(['facts', 'memory', 'total_kib'], 96 * GIB)}, {},
     ['spark-beta: memory: found MemTotal 96.0 GiB; expected about 121.7 GiB', 'set dgxspark_node_memory_gib to 96.0']),
    ({'spark_gamma': setter(['facts', 'memory', 'available_kib'], 60 * GIB)}, {},
     ['spark-gamma: memory: found MemAvailable 60.0 GiB; expected at least 103.4 GiB free',
      'Xorg (pid 900, 3.0 GiB), python3 (pid 1500, container old-sglang, 20.0 GiB)']),
    ({'spark_alpha': setter(['facts', 'docker'], dict(version='', runtimes=[], cdi=[], containers={},
                                                      error='the Docker daemon does not answer'))}, {},
     ['spark-alpha: docker: found the Docker daemon does not answer', 'systemctl enable --now docker']),
    ({'spark_beta': setter(['facts', 'docker', 'runtimes'], ['runc'])}, {},
     ['spark-beta: docker: found Docker 28.3.3 without the nvidia runtime or CDI specs', 'nvidia-ctk runtime configure']),
    ({'spark_alpha': setter(['image'], {'present': False, 'image_id': '', 'errors': []})}, {},
     ['spark-alpha: image: found no image vllm/vllm-openai:v0.33.0', 'docker load (or pull) it on spark-alpha']),
    ({'spark_gamma': setter(['image'], {'present': False, 'image_id': '', 'errors': []})}, {'distribute_image': False},
     ['spark-gamma: image: found image vllm/vllm-openai:v0.33.0 missing', 'dgxspark_distribute_image: true']),
    ({'spark_beta': setter(['image', 'errors'], ['vllm --version in sha256:cc exited 127: executable file not found'])}, {},
     ['spark-beta: image: found vllm --version in sha256:cc exited 127']),
    ({'spark_beta': lambda n: n['facts']['model']['files'].pop('model-00002-of-00002.safetensors'),
      'spark_gamma': setter(['facts', 'model', 'files', 'model-00001-of-00002.safetensors'], 123)}, {'distribute_model': False},
     ['spark-beta: model: found 1 missing (model-00002-of-00002.safetensors)',
      'spark-gamma: model: found 1 of another size (model-00001-of-00002.safetensors)', 'dgxspark_distribute_model: true']),
    ({'spark_beta': lambda n: (n['facts']['model'].update(files={}, free_bytes=12 * 10 ** 9))}, {},
     ['spark-beta: model: found 4 missing (config.json, model-00001-of-00002.safetensors, model-00002-of-00002.safetensors ...); 12.0 GB free',
      'room for 9.0 GB plus 10 GB reserve']),
    ({'spark_alpha': setter(['facts', 'model'], dict(exists=False, files={}, index_sha256='', free_bytes=10 ** 12, error=''))},
     {},
     ['spark-alpha: model: found no model files', 'dgxspark_model_download: true']),
    ({'spark_delta': setter(['cx7', 'devices'], [{'netdev': 'enp1s0f1np1', 'operstate': 'down', 'speed_mbps': None, 'mtu': 9000}])}, {},
     ['spark-delta: fabric: found enp1s0f1np1 down, enP2p1s0f1np1 missing', 'playbooks/discover.yml']),
    ({'spark_beta': setter(['cx7', 'devices', 0, 'speed_mbps'], 100000)}, {}, ['spark-beta: fabric: found enp1s0f1np1 at 100000 Mb/s']),
    ({'spark_alpha': setter(['facts', 'ports'], [dict(port=8000, address='0.0.0.0', process='python3', pid=4242, container='')])},
     {},
     ['spark-alpha: ports: found 8000 (vLLM API) held by python3 pid 4242', 'vllm_container_port']),
    # A Docker network inside a rail subnet (the default bridge moved there, or a compose project's network).
    ({'spark_gamma': setter(['facts', 'docker', 'networks'], {'bridge': ['172.17.0.0/16'], 'host': [], 'none': [],
                                                              'llm_default': ['192.168.100.0/20', 'fd00:1::/64']})}, {},
     ['spark-gamma: docker: found Docker network llm_default (192.168.100.0/20) overlaps rail1 (192.168.100.0/24); '
      'Docker network llm_default (192.168.100.0/20) overlaps rail2 (192.168.101.0/24)',
      'docker network rm llm_default, or give Docker default-address-pools outside the rails']),
    ({'spark_delta': setter(['facts', 'clock_offset_s'], 42.0)}, {},
     ['spark-delta: clock: found clock +41.9 s from the other nodes', 'timedatectl set-ntp true']),
])
def test_each_bad_reading_is_named_with_its_fix(changes, expect, fragments):
    report = evaluate(nodes(**changes), **expect)
    assert not report['ok']
    text = '\n'.join(report['problems'])
    for fragment in fragments:
        assert fragment in text, (fragment, text)
    assert len(report['problems']) == len([f for f in fragments if f.startswith('spark-')]), report['problems']
    for problem in report['problems']:
        assert '; expected ' in problem and '. Fix: ' in problem


@pytest.mark.parametrize('changes,expect,host,cell', [
    ({'spark_gamma': setter(['image'], {'present': False, 'image_id': '', 'errors': []})}, {}, 'spark-gamma', 'to be distributed'),
    ({'spark_beta': setter(['image', 'image_id'], 'sha256:' + 'd' * 64)}, {}, 'spark-beta', 'to be distributed'),
    ({'spark_beta': lambda n: n['facts']['model']['files'].pop('config.json')}, {}, 'spark-beta', 'to be distributed (0.0 GB)'),
    ({'spark_alpha': setter(['facts', 'model', 'exists'], False)}, {'model_download': True}, 'spark-alpha', 'to be downloaded'),
    # The collection's own containers hold their ports and memory on a re-run: not a problem.
    ({'spark_alpha': lambda n: (n['facts'].update(ports=[{'port': 8000, 'process': 'python3', 'pid': 7, 'container': 'dgxspark-vllm'}]),
                                n['facts']['docker'].update(containers={'x' * 64: 'dgxspark-vllm'}),
                                n['facts']['memory'].update(available_kib=20 * GIB))}, {}, 'spark-alpha', 'ours'),
    ({'spark_beta': setter(['facts', 'docker', 'runtimes'], ['runc'])}, {'needs_gpu_runtime': False}, 'spark-beta', '28.3.3'),
    # Docker's own networks outside the rails, and an IPv6 one, are fine.
    ({'spark_beta': setter(['facts', 'docker', 'networks'], {'bridge': ['172.17.0.0/16'], 'v6': ['fd00:100::/64'], 'host': []})},
     {}, 'spark-beta', '28.3.3'),
])
def test_what_the_deploy_will_bring_or_already_owns_is_not_a_problem(changes, expect, host, cell):
    report = evaluate(nodes(**changes), **expect)
    assert report['ok'], report['problems']
    row = next(r for r in report['rows'] if r['node'] == host)
    assert cell in row.values(), row


def test_every_problem_of_every_node_at_once_and_nothing_proceeds_on_a_subset():
    report = evaluate(nodes(spark_beta=setter(['facts', 'gpu', 'driver'], '580.142'),
                            spark_gamma=lambda n: n.update(error='unreachable (timed out)'),
                            spark_delta=setter(['facts', 'ports'], [{'port': 6379, 'process': 'redis-server', 'pid': 3,
                                                                     'container': ''}])))
    assert [p.split(':')[0] for p in report['problems']] == ['spark-gamma', 'spark-delta', 'spark-beta']
    assert next(r for r in report['rows'] if r['node'] == 'spark-gamma')['ssh'] == 'PROBLEM'
    lines = preflight.render(report)
    assert '3 problems (nothing was changed on any node):' in lines


def test_differing_os_and_kernel_are_warnings_only():
    report = evaluate(nodes(spark_delta=setter(['facts', 'os'], {'name': 'Ubuntu 24.04.2 LTS', 'kernel': '6.11.0-1015-nvidia'})))
    assert report['ok']
    assert [w.split(': ', 2)[2].split(':')[0] for w in report['warnings']] == ['OS versions differ', 'kernel versions differ']


def test_mtu_before_the_network_phase_is_a_warning():
    report = evaluate(nodes(spark_beta=setter(['cx7', 'devices', 0, 'mtu'], 1500)))
    assert report['ok'] and report['warnings'] == [
        'spark-beta: fabric: enp1s0f1np1 has MTU 1500 now; the network phase sets 9000 (the switch ports must allow it)']


def test_evaluate_does_not_change_its_inputs():
    readings = nodes()
    before = copy.deepcopy(readings)
    evaluate(readings)
    assert readings == before


def test_an_image_outside_the_profile_patches_vllm_range_is_refused_on_every_node():
    plan = dict(PLAN, model_profile='m', patches=[{'file': 'patches/p.py', 'vllm': '>=0.34', 'kind': 'python'}])
    report = preflight.evaluate(plan, EXPECT, nodes())
    assert len(report['problems']) == 4
    assert report['problems'][0].startswith(
        'spark-alpha: image: found vLLM 0.33.0; expected the vLLM the profile\'s patches were written for (profile m: patch '
        'patches/p.py applies to vLLM >=0.34, but the image has vLLM 0.33.0; refusing to start it)')
    plan['patches'][0]['vllm'] = '>=0.33,<0.34'
    assert preflight.evaluate(plan, EXPECT, nodes())['ok']


def without_ray(node):
    # What serving_image_versions reports for NVIDIA's NGC image: vLLM installed, no Ray (real message shape).
    node['image'].update(ray_version='', errors=["ray --version in sha256:%s exited 127: docker: Error response from daemon: "
                                                 "failed to create task for container: exec: \"ray\": executable file not found "
                                                 "in $PATH" % ('c' * 64)])


@pytest.mark.parametrize('backend, problems, row', [
    ('ray', ['spark-alpha: image: found ray --version in sha256:', 'expected `ray --version` and `vllm --version` to answer',
             'use a serving image with Ray and vLLM'], None),
    ('mp', [], 'vLLM 0.33.0'),
])
def test_an_image_without_ray_serves_only_vllm_s_own_multi_node_backend(backend, problems, row):
    plan = with_backend(backend)
    report = preflight.evaluate(plan, EXPECT, nodes(**dict((h.replace('-', '_'), without_ray) for h in HOSTS)))
    assert len(report['problems']) == (4 if problems else 0), report['problems']
    for fragment in problems:
        assert fragment in report['problems'][0], (fragment, report['problems'][0])
    if row:
        assert [r['image'] for r in report['rows']] == [row] * 4


def test_an_image_without_vllm_is_refused_with_either_backend():
    def without_vllm(node):
        node['image'].update(vllm_version='', errors=['vllm --version in sha256:%s exited 127: not found' % ('c' * 64)])
    report = preflight.evaluate(with_backend('mp'), EXPECT, nodes(spark_alpha=without_vllm))
    assert report['problems'][0].startswith('spark-alpha: image: found vllm --version in sha256:')
    assert 'use a serving image with vLLM (dgxspark_serving_image)' in report['problems'][0]


LOGIND_KEPT = {'installed': True, 'files': ['/etc/systemd/logind.conf', '/etc/systemd/logind.conf.d/90-dgxspark.conf'],
               'remove_ipc': False, 'set_by': '/etc/systemd/logind.conf.d/90-dgxspark.conf', 'running_remove_ipc': False}


@pytest.mark.parametrize('logind,user,keep,cell', [
    (None, '', True, 'to be kept'),                           # the os phase (tag os_logind) writes RemoveIPC=no
    (LOGIND_KEPT, 'vllm', False, 'kept'),
    # The drop-in is written but logind still runs with yes (not restarted): the running value counts.
    (dict(LOGIND_KEPT, running_remove_ipc=True), '', False, 'spares root'),
    # busctl could not ask logind: the files count.
    (dict(LOGIND_KEPT, running_remove_ipc=None), 'vllm', False, 'kept'),
    (None, '', False, 'spares root'),
    (None, '0:0', False, 'spares 0:0'),
    (None, '999', False, 'spares 999'),
    ({'installed': False, 'files': [], 'remove_ipc': True, 'set_by': '', 'running_remove_ipc': None}, 'vllm', False, 'no logind'),
])
def test_logind_removing_ipc_matters_only_for_an_engine_of_a_regular_user(logind, user, keep, cell):
    def change(node):
        if logind:
            node['facts']['logind'] = logind
        node['image']['user'] = user
    report = evaluate(nodes(**dict((h.replace('-', '_'), change) for h in HOSTS)), logind_keep_ipc=keep)
    assert report['ok'] and report['warnings'] == [], report['problems']
    assert [row['ipc'] for row in report['rows']] == [cell] * 4


@pytest.mark.parametrize('user', ['vllm', '1000', 'vllm:vllm'])
def test_an_engine_of_a_regular_user_is_refused_where_logind_removes_its_ipc(user):
    """The head's image's USER runs the engine on every node: a node whose logind removes a regular user's IPC is refused."""
    readings = nodes(spark_alpha=setter(['image', 'user'], user), spark_gamma=setter(['facts', 'logind'], LOGIND_KEPT))
    report = evaluate(readings, logind_keep_ipc=False)
    assert [p.split(':')[0] for p in report['problems']] == ['spark-alpha', 'spark-beta', 'spark-delta']
    assert report['problems'][0] == (
        "spark-alpha: ipc: found logind RemoveIPC=yes (systemd's default) and an engine that runs as %s (the image's USER); "
        "expected RemoveIPC=no, or an engine that runs as root: logind deletes a regular user's semaphores and shared memory "
        "when the user's last session ends, and the engine then hangs in its next collective. Fix: set "
        "os_hardening_logind_keep_ipc: true (the os phase writes RemoveIPC=no and restarts systemd-logind)" % user)
    assert next(r for r in report['rows'] if r['node'] == 'spark-gamma')['ipc'] == 'kept'


def gpu_reading(sm, busy):
    return lambda node: node['facts']['gpu'].update(sm_mhz=sm, utilization=busy)


def test_a_busy_gpu_stuck_at_low_clocks_is_refused():
    report = evaluate(nodes(spark_gamma=gpu_reading(702, 96), spark_beta=gpu_reading(2850, 97)))
    assert report['problems'] == [
        "spark-gamma: gpu: found SM clock 702 MHz at 96% utilisation (maximum 3003 MHz); expected at least 1501 MHz (half "
        "the maximum) under load. Fix: pull the node's AC power for a minute (a reboot keeps a GPU stuck at low clocks, eugr "
        "#334); os_hardening_gpu_clocks_mhz locks the clocks at boot"]
    assert [row['gpu'] for row in report['rows']][1:3] == ['GB10 580.95.05 CUDA 13.0', 'PROBLEM']


@pytest.mark.parametrize('sm,busy,lock,warnings', [
    (850, 0, [], 0),               # an idle GPU's low clock is no sign
    (850, 50, [], 0),              # at the alert's threshold, not above it
    (850, 0, [0, 2200], 0),        # a cap, no floor
    (850, 0, [1800, 2200], 1),     # below the locked floor at idle: not applied, or stuck
    (1800, 0, [1800, 2200], 0),
    (None, None, [1800, 2200], 0),  # nvidia-smi gave no clocks
])
def test_an_idle_gpu_s_clock_warns_only_below_the_locked_minimum(sm, busy, lock, warnings):
    report = evaluate(nodes(**dict((h.replace('-', '_'), gpu_reading(sm, busy)) for h in HOSTS)), gpu_clocks_mhz=lock)
    assert report['ok'] and len(report['warnings']) == 4 * warnings, report['warnings']
    if warnings:
        assert report['warnings'][1].startswith('spark-beta: gpu: SM clock 850 MHz at idle, below the locked minimum 1800 MHz')
