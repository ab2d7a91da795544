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


ETC, RUN, USR = '/etc/systemd', '/run/systemd', '/usr/lib/systemd'


@pytest.mark.parametrize('mains,dropins,expected', [
    # Debian 12: the main file only.
    (['/etc/systemd/logind.conf'], [], ['/etc/systemd/logind.conf']),
    # Ubuntu 24.04 with a vendor drop-in and ours: sorted by name across directories.
    (['/etc/systemd/logind.conf'], [ETC + '/logind.conf.d/90-dgxspark.conf', USR + '/logind.conf.d/10-vendor.conf'],
     ['/etc/systemd/logind.conf', USR + '/logind.conf.d/10-vendor.conf', ETC + '/logind.conf.d/90-dgxspark.conf']),
    # The same name in /etc hides the vendor's, whatever the order found.
    ([], [USR + '/logind.conf.d/50-x.conf', ETC + '/logind.conf.d/50-x.conf', RUN + '/logind.conf.d/50-x.conf'],
     [ETC + '/logind.conf.d/50-x.conf']),
    # Only the first main file is read (systemd 254+ looks in /etc, /run, /usr/local/lib, /usr/lib).
    (['/etc/systemd/logind.conf', '/usr/lib/systemd/logind.conf'], [], ['/etc/systemd/logind.conf']),
    ([], [], []),
])
def test_logind_files_are_read_in_logind_s_order(mains, dropins, expected):
    assert pf.logind_files(mains, dropins) == expected


DEBIAN = ('/etc/systemd/logind.conf', fixture('logind_debian12.conf'))


@pytest.mark.parametrize('files,expected', [
    # The distribution's file comments every entry out: systemd's default (yes) holds.
    ([DEBIAN], {'remove_ipc': True, 'set_by': ''}),
    ([DEBIAN, ('/etc/systemd/logind.conf.d/90-dgxspark.conf', '[Login]\nRemoveIPC=no\n')],
     {'remove_ipc': False, 'set_by': '/etc/systemd/logind.conf.d/90-dgxspark.conf'}),
    # A later drop-in wins; case and spaces around the value do not matter.
    ([('/a.conf', '[Login]\nRemoveIPC = no\n'), ('/b.conf', '[Login]\nRemoveIPC= Yes \n')], {'remove_ipc': True, 'set_by': '/b.conf'}),
    # Outside [Login], commented, or not a boolean: ignored.
    ([('/a.conf', '[Other]\nRemoveIPC=no\n[Login]\n#RemoveIPC=no\n;RemoveIPC=no\nRemoveIPC=maybe\n')], {'remove_ipc': True, 'set_by': ''}),
    ([('/a.conf', '[Login]\nRemoveIPC=0\n')], {'remove_ipc': False, 'set_by': '/a.conf'}),
    ([('/a.conf', None)], {'remove_ipc': True, 'set_by': ''}),
])
def test_logind_remove_ipc(files, expected):
    assert pf.logind_remove_ipc(files) == expected


@pytest.mark.parametrize('output,expected', [
    ('b true\n', True),
    ('b false\n', False),
    ('', None),
    ('Failed to connect to bus: No such file or directory\n', None),
])
def test_parse_busctl_bool(output, expected):
    assert pf.parse_busctl_bool(output) == expected


def test_parse_nvidia_smi_clocks_recorded_idle_and_busy():
    idle, busy = fixture('nvidia_smi_clocks_h200.txt').splitlines()
    assert pf.parse_nvidia_smi_clocks(idle) == {'sm_mhz': 360, 'max_sm_mhz': 1980, 'utilization': 0}
    assert pf.parse_nvidia_smi_clocks(busy + '\n') == {'sm_mhz': 1980, 'max_sm_mhz': 1980, 'utilization': 100}


@pytest.mark.parametrize('output,expected', [
    # GB10 at idle, with nounits (the lab stand-in answers the same query the same way).
    ('850, 3003, 0\n', {'sm_mhz': 850, 'max_sm_mhz': 3003, 'utilization': 0}),
    ('702, 3003, 96\n', {'sm_mhz': 702, 'max_sm_mhz': 3003, 'utilization': 96}),
    ('[N/A], [N/A], [N/A]\n', {'sm_mhz': None, 'max_sm_mhz': None, 'utilization': None}),
    ('', {'sm_mhz': None, 'max_sm_mhz': None, 'utilization': None}),
])
def test_parse_nvidia_smi_clocks(output, expected):
    assert pf.parse_nvidia_smi_clocks(output) == expected
