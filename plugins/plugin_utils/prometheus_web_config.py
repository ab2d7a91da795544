# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus' web configuration (`--web.config.file`, the exporter-toolkit format): one basic-auth user with the bcrypt
hash of the cluster's Prometheus password, and optionally the server's TLS certificate and key.

Controller only (bcrypt comes with paramiko). A bcrypt hash is salted, so hashing again on every run would change the
file every run: the hash of the file already on the node is kept whenever the password still matches it.
"""

from __future__ import annotations

import os

import yaml

try:
    import bcrypt
except ImportError:  # the sanity tests import this without the controller's packages
    bcrypt = None

# bcrypt reads at most 72 bytes of a password; bcrypt 5 refuses more rather than cut it.
MAX_PASSWORD_BYTES = 72
# A random password of the collection's needs no slow hash against guessing; Prometheus checks the hash on requests
# it has not cached, so a lower cost than bcrypt's default 12 keeps a dashboard's many queries fast.
BCRYPT_ROUNDS = 10


class _Dumper(yaml.SafeDumper):
    """A safe dumper that writes a str subclass (Ansible's tagged strings) as the plain string it is."""


_Dumper.add_multi_representer(str, yaml.representer.SafeRepresenter.represent_str)


class WebConfigError(ValueError):
    """The user, password, TLS files or the existing file cannot make a web configuration."""


def existing_hash(text, user):
    """The bcrypt hash that the web configuration `text` (the file on the node; '' when there is none) holds for
    `user`, or None (no file, not YAML, no such user)."""
    try:
        data = yaml.safe_load(text or '') or {}
    except yaml.YAMLError:
        return None
    users = data.get('basic_auth_users') if isinstance(data, dict) else None
    found = users.get(user) if isinstance(users, dict) else None
    return found if isinstance(found, str) and found else None


def password_hash(password, current=None, rounds=BCRYPT_ROUNDS):
    """(hash, reused): `current` when it is a bcrypt hash of `password`, else a new one."""
    if bcrypt is None:
        raise WebConfigError('the Python package bcrypt is missing on the controller (pip install bcrypt; paramiko '
                             'brings it)')
    secret = password.encode('utf-8')
    if current:
        try:
            if bcrypt.checkpw(secret, current.encode('utf-8')):
                return current, True
        except ValueError:  # not a bcrypt hash (edited by hand): replaced
            pass
    return bcrypt.hashpw(secret, bcrypt.gensalt(rounds=rounds)).decode('ascii'), False


def _user(user):
    if not isinstance(user, str) or not user or ':' in user or any(c.isspace() for c in user):
        raise WebConfigError('the user must be a non-empty name without spaces or ":" (basic auth), got %r' % (user,))
    return user


def _password(password):
    # The value itself never goes into a message.
    if not isinstance(password, str) or not password.strip():
        raise WebConfigError('the password is empty')
    if len(password.encode('utf-8')) > MAX_PASSWORD_BYTES:
        raise WebConfigError('the password is longer than bcrypt takes (%d bytes)' % MAX_PASSWORD_BYTES)
    return password


def _tls(cert_file, key_file):
    if not cert_file and not key_file:
        return None
    if not cert_file or not key_file:
        raise WebConfigError('TLS needs both a certificate and its key file, got cert_file=%r key_file=%r'
                             % (cert_file or '', key_file or ''))
    for name, path in (('cert_file', cert_file), ('key_file', key_file)):
        if not os.path.isabs(path):
            raise WebConfigError('%s must be an absolute path on the Prometheus node, got %r' % (name, path))
    return {'cert_file': cert_file, 'key_file': key_file}


def web_config(user, password, existing_text='', tls_cert_file=None, tls_key_file=None):
    """(config dict, hash reused) for `promtool check web-config`: basic_auth_users {user: bcrypt hash}, and
    tls_server_config when a certificate and key are given."""
    user, password = _user(user), _password(password)
    tls = _tls(tls_cert_file, tls_key_file)
    hashed, reused = password_hash(password, existing_hash(existing_text, user))
    config = {'basic_auth_users': {user: hashed}}
    if tls:
        config['tls_server_config'] = tls
    return config, reused


def web_config_text(config):
    """The file's text: YAML, keys in a fixed order, so that the same config is the same file."""
    return '# Managed by dgxspark.cluster (monitoring): Prometheus\' --web.config.file.\n' + yaml.dump(
        config, Dumper=_Dumper, default_flow_style=False, sort_keys=True)
