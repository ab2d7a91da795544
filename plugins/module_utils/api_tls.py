# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTPS to the vLLM API for the probes: verified against the plan's CA (or the system's trust store), and checked for
the plan's server name wherever the probe connects (127.0.0.1 on the head, whose address a user's certificate may not
hold). Stdlib only: it runs on the nodes."""

from __future__ import annotations

import functools
import ssl
from http import client as http_client
from urllib.parse import urlsplit
from urllib.request import HTTPSHandler, ProxyHandler, build_opener


class NamedHTTPSConnection(http_client.HTTPSConnection):
    """An HTTPS connection that checks the certificate for ``server_name`` instead of the host it connects to."""

    def __init__(self, host, server_name=None, **kwargs):
        super(NamedHTTPSConnection, self).__init__(host, **kwargs)
        self._server_name = server_name

    def connect(self):
        http_client.HTTPConnection.connect(self)  # TCP only; TLS below
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name or self.host)


def client_context(ca_file=None):
    """A verifying TLS context: the CA file's certificates when given, else the system's trust store."""
    return ssl.create_default_context(cafile=ca_file or None)


def connection(url, timeout, ca_file=None, server_name=None):
    """An HTTP or HTTPS connection to ``url``'s host and port (no proxy), verified as client_context says."""
    parts = urlsplit(url)
    if parts.scheme == 'https':
        return NamedHTTPSConnection(parts.hostname, server_name=server_name, port=parts.port, timeout=timeout,
                                    context=client_context(ca_file))
    return http_client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)


class _NamedHTTPSHandler(HTTPSHandler):
    def __init__(self, context, server_name):
        HTTPSHandler.__init__(self, context=context)
        self._dgxspark_context = context
        self._server_name = server_name

    def https_open(self, req):
        return self.do_open(functools.partial(NamedHTTPSConnection, server_name=self._server_name), req,
                            context=self._dgxspark_context)


def opener(ca_file=None, server_name=None):
    """A urllib opener without proxies whose HTTPS is verified as client_context says, for ``server_name``."""
    return build_opener(ProxyHandler({}), _NamedHTTPSHandler(client_context(ca_file), server_name))
