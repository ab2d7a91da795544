"""model_download: hf download in a hardened container of the serving image, the token a file only for as long as the
download, over recorded answers of the Docker CLI."""
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.model_download import download, download_argv

REPO = 'Qwen/Qwen3.5-397B-A17B-FP8'
TOKEN = 'hf_lab_download_test_token_0123456789'
# A gated repository's refusal in huggingface_hub's words (what the lab's test looks for: GatedRepoError: 401), and the
# snapshot path hf download prints at its end.
GATED = ('huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-6752)\n'
         'Cannot access gated repo for url https://huggingface.co/api/models/Qwen/Qwen3.5-397B-A17B-FP8/revision/main.\n')
DONE = '/dgxspark-hub/models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/5b6f7a1d9c2e4f3a8b0c1d2e3f4a5b6c7d8e9f0a\n'


@pytest.mark.parametrize('token, env, volumes, expected_tail', [
    (None, {}, [], ['--volume', '/hub:/dgxspark-hub']),
    ('/etc/dgxspark/secrets/distribute_hf_token', {}, [],
     ['--volume', '/hub:/dgxspark-hub', '--volume', '/etc/dgxspark/secrets/distribute_hf_token:/run/secrets/hf_token:ro',
      '--env', 'HF_TOKEN_PATH=/run/secrets/hf_token']),
    (None, {'HF_ENDPOINT': 'file:///mirror', 'HTTPS_PROXY': 'http://proxy:3128'}, ['/mirror:/mirror:ro'],
     ['--volume', '/hub:/dgxspark-hub', '--volume', '/mirror:/mirror:ro', '--env', 'HF_ENDPOINT=file:///mirror',
      '--env', 'HTTPS_PROXY=http://proxy:3128']),
], ids=['public', 'gated', 'mirror'])
def test_download_argv(token, env, volumes, expected_tail):
    argv = download_argv('docker', 'dgxspark-model-download', 'vllm/vllm-openai:v0.33.0', REPO, 'main', '/hub', token, env,
                         volumes)
    image = argv.index('vllm/vllm-openai:v0.33.0')
    assert argv[:image] == ['docker', 'run', '--rm', '--name', 'dgxspark-model-download', '--network', 'host',
                            '--cap-drop', 'ALL', '--security-opt', 'no-new-privileges', '--entrypoint', 'hf'] + expected_tail
    assert argv[image + 1:] == ['download', REPO, '--revision', 'main', '--cache-dir', '/dgxspark-hub']


@pytest.fixture
def head(tmp_path):
    return dict(image='vllm/vllm-openai:v0.33.0', repo=REPO, revision='main', hub_dir=str(tmp_path / 'hub'),
                creates=str(tmp_path / 'hub' / 'snapshot' / '.dgxspark-manifest.json'), token='',
                token_path=str(tmp_path / 'secrets' / 'distribute_hf_token'), env={}, volumes=[],
                name='dgxspark-model-download', docker='docker')


def docker(rc, out, err, params):
    """A Docker CLI that answers ``hf download`` with (rc, out, err), and records what the token file held then."""
    calls = []

    def run_command(argv):
        calls.append((argv, open(params['token_path']).read() if os.path.exists(params['token_path']) else None))
        return (0, '', '') if argv[1] == 'rm' else (rc, out, err)
    return run_command, calls


@pytest.mark.parametrize('token, rc, out, err, changed, failure', [
    ('', 0, DONE, '', True, None),
    (TOKEN, 0, DONE, '', True, None),
    ('', 1, '', GATED, True, 'hf download %s (revision main) failed (exit 1): %s' % (REPO, GATED.strip())),
    (TOKEN, 1, '', GATED, True, 'hf download %s (revision main) failed (exit 1): %s' % (REPO, GATED.strip())),
], ids=['public', 'gated-with-token', 'gated-without-token', 'refused-with-token'])
def test_download(head, token, rc, out, err, changed, failure):
    head['token'] = token
    run_command, calls = docker(rc, out, err, head)
    found = download(run_command, head)
    assert found[:2] == (changed, failure)
    assert [argv[:3] for argv, _held in calls] == [['docker', 'rm', '--force'], ['docker', 'run', '--rm']]
    argv, held = calls[1]
    assert held == (token or None) and TOKEN not in ' '.join(argv)  # a file while hf runs, never in the argv
    assert not os.path.exists(head['token_path']) and os.path.isdir(head['hub_dir'])
    assert ('HF_TOKEN_PATH=/run/secrets/hf_token' in argv) is bool(token)


@pytest.mark.parametrize('complete, token_left, check, changed, runs', [
    (True, False, False, False, False),  # the manifest is there: nothing to do
    (True, True, False, True, False),  # ... but an earlier run's token goes
    (False, False, True, True, False),  # check mode: would download, runs nothing
    (True, True, True, True, False),  # check mode: would remove the token
    (True, False, True, False, False),
], ids=['complete', 'complete-token-left', 'check', 'check-token-left', 'check-complete'])
def test_nothing_downloaded(head, complete, token_left, check, changed, runs):
    for path, wanted in ((head['creates'], complete), (head['token_path'], token_left)):
        if wanted:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, 'w').close()
    run_command, calls = docker(0, DONE, '', head)
    assert download(run_command, head, check) == (changed, None, '')
    assert bool(calls) is runs
    assert os.path.exists(head['token_path']) is (token_left and check)
