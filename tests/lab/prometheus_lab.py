"""Prometheus' HTTP API as every lab test queries it (one place for its user, password, scheme and CA).

Prometheus asks every client for its password (basic auth, user `dgxspark`, the controller's 0600 file
`<state>/secrets/prometheus_password`) and, when the API has TLS (`dgxspark_api_tls`), serves HTTPS with the API's
certificate: the cluster CA the plan generated (`<state>/secrets/api_tls/ca.crt`) verifies it. Its node is the head;
the firewall lets the lab's management network in (inventories/lab's dgxspark_monitoring_allowed_cidrs).
"""

import base64
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request

from ansible_lab import HEAD, api_tls_on, generated_ca_file

USER = "dgxspark"
PORT = 9090


def password_file(lab):
    return os.path.join(lab.state_dir, "secrets", "prometheus_password")


def password(lab):
    """The cluster's Prometheus password, as the controller keeps it."""
    with open(password_file(lab), encoding="utf-8") as handle:
        return handle.read().strip()


def ca_file(lab):
    """The generated cluster CA (dgxspark_api_tls: generated), which verifies Prometheus' certificate too."""
    return generated_ca_file(lab)


def base_url(lab, tls=None):
    """Prometheus on the head's management address: https with the API's TLS, http without (tls: the lab's
    DGXSPARK_LAB_API_TLS when None)."""
    tls = api_tls_on() if tls is None else tls
    return "%s://%s:%d" % ("https" if tls else "http", lab.mgmt_ip[HEAD], PORT)


def basic_auth(secret, user=USER):
    """The Authorization header's value for `user` and `secret`."""
    return "Basic " + base64.b64encode(("%s:%s" % (user, secret)).encode()).decode()


def _open(url, secret, cafile, timeout):
    request = urllib.request.Request(url)
    if secret is not None:
        request.add_header("Authorization", basic_auth(secret))
    context = ssl.create_default_context(cafile=cafile) if url.startswith("https:") else None
    return urllib.request.urlopen(request, timeout=timeout, context=context)


def status(url, secret=None, cafile=None, timeout=10, lab=None):
    """The HTTP status of GET url, with Prometheus' user and `secret` when given (an https url: verified with cafile,
    else the lab's cluster CA when lab is given, else the system's trust store). A connection or TLS failure raises
    (URLError): it has no status."""
    if cafile is None and lab is not None and url.startswith("https:"):
        cafile = ca_file(lab)
    try:
        with _open(url, secret, cafile, timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def api(lab, path, tls=None, timeout=30, **params):
    """GET Prometheus' HTTP API with the cluster's password (and the cluster CA with TLS; tls: the lab's when None) ->
    its `data`."""
    tls = api_tls_on() if tls is None else tls
    url = base_url(lab, tls) + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with _open(url, password(lab), ca_file(lab) if tls else None, timeout) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]
