"""``iro solve`` prints one line on how cpsat's and qubo's solve went (``Solver.describe``):
what ``placement.info`` holds that the table does not show (CP-SAT's bound and gap, the QUBO's
plan and reads), which before took ``--out`` and reading the JSON."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import solvers
from iro_fed import problem_from_dict
from iro_fed.testing import random_problem_doc

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "examples" / "problems" / "bank-three-zone.json"


def _solve(*argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "iro_fed.cli", "solve", str(BANK), *argv], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cpsat_says_what_it_proved() -> None:
    pytest.importorskip("ortools")
    out = _solve("--solver", "cpsat")
    (line,) = [x for x in out.splitlines() if x.startswith("cpsat: ")]
    # The bank example is proved optimal (-0.1860, as the README says): bound = solution = answer.
    assert re.search(r"CP-SAT optimal; its solution -0\.1860, bound -0\.1860; the answer's gap 0\.00 %", line), line
    assert re.search(r"\d+ variables", line) and "answer from cpsat" in line


def test_cpsat_under_a_tight_clock_names_the_open_gap() -> None:
    pytest.importorskip("ortools")
    p = problem_from_dict(random_problem_doc(7, nodes=12, pods=60))
    solver = solvers.make("cpsat", seed=0, relative_gap=1.0, lns=False, polish=False, hint="none")
    placement = solver.solve(p)
    line = solver.describe(placement)
    info = placement.info
    assert line.startswith("cpsat: CP-SAT feasible; ")
    below = 100.0 * (info["best_bound"] - placement.objective.score) / abs(info["best_bound"])
    assert below > 1.0 and f"{below:.2f} % of |bound|" in line


def test_qubo_says_its_plan_and_reads() -> None:
    pytest.importorskip("dimod")
    out = _solve("--solver", "qubo")
    (line,) = [x for x in out.splitlines() if x.startswith("qubo: ")]
    assert re.search(r"plan sample: 1 batch\(es\) sampled, 0 placed greedily; feasible reads \d+ %", line), line
    assert "best start: " in line and "widening R " in line


def test_a_heuristic_adds_no_line() -> None:
    out = _solve("--solver", "best-fit")
    assert not [x for x in out.splitlines() if x.startswith("best-fit:")]


def test_a_problem_without_pods_is_described_without_error() -> None:
    pytest.importorskip("ortools")
    pytest.importorskip("dimod")
    doc = random_problem_doc(1, nodes=3, pods=2)
    doc["workloads"] = []
    p = problem_from_dict(doc)
    for name in ("cpsat", "qubo"):
        solver = solvers.make(name, seed=0)
        line = solver.describe(solver.solve(p))
        assert line is None or line.startswith(f"{name}: ")
