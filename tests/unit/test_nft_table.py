"""The firewall table's state (module_utils/nft_table.py, the nft_table module, phase_state's nft_tables kind) over nft's
real listing format, recorded on a lab node (nft 1.0.6, Debian 12) after the firewall phase; nft itself is a stand-in
program that prints the listing the test gives it, so nothing touches this machine's firewall."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.nft_table import NftTableError, digest, normalize, validate_table

COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".build", "collections")

LISTING = """table inet dgxspark {
\tset rail_nets {
\t\ttype ipv4_addr
\t\tflags interval
\t\telements = { 192.168.100.0/24, 192.168.101.0/24 }
\t}

\tset api_nets {
\t\ttype ipv4_addr
\t\tflags interval
\t\telements = { 172.31.240.0/24 }
\t}

\tchain input {
\t\ttype filter hook input priority filter - 10; policy accept;
\t\tiif "lo" accept
\t\tct state established,related accept
\t\ttcp dport 22 accept
\t\tiifname { "enp1s0f0np0", "enP2p1s0f0np0" } ip saddr @rail_nets accept
\t\ttcp dport 8000 ip saddr @api_nets accept
\t\ttcp dport 8000 counter packets 0 bytes 0 drop comment "vLLM API outside dgxspark_api_allowed_cidrs"
\t\ttcp dport { 6379-6384, 8265, 10001-19999, 52365 } counter packets 0 bytes 0 drop comment "Ray outside the rails"
\t\tmeta l4proto { tcp, udp } th dport 32768-60999 ct state new counter packets 0 bytes 0 drop comment "NCCL/Gloo outside the rails"
\t}
}
"""
# The same table after traffic (counters moved), and listed with handles (`nft -a`).
COUNTED = LISTING.replace('counter packets 0 bytes 0 drop comment "Ray', 'counter packets 17 bytes 1020 drop comment "Ray')
WITH_HANDLES = LISTING.replace('tcp dport 22 accept', 'tcp dport 22 accept # handle 7')
ADDED_RULE = LISTING.replace('\t\ttcp dport 22 accept\n', '\t\ttcp dport 22 accept\n\t\ttcp dport 4242 accept\n')


@pytest.mark.parametrize('other, same', [
    (COUNTED, True),
    (WITH_HANDLES, True),
    (LISTING + '\n\n', True),
    (ADDED_RULE, False),
    (LISTING.replace('192.168.101.0/24', '192.168.102.0/24'), False),
    (LISTING.replace('"enp1s0f0np0", ', ''), False),
])
def test_digest_ignores_counters_and_handles_only(other, same):
    assert (digest(other) == digest(LISTING)) is same


def test_normalize_keeps_the_rules_and_drops_counter_values():
    text = normalize(COUNTED)
    assert 'counter drop comment "Ray outside the rails"' in text and 'packets' not in text and '\n\n' not in text
    assert digest(None) is None and normalize('') == ''


@pytest.mark.parametrize('table', ['inet', 'dgxspark', 'inet dgx spark', 'inet6 dgxspark', 'inet dgxspark; flush ruleset', '', None])
def test_bad_table_names_are_refused(table):
    with pytest.raises(NftTableError, match='FAMILY NAME'):
        validate_table(table)


# --- the modules, run as Ansible runs them, with a stand-in nft -------------------------------------------------------

@pytest.fixture(name='nft')
def fixture_nft(tmp_path):
    """A stand-in nft: `nft list table inet dgxspark` prints $FAKE_NFT_LISTING's file, or fails as nft does without it."""
    program = tmp_path / 'bin' / 'nft'
    program.parent.mkdir()
    program.write_text('#!/bin/sh\n'
                       '[ "$*" = "list table inet dgxspark" ] || { echo "unexpected: $*" >&2; exit 2; }\n'
                       'if [ -f "$FAKE_NFT_LISTING" ]; then cat "$FAKE_NFT_LISTING"; exit 0; fi\n'
                       'echo "Error: No such file or directory" >&2\n'
                       'echo "list table inet dgxspark" >&2\n'
                       'exit 1\n')
    program.chmod(0o755)
    return program


def run_module(name, tmp_path, nft, listing, args):
    listing_file = tmp_path / 'listing'
    if listing is None:
        if listing_file.exists():
            listing_file.unlink()
    else:
        listing_file.write_text(listing)
    args_file = tmp_path / 'args.json'
    args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS, FAKE_NFT_LISTING=str(listing_file),
               PATH='%s:%s' % (nft.parent, os.environ.get('PATH', '')))
    proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.' + name, str(args_file)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')][-1]


def test_the_table_is_recorded_then_matches_then_a_change_or_a_deletion_is_named(tmp_path, nft):
    record = tmp_path / 'firewall' / 'table.sha256'
    args = {'record': str(record), 'nft': str(nft)}
    never = run_module('nft_table', tmp_path, nft, LISTING, args)
    assert never['loaded'] and not never['matches'] and 'never recorded' in never['problem']
    preview = run_module('nft_table', tmp_path, nft, LISTING, dict(args, state='recorded', _ansible_check_mode=True, _ansible_diff=True))
    assert preview['changed'] and not record.exists() and preview['diff']['after'] == digest(LISTING) + '\n'
    recorded = run_module('nft_table', tmp_path, nft, LISTING, dict(args, state='recorded'))
    assert recorded['changed'] and recorded['matches'] and oct(record.stat().st_mode & 0o777) == '0o600'
    assert not run_module('nft_table', tmp_path, nft, COUNTED, dict(args, state='recorded'))['changed']
    assert run_module('nft_table', tmp_path, nft, COUNTED, args)['matches']
    changed = run_module('nft_table', tmp_path, nft, ADDED_RULE, args)
    assert not changed['matches'] and 'differs from the one the firewall phase loaded' in changed['problem']
    gone = run_module('nft_table', tmp_path, nft, None, args)
    assert not gone['loaded'] and not gone['matches'] and gone['sha256'] is None
    assert 'is not loaded (Error: No such file or directory' in gone['problem']
    refused = run_module('nft_table', tmp_path, nft, None, dict(args, state='recorded'))
    assert refused['failed'] and 'it is not loaded' in refused['msg']


def test_a_bad_table_or_a_missing_nft_fails_clearly(tmp_path, nft):
    bad = run_module('nft_table', tmp_path, nft, LISTING, {'table': 'inet x; flush ruleset', 'nft': str(nft)})
    assert bad['failed'] and 'FAMILY NAME' in bad['msg']
    missing = run_module('nft_table', tmp_path, nft, LISTING, {'nft': str(tmp_path / 'no-nft')})
    assert missing['failed'] and 'install the nftables package' in missing['msg']


def test_the_firewall_phase_sees_its_table_deleted_or_changed(tmp_path, nft):
    args = {'phase': 'firewall', 'inputs_digest': 'd1', 'stamp_dir': str(tmp_path / 'stamps'),
            'watch': {'nft_tables': ['inet dgxspark']}}
    assert run_module('phase_state', tmp_path, nft, LISTING, dict(args, state='recorded'))['changed']
    assert run_module('phase_state', tmp_path, nft, COUNTED, args)['converged']
    assert '(nft_tables)' in run_module('phase_state', tmp_path, nft, ADDED_RULE, args)['reason']
    gone = run_module('phase_state', tmp_path, nft, None, args)
    assert not gone['converged'] and gone['observed']['nft_tables'] == {'inet dgxspark': None}
    refused = run_module('phase_state', tmp_path, nft, LISTING, dict(args, watch={'nft_tables': ['dgxspark']}))
    assert refused['failed'] and 'watch.nft_tables' in refused['msg']
