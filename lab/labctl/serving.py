"""The serving image with vLLM's CPU build (lab/serving/README.md), its engine on this host, and the lab's model:
build, cache, and loading the image and the model into the nodes.
"""

import io
import os
import shutil
import subprocess
import tarfile
import threading
import time

from .constants import (
    CACHE_DIR, ENGINE_COMPLETE, ENGINE_ROOT, SERVING_BUILD_FORMAT, SERVING_DIR, SERVING_MODELS_DIR, SERVING_MODEL_MARKER,
    SERVING_MODEL_NAME, SERVING_MODEL_SHARDS, SERVING_PACKAGES, SERVING_REPO, SUITE, LabError,
)
from .logic import container_name, content_hash, detect_mirror, engine_dir, serving_model_hash, serving_tag
from .host import docker, docker_bin, load_state, log, out, run, save_state, state_lock
from .images import debootstrap_rootfs, image_exists, remove_stale_images
from .rootfs import remove_rootfs, tar_argv, unmount_under


def serving_rootfs_key(mirror):
    """Cache key of the serving image's debootstrap rootfs (mirror, suite, packages, build format)."""
    return content_hash([("format", False, SERVING_BUILD_FORMAT.encode()), ("mirror", False, mirror.encode()),
                         ("suite", False, SUITE.encode()), ("packages", False, ",".join(SERVING_PACKAGES).encode())])


def slim_rootfs(rootfs):
    """As container images are: no apt lists/caches, docs, man pages, locales (about 150 MB less to copy
    into every node's Docker)."""
    for rel in ("var/lib/apt/lists", "var/cache/apt", "usr/share/doc", "usr/share/man", "usr/share/locale",
                "usr/share/info", "var/log"):
        path = os.path.join(rootfs, rel)
        if not os.path.isdir(path):
            continue
        for entry in os.listdir(path):
            full = os.path.join(path, entry)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)


def serving_rootfs(mirror, rootfs):
    """Fill `rootfs` with the slimmed debootstrap (minbase + SERVING_PACKAGES), kept as a tarball in the
    cache so that a change under lab/serving/ only re-runs build_image.sh."""
    cached = os.path.join(CACHE_DIR, "serving-rootfs-%s.tar" % serving_rootfs_key(mirror))
    if not os.path.exists(cached):
        started = time.time()
        log("debootstrap %s from %s for the serving image (cache %s)" % (SUITE, mirror, os.path.join(CACHE_DIR, "debs")))
        debootstrap_rootfs(rootfs, SERVING_PACKAGES, mirror)
        slim_rootfs(rootfs)
        for old in os.listdir(CACHE_DIR):
            if old.startswith("serving-rootfs-") and old.endswith(".tar"):
                os.unlink(os.path.join(CACHE_DIR, old))
        run(tar_argv(rootfs, "-cf", cached + ".tmp"))
        os.replace(cached + ".tmp", cached)
        log("serving rootfs debootstrapped in %.0f s (kept as %s)" % (time.time() - started, cached))
        return
    remove_rootfs(rootfs)
    os.makedirs(rootfs)
    run(["tar", "--numeric-owner", "-C", rootfs, "-xf", cached])


def engine_complete(engine):
    return os.path.exists(os.path.join(engine, ENGINE_COMPLETE))


def engine_mount():
    """The docker -v argument that shows the engines to a container at the same path, read-only."""
    return "%s:%s:ro" % (ENGINE_ROOT, ENGINE_ROOT)


def prune_engines(keep):
    for name in os.listdir(ENGINE_ROOT):
        path = os.path.join(ENGINE_ROOT, name)
        if path != keep and name.startswith("vllm-"):
            shutil.rmtree(path, ignore_errors=True)


