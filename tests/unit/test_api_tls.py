# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TLS of the vLLM API: the user's files checked by the plan, the cluster CA made once, and the probes' HTTPS verified
against the planned CA for the planned name (a real TLS server on 127.0.0.1)."""

from __future__ import annotations

import datetime
import http.server
import os
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.dgxspark.cluster.plugins.module_utils import api_tls as client
from ansible_collections.dgxspark.cluster.plugins.module_utils.benchmark import request_body, stream_request
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import api_tls

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
DAY = datetime.timedelta(days=1)


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject_cn, key, issuer_cert=None, issuer_key=None, names=(), ca=False, start=NOW - DAY, end=NOW + 90 * DAY):
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer_cert.subject if issuer_cert else subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName([api_tls._general_name(n) for n in names]), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def _write(path, *items):
    with open(path, 'wb') as handle:
        for item in items:
            if isinstance(item, x509.Certificate):
                handle.write(item.public_bytes(serialization.Encoding.PEM))
            else:
                handle.write(item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    return str(path)


@pytest.fixture(scope='module')
def pki(tmp_path_factory):
    """A CA, an intermediate, and the certificates the table below uses, as files."""
    d = tmp_path_factory.mktemp('pki')
    ca_key, other_key, inter_key, key = _key(), _key(), _key(), _key()
    ca = _cert('Site CA', ca_key, ca=True, end=NOW + 3000 * DAY)
    other = _cert('Other CA', other_key, ca=True, end=NOW + 3000 * DAY)
    inter = _cert('Site intermediate', inter_key, ca, ca_key, ca=True, end=NOW + 3000 * DAY)
    files = {
        'ca': _write(d / 'ca.pem', ca), 'other_ca': _write(d / 'other.pem', other), 'key': _write(d / 'key.pem', key),
        'other_key': _write(d / 'other_key.pem', _key()), 'not_pem': _write(d / 'cert.txt'),
        'good': _write(d / 'good.pem', _cert('api', key, ca, ca_key, names=['spark-alpha', '10.0.0.5'])),
        'wildcard': _write(d / 'wild.pem', _cert('api', key, ca, ca_key, names=['*.lab.example'])),
        'chain': _write(d / 'chain.pem', _cert('api', key, inter, inter_key, names=['10.0.0.5']), inter),
        'no_chain': _write(d / 'nochain.pem', _cert('api', key, inter, inter_key, names=['10.0.0.5'])),
        'expired': _write(d / 'expired.pem', _cert('api', key, ca, ca_key, names=['10.0.0.5'], start=NOW - 90 * DAY, end=NOW - DAY)),
        'self_signed': _write(d / 'self.pem', _cert('api', key, names=['10.0.0.5'])),
    }
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b'secret'))
    (d / 'encrypted.pem').write_bytes(encrypted)
    files['encrypted'] = str(d / 'encrypted.pem')
    files['dir'] = str(d)
    return files


@pytest.mark.parametrize('cert, key, ca, name, expected', [
    ('good', 'key', 'ca', '10.0.0.5', []),
    ('good', 'key', 'ca', 'spark-alpha', []),
    ('good', 'key', None, '10.0.0.5', []),
    ('wildcard', 'key', 'ca', 'head.lab.example', []),
    ('chain', 'key', 'ca', '10.0.0.5', []),
    ('self_signed', 'key', None, '10.0.0.5', []),
    (None, 'key', None, '10.0.0.5', ['dgxspark_api_tls_cert_file is not set']),
    ('good', None, None, '10.0.0.5', ['dgxspark_api_tls_key_file is not set']),
    ('missing', 'key', None, '10.0.0.5', ['missing.pem cannot be read (No such file or directory)']),
    ('not_pem', 'key', None, '10.0.0.5', ['cert.txt holds no PEM certificate']),
    ('good', 'not_pem', None, '10.0.0.5', ['cert.txt holds no PEM private key']),
    ('good', 'encrypted', None, '10.0.0.5', ['is encrypted: vLLM cannot ask for its passphrase']),
    ('good', 'other_key', None, '10.0.0.5', ['is not the key of the certificate in']),
    ('expired', 'key', 'ca', '10.0.0.5', ['expired on 2026-11-30']),
    ('good', 'key', 'ca', '10.0.0.6', ['is not for 10.0.0.6, the address clients call', 'holds spark-alpha, 10.0.0.5']),
    ('wildcard', 'key', 'ca', 'a.b.lab.example', ['is not for a.b.lab.example']),
    ('good', 'key', 'other_ca', '10.0.0.5', ['is not signed by the CA in dgxspark_api_tls_ca_file']),
    ('no_chain', 'key', 'ca', '10.0.0.5', ['is not signed by the CA in dgxspark_api_tls_ca_file']),
])
def test_the_plan_checks_the_users_files(pki, cert, key, ca, name, expected):
    def path(which):
        return None if which is None else pki.get(which, os.path.join(pki['dir'], which + '.pem'))
    problems = api_tls.check_files(path(cert), path(key), path(ca), name, now=NOW)
    assert len(problems) == (1 if expected else 0), problems
    for text in expected:
        assert text in problems[0], problems


def test_plan_tls_off_has_every_key_empty_and_a_bad_mode_is_refused(tmp_path):
    off, problems = api_tls.plan_tls({'mode': 'off'}, 'h', ['h'], str(tmp_path), 'c')
    assert problems == [] and off['enabled'] is False and off['ca_file'] is None and off['controller']['ca_file'] is None
    generated, generated_problems = api_tls.plan_tls({'mode': 'generated'}, 'h', ['h'], str(tmp_path), 'c')
    assert generated_problems == [] and set(off) == set(generated)
    assert os.listdir(str(tmp_path)) == ['api_tls']  # off makes nothing; generated made its directory
    none, problems = api_tls.plan_tls({'mode': 'on'}, 'h', ['h'], str(tmp_path), 'c')
    assert none is None and "dgxspark_api_tls is 'on': use off (plain HTTP), generated" in problems[0]


def test_files_plan_their_paths_and_a_self_signed_certificate_is_its_own_ca(pki):
    tls, problems = api_tls.plan_tls({'mode': 'files', 'cert_file': pki['self_signed'], 'key_file': pki['key']},
                                     '10.0.0.5', [], '/unused', 'c', now=NOW)
    assert problems == []
    assert tls['controller'] == {'cert_file': pki['self_signed'], 'key_file': pki['key'], 'ca_file': pki['self_signed']}
    assert (tls['cert_file'], tls['key_file'], tls['ca_file']) == (api_tls.CERT_ON_HEAD, api_tls.KEY_ON_HEAD, api_tls.CA_ON_NODES)
    public, public_problems = api_tls.plan_tls({'mode': 'files', 'cert_file': pki['good'], 'key_file': pki['key']}, '10.0.0.5',
                                               [], '/unused', 'c', now=NOW)
    # a public CA: the system's trust store
    assert public_problems == [] and public['ca_file'] is None and public['controller']['ca_file'] is None
    assert api_tls.plan_tls({'mode': 'files', 'cert_file': pki['good'], 'key_file': pki['other_key']}, '10.0.0.5', [],
                            '/unused', 'c', now=NOW)[0] is None


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_generated_files_are_made_once_kept_private_and_renewed_when_names_or_time_say(tmp_path):
    directory = str(tmp_path / 'api_tls')
    names = api_tls.client_names('10.0.0.5', 'spark-alpha', ['192.168.100.10'], ['api.example'])
    assert names == ['10.0.0.5', 'spark-alpha', '192.168.100.10', '127.0.0.1', 'localhost', 'api.example']
    first = api_tls.generated_files(directory, names, 'lab', now=NOW)
    assert first['made'] == ['CA', 'certificate']
    assert _mode(directory) == 0o700 and _mode(first['key_file']) == 0o600 and _mode(os.path.join(directory, 'ca.key')) == 0o600
    content = dict((n, open(os.path.join(directory, n), 'rb').read()) for n in os.listdir(directory))
    assert api_tls.generated_files(directory, list(reversed(names)), 'lab', now=NOW + 300 * DAY)['made'] == []
    assert content == dict((n, open(os.path.join(directory, n), 'rb').read()) for n in os.listdir(directory))
    # a new name: a new certificate from the same CA
    again = api_tls.generated_files(directory, names + ['10.0.0.9'], 'lab', now=NOW)
    assert again['made'] == ['certificate'] and open(again['ca_file'], 'rb').read() == content['ca.crt']
    assert api_tls.check_files(again['cert_file'], again['key_file'], again['ca_file'], '10.0.0.9', now=NOW) == []
    # near its end (RENEW_DAYS): made again
    assert api_tls.generated_files(directory, names + ['10.0.0.9'], 'lab',
                                   now=NOW + (api_tls.SERVER_DAYS - api_tls.RENEW_DAYS + 1) * DAY)['made'] == ['certificate']
    # a CA key that was replaced by hand: the CA and the certificate are made again
    os.remove(os.path.join(directory, 'ca.key'))
    assert api_tls.generated_files(directory, names, 'lab', now=NOW)['made'] == ['CA', 'certificate']


def test_each_serving_group_of_a_fleet_keeps_its_own_generated_certificate_from_the_one_ca(tmp_path):
    """Issue 51: both groups' certificates were one file, so each plan run replaced the other group's (the first head
    got the second head's names) and made it again at the next run."""
    directory = str(tmp_path / 'api_tls')
    first = api_tls.generated_files(directory, ['spark-01', '192.168.100.10'], 'spark-01', now=NOW, group='fleet_a')
    second = api_tls.generated_files(directory, ['spark-05', '192.168.100.14'], 'spark-05', now=NOW, group='fleet_b')
    assert (first['made'], second['made']) == (['CA', 'certificate'], ['certificate'])
    assert first['ca_file'] == second['ca_file'] == os.path.join(directory, 'ca.crt')
    assert first['cert_file'] == os.path.join(directory, 'fleet_a', 'api.crt') != second['cert_file']
    assert _mode(os.path.join(directory, 'fleet_a')) == 0o700 and _mode(second['key_file']) == 0o600
    # planned again: nothing made, and each certificate still names its own head
    assert api_tls.generated_files(directory, ['spark-01', '192.168.100.10'], 'spark-01', now=NOW, group='fleet_a')['made'] == []
    assert api_tls.check_files(first['cert_file'], first['key_file'], first['ca_file'], 'spark-01', now=NOW) == []
    assert api_tls.check_files(second['cert_file'], second['key_file'], second['ca_file'], 'spark-05', now=NOW) == []
    tls, problems = api_tls.plan_tls({'mode': 'generated'}, 'spark-05', ['spark-05'], str(tmp_path), 'spark-05', now=NOW,
                                     group='fleet_b')
    assert problems == [] and tls['controller']['cert_file'] == os.path.join(directory, 'fleet_b', 'api.crt')


@pytest.mark.parametrize('enabled, ca, expected', [
    (False, None, 'API: http://h:8000/v1 (plain HTTP: the key crosses the network in clear'),
    (True, '/c/ca.crt', 'API: https://h:8000/v1 (TLS generated, certificate for h, 127.0.0.1, valid until 2027-01-01; '
                        'clients trust --cacert /c/ca.crt)'),
    (True, None, "clients trust the system's trust store)"),
])
def test_the_plan_table_says_how_the_api_is_reached(enabled, ca, expected):
    api = {'url': '%s://h:8000/v1' % ('https' if enabled else 'http'),
           'tls': {'enabled': enabled, 'mode': 'generated', 'names': ['h', '127.0.0.1'], 'not_after': '2027-01-01T00:00:00',
                   'controller': {'ca_file': ca}}}
    assert expected in api_tls.table_lines(api)[0]


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802  # http.server's name
        body = b'{"data": [{"id": "m"}]}'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers['Content-Length']))
        body = (b'data: {"choices": [{"text": "a"}]}\n\ndata: {"choices": [{"text": "b"}], "usage": {"completion_tokens": 2}}\n\n'
                b'data: [DONE]\n\n')
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope='module')
def https_server(tmp_path_factory):
    """A TLS server on 127.0.0.1 with a generated certificate whose names lack 127.0.0.1 (a user's certificate for the
    address clients call), as vLLM serves it."""
    directory = str(tmp_path_factory.mktemp('srv'))
    files = api_tls.generated_files(directory, ['10.0.0.5', 'spark-alpha'], 'lab')
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files['cert_file'], files['key_file'])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield dict(files, url='https://127.0.0.1:%d' % server.server_address[1], other_ca=str(tmp_path_factory.mktemp('o')))
    server.shutdown()


