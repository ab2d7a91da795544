"""The engine's API key against every other container of its node (issue 49, item 4), on a 2-node lab.

The API server holds the key; no other process may get it: not a process of the Ray container (root, an unprivileged
user, or a Ray task that a Ray-token holder submits), not a process that vLLM itself starts (a model's remote code: the
probe runs in the engine's container without the start script's two capabilities, as vLLM's children do), not a process
of another node's container. Each probe, from inside, reads every process it can see: /proc/PID/cmdline, environ and
mem, the key's path in its own container and through /proc/PID/root, and searches what it read for the key by its sha256
(the key never goes to the node); it sends back only where it found it and what it could not read. It searches there:
what it reads, 64 KiB of every mapping of every process, was 0.7 to 1 GB of JSON a probe, 20 to 50 s and 2 to 3 GB of
memory each (three a test, then parsed again in pytest): on a loaded lab machine one test took 406 s, the CPU engine
starved meanwhile, and the next tests found no API server (it was being restarted). The containers of the
collection keep their own PID namespace, none the host's: the head's vLLM container joins its Ray container's (Ray's
driver finds its raylet by scanning processes, ray#63923).

Seen failing on the old behaviour (both containers in the host's PID namespace, the key file 0600 root): from the Ray
container as root, /proc/PID/root/run/secrets/dgxspark/vllm_api_key of the engine core and of the API server (before its
guard made it non-dumpable) gave the key; remote code in the engine's container read the file directly.
Any other file of the engine's container (the TLS key, 0600 root) stays out of the Ray container's reach the same way:
no process of the engine's container is dumpable (the guard's main before vLLM forks or spawns; no docker-init there).

    DGXSPARK_LAB_NODES=2 .venv/bin/python -m pytest -m lab tests/lab/test_isolation_lab.py   (DGXSPARK_LAB_BACKEND=mp too)
"""

import hashlib
import json
import os
import re

import pytest
import yaml

from ansible_lab import BACKEND, RAY, REPO, VLLM, extra_vars, node_container, playbook_ok, serving_lab

pytestmark = pytest.mark.lab

HEAD, WORKER = "spark-alpha", "spark-beta"
KEY_IN_CONTAINER = "/run/secrets/dgxspark/vllm_api_key"
TWO_NODE_VARS_FILE = os.path.join(REPO, "molecule", "shared", "group_vars", "all", "20-two-node-cluster.yml")
# A process vLLM starts: the start script's capabilities for the key are gone (files/vllm-serve.sh).
AS_VLLM_CHILD = "setpriv --inh-caps=-all --bounding-set=-dac_read_search,-setpcap --"
NOBODY = "65534:65534"

