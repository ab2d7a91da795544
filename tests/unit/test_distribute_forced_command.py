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
         'rail_nets': ['192.168.100.0/24', '192.168.101.0/24'],
         'image_id': 'sha256:bb27666592f7addd4327f29d43b556e9f04dbae26d1dd3855c8f7bf720340d01'}
IMAGE_ID = FIXED['image_id']
SSH = argparse.Namespace(ssh_key=FIXED['ssh_key'], known_hosts=FIXED['known_hosts'], user='root',
                         cipher='aes128-gcm@openssh.com', ssh_port=22)


def sent(kind, **change):
    """The command line a relay sends to the next node (start_forward / relay_image, then connect_next)."""
    values = {'dir': FIXED['model_dirs'][0], 'entries': FIXED['entries'], 'progress': FIXED['progress'][kind],
              'upstream': '192.168.100.11', 'here': '192.168.100.12', 'chain': '192.168.100.13', 'image_id': IMAGE_ID}
    values.update(change)
    if kind == 'model-recv':
        extra = ['--dir', values['dir'], '--entries', values['entries'], '--progress', values['progress'], '--lane',
                 '0', '--lanes', '2', '--total', '1000', '--upstream', values['upstream'], '--here', values['here']]
    else:
        extra = ['--progress', values['progress'], '--total', '1000', '--image-id', values['image_id']]
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
    (sent('image', image_id='latest'), "--image-id must be sha256: and 64 hex digits, not 'latest'"),
    # issue 49: a node that sends names another image (a re-tagged vllm/vllm-openai, a release's): refused
    (sent('image', image_id='sha256:' + 'e' * 64), "only the head's image %s may be loaded with this key, not sha256:%s"
     % (IMAGE_ID, 'e' * 64)),
], ids=['empty', 'a shell', 'another script', 'model-send', 'a command after', 'and a command', 'docker save over the key',
        'another key', 'another user', 'progress elsewhere', 'model dir elsewhere', 'entries elsewhere',
        'chain off the rails', 'upstream a name', 'bad quoting', 'image id not a digest', 'another image'])
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


SAVED = os.path.join(os.path.dirname(__file__), 'fixtures', 'docker_save', 'docker-20.10.24-save.tar')


def oci_layout(tmp_path):
    """A docker save archive in the OCI layout (Docker 25+): index.json naming one manifest blob."""
    import hashlib
    import io
    import tarfile
    blobs = {}

    def blob(data):
        digest = 'sha256:' + hashlib.sha256(data).hexdigest()
        blobs['blobs/sha256/' + digest[7:]] = data
        return digest

    config = blob(b'{"architecture":"arm64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}')
    manifest = blob(json.dumps({'schemaVersion': 2, 'config': {'digest': config}, 'layers': []}).encode())
    files = dict(blobs, **{'index.json': json.dumps({'schemaVersion': 2, 'manifests': [{'digest': manifest}]}).encode(),
                           'manifest.json': json.dumps([{'Config': 'blobs/sha256/' + config[7:], 'Layers': []}]).encode(),
                           'oci-layout': b'{"imageLayoutVersion":"1.0.0"}'})
    path = tmp_path / 'oci.tar'
    with tarfile.open(path, 'w') as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path), config, manifest, 'sha256:' + hashlib.sha256(files['index.json']).hexdigest()


def test_the_image_id_of_a_recorded_docker_save():
    assert relay.image_ids_in(SAVED) == {IMAGE_ID}


def test_the_ids_of_an_oci_layout(tmp_path):
    path, config, manifest, index = oci_layout(tmp_path)
    assert relay.image_ids_in(path) == {config, manifest, index}


def test_another_image_is_not_loaded(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(relay.subprocess, 'run', lambda *a, **k: ran.append(a))
    error = relay.load_verified(SAVED, 'sha256:' + '0' * 64)
    assert error == 'the image received is not sha256:%s (it is %s): not loaded' % ('0' * 64, IMAGE_ID)
    junk = tmp_path / 'junk.tar'
    junk.write_bytes(b'not a tar at all' * 100)
    assert 'is not a docker save archive' in relay.load_verified(str(junk), IMAGE_ID)
    assert not ran  # docker load never ran


def test_no_image_is_loaded_where_none_is_being_distributed():
    with pytest.raises(relay.ForcedCommandError, match=r"only the head's image \(none: no image is being distributed\)"):
        relay.forced_request(sent('image'), dict(FIXED, image_id=''))
