"""A debootstrapped rootfs on this host, handled safely whatever is mounted inside it.

debootstrap mounts /proc (and at times /sys or devpts) in its target and can leave one behind. Archived as it was,
the rootfs took the host's live /proc into `docker import` (issue 46); removed as it was, the removal walked into the
mount. So: every mount under a rootfs is taken away before it is archived or removed, the archive never leaves the
rootfs' own file system, and the removal never enters a mount it finds (it names it instead).
"""

import os
import stat
import subprocess

from .constants import LabError

MOUNTINFO = "/proc/self/mountinfo"


def _unescape(field):
    """mountinfo writes space, tab, newline and backslash in a path as octal escapes (\\040 ...)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and len(field[i + 1:i + 4]) == 3:
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points(mountinfo_text):
    """The mount points of a /proc/<pid>/mountinfo text (its fifth field), in the order listed."""
    points = []
    for line in mountinfo_text.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(_unescape(fields[4]))
    return points


def mounts_under(path, mountinfo_text=None):
    """The mount points at or below `path`, deepest first (the order to unmount them in)."""
    if mountinfo_text is None:
        with open(MOUNTINFO) as handle:
            mountinfo_text = handle.read()
    top = os.path.realpath(path)
    inside = {p for p in mount_points(mountinfo_text) if p == top or p.startswith(top.rstrip("/") + "/")}
    return sorted(inside, key=lambda p: (-p.count("/"), p))


def unmount_under(path):
    """Unmount everything mounted at or below `path`, deepest first; a busy mount is detached (umount --lazy),
    which takes it out of the tree at once. Fails, naming them, if mounts remain."""
    for point in mounts_under(path):
        if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    left = mounts_under(path)
    if left:
        raise LabError("%s still has file systems mounted inside it after umount: %s; unmount them "
                       "(umount -R %s) and run the command again" % (path, ", ".join(left), path))


def tar_argv(rootfs, *args):
    """tar of the rootfs' own file system only: a mount inside it, were one left, is archived as an empty directory."""
    return ["tar", "--numeric-owner", "--one-file-system", "-C", rootfs] + list(args) + ["."]


def remove_one_file_system(path, mounted=None):
    """Remove the tree at `path` without entering a mount: a directory on another device, or listed as a mount
    point, is left as it is and named in the error. Symbolic links are removed, never followed."""
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return
    if mounted is None:
        mounted = set(mounts_under(path))
    kept = []

    def remove(entry_path, st):
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(entry_path)
            return
        if st.st_dev != top.st_dev or os.path.realpath(entry_path) in mounted:
            kept.append(entry_path)
            return
        with os.scandir(entry_path) as entries:
            children = [(e.path, e.stat(follow_symlinks=False)) for e in entries]
        for child_path, child_st in children:
            remove(child_path, child_st)
        if not any(k.startswith(entry_path.rstrip("/") + "/") for k in kept):
            os.rmdir(entry_path)

    remove(path, top)
    if kept:
        raise LabError("%s was removed but for what is mounted inside it, left untouched: %s" % (path, ", ".join(kept)))


def remove_rootfs(path):
    """Unmount what is inside `path`, then remove it without entering a mount."""
    if os.path.lexists(path):
        unmount_under(path)
        remove_one_file_system(path)
