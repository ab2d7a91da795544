"""Run the collection's playbooks against the lab, as a user would (ansible-playbook from the checkout's venv)."""

import json
import os
import re
import signal
import ssl
import subprocess
import time
import urllib.request

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
RAY = "dgxspark-ray"
VLLM = "dgxspark-vllm"
HEAD = "spark-alpha"
BACKENDS = ("ray", "mp")
# The executor backend every serving test deploys (DGXSPARK_LAB_BACKEND): Ray, the users' default and the inventory's,
# or vLLM's own multi-node backend, as users ask for it (`-e dgxspark_executor_backend=mp`). `make test` runs the serving
# modules under Ray; `make test-lab-mp` runs them under mp (lab/README.md).
BACKEND = os.environ.get("DGXSPARK_LAB_BACKEND", "ray")
# The lab inventory's vllm_container_extra_env, for a test whose own (an -e) replaces it.
LAB_ENGINE_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
if BACKEND not in BACKENDS:
    raise ValueError("DGXSPARK_LAB_BACKEND must be one of %s, not %r" % ("/".join(BACKENDS), BACKEND))
# The API's TLS every lab playbook runs with (DGXSPARK_LAB_API_TLS): off, the users' default, or generated (the cluster
# CA the collection makes, issue 49). `make test` runs its first lab with generated, its second lab off; every check
# that calls the API or Prometheus follows it through api_url/api_open (and prometheus_lab). A module that tests one
# mode passes its own -e, which comes later and wins.
API_TLS_MODES = ("off", "generated")
API_TLS = os.environ.get("DGXSPARK_LAB_API_TLS", "off")
if API_TLS not in API_TLS_MODES:
    raise ValueError("DGXSPARK_LAB_API_TLS must be one of %s, not %r" % ("/".join(API_TLS_MODES), API_TLS))
API_PORT = 8000


def inventory(lab):
    """The live inventory labctl wrote for the current node count (inventories/lab is the 4-node one)."""
    live = os.path.join(lab.state_dir, "inventory")
    return live if os.path.isdir(live) else os.path.join(REPO, "inventories", "lab")


def backend_args(backend=None):
    """ansible-playbook's arguments for BACKEND (the lab's when None): none for Ray, the inventory's own."""
    backend = backend or BACKEND
    return [] if backend == "ray" else ["-e", "dgxspark_executor_backend=%s" % backend]


def tls_args():
    """ansible-playbook's arguments for the lab's API TLS: none when off, the inventory's own."""
    return [] if API_TLS == "off" else ["-e", "dgxspark_api_tls=" + API_TLS]


def api_tls_on():
    return API_TLS != "off"


def api_url(lab, path="", node=None, port=API_PORT):
    """The API (on the head, else NODE) as a client on the management network calls it: https with the lab's TLS."""
    return "%s://%s:%d%s" % ("https" if api_tls_on() else "http", lab.mgmt_ip[node or lab.nodes[0]], port, path)


def generated_ca_file(lab):
    """The cluster CA that dgxspark_api_tls=generated makes in the lab's secrets directory."""
    return os.path.join(lab.state_dir, "secrets", "api_tls", "ca.crt")


def api_ca_file(lab):
    """The CA that verifies the API with the lab's TLS (None when TLS is off)."""
    return generated_ca_file(lab) if api_tls_on() else None


def api_open(lab, request, timeout):
    """urlopen of a request to api_url: with TLS, verified with the cluster CA (the certificate names the head's
    address)."""
    context = ssl.create_default_context(cafile=api_ca_file(lab)) if api_tls_on() else None
    return urllib.request.urlopen(request, timeout=timeout, context=context)


def node_container(backend=None):
    """The container every node runs under BACKEND (the lab's when None): Ray's, or the node's vLLM rank."""
    return RAY if (backend or BACKEND) == "ray" else VLLM


# A guard against a run that hangs, not a measure of speed: the deploy's own watchdogs fail a stalled step sooner. A
# first deploy of the 4 nodes took 430 s alone on a 2-core AMD EPYC lab host and over 900 s beside the suite's other
# work, so the budget is generous.
PLAYBOOK_TIMEOUT = 2700