def test_the_probe_verifies_the_planned_ca_for_the_planned_name_on_127_0_0_1(https_server):
    from ansible_collections.dgxspark.cluster.plugins.modules.serving_probe import http_request
    url = https_server['url'] + '/v1/models'
    ok = http_request(url, 5, tls={'ca_file': https_server['ca_file'], 'server_name': '10.0.0.5'})
    assert ok[0] == 200 and '"m"' in ok[1], ok
    # the name the certificate lacks (127.0.0.1, the url's host), a name it lacks, and no CA (the system's store)
    for tls in ({'ca_file': https_server['ca_file']}, {'ca_file': https_server['ca_file'], 'server_name': 'elsewhere'}, {}):
        status, body, error = http_request(url, 5, tls=tls)
        assert status is None and body is None and 'CERTIFICATE_VERIFY_FAILED' in error, (tls, error)
    other = api_tls.generated_files(https_server['other_ca'], ['10.0.0.5'], 'other')
    assert 'CERTIFICATE_VERIFY_FAILED' in http_request(url, 5, tls={'ca_file': other['ca_file'], 'server_name': '10.0.0.5'})[2]


def test_the_timed_stream_goes_over_the_same_verified_https(https_server):
    tls = {'ca_file': https_server['ca_file'], 'server_name': 'spark-alpha'}
    record = stream_request(https_server['url'] + '/v1/completions', 'k', request_body('m', 4, 2, 0), 5, tls=tls)
    assert record['error'] is None and record['output_tokens'] == 2, record
    refused = stream_request(https_server['url'] + '/v1/completions', 'k', request_body('m', 4, 2, 0), 5)
    assert 'CERTIFICATE_VERIFY_FAILED' in refused['error'], refused
    assert isinstance(client.connection('http://127.0.0.1:1', 1), client.http_client.HTTPConnection)
