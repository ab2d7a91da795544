"""The monitoring role's node metrics script (roles/monitoring/files/dgxspark_node_metrics.py: it runs on the nodes, not
as a plugin), loaded once as a module for the tests that read it."""
import importlib.util
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
_SPEC = importlib.util.spec_from_file_location(
    "dgxspark_node_metrics", os.path.join(ROOT, "roles", "monitoring", "files", "dgxspark_node_metrics.py"))
metrics = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(metrics)
