"""Smoke test of benchmarks/decision_throughput.py: a tiny --quick run writes well-formed JSON.

Checks structure and positivity only, never timing values (they depend on the machine).
"""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    module = load_benchmark("decision_throughput", "decision_throughput")
    if not (module.DEFAULT_DATA / module.OPENB / module.NODE_CSV).is_file():
        pytest.skip(f"openb trace not found under {module.DEFAULT_DATA}")
    return module


def test_quick_run_writes_expected_json(bench, tmp_path, capsys):
    out = tmp_path / "bench.json"
    solver_names = ["kube-default", "best-fit", "greedy-objective"]
    rc = bench.main(
        ["--quick", "--nodes", "150,200", "--pods", "50", "--warmup", "3", "--solvers", ",".join(solver_names),
         "--seed", "1", "--out", str(out)]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "machine:" in printed and "numpy" in printed and "decisions/s" in printed

    doc = json.loads(out.read_text())
    for key in ("benchmark", "machine", "settings", "targets", "builds", "results", "growth", "summary"):
        assert key in doc
    for key in ("cpu_model", "logical_cores", "python", "numpy"):
        assert key in doc["machine"]
    assert doc["settings"]["nodes"] == [150, 200]
    assert doc["settings"]["pods"] == 50
    assert set(doc["targets"]) == {"5000", "20000"}

    results = doc["results"]
    assert {(r["solver"], r["nodes"]) for r in results} == {(s, n) for s in solver_names for n in (150, 200)}
    for r in results:
        for key in ("decisions_per_s", "mean_ms", "p50_ms", "p99_ms", "max_ms", "placed", "failed", "verdict"):
            assert key in r
        assert r["decisions"] == 50
        assert r["placed"] + r["failed"] == 50
        assert r["placed"] > 0
        assert r["decisions_per_s"] > 0
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
        assert r["verdict"] == "n/a"  # targets are judged at 5,000 and 20,000 nodes only

    # Growth between the two sizes run, one ratio per solver.
    assert set(doc["growth"]) == set(solver_names)
    for g in doc["growth"].values():
        assert (g["from_nodes"], g["to_nodes"]) == (150, 200)
        assert g["ratio"] > 0


def test_profile_flag_reports_top_functions(bench, tmp_path):
    out = tmp_path / "bench.json"
    rc = bench.main(["--quick", "--pods", "20", "--solvers", "best-fit", "--profile", "--out", str(out)])
    assert rc == 0
    profile = json.loads(out.read_text())["profile"]
    assert profile["solver"] == "best-fit"
    assert 0 < len(profile["top"]) <= 15
    assert any("decide" in row["function"] for row in profile["top"])


def test_unknown_solver_is_an_error(bench, tmp_path):
    assert bench.main(["--quick", "--solvers", "no-such-solver", "--out", str(tmp_path / "x.json")]) == 2
    assert not (tmp_path / "x.json").exists()


def test_pod_gpu_shapes(bench):
    assert bench.pod_gpu(0, 0, "") is None
    assert bench.pod_gpu(1, 460, "") == {"count": 1, "milli": 460}
    assert bench.pod_gpu(1, 1500, "") == {"count": 1, "milli": 1000}
    assert bench.pod_gpu(4, 1000, "V100M16|V100M32") == {"count": 4, "milli": 1000, "models": ["V100M16", "V100M32"]}