# Run inside a container (python3 -) or a Ray task (probe()): what this process can read of every process it sees, and
# where the key is among it. The key is letters and digits (the collection's generated key, key_search()): any copy of
# it lies in a run of those of at least its length, and the probe hashes every window of the key's length in such runs.
PROBE = r'''
import hashlib
import json
import os
import re


class KeySearch:
    # Whether a text holds the key whose sha256 and length it knows; each distinct run is hashed once (the processes map
    # the same libraries).
    def __init__(self, sha256, length):
        self.sha256, self.length = sha256, length
        self.runs = re.compile("[A-Za-z0-9]{%d,}" % length)
        self.known = {}

    def holds(self, text):
        found = False
        for run in set(self.runs.findall(text)):
            if run not in self.known:
                self.known[run] = any(hashlib.sha256(run[start:start + self.length].encode()).hexdigest() == self.sha256
                                      for start in range(len(run) - self.length + 1))
            found = found or self.known[run]
        return found


def _read(path, size=1 << 16):
    try:
        with open(path, "rb") as handle:
            return handle.read(size).decode("latin-1")
    except OSError as exc:
        return "error: %s" % exc.strerror


def _memory(pid):
    # Up to 64 KiB of each readable mapping (its heap and stacks included), one after the other, or why none can be
    # read.
    try:
        with open("/proc/%s/maps" % pid) as maps:
            spans = [line.split()[:2] for line in maps.read().splitlines()]
        handle = open("/proc/%s/mem" % pid, "rb")
    except OSError as exc:
        yield "error: %s" % exc.strerror
        return
    read = False
    with handle:
        for span, perms in spans:
            if perms.startswith("r"):
                try:
                    handle.seek(int(span.split("-")[0], 16))
                    chunk = handle.read(1 << 16).decode("latin-1")
                except (OSError, ValueError, OverflowError):
                    continue
                read = True
                yield chunk
    if not read:
        yield "error: no mapping could be read"


def _seen(search, texts):
    # "error: WHY" where nothing could be read, else "read" or "read: the key" where the key is in what was read.
    found, size = False, 0
    for text in texts:
        if text.startswith("error: ") and not size:
            return text
        found, size = found or search.holds(text), size + len(text)
    return "read: the key" if found else "read"


def probe(key_path, key_sha256, key_length):
    me = os.getpid()
    search = KeySearch(key_sha256, key_length)
    found = {"uid": os.getuid(), "key file": _seen(search, [_read(key_path)]), "processes": {}}
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit() and int(p) != me and int(p) != os.getppid()):
        cmdline = _read("/proc/%s/cmdline" % pid).replace("\0", " ")
        found["processes"][pid] = {
            "cmdline": cmdline[:200],
            "holds the key in cmdline": search.holds(cmdline),
            "environ": _seen(search, [_read("/proc/%s/environ" % pid)]),
            "key through root": _seen(search, [_read("/proc/%s/root%s" % (pid, key_path))]),
            "mem": _seen(search, _memory(pid)),
        }
    return found


if __name__ == "__main__":
    print(json.dumps(probe(KEY_PATH, KEY_SHA256, KEY_LENGTH)))
'''

# A Ray task that a Ray-token holder submits from inside the head's Ray container, placed on the head's node.
RAY_TASK = r'''
import json
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address="auto", logging_level="ERROR", log_to_driver=False)


@ray.remote(num_cpus=0)
def run(source, key_path, key_sha256, key_length):
    scope = {"__name__": "probe"}
    exec(source, scope)
    return scope["probe"](key_path, key_sha256, key_length)


here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
print(json.dumps(ray.get(run.options(scheduling_strategy=here).remote(SOURCE, KEY_PATH, KEY_SHA256, KEY_LENGTH),
                          timeout=120)))
'''


def key_search(lab):
    """What the probe searches by: the controller's key's sha256 and length (letters and digits, as PROBE needs)."""
    key = controller_key(lab)
    assert re.fullmatch("[A-Za-z0-9]+", key), "the probe finds only a key of letters and digits"
    return "KEY_PATH = %r\nKEY_SHA256 = %r\nKEY_LENGTH = %d\n" % (
        KEY_IN_CONTAINER, hashlib.sha256(key.encode()).hexdigest(), len(key))


