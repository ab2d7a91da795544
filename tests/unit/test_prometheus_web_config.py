"""Prometheus' web configuration (plugins/plugin_utils/prometheus_web_config.py): the bcrypt hash of the cluster's
Prometheus password, kept while the password matches the file on the node (a second run changes nothing), the optional
TLS server files, and a clear error for every bad input that never shows the password. Each text is also checked by
Prometheus' own `promtool check web-config` where tools/promtool.sh unpacked it."""
import os
import shutil
import subprocess

import bcrypt
import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import prometheus_web_config as pwc

HERE = os.path.dirname(os.path.abspath(__file__))
PROMTOOL = os.path.join(HERE, "..", "..", ".cache", "prometheus-deb", "usr", "bin", "promtool")
PASSWORD = "Zq3vR8tK1mW6pX2nB7cL5dF9gH4jY0sA"  # the shape the role's lookup makes: 32 letters and digits
OTHER = "another-password-of-the-same-size"


def hashed(password, rounds=4):
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=rounds)).decode()


KEPT = hashed(PASSWORD)


def file_with(users, tls=None):
    data = {"basic_auth_users": users}
    if tls:
        data["tls_server_config"] = tls
    return yaml.safe_dump(data)


@pytest.mark.parametrize("existing, user, reused", [
    ("", "dgxspark", False),                                       # first run: no file on the node
    (file_with({"dgxspark": KEPT}), "dgxspark", True),              # second run: the same password, the same hash
    (file_with({"dgxspark": hashed(OTHER)}), "dgxspark", False),    # the password was changed on the controller
    (file_with({"grafana": KEPT}), "dgxspark", False),              # the user was renamed
    (file_with({"dgxspark": "not-a-bcrypt-hash"}), "dgxspark", False),  # edited by hand
    (file_with({"dgxspark": None}), "dgxspark", False),
    ("basic_auth_users: [dgxspark]\n", "dgxspark", False),          # a list, not a map
    ("- just\n- a list\n", "dgxspark", False),
    ("basic_auth_users: {dgxspark: [\n", "dgxspark", False),        # not YAML
    (file_with({"dgxspark": KEPT}, {"cert_file": "/a.pem", "key_file": "/a.key"}), "dgxspark", True),  # TLS dropped
], ids=["first-run", "same-password", "password-changed", "user-renamed", "hand-edited", "null-hash", "users-a-list",
        "a-list", "not-yaml", "tls-dropped"])  # the hashes are salted anew in each process: xdist needs fixed ids
def test_the_hash_is_kept_only_while_the_password_matches_it(existing, user, reused):
    config, was_reused = pwc.web_config(user, PASSWORD, existing)
    assert list(config) == ["basic_auth_users"] and list(config["basic_auth_users"]) == [user]
    new_hash = config["basic_auth_users"][user]
    assert was_reused is reused
    assert (new_hash == KEPT) is reused
    assert bcrypt.checkpw(PASSWORD.encode(), new_hash.encode())
    assert PASSWORD not in pwc.web_config_text(config)
    if not reused:  # a new hash has the collection's cost (a kept one keeps its own)
        assert new_hash.startswith("$2b$%02d$" % pwc.BCRYPT_ROUNDS)


def test_a_second_run_writes_the_same_text():
    first = pwc.web_config("dgxspark", PASSWORD, "")[0]
    text = pwc.web_config_text(first)
    second, reused = pwc.web_config("dgxspark", PASSWORD, text)
    assert reused and pwc.web_config_text(second) == text
    assert text.startswith("# Managed by dgxspark.cluster") and yaml.safe_load(text) == first


class TaggedStr(str):
    """What a templated task argument is in ansible-core 2.19: a str subclass, which yaml.safe_dump refuses."""


