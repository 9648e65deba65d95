"""The example problems load, every available solver solves them validly, and the quickstart runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import iro_fed
import solvers
from iro_fed.feasibility import check_placement
from iro_fed.problem_io import load_document

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PROBLEMS = {
    "bank-three-zone": EXAMPLES / "problems" / "bank-three-zone.json",
    "edge-cloud-gpu": EXAMPLES / "problems" / "edge-cloud-gpu.yaml",
}
IMPOSSIBLE = "risk/stress-test-full-book"  # asks for more memory than any bank node has


@pytest.fixture(scope="module")
def problems() -> dict[str, iro_fed.Problem]:
    return {name: iro_fed.load_problem(path) for name, path in PROBLEMS.items()}


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_example_loads(name: str, problems: dict[str, iro_fed.Problem]) -> None:
    problem = problems[name]
    assert problem.num_nodes >= 12
    assert problem.num_workloads >= 25
    assert len(problem.regions) >= 2
    kinds = {d.kind for d in problem.domains}
    assert "cloud" in kinds and "zone" in kinds
    if name == "edge-cloud-gpu":
        assert "edge" in kinds
        assert problem.has_gpus
    # The file names itself and says where its numbers come from.
    doc = load_document(PROBLEMS[name])
    assert doc["name"] == name
    assert "shared/data" in doc["description"]


@pytest.mark.parametrize("solver_name", solvers.available())
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_every_solver_places_validly(name: str, solver_name: str, problems: dict[str, iro_fed.Problem]) -> None:
    problem = problems[name]
    placement = solvers.make(solver_name).solve(problem)
    assert placement.status in ("optimal", "feasible")
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []
    assert placement.objective is not None
    # Every unplaced workload has a reason and every reason belongs to an unplaced workload.
    unplaced = {int(w) for w in (placement.assignment < 0).nonzero()[0]}
    assert set(placement.reasons) == unplaced
    if name == "bank-three-zone":
        assert placement.num_placed > 0


@pytest.mark.parametrize("solver_name", solvers.available())
def test_bank_impossible_pod_is_unplaced_with_reason(solver_name: str, problems: dict[str, iro_fed.Problem]) -> None:
    problem = problems["bank-three-zone"]
    w = next(i for i, wl in enumerate(problem.workloads) if wl.name == IMPOSSIBLE)
    placement = solvers.make(solver_name).solve(problem)
    assert placement.assignment[w] == -1
    reason = placement.reasons[w]
    assert reason.startswith("0/"), reason
    assert "Insufficient memory" in reason


def test_solvers_differ_on_examples(problems: dict[str, iro_fed.Problem]) -> None:
    """The examples are meant for comparing solvers: the scores must not all coincide."""
    for problem in problems.values():
        scores = {round(solvers.make(n).solve(problem).objective.score, 6) for n in solvers.available()}
        assert len(scores) >= 3


def test_quickstart_runs(tmp_path: Path) -> None:
    # Run from an unrelated directory: the script finds its problem relative to itself.
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "score R" in result.stdout
    assert IMPOSSIBLE in result.stdout
