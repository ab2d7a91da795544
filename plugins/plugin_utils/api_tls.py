# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TLS of the vLLM API, planned on the controller (dgxspark_api_tls: off, generated or files).

``files``: the user's certificate (with its chain), key and optional CA on the controller, checked here: readable, the
key is the certificate's, valid now, signed by the CA (when one is given), and its names include the one clients use.
``generated``: a cluster CA and a server certificate for the head's names, made once in the controller's secrets
directory (keys 0600) and made again only when the names change or the end of their validity is near.

The plan's ``api.tls`` says where each file lies on the controller and on the nodes, and which name a client checks;
every consumer (vLLM's argv, the probes, the supervisor, Prometheus, the printed curl line) reads it from there.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    HAS_CRYPTOGRAPHY = True
    CRYPTOGRAPHY_IMPORT_ERROR = None
except ImportError as _exc:  # pragma: no cover - paramiko, which Ansible's controller uses, brings it
    HAS_CRYPTOGRAPHY = False
    CRYPTOGRAPHY_IMPORT_ERROR = str(_exc)

MODES = ('off', 'generated', 'files')
# On the nodes: the CA is public (every node has it: Prometheus may run on any); the key lives with the other secrets.
TLS_DIR = '/etc/dgxspark/tls'
CERT_ON_HEAD = TLS_DIR + '/api.crt'
CA_ON_NODES = TLS_DIR + '/api-ca.crt'
KEY_ON_HEAD = '/etc/dgxspark/secrets/api_tls_key'
# In the vLLM container (read-only mounts); vLLM gets these paths, never the key's content.
CERT_IN_CONTAINER = '/run/dgxspark/tls/api.crt'
KEY_IN_CONTAINER = '/run/secrets/dgxspark/api_tls_key'
# The generated files, under the controller's secrets directory.
GENERATED_DIR = 'api_tls'
CA_DAYS = 3650
SERVER_DAYS = 397
RENEW_DAYS = 30


class ApiTlsError(ValueError):
    """A certificate or key that cannot serve the API."""


def _now(now=None):
    return now or datetime.datetime.now(datetime.timezone.utc)


def client_names(api_host, head, rail_addresses=(), extra=()):
    """The names a generated certificate holds: the address clients use first, the head's name, its rail addresses
    (Prometheus scrapes there), the loopback ones (the probes on the head) and the user's extra names; no repeats."""
    names = []
    for name in [api_host, head] + list(rail_addresses) + ['127.0.0.1', 'localhost'] + list(extra or []):
        name = str(name).strip()
        if name and name not in names:
            names.append(name)
    return names


def _general_name(name):
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def certificate_names(cert):
    """The DNS names and IP addresses of a certificate's subjectAltName, as text."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n) for n in san.get_values_for_type(x509.DNSName)] + [str(a) for a in san.get_values_for_type(x509.IPAddress)]


def name_matches(name, names):
    """Whether a client checking ``name`` accepts a certificate for ``names`` (a wildcard covers one left label)."""
    name = str(name).lower().rstrip('.')
    for given in (str(n).lower().rstrip('.') for n in names):
        if given == name:
            return True
        if given.startswith('*.') and '.' in name and name.split('.', 1)[1] == given[2:]:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                return True
    return False


def _read(path, what):
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except OSError as exc:
        raise ApiTlsError('%s %s cannot be read (%s): give the path of a PEM file on the controller.' % (what, path, exc.strerror or exc))


def _load_certs(path, what):
    data = _read(path, what)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise ApiTlsError('%s %s holds no PEM certificate (%s).' % (what, path, exc))
    return certs


def _load_key(path, what):
    data = _read(path, what)
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise ApiTlsError('%s %s is encrypted: vLLM cannot ask for its passphrase; give the key without one (kept 0600).' % (what, path))
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ApiTlsError('%s %s holds no PEM private key (%s).' % (what, path, exc))


def _public(key):
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _issued_by(cert, issuer):
    try:
        cert.verify_directly_issued_by(issuer)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False


def _chain_reaches(leaf, intermediates, cas):
    """Whether leaf, through the given intermediates, is signed by one of the CAs."""
    current, seen = leaf, 0
    while seen <= len(intermediates):
        if any(_issued_by(current, ca) for ca in cas):
            return True
        parents = [c for c in intermediates if _issued_by(current, c)]
        if not parents:
            return False
        current, seen = parents[0], seen + 1
    return False


def check_files(cert_file, key_file, ca_file, server_name, now=None):
    """The problems of the user's files (dgxspark_api_tls: files), each a sentence that names the file and the fix."""
    problems = []
    for variable, path in (('dgxspark_api_tls_cert_file', cert_file), ('dgxspark_api_tls_key_file', key_file)):
        if not path:
            problems.append('dgxspark_api_tls is files but %s is not set: give the path of the PEM file on the controller.' % variable)
    if problems:
        return problems
    try:
        certs = _load_certs(cert_file, 'dgxspark_api_tls_cert_file')
        leaf = certs[0]
        key = _load_key(key_file, 'dgxspark_api_tls_key_file')
        cas = _load_certs(ca_file, 'dgxspark_api_tls_ca_file') if ca_file else []
    except ApiTlsError as exc:
        return [str(exc)]
    if _public(key.public_key()) != _public(leaf.public_key()):
        problems.append('dgxspark_api_tls_key_file %s is not the key of the certificate in %s (their public keys differ): give '
                        'the key the certificate was made for.' % (key_file, cert_file))
    now = _now(now)
    if leaf.not_valid_after_utc <= now:
        problems.append('the certificate in %s expired on %s: renew it.' % (cert_file, leaf.not_valid_after_utc.date()))
    elif leaf.not_valid_before_utc > now:
        problems.append('the certificate in %s is valid only from %s (check the clocks).' % (cert_file, leaf.not_valid_before_utc))
    names = certificate_names(leaf)
    if not name_matches(server_name, names):
        problems.append('the certificate in %s is not for %s, the address clients call (the head\'s ansible_host), so every client '
                        'would refuse it: its subjectAltName holds %s; make one whose subjectAltName includes %s.'
                        % (cert_file, server_name, ', '.join(names) or 'no name', server_name))
    if cas and not _chain_reaches(leaf, certs[1:], cas):
        problems.append('the certificate in %s is not signed by the CA in dgxspark_api_tls_ca_file %s (nor through the chain in '
                        'the certificate file): give the CA that issued it, with any intermediate after the certificate in '
                        'its file.' % (cert_file, ca_file))
    return problems


def _write(path, data, mode):
    """Write a file whole, created with its mode (a key is never readable by others, not even for a moment)."""
    temporary = path + '.new'
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, 'wb') as handle:
        handle.write(data)
    os.chmod(temporary, mode)
    os.replace(temporary, path)


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _make(subject, issuer_name, public_key, signing_key, days, now, ca, names=()):
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name).public_key(public_key)
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                                      data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                                      crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def _fresh(cert, now):
    return cert.not_valid_after_utc - now > datetime.timedelta(days=RENEW_DAYS)


