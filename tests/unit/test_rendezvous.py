# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who joined rank 0's rendezvous under mp (module_utils/rendezvous.py, the plan's serving.rendezvous, serving_probe's
read and the vllm_ready action's use of it): over the real socket tables of the lab's head while its four ranks were
up (fixtures/rendezvous, /proc/net/tcp and tcp6 of spark-alpha, vLLM 0.32 CPU, --master-port 29501), and those tables
with a rank's line taken out (a rank that never connected), or every rendezvous line (rank 0 not listening yet)."""

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import cluster_plan as cp
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.vllm_args import VllmArgsError, executor_rendezvous
from ansible_collections.dgxspark.cluster.plugins.module_utils.rendezvous import (
    RendezvousError,
    RendezvousWatch,
    parse_proc_net_tcp,
    rendezvous_view,
)
from ansible_collections.dgxspark.cluster.plugins.modules.serving_probe import read_rendezvous

from test_cluster_plan import PROFILES, cluster

FIXTURES = pathlib.Path(__file__).parent / 'fixtures' / 'rendezvous'
TCP = (FIXTURES / 'head-all-joined.tcp').read_text(encoding='ascii')
TCP6 = (FIXTURES / 'head-all-joined.tcp6').read_text(encoding='ascii')
PORT = 29501
PORT_HEX = ':733D'
DELTA_HEX = '0D64A8C0'  # 192.168.100.13, spark-delta's rail-1 address
PEERS = {'spark-beta': '192.168.100.11', 'spark-gamma': '192.168.100.12', 'spark-delta': '192.168.100.13'}


def without(text, *fragments):
    return '\n'.join(line for line in text.splitlines() if not all(f in line for f in fragments)) + '\n'


DELTA_NEVER_CAME = without(TCP6, PORT_HEX, DELTA_HEX)
NOT_LISTENING = without(TCP6, PORT_HEX)


@pytest.mark.parametrize('tables, port, expected', [
    ([TCP, TCP6], PORT, {'listening': True, 'peers': ['192.168.100.11', '192.168.100.12', '192.168.100.13']}),
    # The tables' order does not matter; the IPv4 table alone holds no rendezvous socket (torch listens on IPv6).
    ([TCP6, TCP], PORT, {'listening': True, 'peers': ['192.168.100.11', '192.168.100.12', '192.168.100.13']}),
    ([TCP], PORT, {'listening': False, 'peers': []}),
    ([TCP, DELTA_NEVER_CAME], PORT, {'listening': True, 'peers': ['192.168.100.11', '192.168.100.12']}),
    ([TCP, NOT_LISTENING], PORT, {'listening': False, 'peers': []}),
    # Another port of the same tables: sshd, and the controller's connection to it.
    ([TCP, TCP6], 22, {'listening': True, 'peers': ['172.31.242.1']}),
    ([], PORT, {'listening': False, 'peers': []}),
], ids=['all-joined', 'tables-reversed', 'ipv4-table-only', 'delta-never-came', 'not-listening-yet', 'ssh-port', 'no-tables'])
def test_the_head_s_socket_tables_say_who_joined(tables, port, expected):
    assert rendezvous_view(tables, port) == dict(expected, port=port)


def test_rank_0_s_own_connection_to_itself_is_not_a_peer():
    sockets = parse_proc_net_tcp(TCP6)
    own = [s for s in sockets if s['state'] == '01' and s['local'][1] == PORT and s['remote'][0] == s['local'][0]]
    assert len(own) == 1 and str(own[0]['remote'][0]) == '192.168.100.10'


@pytest.mark.parametrize('table', [
    'sl local_address rem_address st\n 0: 0A64A8C0 00000000:0000 0A\n',
    'sl local_address rem_address st\n 0: ZZ64A8C0:733D 00000000:0000 0A\n',
], ids=['no-port', 'not-hex'])
def test_a_table_that_is_not_the_kernel_s_is_refused(table):
    with pytest.raises(RendezvousError, match='not an address of /proc/net/tcp'):
        parse_proc_net_tcp(table)


def view(*peers, listening=True):
    return {'port': PORT, 'listening': listening, 'peers': list(peers), 'error': None}