def run_probe(lab, node, container, user="0:0", prefix=""):
    """What a process of ``container`` on ``node`` (as ``user``, under ``prefix``) reads of every process it sees."""
    command = "docker exec -i -u %s %s %s python3 -" % (user, container, prefix)
    result = lab.host(node).run("printf '%%s' %s | %s" % (_quoted(key_search(lab) + PROBE), command))
    assert result.rc == 0, (node, container, user, result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_ray_task(lab):
    script = "SOURCE = %r\n%s%s" % (PROBE, key_search(lab), RAY_TASK)
    result = lab.host(HEAD).run("printf '%%s' %s | docker exec -i %s python3 -" % (_quoted(script), RAY))
    assert result.rc == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _quoted(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def is_api_server(process):
    """The process that holds the key: vLLM's API server (a headless rank of mp holds none)."""
    return "bin/vllm serve " in process["cmdline"] and "--headless" not in process["cmdline"]


def leaks(found):
    """Where ``found`` (a probe's answer) shows the key, and the server's memory if it could be read at all."""
    where = ["the key file"] if found["key file"] == "read: the key" else []
    for pid, process in found["processes"].items():
        where += ["cmdline of %s (%s)" % (pid, process["cmdline"][:60])] if process["holds the key in cmdline"] else []
        where += ["%s of %s (%s)" % (what, pid, process["cmdline"][:60])
                  for what in ("environ", "key through root", "mem") if process[what] == "read: the key"]
        if is_api_server(process) and not process["mem"].startswith("error: "):
            where.append("the memory of the API server %s" % pid)
    return where


def controller_key(lab):
    with open(os.path.join(lab.state_dir, "secrets", "vllm_api_key")) as handle:
        return handle.read().strip()


@pytest.fixture(scope="module")
def deployed(lab):
    """The 2-node shape (seed 003's, as molecule deploys it) with the lab's backend, skipping the phases no probe needs."""
    serving_lab(lab, 2)
    with open(TWO_NODE_VARS_FILE, encoding="utf-8") as handle:
        two_node = yaml.safe_load(handle)
    playbook_ok(lab, "deploy.yml", "--skip-tags", "os,monitoring",
                *extra_vars(two_node, dgxspark_tensor_parallel_size=2))
    return lab


def test_no_container_of_the_collection_shares_the_hosts_pid_namespace(deployed):
    for node in deployed.nodes:
        host = deployed.host(node)
        modes = dict(line.split(" ", 1) for line in host.check_output(
            "docker inspect --format '{{.Name}} {{.HostConfig.PidMode}}' $(docker ps -q)").splitlines())
        assert "host" not in modes.values(), (node, modes)
        if BACKEND == "ray" and node == HEAD:
            ray_id = host.check_output("docker inspect --format '{{.Id}}' %s" % RAY)
            # The driver and its raylet in one namespace, the Ray container's own.
            assert modes == {"/" + RAY: "", "/" + VLLM: "container:" + ray_id}, modes
        else:
            assert set(modes.values()) == {""}, (node, modes)


def test_the_server_holds_the_key_and_the_file_needs_a_capability(deployed):
    host = deployed.host(HEAD)
    key_file = host.file("/etc/dgxspark/secrets/vllm_api_key")
    assert (key_file.user, key_file.mode) == ("root", 0o000)
    # The server's first act (the guard's main) read the start script's descriptor and closed it, before vLLM forked its
    # engine core: no process of the container holds it (a child forked with it open would keep it for good, where a
    # model's remote code reads fd 3 itself and pidfd_getfd or /proc/PID/fd would find it). Read from the node, which
    # sees the non-dumpable server's descriptors too.
    processes = host.check_output("docker top %s -eo pid,args" % VLLM).splitlines()[1:]
    assert any("EngineCore" in line for line in processes), processes  # the fork happened: the check means something
    for pid in (line.split()[0] for line in processes):
        fds = host.run("ls -l /proc/%s/fd" % pid)
        assert "vllm_api_key" not in fds.stdout, pid
        assert fds.rc == 0 or not host.file("/proc/%s" % pid).exists, (pid, fds.stderr)  # unless it has ended since
    server = host.check_output("docker exec %s pgrep -o -f 'bin/vllm serve '" % VLLM)
    status = host.check_output("docker exec %s grep -E '^Cap(Eff|Prm|Bnd)' /proc/%s/status" % (VLLM, server))
    cap_dac_read_search, cap_setpcap = 1 << 2, 1 << 8
    for line in status.splitlines():
        assert not int(line.split()[1], 16) & (cap_dac_read_search | cap_setpcap), status


@pytest.mark.parametrize("who", ["root", "an unprivileged user"])
def test_no_process_of_another_container_reads_the_key(deployed, who):
    user = "0:0" if who == "root" else NOBODY
    # Every container on the engine's node but its own, then every container of the other node.
    others = [(HEAD, RAY)] if BACKEND == "ray" else []
    others += [(WORKER, node_container())]
    for node, container in others:
        found = run_probe(deployed, node, container, user=user)
        assert not leaks(found), (node, container, who, leaks(found))
        if (node, container) == (HEAD, RAY):
            # It saw the engine's processes (the same PID namespace): it was tried.
            assert any(is_api_server(process) for process in found["processes"].values())


def test_no_process_that_vllm_starts_reads_the_key(deployed):
    """A model's remote code runs in the engine's processes: in its container, without the start script's capabilities."""
    for user in ("0:0", NOBODY):
        found = run_probe(deployed, HEAD, VLLM, user=user, prefix=AS_VLLM_CHILD if user == "0:0" else "")
        assert any(is_api_server(process) for process in found["processes"].values()), "the server was not seen"
        where = leaks(found)
        assert not where, (user, where)
    # With the start script's capabilities (the one process that has them) the probe reads the key file and finds the
    # key in it: its search finds the key where it is.
    assert "the key file" in leaks(run_probe(deployed, HEAD, VLLM)), "the probe did not find the key in its own file"


@pytest.mark.skipif(BACKEND != "ray", reason="a Ray task needs the Ray backend")
def test_a_ray_task_on_the_engines_node_does_not_read_the_key(deployed):
    found = run_ray_task(deployed)
    assert found["processes"], "the Ray task saw no process"
    assert any(is_api_server(process) for process in found["processes"].values())
    where = leaks(found)
    assert not where, where


# Run as root in the head's Ray container: what it reads through /proc of the given PIDs (of its PID namespace).
THROUGH_PROC = r"""
import json, sys


def read(path):
    try:
        with open(path, "rb") as handle:
            return "read %d bytes" % len(handle.read())
    except OSError as exc:
        return "error: %s" % exc.strerror


print(json.dumps(dict((pid, {"root/etc/hostname": read("/proc/%s/root/etc/hostname" % pid),
                             "environ": read("/proc/%s/environ" % pid)}) for pid in sys.argv[1:])))
"""


@pytest.mark.skipif(BACKEND != "ray", reason="only the head's vLLM container under Ray shares a PID namespace")
def test_the_ray_container_opens_no_file_of_the_engines_container_through_proc(deployed):
    """/proc/PID/root of a process of the engine's container is its whole file tree (the TLS key is 0600 root there, and
    root in the Ray container is root): every process of it is non-dumpable, so that path needs CAP_SYS_PTRACE."""
    host = deployed.host(HEAD)
    processes = dict(line.strip().split(None, 1) for line in host.check_output("docker top %s -eo pid,args" % VLLM).splitlines()[1:])
    assert any("EngineCore" in args for args in processes.values()), processes  # vLLM forked or spawned: it was tried
    assert not [args for args in processes.values() if "docker-init" in args], processes
    # Each one's PID in the Ray container's namespace: the last of NSpid, read from the node.
    inner = {}
    for pid in processes:
        status = host.run("grep '^NSpid:' /proc/%s/status" % pid)
        if status.rc == 0:
            inner[status.stdout.split()[-1]] = pid
    script = "printf '%%s' %s | docker exec -i -u 0:0 %s python3 - %s" % (_quoted(THROUGH_PROC), RAY, " ".join(sorted(inner)))
    found = json.loads(host.check_output(script).strip().splitlines()[-1])
    opened = {}
    for pid, reads in found.items():
        for what, result in reads.items():
            if result != "error: Permission denied" and host.file("/proc/%s" % inner[pid]).exists:  # unless it ended since
                opened["%s of %s (%s)" % (what, pid, processes[inner[pid]][:60])] = result
    assert not opened, opened
    # The same reads of a process of the Ray container itself succeed: the probe can read what it is allowed to.
    own = json.loads(host.check_output(script.replace(" ".join(sorted(inner)), "1")).strip().splitlines()[-1])
    assert own["1"]["root/etc/hostname"].startswith("read "), own


# PR_GET_DUMPABLE of a Python that the container's bash starts with no capability that reads past a file's mode, as
# vLLM's processes start (a child multiprocessing spawns, a rank, the guard's children).
DUMPABLE_AT_EXEC = "exec %s -c 'import ctypes; print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))'"


@pytest.mark.parametrize("node", [HEAD, WORKER])
def test_every_python_of_the_engines_container_is_non_dumpable_from_its_exec(deployed, node):
    """No window between a Python's exec and its first prctl (in which root in the Ray container could attach with ptrace
    and stay attached): the start script made the container's interpreter unreadable, and the kernel makes a process
    that executes a file it cannot read non-dumpable."""
    if node == WORKER and BACKEND == "ray":
        pytest.skip("with Ray the worker runs no vLLM container")
    host = deployed.host(node)
    interpreter = host.check_output("docker exec %s sh -c 'readlink -f \"$(command -v python3)\"'" % VLLM)
    mode = int(host.check_output("docker exec %s stat -c %%a %s" % (VLLM, interpreter)), 8)
    assert not mode & 0o444 and mode & 0o111, (interpreter, oct(mode))
    # On the head, docker exec holds the start script's two capabilities: without them, as vLLM's processes run.
    capless = AS_VLLM_CHILD if node == HEAD else ""
    started = host.check_output("docker exec %s %s bash -c %s" % (VLLM, capless, _quoted(DUMPABLE_AT_EXEC % "python3")))
    assert started == "0", started
    # The same Python from a readable copy beside it is dumpable: the check can fail.
    control = interpreter + "-readable-control"
    # Copied by Docker (no process of a rank's container reads the interpreter any more).
    host.check_output("docker cp %s:%s /tmp/dgxspark-python-control && docker cp /tmp/dgxspark-python-control %s:%s && "
                      "rm /tmp/dgxspark-python-control && docker exec %s chmod 0755 %s"
                      % (VLLM, interpreter, VLLM, control, VLLM, control))
    try:
        started = host.check_output("docker exec %s %s bash -c %s" % (VLLM, capless, _quoted(DUMPABLE_AT_EXEC % control)))
    finally:
        host.run("docker exec %s rm -f %s" % (VLLM, control))
    assert started == "1", started


# Run by a shell that the probe's command starts: whether this Python (capless, non-dumpable) reads its parent's
# environ, which it can exactly when that shell is dumpable.
PARENT_READABLE = """import os
try:
    open("/proc/%d/environ" % os.getppid(), "rb").read()
    print("readable")
except OSError as exc:
    print(exc.strerror)"""


def test_the_heads_patches_shell_is_non_dumpable_from_its_exec(deployed):
    """The profile's patches run in a shell on the head before vLLM: started through the guard's --exec (non-dumpable,
    then capless, then exec of an unreadable bash), never dumpable. Through setpriv, as before, it was."""
    host = deployed.host(HEAD)
    shell = "bash -c 'python3 -c \"$PROBE\"; true'"  # `; true`: bash forks the probe, instead of becoming it
    probe = "docker exec -e PROBE=%s %s sh -c %s"
    through_guard = host.check_output(probe % (_quoted(PARENT_READABLE), VLLM, _quoted(
        'python3 "$DGXSPARK_PYTHON_DIR/dgxspark_api_guard.py" --exec ' + shell)))
    assert through_guard == "Permission denied", through_guard
    through_setpriv = host.check_output(probe % (_quoted(PARENT_READABLE), VLLM, _quoted(AS_VLLM_CHILD + " " + shell)))
    assert through_setpriv == "readable", through_setpriv
