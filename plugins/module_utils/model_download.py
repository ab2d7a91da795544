# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A model repository downloaded into a Hugging Face cache with ``hf download`` from a container of the serving image,
through the Docker CLI, with the Hugging Face token in a 0600 file only for as long as the download."""

from __future__ import annotations

import os

from ansible_collections.dgxspark.cluster.plugins.module_utils.private_file import write_private_file

HUB = '/dgxspark-hub'
TOKEN_IN_CONTAINER = '/run/secrets/hf_token'


def download_argv(docker, name, image, repo, revision, hub_dir, token_file=None, env=None, volumes=()):
    """`docker run` of ``hf download`` (an interrupted download resumes): the host's network, none of Docker's default
    capabilities and no privilege to gain (hf writes root's files in the hub as root); the token, when given, as a file
    (HF_TOKEN_PATH), never in the environment or the argv."""
    env = dict(env or {})
    mounts = ['%s:%s' % (hub_dir, HUB)] + (['%s:%s:ro' % (token_file, TOKEN_IN_CONTAINER)] if token_file else [])
    if token_file:
        env['HF_TOKEN_PATH'] = TOKEN_IN_CONTAINER
    argv = [docker, 'run', '--rm', '--name', name, '--network', 'host', '--cap-drop', 'ALL',
            '--security-opt', 'no-new-privileges', '--entrypoint', 'hf']
    for mount in mounts + list(volumes):
        argv += ['--volume', mount]
    for key in sorted(env):
        argv += ['--env', '%s=%s' % (key, env[key])]
    return argv + [image, 'download', repo, '--revision', revision, '--cache-dir', HUB]


def tail(text, lines=20):
    return '\n'.join((text or '').strip().splitlines()[-lines:])


def download(run_command, params, check_mode=False):
    """Download unless ``params['creates']`` exists; remove the token file whatever happened, one an earlier run left
    included. Returns (changed, failure message or None, what hf printed last)."""
    token_path = params['token_path']
    needed = not (params.get('creates') and os.path.exists(params['creates']))
    if check_mode:
        return needed or os.path.lexists(token_path), None, ''
    try:
        changed, failure, printed = _download(run_command, params) if needed else (False, None, '')
    finally:
        left = os.path.lexists(token_path)
        if left:
            os.remove(token_path)
    return changed or left, failure, printed


def _download(run_command, params):
    token = params.get('token') or ''
    os.makedirs(params['hub_dir'], mode=0o755, exist_ok=True)
    if token:
        write_private_file(params['token_path'], token)
    # A container of that name left by an interrupted run would refuse the new one.
    run_command([params['docker'], 'rm', '--force', params['name']])
    argv = download_argv(params['docker'], params['name'], params['image'], params['repo'], params['revision'],
                         params['hub_dir'], params['token_path'] if token else None, params.get('env'),
                         params.get('volumes') or ())
    rc, out, err = run_command(argv)
    printed = tail('%s\n%s' % (out or '', err or ''))
    if rc != 0:
        return True, 'hf download %s (revision %s) failed (exit %d): %s' % (params['repo'], params['revision'], rc,
                                                                            printed), printed
    return True, None, printed
