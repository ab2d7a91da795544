"""dgxspark.cluster: the plan's `sitecustomize` patches, run in order in every Python process of a serving container.

Python imports one module named sitecustomize (the first on sys.path): this loader, put on PYTHONPATH when the plan has
any sitecustomize patch, so that several of them (a site's, a profile's) can load together. It runs each one named in
DGXSPARK_PATCHES ("kind:path:sha256 ..."), from DGXSPARK_PATCH_DIR; dgxspark-apply-patches.sh checked their sha256 before
Ray or vLLM started. A patch that raises is reported on stderr and the others still run, as Python does for a broken
sitecustomize.
"""
import os
import sys


def _run_site_patches():
    import importlib.util  # pylint: disable=import-outside-toplevel
    directory = os.environ.get("DGXSPARK_PATCH_DIR", "")
    for entry in os.environ.get("DGXSPARK_PATCHES", "").split():
        kind, path = entry.split(":")[:2]
        if kind != "sitecustomize":
            continue
        name = "dgxspark_site_" + os.path.splitext(os.path.basename(path))[0]
        try:
            spec = importlib.util.spec_from_file_location(name, os.path.join(directory, path))
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        except Exception as exc:  # pylint: disable=broad-except
            sys.stderr.write("dgxspark sitecustomize: %s failed: %s: %s\n" % (path, type(exc).__name__, exc))


_run_site_patches()
