"""The distribution key's forced command (distribute_relay.py --forced): what a relay sends to the next node
(remote_relay(), the real command line) runs; anything else over that key is refused before anything runs."""
import argparse
import importlib.util
import json
import os

import pytest

RELAY = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', 'roles', 'distribute', 'files',
                                     'distribute_relay.py'))
_SPEC = importlib.util.spec_from_file_location('distribute_relay', RELAY)
relay = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(relay)

FIXED = {'relay': RELAY, 'ssh_key': '/etc/dgxspark/secrets/distribute_ed25519',
         'known_hosts': '/etc/dgxspark/distribute_known_hosts', 'user': 'root',
         'progress': {'image': '/run/dgxspark/distribute/image.json',
                      'model-recv': '/run/dgxspark/distribute/model.json'},
         'entries': '/run/dgxspark/distribute/model-entries.json',
         'model_dirs': ['/var/lib/dgxspark-lab/models/qwen3.5-397b-a17b-fp8'],
         'rail_nets': ['192.168.100.0/24', '192.168.101.0/24']}
SSH = argparse.Namespace(ssh_key=FIXED['ssh_key'], known_hosts=FIXED['known_hosts'], user='root',
                         cipher='aes128-gcm@openssh.com', ssh_port=22)


def sent(kind, **change):
    """The command line a relay sends to the next node (start_forward / relay_image, then connect_next)."""
    values = {'dir': FIXED['model_dirs'][0], 'entries': FIXED['entries'], 'progress': FIXED['progress'][kind],
              'upstream': '192.168.100.11', 'here': '192.168.100.12', 'chain': '192.168.100.13'}
    values.update(change)
    if kind == 'model-recv':
        extra = ['--dir', values['dir'], '--entries', values['entries'], '--progress', values['progress'], '--lane',
                 '0', '--lanes', '2', '--total', '1000', '--upstream', values['upstream'], '--here', values['here']]
    else:
        extra = ['--progress', values['progress'], '--total', '1000']
    extra += ['--connect-wait', '60', '--chain', values['chain']]
    ssh = argparse.Namespace(**dict(vars(SSH), **{k: v for k, v in change.items() if k in vars(SSH)}))
    return relay.remote_relay(ssh, kind, extra)


@pytest.mark.parametrize('kind', ['model-recv', 'image'])
def test_what_a_relay_sends_runs(kind):
    argv = relay.forced_request(sent(kind), FIXED)
    args = relay.build_parser().parse_args(argv)
    assert args.kind == kind and args.ssh_key == FIXED['ssh_key'] and args.chain == ['192.168.100.13']


def test_the_last_node_of_a_chain_runs_too():
    assert relay.forced_request(sent('image', chain=''), FIXED)


@pytest.mark.parametrize('original, words', [
    ('', 'only the relay'),
    ('bash -c id', "only the relay %s runs with this key, not 'bash -c'" % RELAY),
    ('python3 /tmp/evil.py image', 'only the relay'),
    ('python3 %s model-send --progress x' % RELAY, "only model-recv and image run with this key, not 'model-send'"),
    (sent('image') + '; reboot', "invalid int value: '22;'"),
    (sent('image') + ' && reboot', 'unrecognized arguments: && reboot'),
    (sent('image') + ' --source dgxspark/vllm:evil', '--source (docker save) runs only where the chain starts'),
    (sent('image', ssh_key='/root/.ssh/id_ed25519'), '--ssh-key must be /etc/dgxspark/secrets/distribute_ed25519'),
    (sent('image', user='admin'), '--user must be root, not admin'),
    (sent('image', progress='/etc/cron.d/dgxspark'), '--progress must be /run/dgxspark/distribute/image.json'),
    (sent('model-recv', dir='/etc'), '--dir must be one of /var/lib/dgxspark-lab/models/qwen3.5-397b-a17b-fp8'),
    (sent('model-recv', entries='/tmp/entries.json'), '--entries must be /run/dgxspark/distribute/model-entries.json'),
    (sent('image', chain='10.0.0.5'), '10.0.0.5 is not on the rails (192.168.100.0/24, 192.168.101.0/24)'),
    (sent('model-recv', upstream='attacker.example'), "'attacker.example' is not an address on the rails"),
    ("python3 %s image --progress 'unterminated" % RELAY, 'unreadable request'),
], ids=['empty', 'a shell', 'another script', 'model-send', 'a command after', 'and a command', 'docker save over the key',
        'another key', 'another user', 'progress elsewhere', 'model dir elsewhere', 'entries elsewhere',
        'chain off the rails', 'upstream a name', 'bad quoting'])
def test_anything_else_is_refused(original, words):
    with pytest.raises(relay.ForcedCommandError) as err:
        relay.forced_request(original, FIXED)
    assert words in str(err.value)


def test_a_refused_request_runs_nothing(tmp_path, monkeypatch, capsys):
    config = tmp_path / 'forced.json'
    config.write_text(json.dumps(FIXED))
    monkeypatch.setenv('SSH_ORIGINAL_COMMAND', 'python3 %s model-send --x 1; touch %s' % (RELAY, tmp_path / 'pwned'))
    ran = []
    monkeypatch.setattr(relay, 'send_model', ran.append)
    assert relay.main(['--forced', str(config)]) == 2
    assert 'refused' in capsys.readouterr().err
    assert not ran and not (tmp_path / 'pwned').exists()