def run_build_script(script, *args):
    env = dict(os.environ, DGXSPARK_ENGINE_WHEELS=os.path.join(CACHE_DIR, "engine-wheels"))
    proc = subprocess.run(["bash", os.path.join(SERVING_DIR, script)] + list(args), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise LabError("lab/serving/%s failed:\n%s" % (script, "\n".join(
            proc.stdout.decode(errors="replace").splitlines()[-30:])))


def build_serving(mirror, tag, engine, need_engine, need_image):
    """Serving rootfs (bookworm minbase + python3...) -> the engine (build-engine.sh) and/or the image (build_image.sh)."""
    rootfs = os.path.join(CACHE_DIR, "serving-build-" + tag.split(":")[1])
    started = time.time()
    try:
        serving_rootfs(mirror, rootfs)
        if need_engine:
            log("building the vLLM engine %s (lab/serving/build-engine.sh)" % engine)
            os.makedirs(ENGINE_ROOT, exist_ok=True)
            run_build_script("build-engine.sh", rootfs, engine)
            with open(os.path.join(engine, ENGINE_COMPLETE), "w") as handle:
                handle.write(tag + "\n")
            prune_engines(engine)
            log("engine %s built in %.0f s" % (engine, time.time() - started))
        if need_image:
            log("building the serving image %s (lab/serving/build_image.sh)" % tag)
            unmount_under(rootfs)
            run_build_script("build_image.sh", rootfs, tag, engine)
    finally:
        remove_rootfs(rootfs)
    version = out(docker("run", "--rm", "--network", "none", "-v", engine_mount(), tag, "vllm", "--version")).splitlines()
    log("serving image %s with vLLM %s ready in %.0f s" % (tag, version[-1] if version else "?", time.time() - started))


def ensure_serving_image():
    """The serving image's tag; it and its engine are built (never pulled) only when lab/serving/ changed."""
    mirror = detect_mirror()
    tag = serving_tag(mirror)
    engine = engine_dir()
    need_engine, need_image = not engine_complete(engine), not image_exists(tag)
    if need_engine or need_image:
        build_serving(mirror, tag, engine, need_engine, need_image)
        remove_stale_images(SERVING_REPO, tag)
    return tag


def node_exec(node, *args, check=False, input_data=None, timeout=None):
    flags = ["-i"] if input_data is not None else []
    return docker("exec", *flags, container_name(node), *args, check=check, input_data=input_data, timeout=timeout)


def node_has_image(node, tag):
    return node_exec(node, "docker", "image", "inspect", "-f", "{{.Id}}", tag).returncode == 0


def serving_model_path():
    return "%s/%s" % (SERVING_MODELS_DIR, SERVING_MODEL_NAME)


def node_has_model(node, model_hash):
    proc = node_exec(node, "cat", "%s/%s" % (serving_model_path(), SERVING_MODEL_MARKER))
    return proc.returncode == 0 and out(proc) == model_hash


# provide_serving fills nodes in parallel threads: one of them builds the cached model tar, the others wait
# (two builders would delete each other's scratch dir and tar).
_MODEL_TAR_LOCK = threading.Lock()


def serving_model_tar(model_hash, tag):
    """tar of <name>/ (made by lab/serving/make_lab_model.py in the serving image, cached by content hash)."""
    with _MODEL_TAR_LOCK:
        return _serving_model_tar_locked(model_hash, tag)


def _serving_model_tar_locked(model_hash, tag):
    cached = os.path.join(CACHE_DIR, "serving-model-%s.tar" % model_hash)
    if not os.path.exists(cached):
        tmp = os.path.join(CACHE_DIR, "serving-model-%s.tmp" % model_hash)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        target = os.path.join(tmp, SERVING_MODEL_NAME)
        # Made by the engine's own libraries (torch, transformers, tokenizers), in the serving image.
        docker("run", "--rm", "--network", "none", "-v", engine_mount(), "-v", "%s:/out" % tmp, tag,
               "dgxspark-make-lab-model", "/out/" + SERVING_MODEL_NAME, "--shards", str(SERVING_MODEL_SHARDS))
        with open(os.path.join(target, SERVING_MODEL_MARKER), "w") as handle:
            handle.write(model_hash + "\n")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(target, arcname=SERVING_MODEL_NAME,
                    filter=lambda info: setattr(info, "uid", 0) or setattr(info, "gid", 0)
                    or setattr(info, "uname", "root") or setattr(info, "gname", "root") or info)
        shutil.rmtree(tmp, ignore_errors=True)
        for old in os.listdir(CACHE_DIR):
            if old.startswith("serving-model-") and old.endswith(".tar"):
                os.unlink(os.path.join(CACHE_DIR, old))
        with open(cached + ".tmp", "wb") as handle:
            handle.write(buf.getvalue())
        os.replace(cached + ".tmp", cached)
    with open(cached, "rb") as handle:
        return handle.read()


def install_serving_model(node, model_hash, tag):
    if node_has_model(node, model_hash):
        return False
    path = serving_model_path()
    node_exec(node, "sh", "-c", "rm -rf '%s' && mkdir -p '%s'" % (path, SERVING_MODELS_DIR), check=True)
    docker("cp", "-", "%s:%s" % (container_name(node), SERVING_MODELS_DIR), input_data=serving_model_tar(model_hash, tag))
    return True


def copy_image_into_node(node, image):
    """`docker save IMAGE | docker load` from the host's Docker into the node's; returns the seconds it took."""
    started = time.time()
    save = subprocess.Popen([docker_bin(), "save", image], stdout=subprocess.PIPE)
    load = subprocess.run([docker_bin(), "exec", "-i", container_name(node), "docker", "load", "-q"],
                          stdin=save.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    save.stdout.close()
    save.wait()
    if load.returncode != 0 or save.returncode != 0:
        raise LabError("loading %s into %s failed: %s" % (image, node, load.stderr.decode(errors="replace")))
    return round(time.time() - started, 1)


def load_serving_into_node(node, tag):
    """docker save | docker load into the node's (vfs) Docker where the tag is missing (the image is small: its engine is
    mounted); older serving tags removed."""
    result = {"node": node, "image": "present", "model": "present", "load_s": None}
    if not node_has_image(node, tag):
        result["image"], result["load_s"] = "loaded", copy_image_into_node(node, tag)
        for line in out(node_exec(node, "docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
                                  SERVING_REPO)).splitlines():
            if line and line != tag:
                node_exec(node, "docker", "rmi", line)  # fails (kept) while a container uses it
    if install_serving_model(node, serving_model_hash(), tag):
        result["model"] = "written"
    return result


def provide_serving(nodes, tag):
    """Load the serving image + the lab model directory into `nodes` (in parallel); log what was done."""
    results, errors = {}, {}

    def worker(node):
        try:
            results[node] = load_serving_into_node(node, tag)
        except LabError as exc:
            errors[node] = str(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for node in nodes:
        if node in results:
            r = results[node]
            log("%s: serving image %s%s; model %s %s" % (
                node, r["image"], " in %.1f s" % r["load_s"] if r["load_s"] is not None else "",
                serving_model_path(), r["model"]))
    if errors:
        raise LabError("; ".join("%s: %s" % item for item in sorted(errors.items())))
    return results


def record_serving_image(tag):
    with state_lock():
        state = load_state()
        if state is not None:
            state["serving_image"] = tag
            save_state(state)
