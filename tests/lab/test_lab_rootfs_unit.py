"""A debootstrapped rootfs with a file system still mounted inside it (issue 46: debootstrap left /proc mounted, the
host's live /proc went into `docker import`, and the removal walked into the mount). Real mounts: root, as CI is."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab"))
from labctl import LabError  # noqa: E402  pylint: disable=wrong-import-position
from labctl.rootfs import (  # noqa: E402  pylint: disable=wrong-import-position
    mount_points, mounts_under, remove_one_file_system, remove_rootfs, tar_argv, unmount_under,
)

# /proc/self/mountinfo lines as the kernel writes them (proc(5)); the last with a space in its path (\040).
MOUNTINFO = """\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw
61 22 0:52 / /work/.cache/lab/rootfs-d062dc255562/proc rw,relatime shared:30 - proc proc rw
62 61 0:53 / /work/.cache/lab/rootfs-d062dc255562/proc/sys/fs/binfmt_misc rw,relatime - binfmt_misc binfmt_misc rw
63 22 0:54 / /work/.cache/lab/rootfs-d062dc255562/dev/pts rw,relatime - devpts devpts rw,gid=5
64 22 0:55 / /work/.cache/lab/rootfs-d062dc2555620/proc rw,relatime - proc proc rw
65 22 0:56 / /work/my\\040rootfs/proc rw,relatime - tmpfs tmpfs rw
"""


@pytest.mark.parametrize("path, expected", [
    ("/work/.cache/lab/rootfs-d062dc255562", ["/work/.cache/lab/rootfs-d062dc255562/proc/sys/fs/binfmt_misc",
                                              "/work/.cache/lab/rootfs-d062dc255562/dev/pts",
                                              "/work/.cache/lab/rootfs-d062dc255562/proc"]),
    ("/work/.cache/lab/rootfs-d062dc255562/", ["/work/.cache/lab/rootfs-d062dc255562/proc/sys/fs/binfmt_misc",
                                               "/work/.cache/lab/rootfs-d062dc255562/dev/pts",
                                               "/work/.cache/lab/rootfs-d062dc255562/proc"]),
    ("/work/my rootfs", ["/work/my rootfs/proc"]),
    ("/work/.cache/lab/rootfs-other", []),
])
def test_the_mounts_under_a_rootfs_deepest_first_and_no_sibling_with_a_longer_name(path, expected):
    assert mounts_under(path, MOUNTINFO) == expected


def test_mount_points_reads_the_fifth_field():
    assert mount_points(MOUNTINFO)[:2] == ["/", "/proc"]


def _mount_tmpfs(point):
    os.makedirs(point, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "dgxspark-test", point], check=True)


@pytest.fixture
def rootfs(tmp_path):
    """A small rootfs whose proc/ is a tmpfs with a file in it, as debootstrap's proc was; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.fail("these tests mount a tmpfs: run them as root (CI is root)")
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").write_text("spark\n")
    (root / "bin").symlink_to("/usr/bin")
    _mount_tmpfs(str(root / "proc"))
    (root / "proc" / "13303").mkdir()
    (root / "proc" / "13303" / "auxv").write_text("the host's process\n")
    yield root
    for point in mounts_under(str(tmp_path)):
        subprocess.run(["umount", "--lazy", point], check=False)


def _archived_names(root, tmp_path):
    archive = str(tmp_path / "rootfs.tar")
    subprocess.run(tar_argv(str(root), "-cf", archive), check=True)
    listing = subprocess.run(["tar", "-tf", archive], check=True, capture_output=True, text=True).stdout
    return {name.rstrip("/") for name in listing.split()}


def test_a_mount_left_in_the_rootfs_is_archived_as_an_empty_directory(rootfs, tmp_path):
    names = _archived_names(rootfs, tmp_path)
    assert {"./etc/hostname", "./bin", "./proc"} <= names
    assert not [n for n in names if n.startswith("./proc/")], names


def test_unmount_under_takes_every_mount_away_nested_ones_too(rootfs, tmp_path):
    _mount_tmpfs(str(rootfs / "proc" / "13303" / "nested"))
    _mount_tmpfs(str(rootfs / "dev" / "pts"))
    assert len(mounts_under(str(rootfs))) == 3
    unmount_under(str(rootfs))
    assert mounts_under(str(rootfs)) == []
    assert os.listdir(str(rootfs / "proc")) == []  # the directory of the rootfs itself, now empty
    assert not [n for n in _archived_names(rootfs, tmp_path) if n.startswith("./proc/")]


def test_the_removal_never_enters_a_mount_and_names_it(rootfs):
    with pytest.raises(LabError) as failure:
        remove_one_file_system(str(rootfs))
    assert str(rootfs / "proc") in str(failure.value) and "left untouched" in str(failure.value)
    assert (rootfs / "proc" / "13303" / "auxv").read_text() == "the host's process\n"
    assert sorted(os.listdir(str(rootfs))) == ["proc"]  # the rest is gone
    assert os.path.lexists("/usr/bin")  # the symlink was removed, not followed


def test_a_bind_mount_on_the_same_file_system_is_not_entered_either(tmp_path):
    """A bind mount has the device of its parent: only the mount table tells it is one."""
    if os.geteuid() != 0:
        pytest.fail("this test bind-mounts a directory: run it as root (CI is root)")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the rootfs'\n")
    root = tmp_path / "rootfs"
    (root / "mnt").mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(outside), str(root / "mnt")], check=True)
    try:
        with pytest.raises(LabError):
            remove_one_file_system(str(root))
        assert (outside / "keep").read_text() == "not the rootfs'\n"
    finally:
        subprocess.run(["umount", "--lazy", str(root / "mnt")], check=False)


def test_remove_rootfs_unmounts_then_removes_the_whole_tree(rootfs):
    remove_rootfs(str(rootfs))
    assert not os.path.lexists(str(rootfs))
    assert mounts_under(str(rootfs)) == []
    remove_rootfs(str(rootfs))  # nothing there: nothing to do
