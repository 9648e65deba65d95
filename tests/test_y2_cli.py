"""``iro``'s rough edges found by a README walk-through (each test failed before the fix):
the ``time ms`` column timed one-off library loading, ``iro --version`` exited 2, and a stray
comma in a solver list was silently dropped."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import ClassVar

import pytest

import solvers
from iro_fed.cli import main
from iro_fed.testing import random_problem_doc
from solvers.heuristics import FirstFit


class OneOffLoad(FirstFit):
    """first-fit whose first solve in the process stands for a one-off library import (dqn's
    torch and policy, qubo's dimod): each solve records its pod count and whether it paid it."""

    name = "y2-one-off-load"
    loaded: ClassVar[bool] = False
    solves: ClassVar[list[tuple[int, bool]]] = []

    def _solve(self, problem, deadline):
        OneOffLoad.solves.append((problem.num_workloads, not OneOffLoad.loaded))
        OneOffLoad.loaded = True
        return super()._solve(problem, deadline)


class AlwaysFails(FirstFit):
    name = "y2-always-fails"

    def _solve(self, problem, deadline):
        raise solvers.SolverError("no placement today")


@pytest.fixture
def test_solvers(monkeypatch):
    for cls in (OneOffLoad, AlwaysFails):
        monkeypatch.setitem(solvers._REGISTRY, cls.name, cls)
    monkeypatch.setattr(OneOffLoad, "loaded", False)
    monkeypatch.setattr(OneOffLoad, "solves", [])


def _problem_file(tmp_path: Path, name: str, seed: int, pods: int) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(random_problem_doc(seed, nodes=5, pods=pods)))
    return path


# Before: the first timed solve of each solver paid its imports (dqn 4,879 ms, then 48 ms).
def test_compare_times_each_solver_after_an_untimed_warm_up(tmp_path, test_solvers, capsys):
    first = _problem_file(tmp_path, "a.json", 1, pods=7)
    second = _problem_file(tmp_path, "b.json", 2, pods=9)
    out = tmp_path / "r.json"
    assert main(["compare", str(first), str(second), "--solvers", f"{OneOffLoad.name},first-fit",
                 "--out", str(out)]) == 0
    # one untimed one-pod solve paid the one-off; no timed solve of either problem did
    assert OneOffLoad.solves == [(1, True), (7, False), (9, False)]
    rows = json.loads(out.read_text())["results"]
    assert [(r["problem"], r["solver"], r["placed"] + r["unplaced"]) for r in rows if r["solver"] == OneOffLoad.name] == [
        (str(first), OneOffLoad.name, 7), (str(second), OneOffLoad.name, 9)]


def test_solve_times_the_solve_after_an_untimed_warm_up(tmp_path, test_solvers, capsys):
    problem = _problem_file(tmp_path, "a.json", 3, pods=6)
    out = tmp_path / "placement.json"
    assert main(["solve", str(problem), "--solver", OneOffLoad.name, "--out", str(out)]) == 0
    assert OneOffLoad.solves == [(1, True), (6, False)]
    assert len(json.loads(out.read_text())["assignments"]) == 6


def test_the_warm_up_changes_no_result_and_a_failing_solver_is_still_reported(tmp_path, test_solvers, capsys):
    from iro_fed.problem_io import load_problem

    path = _problem_file(tmp_path, "a.json", 4, pods=8)
    out = tmp_path / "r.json"
    # random draws from its seeded generator: the warm-up's own solver must not shift its draws
    assert main(["compare", str(path), "--solvers", f"random,kube-default,{AlwaysFails.name}", "--seed", "5",
                 "--out", str(out)]) == 0
    rows = {r["solver"]: r for r in json.loads(out.read_text())["results"]}
    problem = load_problem(path)
    for name in ("random", "kube-default"):
        alone = solvers.make(name, seed=5).solve(problem).to_dict(problem)["objective"]
        assert {k: rows[name][k] for k in alone} == alone
    assert rows[AlwaysFails.name]["status"] == "error" and rows[AlwaysFails.name]["error"] == "no placement today"


# Before: "the following arguments are required: COMMAND", exit 2.
def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code in (0, None)
    assert capsys.readouterr().out == f"iro {version('iro-fed')}\n"
    iro = shutil.which("iro") or str(Path(sys.executable).parent / "iro")
    run = subprocess.run([iro, "--version"], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout, run.stderr) == (0, f"iro {version('iro-fed')}\n", "")


# Before: the empty names were dropped and the run went on with the others (exit 0).
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("best-fit,", "--solvers: empty solver name at position 2 of 2 in 'best-fit,'"),
        ("best-fit,,first-fit", "--solvers: empty solver name at position 2 of 3 in 'best-fit,,first-fit'"),
        (",best-fit", "--solvers: empty solver name at position 1 of 2 in ',best-fit'"),
        ("best-fit, ,first-fit", "--solvers: empty solver name at position 2 of 3"),
    ],
)
def test_compare_refuses_an_empty_solver_name(tmp_path, capsys, value, message):
    path = _problem_file(tmp_path, "a.json", 5, pods=4)
    out = tmp_path / "r.json"
    assert main(["compare", str(path), "--solvers", value, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("value", ["fgd,", "fgd,,best-fit"])
def test_replay_refuses_an_empty_policy_name(tmp_path, capsys, value):
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"  # never read: the list is checked first
    assert main(["replay", "--nodes", str(nodes), "--pods", str(pods), "--policy", value]) == 2
    assert "--policy: empty solver name at position 2" in capsys.readouterr().err
