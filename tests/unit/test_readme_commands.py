# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every command in the README's code blocks, run in the README's order (issue 48), with hosts never contacted: in a
scratch directory that holds copies of the example inventories and links to the checkout's playbooks and .venv, so
that `cp -r inventories/4node inventories/mine` and the edits after it change nothing in the checkout.

- `make TARGET`: the target exists in the Makefile (make run and make test are the suite itself);
- shell steps on the inventory (cp, mkdir, mv): run;
- `ansible-vault create`: run with a stand-in editor that writes an API key, and --skip-tty-check (no terminal here);
  the later commands read the vault with its password file, as a user's --vault-password-file does;
- `ansible-playbook playbooks/plan.yml ...`: run whole (the plan contacts no host) and must plan;
- any other `ansible-playbook ...`: --syntax-check and --list-hosts, which parse the playbook and the inventory.
A command of another kind fails the test until this file says how it is checked."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, 'README.md')
VENV_BIN = os.path.join(ROOT, '.venv', 'bin')
API_KEY = 'Zq7vR2mLx9TbW4kNc8PdYh3Jf6Gs1Ae5'

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(VENV_BIN, 'ansible-playbook')),
                                reason='run `make setup` first (.venv/bin/ansible-playbook)')


def readme_commands(text):
    """The commands of the README's ```bash blocks, in order: comments dropped, continued lines joined, `&&` split."""
    commands = []
    for block in re.findall(r'```bash\n(.*?)```', text, re.S):
        joined = re.sub(r'\\\n\s*', ' ', block)
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            while words:  # `a && b` is two commands
                first = words.index('&&') if '&&' in words else len(words)
                commands.append(words[:first])
                words = words[first + 1:]
    return commands


def make_targets():
    with open(os.path.join(ROOT, 'Makefile'), encoding='utf-8') as handle:
        return set(re.findall(r'^([a-z][a-z0-9-]*):', handle.read(), re.M))


@pytest.fixture(scope='module')
def scratch(tmp_path_factory):
    """A directory that looks like the checkout to the README's commands: copies of inventories/, links to the rest."""
    root = tmp_path_factory.mktemp('readme')
    shutil.copytree(os.path.join(ROOT, 'inventories'), str(root / 'inventories'), symlinks=False)
    for name in ('playbooks', 'profiles', 'roles', 'plugins', '.venv', '.build', 'ansible.cfg', 'galaxy.yml', 'meta'):
        if os.path.exists(os.path.join(ROOT, name)):
            os.symlink(os.path.join(ROOT, name), str(root / name))
    (root / 'vault-password').write_text('readme-test\n')
    editor = root / 'editor.sh'
    editor.write_text('#!/bin/sh\necho "vllm_container_api_key: %s" > "$1"\n' % API_KEY)
    editor.chmod(0o755)
    return root


def run(scratch, words, extra=()):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0',
               EDITOR=str(scratch / 'editor.sh'), ANSIBLE_VAULT_PASSWORD_FILE=str(scratch / 'vault-password'))
    return subprocess.run(list(words) + list(extra), cwd=str(scratch), env=env, capture_output=True, text=True,
                          timeout=300, check=False)


COMMANDS = readme_commands(open(README, encoding='utf-8').read())


def test_the_readme_has_the_users_commands():
    programs = [' '.join(words[:2]) for words in COMMANDS]
    assert 'make setup-runtime' in programs and 'make run' in programs and 'make test' in programs
    playbooks = [words[1] for words in COMMANDS if words[0].endswith('ansible-playbook')]
    for playbook in ('playbooks/init.yml', 'playbooks/discover.yml', 'playbooks/plan.yml', 'playbooks/preflight.yml', 'playbooks/deploy-397b.yml',
                     'playbooks/status.yml'):
        assert playbook in playbooks, playbooks


def test_every_command_of_the_readme_works_in_its_order_without_contacting_a_host(scratch):
    targets = make_targets()
    checked = []
    for words in COMMANDS:
        program = os.path.basename(words[0])
        if program == 'make':
            assert words[1] in targets, ('make target missing', words)
        elif program in ('cp', 'mkdir', 'mv'):
            result = run(scratch, words)
            assert result.returncode == 0, (words, result.stderr)
        elif program == 'ansible-vault' and words[1] == 'create':
            result = run(scratch, words[:2] + ['--skip-tty-check'] + words[2:])
            assert result.returncode == 0, (words, result.stderr)
        elif program == 'ansible-playbook' and words[1] == 'playbooks/plan.yml':
            result = run(scratch, words)
            assert result.returncode == 0, (words, result.stdout[-3000:] + result.stderr[-3000:])
            assert 'Cluster plan:' in result.stdout, result.stdout[-3000:]
        elif program == 'ansible-playbook':
            for check in (['--syntax-check'], ['--list-hosts']):
                result = run(scratch, words, check)
                assert result.returncode == 0, (words + check, result.stdout[-2000:] + result.stderr[-2000:])
        else:
            pytest.fail('a README command this test does not know how to check: %s' % ' '.join(words))
        checked.append(' '.join(words))
    assert len(checked) == len(COMMANDS)
    # The steps happened where the README says: the copied inventory holds the vaulted key, outside the checkout.
    vault = scratch / 'inventories' / 'mine' / 'group_vars' / 'all' / 'vault.yml'
    assert vault.read_text().startswith('$ANSIBLE_VAULT;') and not os.path.exists(os.path.join(ROOT, 'inventories', 'mine'))
