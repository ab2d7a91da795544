"""Table tests for the preflight parsers over real output formats (tests/unit/fixtures/preflight/)."""
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import preflight_facts as pf

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures', 'preflight')


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding='utf-8') as handle:
        return handle.read()


@pytest.mark.parametrize('output,expected', [
    ('NVIDIA GB10, 580.95.05\n', [{'name': 'NVIDIA GB10', 'driver': '580.95.05'}]),
    ('NVIDIA GB10, 580.142\nNVIDIA GB10, 580.142\n', [{'name': 'NVIDIA GB10', 'driver': '580.142'}] * 2),
    ('', []),
    ('No devices were found\n', []),
])
def test_parse_nvidia_smi_query(output, expected):
    assert pf.parse_nvidia_smi_query(output) == expected


@pytest.mark.parametrize('output,expected', [
    (fixture('nvidia_smi_gb10.txt'), ('580.95.05', '13.0')),
    ('NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.', ('', '')),
])
def test_parse_nvidia_smi_header(output, expected):
    assert pf.parse_nvidia_smi_header(output) == expected


def test_parse_meminfo_real_file():
    info = pf.parse_meminfo(fixture('meminfo_spark.txt'))
    assert info['MemTotal'] == 127614976 and info['MemAvailable'] == 122687412
    assert info['SwapTotal'] == 16777212 and info['HugePages_Total'] == 0


def test_parse_ss_listening_real_output():
    sockets = pf.parse_ss_listening(fixture('ss_tlnp.txt'))
    assert [s['port'] for s in sockets] == [33483, 37055, 22, 22, 6379, 8000]
    assert sockets[1] == {'port': 37055, 'address': '127.0.0.11', 'process': '', 'pid': None}
    assert sockets[3]['address'] == '[::]'
    assert sockets[4] == {'port': 6379, 'address': '192.168.100.10', 'process': 'gcs_server', 'pid': 1841}
    assert sockets[5]['process'] == 'python3' and sockets[5]['pid'] == 2210  # the first of several holders


@pytest.mark.parametrize('name,expected', [
    ('cgroup_v2_docker.txt', '4f1c2a9b8e7d6c5b4a3928170f6e5d4c3b2a19087f6e5d4c3b2a190876543210'),
    ('cgroup_nested_docker.txt', '2' * 64),  # a container of a lab node's own dockerd: the inner one
    ('cgroup_session.txt', ''),
])
def test_container_id_of_cgroup(name, expected):
    assert pf.container_id_of_cgroup(fixture(name)) == expected


@pytest.mark.parametrize('text,expected', [
    ('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n', 'Ubuntu 24.04.3 LTS'),
    ('NAME="Debian GNU/Linux"\nVERSION_ID="12"\n', 'Debian GNU/Linux 12'),
    ('', ''),
])
def test_parse_os_release(text, expected):
    assert pf.parse_os_release(text) == expected


def test_parse_docker_networks():
    # `docker network inspect --format DOCKER_NETWORK_FORMAT $(docker network ls -q)`, Docker 20.10.24 (Debian 12),
    # plus a network with an IPv4 and an IPv6 subnet.
    listing = 'bridge 172.17.0.0/16\ndgxspark-lab-mgmt 172.31.240.0/24\nhost\nnone\ndual 10.9.0.0/24 fd00:9::/64\n'
    assert pf.parse_docker_networks(listing) == {'bridge': ['172.17.0.0/16'], 'dgxspark-lab-mgmt': ['172.31.240.0/24'],
                                                 'host': [], 'none': [], 'dual': ['10.9.0.0/24', 'fd00:9::/64']}
    assert pf.parse_docker_networks('') == {}


def test_parse_docker_ps():
    listing = '%s dgxspark-ray\n%s old-sglang\n' % ('a' * 64, 'b' * 64)
    assert pf.parse_docker_ps(listing) == {'a' * 64: 'dgxspark-ray', 'b' * 64: 'old-sglang'}
