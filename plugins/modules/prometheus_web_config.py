#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: prometheus_web_config
short_description: Prometheus' web configuration (basic auth with a bcrypt hash, optional TLS), stable from run to run
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - An action plugin (the C(monitoring) role's). It returns the text of Prometheus' C(--web.config.file) (the exporter-toolkit
    format) - C(basic_auth_users) with one user and the bcrypt hash of O(password), and C(tls_server_config) when
    O(tls_cert_file) and O(tls_key_file) are given - for a copy task to write (validated with C(promtool check web-config)).
  - A bcrypt hash is salted, so it differs at every hashing. It reads the file O(path) on the host first and keeps its hash
    while O(password) still matches it, so that the text, and the file, change only when the password or the TLS files do.
  - The hash is computed on the controller (the Python package C(bcrypt), which paramiko brings); the password never
    reaches the host.
options:
  path:
    description: The web configuration file on the host, read for the hash it holds (missing - a new hash).
    type: path
    required: true
  user:
    description: The basic-auth user name (no spaces, no C(:)).
    type: str
    required: true
  password:
    description: The password (at most 72 bytes, bcrypt's limit). Never in the result.
    type: str
    required: true
  tls_cert_file:
    description: The server's certificate on the host (absolute path), with O(tls_key_file); empty - plain HTTP.
    type: str
    default: ""
  tls_key_file:
    description: The certificate's private key on the host (absolute path), with O(tls_cert_file).
    type: str
    default: ""
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: It only reads the host's file; the copy task that writes the text follows check mode.
  diff_mode:
    support: none
    details: The copy task that writes the text shows the diff.
notes:
  - Run it with C(no_log) - its arguments hold the password.
"""

EXAMPLES = r"""
- name: Compute Prometheus' web configuration
  dgxspark.cluster.prometheus_web_config:
    path: /etc/prometheus/dgxspark-web.yml
    user: dgxspark
    password: "{{ lookup('ansible.builtin.password', secrets_dir ~ '/prometheus_password', length=32) }}"
  register: web
  no_log: true

- name: Write it (checked by promtool)
  ansible.builtin.copy:
    content: "{{ web.content }}"
    dest: /etc/prometheus/dgxspark-web.yml
    owner: root
    group: prometheus
    mode: "0640"
    validate: promtool check web-config %s
"""

RETURN = r"""
content:
  description: The web configuration's text (YAML).
  returned: always
  type: str
  sample: "basic_auth_users:\n  dgxspark: $2b$10$...\n"
hash_reused:
  description: Whether the hash of the host's file was kept (the password matches it).
  returned: always
  type: bool
tls:
  description: Whether the configuration serves TLS (tls_server_config).
  returned: always
  type: bool
"""
