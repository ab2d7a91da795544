"""vLLM's placement-group wait, read from its log (plugins/module_utils/placement_wait.py).

The lines are vLLM 0.32's: the format string of vllm/v1/executor/ray_utils.py (_wait_until_pg_ready) filled as its
logger fills it, the specs being the Python repr of the list ray_utils builds (one {device: 1.0} per rank, bundle 0 with
node:<ip> 0.001), behind the process prefix and level tag vLLM prints (tests/unit/fixtures/vllm_progress/README.md).
"""
import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import placement_wait as pw

TAIL = (". Check `ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP addresses used "
        "by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a "
        "multi-node.")


def wait_line(seconds, specs):
    return ("(EngineCore_DP0 pid=312) INFO 12-04 18:44:30 [ray_utils.py:466] Waiting for creating a placement group of specs "
            "for %d seconds. specs=%r%s" % (seconds, specs, TAIL))


PINNED = [{'GPU': 1.0, 'node:192.168.100.10': 0.001}, {'GPU': 1.0}, {'GPU': 1.0}, {'GPU': 1.0}]


@pytest.mark.parametrize('line, expected', [
    (wait_line(10, PINNED), {'seconds': 10, 'bundles': 4, 'device': 'GPU', 'pinned': '192.168.100.10'}),
    # The lab's CPU build asks for CPU bundles; a placement group made outside vLLM has no pin.
    (wait_line(40, [{'CPU': 1.0}, {'CPU': 1.0}]), {'seconds': 40, 'bundles': 2, 'device': 'CPU', 'pinned': ''}),
    ('(EngineCore_DP0 pid=312) INFO 12-04 18:44:30 [ray_utils.py:321] tensor_parallel_size=4 is bigger than a reserved number '
     'of GPUs (1 GPUs) in a node', None),
    ('', None),
])
def test_parse_placement_wait(line, expected):
    assert pw.parse_placement_wait(line) == expected


def test_the_latest_wait_counts_and_the_advice_names_strategy_and_pin():
    wait = pw.latest_placement_wait([wait_line(10, PINNED), 'other', wait_line(20, PINNED)])
    assert wait['seconds'] == 20
    assert pw.placement_text(wait) == 'Ray placement group pending 20 s (PACK, 4 bundles of 1 GPU, bundle 0 on node:192.168.100.10)'
    advice = pw.placement_advice(wait)
    assert advice.startswith('vLLM has waited 20 s for its Ray placement group (strategy PACK, 4 bundles of 1 GPU): bundle 0 '
                             'is pinned to the resource node:192.168.100.10')
    assert 'VLLM_HOST_IP must be the address Ray started with (--node-ip-address' in advice
    assert 'every node must have a free GPU in Ray' in advice
    assert pw.latest_placement_wait(['nothing', 'here']) is None
