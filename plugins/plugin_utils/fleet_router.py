# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet router's configuration (issue 51 item 2): LiteLLM's proxy (docs/fleet-router.md), rendered from the plan.

Pure logic, controller only. The input is the plan's router (``dgxspark_fleet.router``, fleet_plan.router_plan); the
output is what the router's unit runs: the proxy's config (a dict, written as YAML), its command line and its
environment. No secret is in any of them: the config names environment variables (LiteLLM's ``os.environ/NAME``), which
the unit's start script fills from 0600 files, and the command line and environment carry paths and switches only.
Read against LiteLLM 1.110.2 (the version the router's lock pins).
"""

from __future__ import annotations

# LiteLLM reads a value written ``os.environ/NAME`` from the environment at start.
UPSTREAM_KEY_ENV = 'DGXSPARK_UPSTREAM_API_KEY'  # the groups' API key, which the router sends to every group
MASTER_KEY_ENV = 'LITELLM_MASTER_KEY'  # the key clients give the router (the same key: one key for the fleet)
PROVIDER = 'hosted_vllm'  # LiteLLM's provider for a vLLM server: it posts to <api_base>/chat/completions as is

# How the proxy balances the replicas of one model and leaves a failing one.
ROUTER_SETTINGS = {
    # The replica with the fewest requests in flight (replicas of one model may differ in load: long prompts). A tie
    # goes to the first (router_strategy/least_busy.py: min() over the counts), so one stream at a time stays on the
    # first replica; the others take load from the second concurrent request on.
    'routing_strategy': 'least-busy',
    # one failed request is allowed; the next failure (within a minute) takes the replica out of rotation
    'allowed_fails': 1,
    # Seconds out of rotation. Short, because the proxy tries a replica again only when its cooldown ends: a replica
    # that was restarted (a release, the supervisor) is back in service within 10 s of answering again, while a dead
    # one costs one failed try per 10 s, which num_retries resends to another replica (the client sees no error).
    'cooldown_time': 10,
    # a request that failed before its first byte is sent again, to another replica when there is one
    'num_retries': 2,
}
GENERAL_SETTINGS = {
    'master_key': 'os.environ/' + MASTER_KEY_ENV,
}
LITELLM_SETTINGS = {
    # /metrics for the collection's Prometheus (free in 1.110.2: no premium check in integrations/prometheus.py)
    'callbacks': ['prometheus'],
    # /metrics asks for the master key (1.110.2's default, said here so that an upgrade cannot open it): the metrics
    # name every model, client address and key alias; Prometheus scrapes with the key as its bearer token.
    'require_auth_for_metrics_endpoint': True,
}

# The unit's environment, none of it secret.
ENVIRONMENT = {
    # Without it, LiteLLM fetches its model cost map from GitHub at every start (three tries, then its bundled copy):
    # a router node may have no route to GitHub, and the start would wait on it and depend on what is served there.
    'LITELLM_LOCAL_MODEL_COST_MAP': 'True',
    # DEV (the default) loads a .env file from the working directory into the environment at start (proxy_cli.py).
    'LITELLM_MODE': 'PRODUCTION',
    # No admin UI (it needs a database the router does not have) and no API docs page: fewer routes on the port.
    'DISABLE_ADMIN_UI': 'True',
    'NO_DOCS': 'True',
}
# The proxy's worker processes: a DGX Spark has 20 cores, and each worker holds its own copy of LiteLLM in memory.
MAX_WORKERS = 16
WORKER_MB = 400
# The names of the router's own TLS files (copies of its head's certificate and key, the key readable by the router's
# user only) in the directory the role gives proxy_args (roles/fleet_router: its config directory; LoadCredential's
# $CREDENTIALS_DIRECTORY is empty under systemd 252 in a container, docs/fleet-router.md).
TLS_CREDENTIALS = {'cert': 'api_tls_cert', 'key': 'api_tls_key'}


def model_list(router):
    """LiteLLM's model_list: one deployment per replica (a group), named by the served model, so that entries of one
    name are that model's replicas; each calls its group's API and checks its certificate with the groups' CAs."""
    tls = router['tls']
    entries = []
    for model in router['models']:
        for replica in model['replicas']:
            params = {
                'model': '%s/%s' % (PROVIDER, model['served_model_name']),
                'api_base': replica['api_base'],
                'api_key': 'os.environ/' + UPSTREAM_KEY_ENV,
            }
            if tls['enabled']:
                # A CA file for the upstream's httpx client (llms/custom_httpx/http_handler.py get_ssl_verify: a path
                # that exists is used as the CA bundle); without it LiteLLM trusts certifi's public CAs only.
                params['ssl_verify'] = tls['upstream_ca_file']
            # a stable deployment id (the group): the proxy's metrics and a roll that takes one replica out name it
            entries.append({'model_name': model['served_model_name'], 'litellm_params': params,
                            'model_info': {'id': replica['group']}})
    return entries


def in_rotation(router, out_of_rotation=()):
    """The router without the replicas of the groups in ``out_of_rotation`` (a roll takes a group out while it changes,
    issue 51 item 3). A group that is not the fleet's, or a model left without a replica, is refused: the router would
    answer that model's requests with an error for the whole change."""
    out = list(out_of_rotation or ())
    known = [replica['group'] for model in router['models'] for replica in model['replicas']]
    unknown = [group for group in out if group not in known]
    if unknown:
        raise ValueError('%s %s no serving group of the fleet (%s)' % (
            ', '.join(unknown), 'is' if len(unknown) == 1 else 'are', ', '.join(known)))
    if not out:
        return router
    models = []
    for model in router['models']:
        replicas = [replica for replica in model['replicas'] if replica['group'] not in out]
        if not replicas:
            raise ValueError('taking %s out of the router leaves %s without a replica: a group is taken out only while '
                             'another group serves its model' % (', '.join(out), model['served_model_name']))
        models.append(dict(model, replicas=replicas))
    return dict(router, models=models)


def proxy_config(router):
    """The proxy's config file (--config) as a dict."""
    return {
        'model_list': model_list(router),
        'router_settings': dict(ROUTER_SETTINGS),
        'general_settings': dict(GENERAL_SETTINGS),
        'litellm_settings': dict(LITELLM_SETTINGS, callbacks=list(LITELLM_SETTINGS['callbacks'])),
    }


def proxy_args(router, config_file, credentials_dir='${CREDENTIALS_DIRECTORY}', port=None, workers=1):
    """The arguments of LiteLLM's ``litellm`` command: the config, where it listens, its worker processes, and with TLS
    the head's certificate and key as the unit hands them over (paths only; the key's content never is in argv).
    credentials_dir: as the unit's start script (a shell) expands it; port: where this instance listens (an int, or a
    shell variable the start script sets from its instance's name), the router's port by default; workers: the proxy's
    processes (uvicorn's workers, 1 to MAX_WORKERS). One process parses every streamed chunk in one Python thread, so
    it serves about one core's worth of tokens (docs/fleet-router.md, "Measured")."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ValueError('the router\'s workers are %r, not a whole number from 1 to %d: give fleet_router_workers as '
                         'the proxy\'s processes (each about %d MB)' % (workers, MAX_WORKERS, WORKER_MB))
    args = ['--config', str(config_file), '--host', '0.0.0.0', '--port', str(router['port'] if port is None else port),
            '--num_workers', str(workers)]
    if router['tls']['enabled']:
        args += ['--ssl_certfile_path', '%s/%s' % (credentials_dir, TLS_CREDENTIALS['cert']),
                 '--ssl_keyfile_path', '%s/%s' % (credentials_dir, TLS_CREDENTIALS['key'])]
    return args


def unit_environment():
    """The router unit's environment (ENVIRONMENT): switches only; the two keys come from the start script."""
    return dict(ENVIRONMENT)


# The wheelhouse: what the controller downloads for the router node (pip download --only-binary=:all:), named by the
# lock, the node's CPython and its platform, so that a node of another Python or architecture gets a wheelhouse of its own.
MACHINES = ('x86_64', 'aarch64')  # the two a router node may be: a DGX Spark (aarch64) or the lab's nodes
OLDEST_MANYLINUX = 17  # manylinux_2_17 (manylinux2014): the oldest glibc PyPI's wheels are built for that still matter


def _version(text, parts, what):
    """A dotted version's first `parts` numbers, or a clear error naming what it is."""
    numbers = str(text or '').strip().split('.')
    if len(numbers) < parts or not all(n.isdigit() for n in numbers[:parts]):
        raise ValueError('the router node\'s %s is %r, not a version of %d numbers (as %s)'
                         % (what, text, parts, '3.11' if what == 'Python' else '2.36'))
    return tuple(int(n) for n in numbers[:parts])


def wheelhouse(node, lock_digest):
    """What to download for the router's node. node: what its Python says of itself ({'implementation': 'cpython',
    'python': '3.11.2', 'machine': 'x86_64', 'glibc': '2.36'}); lock_digest: the lock's sha256 (hex). Returns the
    wheelhouse's name (lock, CPython tag, newest platform) and pip download's python_version, implementation and
    platforms: every manylinux_2_N from the node's glibc down to 2_17, and manylinux2014 (pip adds 2010 and 1 to it)."""
    if str(node.get('implementation', '')).lower() != 'cpython':
        raise ValueError('the router node\'s Python is %r, not CPython: the lock\'s wheels are built for CPython'
                         % node.get('implementation'))
    major, minor = _version(node.get('python'), 2, 'Python')
    if (major, minor) < (3, 9):
        raise ValueError('the router node\'s Python is %d.%d: LiteLLM needs 3.9 or newer; install a newer python3 there, '
                         'or name another dgxspark_router_host' % (major, minor))
    machine = str(node.get('machine', ''))
    if machine not in MACHINES:
        raise ValueError('the router node is %r: the router is installed on %s only' % (machine, ' or '.join(MACHINES)))
    glibc_major, glibc_minor = _version(node.get('glibc'), 2, 'glibc')
    if (glibc_major, glibc_minor) < (2, OLDEST_MANYLINUX):
        raise ValueError('the router node\'s glibc is %d.%d: the lock\'s wheels need 2.%d or newer'
                         % (glibc_major, glibc_minor, OLDEST_MANYLINUX))
    digest = str(lock_digest or '')
    if len(digest) < 12 or any(c not in '0123456789abcdef' for c in digest.lower()):
        raise ValueError('the lock digest is %r, not a sha256 in hex' % (lock_digest,))
    platforms = ['manylinux_2_%d_%s' % (n, machine) for n in range(glibc_minor, OLDEST_MANYLINUX - 1, -1)]
    tag = 'cp%d%d' % (major, minor)
    return {
        'name': 'wheelhouse-%s-%s-%s' % (digest[:12].lower(), tag, platforms[0]),
        'python_version': '%d.%d' % (major, minor),
        'implementation': 'cp',
        'platforms': platforms + ['manylinux2014_%s' % machine],
    }


def download_args(house, requirements, dest, specs=()):
    """pip download's arguments (after ``python -m pip``) for a wheelhouse (wheelhouse()): wheels only, no dependency
    resolution (the lock is complete: every distribution pinned), for the node's Python and platforms. requirements:
    files; specs: single pins besides them (the pip that installs the rest on the node, which has no ensurepip)."""
    args = ['download', '--disable-pip-version-check', '--no-deps', '--only-binary=:all:',
            '--implementation', house['implementation'], '--python-version', house['python_version']]
    for platform in house['platforms']:
        args += ['--platform', platform]
    for spec in specs:
        if '==' not in str(spec):
            raise ValueError('%r is no exact pin (name==version): the wheelhouse holds pinned wheels only' % (spec,))
    return (args + ['--dest', str(dest)] + [arg for path in requirements for arg in ('--requirement', str(path))]
            + [str(spec) for spec in specs])