# Probes at times (s) and what each one saw: the watch fails only join_timeout after the rendezvous opened, and only
# for a rank that never joined.
@pytest.mark.parametrize('probes, failed_at, missing', [
    ([(0, view(listening=False)), (70, view('192.168.100.11', '192.168.100.12', '192.168.100.13')), (400, view('192.168.100.11',
      '192.168.100.12', '192.168.100.13'))], None, []),
    # spark-delta never comes: 300 s after the rendezvous opened (at 70 s), not after the container started.
    ([(0, view(listening=False)), (70, view('192.168.100.11', '192.168.100.12')), (300, view('192.168.100.11', '192.168.100.12')),
      (370, view('192.168.100.11', '192.168.100.12'))], 370, ['spark-delta']),
    # A rank that joined once and left counts as joined (its container's failure says the rest).
    ([(70, view('192.168.100.11', '192.168.100.12', '192.168.100.13')), (400, view('192.168.100.11'))], None, []),
    # Ranks coming one by one, the last just in time.
    ([(70, view()), (200, view('192.168.100.12')), (369, view('192.168.100.12', '192.168.100.11', '192.168.100.13')),
      (500, view('192.168.100.11'))], None, []),
    # Never listening: the stall watchdog's case, not this watch's.
    ([(0, view(listening=False)), (1000, view(listening=False))], None, ['spark-beta', 'spark-gamma', 'spark-delta']),
    # A probe without the view (the tables could not be read) changes nothing.
    ([(70, view()), (200, None), (370, view())], 370, ['spark-beta', 'spark-gamma', 'spark-delta']),
], ids=['all-join', 'delta-never-comes', 'joined-then-left', 'last-just-in-time', 'never-listening', 'probe-without-view'])
def test_the_watch_names_a_rank_that_never_joined_after_join_timeout(probes, failed_at, missing):
    watch = RendezvousWatch('192.168.100.10', PORT, PEERS, join_timeout=300)
    failures = [(t, watch.observe(seen, t)) for t, seen in probes]
    first = next(((t, m) for t, m in failures if m), None)
    assert (first[0] if first else None) == failed_at
    assert watch.missing() == missing
    if first:
        names = ', '.join('%s (%s)' % (node, PEERS[node]) for node in missing)
        which = 'the rank of %s has not' if len(missing) == 1 else 'the ranks of %s have not'
        assert first[1].startswith("Rank 0's rendezvous 192.168.100.10:29501 has been open for 5 min 0 s "
                                   "(vllm_container_join_timeout 300 s), and %s joined it" % (which % names)), first[1]
        assert 'nc -zv 192.168.100.10 29501' in first[1] and 'docker logs dgxspark-vllm' in first[1]


@pytest.mark.parametrize('peers, join_timeout, fragment', [
    ({}, 300, 'rendezvous peers must map'),
    (['192.168.100.11'], 300, 'rendezvous peers must map'),
    ({'spark-beta': 'spark-beta.lan'}, 300, 'rendezvous peers: '),
    (PEERS, 0, 'join_timeout must be a positive number of seconds, got 0'),
    (PEERS, True, 'join_timeout must be a positive number'),
], ids=['no-peers', 'peers-a-list', 'peer-not-an-address', 'zero-timeout', 'bool-timeout'])
def test_bad_watch_settings_are_refused(peers, join_timeout, fragment):
    with pytest.raises(RendezvousError, match=fragment):
        RendezvousWatch('192.168.100.10', PORT, peers, join_timeout=join_timeout)


def test_serving_probe_reads_the_tables_it_is_given_and_skips_a_missing_one(tmp_path):
    (tmp_path / 'tcp').write_text(TCP, encoding='ascii')
    (tmp_path / 'tcp6').write_text(DELTA_NEVER_CAME, encoding='ascii')
    tables = (str(tmp_path / 'tcp'), str(tmp_path / 'tcp6'), str(tmp_path / 'absent'))
    assert read_rendezvous(PORT, tables) == {'port': PORT, 'listening': True, 'peers': ['192.168.100.11', '192.168.100.12'],
                                             'error': None}
    (tmp_path / 'tcp6').write_text('sl local\n 0: nonsense here 0A\n', encoding='ascii')
    assert read_rendezvous(PORT, tables)['error'].startswith('not an address of /proc/net/tcp')


@pytest.mark.parametrize('backend, expected', [
    ('ray', None),
    ('mp', {'address': '192.168.100.10', 'port': PORT, 'peers': PEERS}),
])
def test_the_plan_gives_the_rendezvous_and_each_rank_s_rail_1_address(backend, expected):
    groups, hostvars = cluster(dgxspark_executor_backend=backend)
    plan = cp.build_plan(groups, hostvars, PROFILES)
    assert executor_rendezvous(plan) == expected


def test_a_plan_without_its_rails_is_refused():
    groups, hostvars = cluster(dgxspark_executor_backend='mp')
    plan = dict(cp.build_plan(groups, hostvars, PROFILES), rails=[])
    with pytest.raises(VllmArgsError, match='executor_rendezvous: the plan lacks'):
        executor_rendezvous(plan)
