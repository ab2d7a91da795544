# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of the distribute scenario: the worker has the head's image (same ID) and the head's model (same
content, the manifest with it), the node-to-node key is 0600 and authorized only from the rail subnets, and host keys
are pinned at the rail addresses."""

from __future__ import annotations

import json

import pytest

testinfra_hosts = ["ansible://all"]
MODEL_CONTENT = "cd {0} && find . -type f ! -name .dgxspark-manifest.json -print0 | sort -z | xargs -0r sha256sum"


@pytest.fixture(name="model_dir")
def fixture_model_dir(host):
    return host.ansible.get_variables()["dgxspark_model"]


def head(host):
    return host.get_host("ansible://spark-alpha", ansible_inventory=host.backend.ansible_inventory)


def test_the_image_has_the_heads_id(host):
    # The lab's image name is a lookup in the inventory; the nodes hold only the serving image, so compare all IDs.
    listing = "docker images --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}' | sort"
    mine = host.check_output(listing)
    assert mine and mine == head(host).check_output(listing)


def test_the_model_has_the_heads_content_and_its_manifest(host, model_dir):
    assert host.check_output(MODEL_CONTENT.format(model_dir)) == head(host).check_output(MODEL_CONTENT.format(model_dir))
    manifest = json.loads(host.file(model_dir + "/.dgxspark-manifest.json").content_string)
    assert manifest["total_bytes"] > 0 and all(len(f["sha256"]) == 64 for f in manifest["files"])
    assert not host.file(model_dir + "/.dgxspark-partial").exists


def test_the_node_to_node_key_is_private_and_authorized_only_from_the_rails(host):
    key = host.file("/etc/dgxspark/secrets/distribute_ed25519")
    assert key.mode == 0o600 and key.user == "root"
    lines = [l for l in host.file("/root/.ssh/authorized_keys").content_string.splitlines() if "dgxspark-distribute" in l]
    assert len(lines) == 1
    assert lines[0].startswith('from="192.168.100.0/24,192.168.101.0/24",restrict ssh-ed25519 ')


def test_host_keys_are_pinned_at_the_rail_addresses(host):
    pins = host.file("/etc/dgxspark/distribute_known_hosts").content_string.splitlines()
    assert [p.split()[0] for p in pins] == ["192.168.100.10,192.168.101.10", "192.168.100.11,192.168.101.11"]
    assert all(p.split()[1] == "ssh-ed25519" for p in pins)