def generated_files(directory, names, cluster, now=None, group=None):
    """Make the cluster CA and the server certificate for ``names`` in ``directory`` unless they are there, fresh, and
    for these names. Returns {cert_file, key_file, ca_file, made: [what was made]}.

    ``group``: a serving group of a fleet (issue 51), whose server certificate and key lie in ``directory/<group>``,
    signed by the one CA in ``directory``: in one file, each group's plan would replace the other's certificate (each
    head would get the last group's names) and make it again at every run."""
    now = _now(now)
    server_dir = os.path.join(directory, group) if group else directory
    for path in (directory, server_dir):
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)
    paths = dict((name, os.path.join(directory, name)) for name in ('ca.key', 'ca.crt'))
    paths.update((name, os.path.join(server_dir, name)) for name in ('api.key', 'api.crt'))
    made = []
    try:
        ca_key = _load_key(paths['ca.key'], 'the cluster CA key')
        ca_cert = _load_certs(paths['ca.crt'], 'the cluster CA')[0]
        if not _fresh(ca_cert, now) or _public(ca_cert.public_key()) != _public(ca_key.public_key()):
            raise ApiTlsError('renew')
    except ApiTlsError:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'dgxspark %s API CA' % cluster)])
        ca_cert = _make(name, name, ca_key.public_key(), ca_key, CA_DAYS, now, ca=True)
        _write(paths['ca.key'], _pem_key(ca_key), 0o600)
        _write(paths['ca.crt'], ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
        made.append('CA')
    try:
        server = _load_certs(paths['api.crt'], 'the API certificate')[0]
        key = _load_key(paths['api.key'], 'the API key')
        if (not _fresh(server, now) or sorted(certificate_names(server)) != sorted(str(_general_name(n).value) for n in names)
                or not _issued_by(server, ca_cert) or _public(server.public_key()) != _public(key.public_key())):
            raise ApiTlsError('renew')
    except ApiTlsError:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(names[0]))])
        server = _make(subject, ca_cert.subject, key.public_key(), ca_key, SERVER_DAYS, now, ca=False, names=names)
        _write(paths['api.key'], _pem_key(key), 0o600)
        _write(paths['api.crt'], server.public_bytes(serialization.Encoding.PEM), 0o644)
        made.append('certificate')
    return {'cert_file': paths['api.crt'], 'key_file': paths['api.key'], 'ca_file': paths['ca.crt'], 'made': made}


