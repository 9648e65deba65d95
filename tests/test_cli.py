"""The `iro` command: outputs, the placement file and exit status 2 on bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from iro_fed.cli import main
from iro_fed.testing import random_problem_doc


@pytest.fixture
def problem_file(tmp_path):
    path = tmp_path / "problem.json"
    doc = random_problem_doc(7, nodes=6, pods=8)
    doc["workloads"].append({"name": "too-big", "requests": {"cpu": 10**7, "memory": 1}})
    path.write_text(json.dumps(doc))
    return path


def test_solvers_json(capsys):
    assert main(["solvers", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in rows}
    assert by_name["kube-default"]["installed"] is True
    assert by_name["kube-default"]["properties"]["mode"] == "online"
    assert "percentage_of_nodes_to_score" in by_name["kube-default"]["parameters"]


def test_solve_writes_the_placement_file(problem_file, tmp_path, capsys):
    out = tmp_path / "sub" / "placement.json"
    assert main(["solve", str(problem_file), "--solver", "best-fit", "--set", "seed=4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "best-fit" in printed and "too-big" in printed
    doc = json.loads(out.read_text())
    assert set(doc) >= {"solver", "params", "status", "assignments", "gpu_assignments", "unplaced", "objective", "timing"}
    assert doc["solver"] == "best-fit" and doc["params"]["seed"] == 4 and doc["status"] == "feasible"
    assert doc["assignments"]["too-big"] is None
    assert doc["unplaced"]["too-big"].startswith("0/6 nodes are available: ")
    assert set(doc["objective"]["terms"]) == {"utilization", "latency", "cost", "carbon", "unplaced"}
    for key in ("score", "utilization_pct", "mean_latency_ms", "cost_per_hour", "carbon_g_per_hour", "unplaced"):
        assert key in doc["objective"]
    assert doc["timing"]["solve_s"] >= 0


def test_solve_to_stdout(problem_file, capsys):
    assert main(["solve", str(problem_file), "--solver", "kube-default", "--out", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["solver"] == "kube-default"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--solver", "nope"], "unknown solver 'nope'"),
        (["--solver", "best-fit", "--set", "bogus=1"], "--set bogus: unknown setting"),
        (["--solver", "best-fit", "--set", "seed"], "expected KEY=VALUE"),
        (["--solver", "best-fit", "--set", "seed=abc"], "cannot read 'abc' as int"),
        (["--solver", "kube-default", "--set", "order=up"], "must be one of"),
    ],
)
def test_bad_settings_exit_2(problem_file, capsys, argv, message):
    assert main(["solve", str(problem_file), *argv]) == 2
    assert message in capsys.readouterr().err


def test_invalid_problem_exits_2_and_names_the_field(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    doc = random_problem_doc(1)
    doc["nodes"][2]["capacity"]["cpu"] = "lots"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "never.json"
    assert main(["solve", str(bad), "--solver", "best-fit", "--out", str(out)]) == 2
    assert "nodes[2].capacity.cpu" in capsys.readouterr().err
    assert not out.exists()
    assert main(["validate", str(bad)]) == 2


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["solve", str(tmp_path / "nope.json"), "--solver", "best-fit"]) == 2
    assert "cannot read file" in capsys.readouterr().err


def test_compare_prints_every_solver_and_writes_json(problem_file, tmp_path, capsys):
    out = tmp_path / "cmp.json"
    assert main(["compare", str(problem_file), "--solvers", "best-fit,kube-default,greedy-objective", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("best-fit", "kube-default", "greedy-objective"):
        assert name in printed
    results = json.loads(out.read_text())["results"]
    assert {r["solver"] for r in results} == {"best-fit", "kube-default", "greedy-objective"}
    assert main(["compare", str(problem_file), "--solvers", "best-fit,nope"]) == 2


def test_console_script_exit_codes(problem_file):
    iro = shutil.which("iro") or str(__import__("pathlib").Path(sys.executable).parent / "iro")
    ok = subprocess.run([iro, "solve", str(problem_file), "--solver", "first-fit"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([iro, "solve", str(problem_file)], capture_output=True, text=True)
    assert bad.returncode == 2 and "--solver" in bad.stderr
    help_run = subprocess.run([iro, "solve", "--help"], capture_output=True, text=True)
    assert help_run.returncode == 0 and "KEY=VALUE" in help_run.stdout
