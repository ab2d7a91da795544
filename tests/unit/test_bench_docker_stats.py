# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""bench/lib/docker_stats.py (bench/backends' CPU and memory of the serving containers), over real `docker stats
--no-stream --format '{{json .}}'` lines of a lab node (Docker 20.10.24, Debian 12)."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SPEC = importlib.util.spec_from_file_location('docker_stats', os.path.join(ROOT, 'bench', 'lib', 'docker_stats.py'))
docker_stats = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(docker_stats)

HEAD = (
    '{"BlockIO":"0B / 0B","CPUPerc":"0.19%","Container":"ac4b1305a8d2","ID":"ac4b1305a8d2","MemPerc":"3.61%",'
    '"MemUsage":"869.1MiB / 23.54GiB","Name":"dgxspark-vllm","NetIO":"0B / 0B","PIDs":"52"}\n'
    '{"BlockIO":"0B / 0B","CPUPerc":"57.99%","Container":"7ec7dd186364","ID":"7ec7dd186364","MemPerc":"5.40%",'
    '"MemUsage":"1.272GiB / 23.54GiB","Name":"dgxspark-ray","NetIO":"0B / 0B","PIDs":"267"}\n')


@pytest.mark.parametrize("text, mib", [
    ("468.4MiB", 468.4), ("1.2GiB", 1228.8), ("512KiB", 0.5), ("0B", 0.0), ("1048576B", 1.0), (" 2TiB ", 2 * 1024 ** 2),
])
def test_memory_sizes_in_mebibytes(text, mib):
    assert docker_stats.mebibytes(text) == pytest.approx(mib)


@pytest.mark.parametrize("text", ["468.4MB", "lots", "", "-1MiB"])
def test_other_sizes_are_refused(text):
    with pytest.raises(ValueError, match="not a memory size of docker stats"):
        docker_stats.mebibytes(text)


def test_a_nodes_lines_by_container():
    usage = docker_stats.node_usage(HEAD)
    assert usage == {"dgxspark-vllm": (0.19, pytest.approx(869.1)), "dgxspark-ray": (57.99, pytest.approx(1.272 * 1024))}


def test_a_node_without_containers_uses_nothing():
    assert docker_stats.node_usage("\n") == {}
