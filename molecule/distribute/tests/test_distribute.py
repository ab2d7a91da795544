# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of the distribute scenario: the worker has the head's image (same ID) and the head's model (same
content, the manifest with it), the node-to-node key and its authorization are gone once the phase ended, what the key
may run is fixed to the relay's paths and the rails, and host keys are pinned at the rail addresses."""

from __future__ import annotations

import json

import pytest

testinfra_hosts = ["ansible://all"]
# The model's files, without the collection's own: the manifest, and the mark of a copy the distribution made.
MODEL_CONTENT = ("cd {0} && find . -type f ! -name .dgxspark-manifest.json ! -name .dgxspark-copy -print0 | sort -z"
                 " | xargs -0r sha256sum")


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


def test_only_a_copy_the_distribution_made_is_marked_as_one_it_may_remove(host, model_dir):
    # The head's directory is the source (never removed by a release that no longer serves it); the worker's was made.
    assert host.file(model_dir + "/.dgxspark-copy").exists == (host.backend.get_hostname() != "spark-alpha")


def test_the_node_to_node_key_and_its_authorization_are_gone_once_the_phase_ended(host):
    assert not host.file("/etc/dgxspark/secrets/distribute_ed25519").exists
    keys = host.file("/root/.ssh/authorized_keys")
    assert not keys.exists or "dgxspark-distribute" not in keys.content_string


def test_the_key_may_run_only_the_relays_receiving_operations_with_fixed_paths_over_the_rails(host, model_dir):
    forced = json.loads(host.file("/etc/dgxspark/distribute_forced.json").content_string)
    assert forced["relay"] == "/usr/local/lib/dgxspark/distribute_relay.py"
    assert forced["ssh_key"] == "/etc/dgxspark/secrets/distribute_ed25519"
    assert forced["model_dirs"] == [model_dir]
    assert forced["rail_nets"] == ["192.168.100.0/24", "192.168.101.0/24"]
    assert sorted(forced["progress"]) == ["image", "model-recv"]


def test_host_keys_are_pinned_at_the_rail_addresses(host):
    pins = host.file("/etc/dgxspark/distribute_known_hosts").content_string.splitlines()
    assert [p.split()[0] for p in pins] == ["192.168.100.10,192.168.101.10", "192.168.100.11,192.168.101.11"]
    assert all(p.split()[1] == "ssh-ed25519" for p in pins)
