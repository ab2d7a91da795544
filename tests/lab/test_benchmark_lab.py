"""The benchmark against the 4-node lab (playbooks/benchmark.yml), tested against a known truth: vLLM LAB STAND-IN's
labelled streaming mode at a set cadence (DGXSPARK_LAB_STANDIN_TOKENS_PER_S through vllm_container_extra_env), so the
measured per-user rate must match it within 5 %. One deploy for the module; a second run with the first's
results.json draws two series.

    python3 lab/labctl.py up --nodes 4 --serving && .venv/bin/python -m pytest -m lab tests/lab/test_benchmark_lab.py
"""
import csv
import json
import os

import pytest

from ansible_lab import four_serving_nodes, run_playbook

pytestmark = pytest.mark.lab

CADENCE = 40.0
CONCURRENCY = [1, 2, 4]


def _bench(lab, results_dir, *extra):
    values = {"benchmark_concurrency": CONCURRENCY, "benchmark_prompt_tokens": 64, "benchmark_output_tokens": 24,
              "benchmark_requests_per_user": 2, "benchmark_results_dir": str(results_dir)}
    return run_playbook(lab, "benchmark.yml", "-e", json.dumps(values), *extra, timeout=300)


@pytest.fixture(scope="module")
def deployed(lab):
    four_serving_nodes(lab)
    cadence = ["-e", json.dumps({"vllm_container_extra_env": {"DGXSPARK_LAB_STANDIN_TOKENS_PER_S": str(CADENCE)}})]
    rc, out = run_playbook(lab, "deploy-397b.yml", *cadence)
    assert rc == 0, out[-6000:]
    # The module leaves the cluster serving, for the next serving module (conftest.SERVING_MODULES).


@pytest.fixture(scope="module")
def first_run(deployed, lab, tmp_path_factory):
    results = tmp_path_factory.mktemp("bench") / "rdma"
    rc, out = _bench(lab, results)
    assert rc == 0, out[-6000:]
    return results, out


def test_per_user_rate_matches_the_cadence(first_run):
    results, out = first_run
    data = json.loads((results / "results.json").read_text())
    assert [r["concurrency"] for r in data["rows"]] == CONCURRENCY
    for row in data["rows"]:
        assert row["errors"] == 0 and row["requests"] == 2 * row["concurrency"]
        assert row["per_user_tok_s_median"] == pytest.approx(CADENCE, rel=0.05), row
        assert row["total_tok_s"] > 0 and row["ttft_ms_median"] > 0 and row["itl_ms_median"] > 0
    print(out[out.index("conc "):out.index("Results:")])


def test_files_table_roofline_share_and_no_key_in_output(first_run, lab):
    results, out = first_run
    with open(results / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["concurrency", "requests", "errors", "ttft_ms_median", "ttft_ms_p99", "itl_ms_median",
                             "per_user_tok_s_median", "per_user_tok_s_min", "total_tok_s", "wall_s"]
    assert (results / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tok/s/user p50" in out and "decode roofline (" in out and "Errors: 0 of 14 requests" in out
    key_file = os.path.join(lab.state_dir, "secrets", "vllm_api_key")
    with open(key_file) as handle:
        key = handle.read().strip()
    assert key and key not in out


def test_comparison_with_a_previous_run_draws_two_series(first_run, lab, tmp_path):
    previous, _ = first_run
    rc, out = _bench(lab, tmp_path / "second", "-e", "benchmark_previous_results=%s" % (previous / "results.json"))
    assert rc == 0, out[-4000:]
    assert (tmp_path / "second" / "results.png").stat().st_size > 10000


def test_a_bad_previous_file_fails_before_measuring(deployed, lab, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    rc, out = _bench(lab, tmp_path / "third", "-e", "benchmark_previous_results=%s" % bad)
    assert rc != 0 and "is not a results.json of this benchmark" in out
    assert not (tmp_path / "third").exists()