def _self_signed(cert):
    return cert.issuer == cert.subject and _issued_by(cert, cert)


def plan_tls(settings, server_name, names, secrets_dir, cluster, now=None, group=None):
    """(the plan's api.tls, problems). settings: mode, cert_file, key_file, ca_file (the inventory's). server_name: the
    name clients call (the head's ansible_host, else its name); names: what a generated certificate holds; group: the
    serving group (a fleet's), whose generated certificate is its own (generated_files)."""
    mode = str(settings.get('mode') or 'off')
    if mode not in MODES:
        return None, ['dgxspark_api_tls is %r: use off (plain HTTP), generated (a cluster CA the collection makes) or files '
                      '(your certificate: dgxspark_api_tls_cert_file, dgxspark_api_tls_key_file).' % mode]
    if mode == 'off':  # the same keys, empty: every consumer reads them as they are
        return {'enabled': False, 'mode': 'off', 'server_name': None, 'names': [], 'not_after': None, 'fingerprint_sha256': None,
                'controller': {'cert_file': None, 'key_file': None, 'ca_file': None}, 'cert_file': None, 'key_file': None,
                'ca_file': None, 'cert_in_container': None, 'key_in_container': None}, []
    if not HAS_CRYPTOGRAPHY:
        return None, ['dgxspark_api_tls is %s, which needs the Python library cryptography on the controller (%s): install it '
                      'in the Python that runs Ansible.' % (mode, CRYPTOGRAPHY_IMPORT_ERROR)]
    paths = dict((name, os.path.abspath(os.path.expanduser(str(settings[name]))) if settings.get(name) else None)
                 for name in ('cert_file', 'key_file', 'ca_file'))
    if mode == 'files':
        problems = check_files(paths['cert_file'], paths['key_file'], paths['ca_file'], server_name, now)
        if problems:
            return None, problems
        ca = paths['ca_file']
        if not ca and _self_signed(_load_certs(paths['cert_file'], 'dgxspark_api_tls_cert_file')[0]):
            ca = paths['cert_file']  # a self-signed certificate is its own CA
        controller = {'cert_file': paths['cert_file'], 'key_file': paths['key_file'], 'ca_file': ca}
    else:
        try:
            controller = generated_files(os.path.join(os.path.expanduser(str(secrets_dir)), GENERATED_DIR), names, cluster, now,
                                         group)
        except (OSError, ApiTlsError) as exc:
            return None, ['the API certificate cannot be made in %s (%s): check that the controller\'s secrets directory is '
                          'writable.' % (secrets_dir, exc)]
        controller.pop('made')
    leaf = _load_certs(controller['cert_file'], 'the API certificate')[0]
    return {
        'enabled': True,
        'mode': mode,
        # the name every client checks, wherever it connects (the probes on 127.0.0.1, Prometheus on rail 1)
        'server_name': str(server_name),
        'names': certificate_names(leaf),
        'not_after': leaf.not_valid_after_utc.isoformat(),
        'fingerprint_sha256': hashlib.sha256(leaf.public_bytes(serialization.Encoding.DER)).hexdigest(),
        'controller': controller,
        'cert_file': CERT_ON_HEAD,
        'key_file': KEY_ON_HEAD,
        # None: a certificate of a public CA, which the system's trust store already holds
        'ca_file': CA_ON_NODES if controller['ca_file'] else None,
        'cert_in_container': CERT_IN_CONTAINER,
        'key_in_container': KEY_IN_CONTAINER,
    }, []


def table_lines(api):
    """The plan table's line about the API: its URL and, with TLS, the certificate's names, end and the CA to trust."""
    tls = api.get('tls') or {}
    if not tls.get('enabled'):
        return ['API: %s (plain HTTP: the key crosses the network in clear; dgxspark_api_tls turns TLS on)' % api['url']]
    trust = ('--cacert %s' % tls['controller']['ca_file']) if tls['controller']['ca_file'] else "the system's trust store"
    return ['API: %s (TLS %s, certificate for %s, valid until %s; clients trust %s)' % (
        api['url'], tls['mode'], ', '.join(tls['names']), tls['not_after'][:10], trust)]
