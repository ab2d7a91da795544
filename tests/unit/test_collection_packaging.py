# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection resolves from the checkout, documents every plugin, and builds a working tarball."""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys
import tarfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent

CORE_PLUGINS = {
    ("module", "cx7_facts"),
    ("module", "nccl_env"),
    ("module", "cluster_plan"),
    ("module", "fabric_report"),
    ("filter", "vllm_args"),
}


def discovered_plugins():
    found = {("module", p.stem) for p in (REPO / "plugins/modules").glob("*.py") if p.stem != "__init__"}
    found |= {("filter", p.stem) for p in (REPO / "plugins/filter").glob("*.yml")}
    return sorted(found)


PLUGINS = discovered_plugins()


def run(args, cwd=REPO, env=None, check=True):
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run([str(a) for a in args], cwd=cwd, env=full_env, capture_output=True, text=True, check=check)


def test_the_core_plugins_exist():
    assert CORE_PLUGINS <= set(PLUGINS)


def test_every_filter_has_its_own_documentation_file():
    """ansible-doc finds a filter's documentation by the filter's name, so each needs a sidecar."""
    exported = set()
    for path in (REPO / "plugins/filter").glob("*.py"):
        namespace = {}
        exec(compile(path.read_text(), str(path), "exec"), namespace)  # pylint: disable=exec-used
        exported |= set(namespace["FilterModule"]().filters())
    assert exported == {name for kind, name in PLUGINS if kind == "filter"}


@pytest.mark.parametrize("plugin_type,name", PLUGINS)
def test_ansible_doc_renders_with_examples_and_return(plugin_type, name):
    result = run([BIN / "ansible-doc", "--json", "-t", plugin_type, "dgxspark.cluster." + name])
    doc = json.loads(result.stdout)["dgxspark.cluster." + name]
    assert doc["doc"]["short_description"]
    assert doc["doc"]["description"]
    assert doc["examples"].strip()
    assert doc["return"]


# Where the playbooks write on the controller (benchmark.yml: results/; bundles: diagnostics/), gitignored.
CONTROLLER_OUTPUT = ("results", "diagnostics")


@pytest.fixture(scope="module")
def built_collection(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    # A checkout that has been used: an earlier run's files in each output directory, removed again afterwards.
    planted = []
    for directory in CONTROLLER_OUTPUT:
        marker = REPO / directory / "dgxspark-packaging-test" / "results.json"
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("{}")
            planted.append(marker)
    try:
        run([BIN / "ansible-galaxy", "collection", "build", "--output-path", out, REPO])
    finally:
        for marker in planted:
            marker.unlink()
            for directory in (marker.parent, marker.parent.parent):
                if not any(directory.iterdir()):
                    directory.rmdir()
    tarballs = list(out.glob("dgxspark-cluster-*.tar.gz"))
    assert len(tarballs) == 1
    return tarballs[0]


def test_tarball_holds_plugins_and_profiles_but_not_test_beds(built_collection):
    with tarfile.open(built_collection) as tar:
        names = set(tar.getnames())
    assert "plugins/modules/cx7_facts.py" in names
    assert "plugins/plugin_utils/cluster_plan.py" in names
    assert "profiles/models/qwen3_5_397b_a17b_fp8.yml" in names
    assert "playbooks/plan.yml" in names
    for prefix in ("tests/", "lab/", "bench/", "molecule/", "tools/", ".venv/", ".build/") + tuple(d + "/" for d in CONTROLLER_OUTPUT):
        assert not any(n.startswith(prefix) for n in names), prefix
    # The checkout's ansible.cfg points at the checkout's own link; it means nothing once installed.
    assert "ansible.cfg" not in names


def test_installed_tarball_works_outside_the_checkout(built_collection, tmp_path):
    install_root = tmp_path / "installed"
    # Away from the checkout's ansible.cfg, which already resolves dgxspark.cluster to the checkout.
    env = {"ANSIBLE_CONFIG": None, "ANSIBLE_COLLECTIONS_PATH": str(install_root)}
    run([BIN / "ansible-galaxy", "collection", "install", "--offline", "--no-deps", "-p", install_root, built_collection], cwd=tmp_path, env=env)
    assert (install_root / "ansible_collections/dgxspark/cluster/MANIFEST.json").is_file()
    doc = run([BIN / "ansible-doc", "-t", "filter", "dgxspark.cluster.vllm_args"], cwd=tmp_path, env=env)
    assert "vllm_args" in doc.stdout
    plan = run([BIN / "ansible-playbook", "dgxspark.cluster.plan", "-i", REPO / "inventories/4node",
                "-e", "dgxspark_plan_playbook=deploy-397b.yml"], cwd=tmp_path, env=env, check=False)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "spark-delta" in plan.stdout and "192.168.100.13" in plan.stdout
    # Every playbook by its collection name (a hyphen is no valid name: deploy-397b.yml only imports deploy_397b.yml).
    names = sorted(os.path.splitext(f)[0] for f in os.listdir(REPO / "playbooks") if f.endswith(".yml") and "-" not in f)
    assert {"deploy_397b", "deploy_397b_int4", "deploy_397b_int4_3node", "deploy_vl235b_2node", "init", "plan"} <= set(names)
    assert sorted(f for f in os.listdir(REPO / "playbooks") if "-" in f) == ["deploy-397b.yml"]
    syntax = run([BIN / "ansible-playbook", "--syntax-check", "-i", REPO / "inventories/4node"] + ["dgxspark.cluster." + n for n in names],
                 cwd=tmp_path, env=env, check=False)
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    for name in names:
        assert "ansible_collections/dgxspark/cluster/playbooks/%s.yml" % name in syntax.stdout, (name, syntax.stdout)


UTILS = "ansible_collections.dgxspark.cluster.plugins."


def imported_utils(path):
    """The collection's (kind, name) pairs that a Python file imports, kind module_utils or plugin_utils."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(UTILS):
            parts = node.module[len(UTILS):].split(".")
            names = parts[1:2] or [alias.name for alias in node.names]
            found |= {(parts[0], name) for name in names}
    return found


def test_module_utils_holds_what_modules_send_to_nodes_and_no_controller_code():
    """module_utils is what a module ships to a node (with what it imports in turn); controller-only logic lives in
    plugin_utils, which nothing sent to a node imports."""
    shipped, pending = set(), list((REPO / "plugins/modules").glob("*.py"))
    while pending:
        for kind, name in imported_utils(pending.pop()):
            assert kind == "module_utils", "%s is imported by code sent to nodes: it belongs in module_utils" % name
            if name not in shipped:
                shipped.add(name)
                pending.append(REPO / "plugins/module_utils" / (name + ".py"))
    present = {p.stem for p in (REPO / "plugins/module_utils").glob("*.py") if p.stem != "__init__"}
    assert present - shipped == set(), "no module imports these: move them to plugins/plugin_utils"
    assert len(shipped) >= 15 and {"cx7", "nccl_env", "phase_state"} <= shipped
    assert {p.stem for p in (REPO / "plugins/plugin_utils").glob("*.py")} >= {"cluster_plan", "serving_command"}