def test_templated_arguments_are_written_as_plain_strings():
    config = pwc.web_config(TaggedStr("dgxspark"), TaggedStr(PASSWORD), "", TaggedStr("/etc/tls/a.crt"),
                            TaggedStr("/etc/tls/a.key"))[0]
    text = pwc.web_config_text(config)
    assert "!!python" not in text and yaml.safe_load(text)["tls_server_config"]["cert_file"] == "/etc/tls/a.crt"
    assert list(yaml.safe_load(text)["basic_auth_users"]) == ["dgxspark"]


@pytest.mark.parametrize("cert, key, expected", [
    (None, None, None),
    ("", "", None),
    ("/etc/dgxspark/tls/api.crt", "/etc/dgxspark/tls/api.key",
     {"cert_file": "/etc/dgxspark/tls/api.crt", "key_file": "/etc/dgxspark/tls/api.key"}),
])
def test_tls_server_files_when_given(cert, key, expected):
    config = pwc.web_config("dgxspark", PASSWORD, "", cert, key)[0]
    assert config.get("tls_server_config") == expected


@pytest.mark.parametrize("user, password, cert, key, message", [
    ("", PASSWORD, "", "", "the user must be a non-empty name without spaces or \":\" (basic auth), got ''"),
    ("dgx:spark", PASSWORD, "", "", "got 'dgx:spark'"),
    ("dgx spark", PASSWORD, "", "", "got 'dgx spark'"),
    (None, PASSWORD, "", "", "got None"),
    ("dgxspark", "", "", "", "the password is empty"),
    ("dgxspark", "   ", "", "", "the password is empty"),
    ("dgxspark", None, "", "", "the password is empty"),
    ("dgxspark", "x" * 73, "", "", "the password is longer than bcrypt takes (72 bytes)"),
    ("dgxspark", "é" * 37, "", "", "the password is longer than bcrypt takes (72 bytes)"),  # 74 bytes in UTF-8
    ("dgxspark", PASSWORD, "/etc/tls/a.crt", "", "TLS needs both a certificate and its key file, got "
                                                 "cert_file='/etc/tls/a.crt' key_file=''"),
    ("dgxspark", PASSWORD, "", "/etc/tls/a.key", "TLS needs both a certificate and its key file"),
    ("dgxspark", PASSWORD, "tls/a.crt", "/etc/tls/a.key", "cert_file must be an absolute path on the Prometheus node, "
                                                          "got 'tls/a.crt'"),
    ("dgxspark", PASSWORD, "/etc/tls/a.crt", "a.key", "key_file must be an absolute path on the Prometheus node"),
])
def test_bad_inputs_say_what_is_wrong_without_the_password(user, password, cert, key, message):
    with pytest.raises(pwc.WebConfigError) as error:
        pwc.web_config(user, password, "", cert, key)
    assert message in str(error.value)
    if password and password.strip():
        assert password not in str(error.value)


def test_a_password_of_72_bytes_is_taken():
    config = pwc.web_config("dgxspark", "x" * 72, "")[0]
    assert bcrypt.checkpw(b"x" * 72, config["basic_auth_users"]["dgxspark"].encode())


def test_without_bcrypt_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(pwc, "bcrypt", None)
    with pytest.raises(pwc.WebConfigError, match="the Python package bcrypt is missing on the controller"):
        pwc.web_config("dgxspark", PASSWORD, "")


def self_signed(directory):
    cert, key = str(directory / "server.crt"), str(directory / "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=prometheus",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


@pytest.mark.skipif(not os.access(PROMTOOL, os.X_OK), reason="promtool not unpacked (bash tools/promtool.sh)")
@pytest.mark.parametrize("tls", [False, True], ids=["basic-auth", "basic-auth-and-tls"])
def test_promtool_accepts_the_text(tmp_path, tls):
    if tls and not shutil.which("openssl"):
        pytest.skip("openssl is missing")
    cert, key = self_signed(tmp_path) if tls else ("", "")
    config = pwc.web_config("dgxspark", PASSWORD, "", cert, key)[0]
    path = tmp_path / "web.yml"
    path.write_text(pwc.web_config_text(config))
    checked = subprocess.run([PROMTOOL, "check", "web-config", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
