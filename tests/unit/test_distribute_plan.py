"""Table tests for the distribution chain (plugins/module_utils/distribute_plan.py, filter distribute_chain)."""
import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.distribute_plan import chain

PLAN = {
    'rails': [{'name': 'rail1'}, {'name': 'rail2'}],
    'nodes': [{'host': h, 'rail_addresses': {'rail1': '192.168.100.%d' % (10 + i), 'rail2': '192.168.101.%d' % (10 + i)}}
              for i, h in enumerate(['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta'])],
}


@pytest.mark.parametrize('targets,head,rail,expected', [
    # The model: the head first, then the targets in rank order whatever order they come in.
    (['spark-delta', 'spark-beta'], 'spark-alpha', None,
     [{'rail1': '192.168.100.10', 'rail2': '192.168.101.10'}, {'rail1': '192.168.100.11', 'rail2': '192.168.101.11'},
      {'rail1': '192.168.100.13', 'rail2': '192.168.101.13'}]),
    # The image: the targets only, on rail 1.
    (['spark-gamma', 'spark-beta'], None, 'rail1', ['192.168.100.11', '192.168.100.12']),
    (['spark-gamma'], None, 'rail2', ['192.168.101.12']),
    ([], 'spark-alpha', 'rail1', ['192.168.100.10']),
    ([], None, 'rail1', []),
    # The head among the targets is not repeated.
    (['spark-alpha', 'spark-beta'], 'spark-alpha', 'rail1', ['192.168.100.10', '192.168.100.11']),
])
def test_chain(targets, head, rail, expected):
    assert chain(PLAN, targets, head=head, rail=rail) == expected


@pytest.mark.parametrize('targets,head,rail,message', [
    (['spark-omega'], None, None, 'not nodes of the plan: spark-omega'),
    ([], 'spark-zeta', None, 'not nodes of the plan: spark-zeta'),
    (['spark-beta'], None, 'rail3', "rail 'rail3' is not a rail of the plan (rail1, rail2)"),
])
def test_chain_refuses_what_is_not_in_the_plan(targets, head, rail, message):
    with pytest.raises(ValueError, match=message.replace('(', r'\(').replace(')', r'\)')):
        chain(PLAN, targets, head=head, rail=rail)
