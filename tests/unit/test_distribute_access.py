"""distribute_access: the node-to-node key made once on the controller, given to a node with the relay's files and
authorized for the relay only, and taken away again, over real authorized_keys lines."""
import os
import shutil
import stat
import threading

import pytest

from ansible_collections.dgxspark.cluster.plugins.action.distribute_access import controller_key
from ansible_collections.dgxspark.cluster.plugins.module_utils import distribute_access as da

PUBLIC = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFq dgxspark-distribute'
OPTIONS = ('command="/usr/bin/python3 /usr/local/lib/dgxspark/distribute_relay.py --forced /etc/dgxspark/distribute_forced.json",'
           'from="192.168.100.0/24,192.168.101.0/24",restrict,expiry-time="202612061111Z"')
# What ansible.posix.authorized_key wrote for the role before this module (the same line).
OURS = OPTIONS + ' ' + PUBLIC + '\n'
OPERATOR = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOp admin@laptop\n'
OLDER = 'restrict,expiry-time="202001010000Z" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOld dgxspark-distribute\n'
SAME_KEY_OTHER_COMMENT = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFq root@old-controller\n'


@pytest.mark.parametrize('nets, expiry, expected', [
    (['192.168.100.0/24', '192.168.101.0/24'], 1796555460, OPTIONS),
    (['10.0.0.0/8'], 0, 'command="/usr/bin/python3 /usr/local/lib/dgxspark/distribute_relay.py --forced '
     '/etc/dgxspark/distribute_forced.json",from="10.0.0.0/8",restrict,expiry-time="197001010000Z"'),
])
def test_key_options(nets, expiry, expected):
    assert da.key_options('/usr/local/lib/dgxspark/distribute_relay.py', '/etc/dgxspark/distribute_forced.json', nets,
                          expiry) == expected


@pytest.mark.parametrize('text, public, options, expected', [
    (None, PUBLIC, OPTIONS, OURS),  # no authorized_keys yet
    (OPERATOR, PUBLIC, OPTIONS, OPERATOR + OURS),  # the operator's key stays
    (OPERATOR + OURS, PUBLIC, OPTIONS, OPERATOR + OURS),  # already there: the same text
    (OURS.replace('202612061111Z', '202612060000Z') + OPERATOR, PUBLIC, OPTIONS, OPERATOR + OURS),  # a new expiry
    (SAME_KEY_OTHER_COMMENT + OPERATOR, PUBLIC, OPTIONS, OPERATOR + OURS),  # the same key without options goes
    (OLDER + OPERATOR, PUBLIC, OPTIONS, OPERATOR + OURS),  # an older run's key (its comment) goes
    ('# dgxspark-distribute\n' + OPERATOR, PUBLIC, None, '# dgxspark-distribute\n' + OPERATOR),  # a comment line stays
    (OPERATOR + OURS, PUBLIC, None, OPERATOR),  # removed
    (OPERATOR + OLDER + OURS, None, None, OPERATOR),  # removed without the public key (the controller lost it)
    (OPERATOR.rstrip('\n'), PUBLIC, None, OPERATOR),  # a last line without a line break keeps its line
], ids=['new', 'beside-operator', 'unchanged', 'new-expiry', 'same-key-other-line', 'older-key', 'comment-line',
        'removed', 'removed-by-comment', 'no-final-newline'])
def test_authorized_text(text, public, options, expected):
    assert da.authorized_text(text, public, options) == expected


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node in tmp_path: the files are the test user's, the user's home is tmp_path/home."""
    monkeypatch.setattr(da, 'ROOT', (os.getuid(), os.getgid()))
    monkeypatch.setattr(da, '_authorized_keys', lambda user: (str(tmp_path / 'home' / '.ssh'), os.getuid(), os.getgid()))
    paths = dict(key=str(tmp_path / 'etc' / 'secrets' / 'distribute_ed25519'), run=str(tmp_path / 'run' / 'distribute'),
                 relay=str(tmp_path / 'lib' / 'distribute_relay.py'), known=str(tmp_path / 'etc' / 'known_hosts'),
                 keys=str(tmp_path / 'home' / '.ssh' / 'authorized_keys'))
    return paths


def grant(paths, private='-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n-----END OPENSSH PRIVATE KEY-----', check=False):
    files = {paths['relay']: ('print("relay")\n', 0o644), paths['known']: ('192.168.100.11 ssh-ed25519 AAAAhost\n', 0o644)}
    return da.grant(paths['key'], private, PUBLIC, 'root', OPTIONS, files, paths['run'], check)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize('private', ['-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n', None], ids=['sender', 'receiver'])
def test_grant_then_again_then_revoke(node, private):
    os.makedirs(node['run'])
    open(os.path.join(node['run'], 'model.json'), 'w').close()  # an earlier copy's progress
    changed, diff = grant(node, private)
    assert set(changed) >= {node['relay'], node['known'], node['run'], node['keys']}
    assert (node['key'] in changed) is bool(private) and os.path.exists(node['key']) is bool(private)
    assert 'secret' not in str(diff) and 'print("relay")' in diff['after'] and diff['before'].count('(absent)') == 3
    assert os.listdir(node['run']) == [] and mode(node['run']) == 0o700 and mode(os.path.dirname(node['key'])) == 0o700
    assert mode(node['keys']) == 0o600 and mode(os.path.dirname(node['keys'])) == 0o700 and mode(node['relay']) == 0o644
    if private:
        assert mode(node['key']) == 0o600
    with open(node['keys']) as handle:
        assert handle.read() == OURS
    assert grant(node, private)[0] == []  # nothing left to do
    assert grant(node, private, check=True)[0] == []

    changed, diff = da.revoke(node['key'], PUBLIC, 'root', check_mode=True)
    assert changed and os.path.exists(node['keys']) and diff['before'].endswith(OURS)
    changed, _diff = da.revoke(node['key'], PUBLIC, 'root')
    assert changed == ([node['key']] if private else []) + [node['keys']]
    assert not os.path.exists(node['key']) and open(node['keys']).read() == '' and mode(node['keys']) == 0o600
    assert da.revoke(node['key'], PUBLIC, 'root') == ([], {'before': '', 'after': ''})


def test_check_mode_changes_nothing(node, tmp_path):
    changed, _diff = grant(node, check=True)
    assert node['keys'] in changed and node['key'] in changed
    assert sorted(os.listdir(tmp_path)) == []


def test_revoke_on_a_clean_node_does_nothing(node):
    assert da.revoke(node['key'], None, 'root') == ([], {'before': '', 'after': ''})


def test_an_unknown_user_is_an_error():
    with pytest.raises(KeyError):
        da.revoke('/nonexistent/key', None, 'no-such-user-dgxspark')


@pytest.mark.skipif(not shutil.which('ssh-keygen'), reason='needs ssh-keygen')
def test_the_controller_makes_the_key_once_even_when_forks_ask_at_once(tmp_path):
    secrets = str(tmp_path / 'secrets')
    assert controller_key(secrets, False) == (os.path.join(secrets, 'distribute_ed25519'), None)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(controller_key(secrets, True))) for _fork in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(answers)) == 1 and answers[0][1].startswith('ssh-ed25519 ') and answers[0][1].endswith(' dgxspark-distribute')
    assert mode(secrets) == 0o700 and mode(answers[0][0]) == 0o600
    assert controller_key(secrets, True) == answers[0]
    # Every file there is a secret to diagnose.yml's last look: the lock leaves none of its own.
    assert sorted(os.listdir(secrets)) == ['distribute_ed25519', 'distribute_ed25519.pub']
