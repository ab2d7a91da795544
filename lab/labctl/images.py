"""The node image: debootstrap of the base rootfs (shared with the serving image), docker import of the base,
docker build of the node image, stale image removal.
"""

import os
import shutil
import subprocess
import time

from .constants import BASE_REPO, CACHE_DIR, NODE_DIR, NODE_REPO, SUITE, LabError
from .logic import base_hash_parts, base_packages, content_hash, detect_mirror, node_hash_parts
from .host import docker, docker_bin, log, out, run
from .rootfs import remove_rootfs, tar_argv, unmount_under


def image_exists(tag):
    return docker("image", "inspect", tag, check=False).returncode == 0


def image_tags():
    mirror = detect_mirror()
    base = "%s:%s" % (BASE_REPO, content_hash(base_hash_parts(mirror)))
    node = "%s:%s" % (NODE_REPO, content_hash(node_hash_parts(base)))
    return mirror, base, node


def debootstrap_rootfs(rootfs, packages, mirror):
    """debootstrap --variant=minbase of SUITE into rootfs with the lab's .deb cache (one retry); nothing it mounted
    inside the rootfs stays mounted."""
    os.makedirs(os.path.join(CACHE_DIR, "debs"), exist_ok=True)
    remove_rootfs(rootfs)
    for attempt in (1, 2):  # a mirror hiccup ("Couldn't find these debs") gets one retry
        proc = subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ",".join(packages),
                               "--cache-dir=" + os.path.join(CACHE_DIR, "debs"), SUITE, rootfs, mirror],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        unmount_under(rootfs)
        if proc.returncode == 0:
            return
        tail = "\n".join(proc.stdout.decode(errors="replace").splitlines()[-25:])
        if attempt == 2:
            raise LabError("debootstrap of %s from %s failed twice:\n%s" % (SUITE, mirror, tail))
        log("debootstrap failed, retrying once:\n%s" % tail[-2000:])
        remove_rootfs(rootfs)


def build_base(mirror, tag):
    with open(os.path.join(NODE_DIR, "packages.txt")) as handle:
        packages = base_packages(handle.read())
    rootfs = os.path.join(CACHE_DIR, "rootfs-" + tag.split(":")[1])
    started = time.time()
    log("debootstrap %s from %s (cache %s)" % (SUITE, mirror, os.path.join(CACHE_DIR, "debs")))
    try:
        debootstrap_rootfs(rootfs, packages, mirror)
        log("debootstrap done in %.0f s; customizing" % (time.time() - started))
        shutil.copy(os.path.join(NODE_DIR, "customize.sh"), os.path.join(rootfs, "customize.sh"))
        run(["chroot", rootfs, "/bin/sh", "/customize.sh", mirror, SUITE])
        os.unlink(os.path.join(rootfs, "customize.sh"))
        unmount_under(rootfs)
        log("importing %s" % tag)
        tar = subprocess.Popen(tar_argv(rootfs, "-c"), stdout=subprocess.PIPE)
        imp = subprocess.run([docker_bin(), "import", "--change", "ENV container=docker",
                              "--change", 'CMD ["/lib/systemd/systemd"]', "-", tag],
                             stdin=tar.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise LabError("docker import failed: %s" % imp.stderr.decode(errors="replace"))
    finally:
        remove_rootfs(rootfs)
    log("base image %s built in %.0f s" % (tag, time.time() - started))


def build_node(base, tag):
    started = time.time()
    docker("build", "--network", "none", "-q", "--build-arg", "BASE=" + base, "-t", tag,
           "-f", os.path.join(NODE_DIR, "Dockerfile"), NODE_DIR)
    log("node image %s built in %.1f s" % (tag, time.time() - started))


def remove_stale_images(repo, keep):
    for line in out(docker("images", "--format", "{{.Repository}}:{{.Tag}}", repo, check=False)).splitlines():
        if line and line != keep:
            docker("rmi", line, check=False)


def ensure_images():
    mirror, base, node = image_tags()
    if image_exists(node):
        return node
    if not image_exists(base):
        build_base(mirror, base)
    build_node(base, node)
    return node


def prune_images(node_tag):
    """Drop lab images other than the current ones (those still used by a container stay)."""
    remove_stale_images(NODE_REPO, node_tag)
    _mirror, base, _node = image_tags()
    remove_stale_images(BASE_REPO, base)
