"""disk_room: places on one filesystem add up; the message names the node, what, where and how much to free."""
import collections
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.disk_room import filesystems, problem
from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import nearest_existing

GB = 10 ** 9
StatVfs = collections.namedtuple("StatVfs", "f_bavail f_frsize")


def fake(devices, free):
    """stat/device stand-ins: ``devices`` maps a path prefix to a device, ``free`` a device to its free bytes."""
    def device(path):
        return devices[max((prefix for prefix in devices if path.startswith(prefix)), key=len)]

    def stat(path):
        return StatVfs(free[device(path)] // 4096, 4096)
    return stat, device


SPOOL = {"path": "/var/lib/dgxspark/distribute", "bytes": 19 * GB, "role": "spooled"}
STORE = {"path": "/var/lib/docker", "bytes": 19 * GB, "role": "loaded into Docker"}


@pytest.mark.parametrize("devices, free, reserve, expected", [
    # One root filesystem: the spool and the store add up (38 GB) and fit in 40 GB.
    ({"/": 1}, {1: 40 * GB}, 0, ""),
    # The same with 10 GB kept free does not fit: named with both places and the shortfall.
    ({"/": 1}, {1: 40 * GB}, 10 * GB,
     "spark-delta: not enough disk for the serving image: 19.0 GB spooled at /var/lib/dgxspark/distribute and 19.0 GB "
     "loaded into Docker at /var/lib/docker (one filesystem) + 10.0 GB kept free (distribute_reserve_bytes), 40.0 GB free; "
     "free 8.0 GB there (or lower distribute_reserve_bytes)"),
    # Docker on its own disk: 25 GB on each is enough for 19 GB each (each filesystem is checked alone).
    ({"/": 1, "/var/lib/docker": 2}, {1: 25 * GB, 2: 25 * GB}, 0, ""),
    # ... and only the one that is short is named,
    ({"/": 1, "/var/lib/docker": 2}, {1: 100 * GB, 2: 5 * GB}, 0,
     "spark-delta: not enough disk for the serving image: 19.0 GB loaded into Docker at /var/lib/docker, 5.0 GB free; "
     "free 14.0 GB there (or lower distribute_reserve_bytes)"),
    # ... or both, each with its own shortfall.
    ({"/": 1, "/var/lib/docker": 2}, {1: 10 * GB, 2: 5 * GB}, 0,
     "spark-delta: not enough disk for the serving image: 19.0 GB spooled at /var/lib/dgxspark/distribute, 10.0 GB free; "
     "free 9.0 GB there; 19.0 GB loaded into Docker at /var/lib/docker, 5.0 GB free; free 14.0 GB there "
     "(or lower distribute_reserve_bytes)"),
])
def test_places_on_one_filesystem_add_up_and_a_shortfall_is_named(devices, free, reserve, expected):
    stat, device = fake(devices, free)
    found = filesystems([SPOOL, STORE], stat=stat, device=device)
    assert sum(fs["bytes"] for fs in found) == 38 * GB
    assert len(found) == len(set(devices.values()))
    assert problem("spark-delta", "the serving image", [SPOOL, STORE], found, reserve) == expected


def test_a_directory_not_made_yet_counts_on_its_nearest_existing_parent(tmp_path):
    missing = tmp_path / "not" / "made" / "yet"
    assert nearest_existing(str(missing)) == str(tmp_path)
    found = filesystems([{"path": str(missing), "bytes": 1}])
    assert found[0]["device"] == os.stat(str(tmp_path)).st_dev and found[0]["free"] > 0


def test_the_real_filesystem_with_more_than_it_holds_is_a_problem(tmp_path):
    found = filesystems([{"path": str(tmp_path), "bytes": 10 ** 18}])
    message = problem("here", "the serving image", [{"path": str(tmp_path), "bytes": 10 ** 18}], found)
    assert message.startswith("here: not enough disk for the serving image: 1000000.0 TB written at %s, " % tmp_path)