def run_playbook(lab, playbook, *extra, on_line=None, timeout=PLAYBOOK_TIMEOUT, kill_when=None, backend=None, source=None,
                 env=None):
    """Run playbooks/<playbook> on every lab node with BACKEND (the lab's when None); returns (rc, output).
    on_line(line) sees each output line; when kill_when(line) is true, the run is killed at once with its workers
    (SIGKILL: a controller that dies mid-way). source: another inventory than the lab's; env: more environment."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH=os.path.join(REPO, ".venv", "bin") + os.pathsep + os.environ.get("PATH", ""), **(env or {}))
    cmd = ([ANSIBLE_PLAYBOOK, os.path.join(REPO, "playbooks", playbook), "-i", source or inventory(lab)] + backend_args(backend)
           + tls_args() + list(extra))
    # A run that may be killed gets its own process group, so that its forked workers die with it.
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=kill_when is not None)
    lines = []
    deadline = time.time() + timeout
    for line in proc.stdout:
        lines.append(line)
        if on_line is not None:
            on_line(line)
        if kill_when is not None and kill_when(line):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        if time.time() > deadline:
            proc.kill()
            break
    proc.wait()
    return proc.returncode, "".join(lines)


def planned_containers(lab, *extra, backend=None):
    """{node: {'ray': spec or None, 'vllm': spec or None}}: the serving containers the plan makes for the lab (its
    dgxspark_plan.containers), from the plan action run alone on the controller (it contacts no node)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    cmd = [os.path.join(REPO, ".venv", "bin", "ansible"), "localhost", "-i", inventory(lab), "-m", "dgxspark.cluster.cluster_plan",
           "-a", "playbook=deploy-397b.yml"] + backend_args(backend) + tls_args() + list(extra)
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(result.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["plan"]["containers"]


def extra_vars(*maps, **values):
    """ansible-playbook's `-e` with the maps and keywords merged, later ones winning, as one JSON document."""
    merged = {}
    for more in maps + (values,):
        merged.update(more)
    return ["-e", json.dumps(merged)]


def recap(output):
    """{host: {ok, changed, failed, ...}} from the PLAY RECAP lines (the last line of each host wins)."""
    result = {}
    for line in output.splitlines():
        if " : ok=" not in line:
            continue
        host, _, counts = line.partition(" : ")
        result[host.strip()] = dict((k, int(v)) for k, v in (item.split("=") for item in counts.split()))
    return result


def changed_tasks(output):
    """The tasks that reported a change, each once with its hosts ("TASK name: host, host"): why a run was not a no-op."""
    found, task = {}, None
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK ["):].rsplit("]", 1)[0]
        elif line.startswith("changed: [") and task is not None:
            found.setdefault(task, []).append(line[len("changed: ["):].split("]", 1)[0])
    return ["%s: %s" % (name, ", ".join(hosts)) for name, hosts in found.items()]


def serving_lab(lab, count=4):
    """The lab at COUNT nodes with the serving image and the lab model on every node (what a deploy test starts
    from)."""
    if len(lab.nodes) != count:
        lab.resize(count)
    lab.labctl("serving")
    return lab


def containers(lab, names=(RAY, VLLM)):
    """{node: {name: (id, started_at)}} of the serving containers each node has (Ray's, vLLM's)."""
    state = {}
    for node in lab.nodes:
        out = lab.host(node).run("docker inspect --format '{{.Name}} {{.Id}} {{.State.StartedAt}}' %s 2>/dev/null"
                                 % " ".join(names))
        state[node] = dict((name.lstrip("/"), (cid, started)) for name, cid, started in (l.split() for l in out.stdout.splitlines()))
    return state


def playbook_ok(lab, playbook, *extra, timeout=PLAYBOOK_TIMEOUT):
    """Run a playbook that must succeed; returns its output."""
    rc, out = run_playbook(lab, playbook, *extra, timeout=timeout)
    assert rc == 0, out[-6000:]
    return out


def says_healthy(status_output):
    """status.yml's verdict line (the table's message is indented by the callback)."""
    return re.search(r"^\s*healthy$", status_output, re.MULTILINE) is not None


def serving_cluster(lab):
    """The 4-node lab serving the users' default deploy (deploy-397b.yml) with the lab's backend, for a module that
    starts from it: deployed only when status.yml does not say healthy. The modules that serve run last and one after the other (conftest.py)
    and leave the cluster serving, so each pays for the change it makes, not for a start from nothing and a stop."""
    serving_lab(lab)
    rc, out = run_playbook(lab, "status.yml", timeout=300)
    if rc != 0 or not says_healthy(out):
        playbook_ok(lab, "deploy-397b.yml")
    return lab


# The lab inventory's cluster values, which playbooks/init.yml drafts; the rest of it is how the controller reaches the
# lab's nodes and the lab's labelled differences from a Spark, which a user's inventory never has.
DRAFTED = ("dgxspark_model_profile", "dgxspark_gpu_memory_utilization", "dgxspark_rails", "dgxspark_mtu",
           "dgxspark_nccl_transport", "dgxspark_api_allowed_cidrs")


def lab_inventory_env(lab):
    """The environment that points the lab's templates at its state and patches, for an inventory outside the lab's own
    directory (which finds them next to itself)."""
    return {"DGXSPARK_LAB_STATE": os.path.realpath(lab.state_dir),
            "DGXSPARK_LAB_PATCHES": os.path.join(REPO, "lab", "serving", "patches")}


def fleet_inventory(lab, directory, groups, group_values=None, **values):
    """A fleet inventory of the lab (issue 51) in DIRECTORY: GROUPS ({group: [nodes], head first}, in order) as serving
    groups, with the live inventory's variables (group_vars/all) and VALUES over them, and GROUP_VALUES ({group: its
    variables}) in group_vars/<group>.yml; run it with env=lab_inventory_env(lab). Returns DIRECTORY."""
    live = inventory(lab)
    with open(os.path.join(live, "hosts.yml"), encoding="utf-8") as handle:
        children = yaml.safe_load(handle)["all"]["children"]
    hostvars = dict((host, dict(v or {})) for group in children.values() for host, v in (group.get("hosts") or {}).items())
    hosts = {"all": {"children": dict((name, {"hosts": dict((node, hostvars[node]) for node in nodes)})
                                      for name, nodes in groups.items())}}
    os.makedirs(os.path.join(directory, "group_vars"), exist_ok=True)
    with open(os.path.join(directory, "hosts.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(hosts, handle, sort_keys=False)
    with open(os.path.join(live, "group_vars", "all.yml"), encoding="utf-8") as handle:
        lab_vars = yaml.safe_load(handle)
    # The live inventory finds the lab's state next to itself: this one lies elsewhere, so name it.
    lab_vars.update(values, dgxspark_serving_groups=list(groups), dgxspark_lab_state_dir=os.path.realpath(lab.state_dir))
    with open(os.path.join(directory, "group_vars", "all.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(lab_vars, handle, sort_keys=False, width=200)
    for name in groups:
        path = os.path.join(directory, "group_vars", name + ".yml")
        if (group_values or {}).get(name):
            with open(path, "w", encoding="utf-8") as handle:
                yaml.safe_dump(group_values[name], handle, sort_keys=False, width=200)
        elif os.path.exists(path):
            os.remove(path)
    return directory


def fleet_plan(source, env):
    """The plan action's result for a fleet inventory, on the controller alone (it contacts no node): group_plans
    ({group: its plan}) and fleet (its router among it)."""
    run_env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", **env)
    cmd = [os.path.join(REPO, ".venv", "bin", "ansible"), "localhost", "-i", source, "-m", "dgxspark.cluster.cluster_plan"] + tls_args()
    result = subprocess.run(cmd, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(result.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def group_api_key(plan):
    """The fleet's API key, from the controller's file that a serving group's plan names."""
    with open(plan["api"]["api_key_file"], encoding="utf-8") as handle:
        return handle.read().strip()


def group_api_url(lab, plan, path=""):
    """A serving group's API on its head's management address (https with the plan's TLS)."""
    return "%s://%s:%d%s" % ("https" if plan["api"]["tls"]["enabled"] else "http", lab.mgmt_ip[plan["head"]],
                             plan["api"]["port"], path)


def group_tls_context(plan, url):
    """What verifies URL (a group's API, or the router's, which serves the same certificate) with the plan's cluster
    CA; None for plain http."""
    return ssl.create_default_context(cafile=plan["api"]["tls"]["controller"]["ca_file"]) if url.startswith("https:") else None


def init_draft(lab, workdir, *extra):
    """playbooks/init.yml on the lab's nodes as a user runs it: a hosts-only inventory, the client network (the lab's
    management network), and the lab's differences as an -e file. Returns (rc, output, draft dir, the -e arguments and
    the environment that run another playbook with the draft the same way)."""
    live = inventory(lab)
    source = os.path.join(workdir, "source")
    os.makedirs(source, exist_ok=True)
    with open(os.path.join(live, "hosts.yml"), encoding="utf-8") as handle:
        hosts = handle.read()
    with open(os.path.join(source, "hosts.yml"), "w", encoding="utf-8") as handle:
        handle.write(hosts)
    with open(os.path.join(live, "group_vars", "all.yml"), encoding="utf-8") as handle:
        lab_vars = yaml.safe_load(handle)
    differences = os.path.join(workdir, "lab-differences.yml")
    with open(differences, "w", encoding="utf-8") as handle:
        differing = dict((k, v) for k, v in lab_vars.items() if k not in DRAFTED)
        # The live inventory finds the lab's state next to itself: the draft lies elsewhere, so name it.
        differing["dgxspark_lab_state_dir"] = os.path.realpath(lab.state_dir)
        yaml.safe_dump(differing, handle, sort_keys=False, width=200)
    with open(os.path.join(lab.state_dir, "lab.json"), encoding="utf-8") as handle:
        mgmt = json.load(handle)["mgmt_subnet"]
    # The lab's templates find its state and patches through these when the inventory is not the lab's own.
    env = {"DGXSPARK_LAB_STATE": os.path.realpath(lab.state_dir),
           "DGXSPARK_LAB_PATCHES": os.path.join(REPO, "lab", "serving", "patches")}
    draft = os.path.join(workdir, "draft")
    rc, out = run_playbook(lab, "init.yml", "-e", "@" + differences, "-e", "dgxspark_init_dir=" + draft,
                           "-e", "dgxspark_init_client_cidrs=" + mgmt, *extra, source=source, env=env, timeout=600)
    return rc, out, draft, ["-e", "@" + differences], env
