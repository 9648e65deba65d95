"""The library API as a user meets it: hostile but plausible arguments get errors naming them.

Each test failed before its fix: a negative pod index decided for the last pod, a negative ``k``
ranked every node but the last, a caller's settings dict edited after ``make`` changed the
recorded settings but not the solver, a placement written against another problem crashed or
wrote the wrong names, and the bank example ran minutes before a traceback on a bad ``--solver``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import iro_fed
import solvers
from iro_fed import ClusterState

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BANK = EXAMPLES / "problems" / "bank-three-zone.json"
GPU = EXAMPLES / "problems" / "edge-cloud-gpu.yaml"


@pytest.fixture(scope="module")
def bank() -> iro_fed.Problem:
    return iro_fed.load_problem(BANK)


@pytest.mark.parametrize("name", ["kube-default", "best-fit", "greedy-objective", "dqn"])
def test_decide_refuses_a_pod_index_out_of_range(bank: iro_fed.Problem, name: str) -> None:
    solver = solvers.make(name)
    state = ClusterState(bank)
    # -1 is "not placed" in an assignment; as a pod index it decided for the last pod.
    with pytest.raises(IndexError, match=r"^w: workload index -1 is out of range \(the problem has 34"):
        solver.decide(state, -1)
    with pytest.raises(IndexError, match="^w: workload index 34 is out of range"):
        solver.decide(state, 34)
    with pytest.raises(TypeError, match="^w: expected a workload index, got bool"):
        solver.decide(state, True)
    with pytest.raises(TypeError, match="^w: expected a workload index, got float"):
        solver.decide(state, 1.0)
    with pytest.raises(IndexError, match="^w: "):
        solver.rank(state, -1)
    # numpy ints are indices like Python ints.
    assert solver.decide(state, np.int64(3)) == solver.decide(state, 3)
    assert solver.rank(state, np.int32(3), k=np.int64(2)) == solver.rank(state, 3, k=2)


@pytest.mark.parametrize("name", ["kube-default", "best-fit", "fgd", "dqn"])
def test_rank_refuses_a_negative_or_fractional_k(bank: iro_fed.Problem, name: str) -> None:
    solver = solvers.make(name)
    state = ClusterState(bank)
    every = solver.rank(state, 0, k=1000)
    assert len(every) > 2
    # k=-1 read as "all" returned all but the last node, silently.
    with pytest.raises(ValueError, match="^k: must be >= 0, got -1"):
        solver.rank(state, 0, k=-1)
    with pytest.raises(TypeError, match="^k: expected a non-negative integer, got float"):
        solver.rank(state, 0, k=2.5)
    assert solver.rank(state, 0, k=0) == []
    assert solver.rank(state, 0, k=2) == every[:2]


def test_a_settings_dict_edited_after_make_changes_neither_solver_nor_record(bank: iro_fed.Problem) -> None:
    inner = {"order": "given"}
    solver = solvers.make("fallback", primary="best-fit", primary_params=inner)
    inner["order"] = "largest-first"  # the caller reuses its dict
    # The inner solver was built with "given"; the recorded settings must say so.
    assert solver.get_params()["primary_params"] == {"order": "given"}
    placement = solver.solve(bank)
    assert placement.params["primary_params"] == {"order": "given"}
    same = solvers.make("fallback", primary="best-fit", primary_params={"order": "given"}).solve(bank)
    assert np.array_equal(placement.assignment, same.assignment)
    # Editing a placement's record (or get_params' result) leaves the solver as it was.
    placement.params["primary_params"]["order"] = "priority"
    solver.get_params()["primary_params"]["order"] = "priority"
    assert solver.get_params()["primary_params"] == {"order": "given"}
    assert solver.solve(bank).params["primary_params"] == {"order": "given"}


def test_composite_settings_with_a_non_string_name_are_refused_naming_them() -> None:
    with pytest.raises(solvers.InvalidSettingError, match="^solver 'fallback' setting 'primary_params': setting names must be strings, got 1"):
        solvers.make("fallback", primary_params={1: 2})
    with pytest.raises(solvers.InvalidSettingError, match="^solver 'time-budget' setting 'solver_params': "):
        solvers.make("time-budget", solver_params={("seed",): 1})


def test_make_refuses_a_solver_name_that_is_not_a_string() -> None:
    with pytest.raises(solvers.InvalidSettingError, match=r"^solver name: expected a string, got list \['best-fit'\]"):
        solvers.make(["best-fit"])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["best-fit", "cpsat", "fallback"])
def test_solve_refuses_a_path_naming_the_argument(name: str) -> None:
    solver = solvers.make(name)
    with pytest.raises(TypeError, match=r"^problem: expected an iro_fed.Problem \(iro_fed.load_problem\(path\)"):
        solver.solve(str(BANK))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got dict"):
        solver.solve({})  # type: ignore[arg-type]


def test_a_placement_written_against_another_problem_is_refused(bank: iro_fed.Problem, tmp_path: Path) -> None:
    gpu = iro_fed.load_problem(GPU)
    placement = solvers.make("best-fit").solve(gpu)  # 39 pods on 22 nodes
    # The bank's first 34 pods: the same length as the bank, node indices past its 16 nodes.
    out = tmp_path / "placement.json"
    with pytest.raises(ValueError, match=r"^assignment has shape \(39,\), expected \(34,\)"):
        iro_fed.write_placement(placement, bank, out)
    assert not out.exists()
    # Same shape, indices that fit the workloads but not always the nodes; or a bad index.
    other = gpu.with_workloads(range(bank.num_workloads))
    short = solvers.make("best-fit").solve(other)
    assert short.assignment.max() >= bank.num_nodes
    with pytest.raises(ValueError, match=r"node index \d+ is not -1 \(unplaced\) or 0..15"):
        short.to_dict(bank)
    bad = solvers.make("best-fit").solve(bank)
    bad.assignment[0] = -5  # was written as unplaced
    with pytest.raises(ValueError, match=r"^assignment\[0\] \(payments/payment-api-0\): node index -5 is not -1"):
        iro_fed.write_placement(bad, bank, out)
    assert not out.exists()
    # A placement of the problem itself writes and reads back unchanged.
    good = solvers.make("best-fit").solve(bank)
    iro_fed.write_placement(good, bank, out)
    back = iro_fed.placement_from_dict(bank, json.loads(out.read_text()))
    assert np.array_equal(back.assignment, good.assignment)
    assert back.objective.score == good.objective.score


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--solver", "nope"], "--solver: unknown solver 'nope'"),
        (["--seed", "-1"], "--seed must be 0..2147483647, got -1"),
        (["--seed", "99999999999"], "--seed must be 0..2147483647, got 99999999999"),
        (["--days", "100000000"], "--days must be 1..366, got 100000000"),
    ],
)
def test_bank_case_study_refuses_bad_arguments_before_it_runs(args: list[str], message: str) -> None:
    # Before: A (kube-default) ran first, then a traceback and exit status 1.
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "bank_case_study.py"), "--short", *args],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_a_problem_document_built_from_numpy_values_reads_as_the_plain_one() -> None:
    import json

    from iro_fed.problem_io import problem_from_dict, problem_to_dict

    plain = json.loads(BANK.read_text())
    doc = json.loads(BANK.read_text())
    doc["nodes"][0]["capacity"]["cpu"] = np.int64(doc["nodes"][0]["capacity"]["cpu"])
    doc["workloads"][0]["requests"]["memory"] = np.float32(doc["workloads"][0]["requests"]["memory"])
    # np.int64 was refused: "nodes[0].capacity.cpu: expected a finite number, got int64 ...".
    assert problem_to_dict(problem_from_dict(doc)) == problem_to_dict(problem_from_dict(plain))


def test_a_placement_on_cards_the_node_does_not_have_is_refused_by_name() -> None:
    from iro_fed.model import ClusterState as State
    from iro_fed.problem_io import problem_from_dict

    doc = {
        "domains": [{"name": "z", "kind": "zone"}],
        "nodes": [{"name": "g", "domain": "z", "capacity": {"cpu": 8000, "memory": 8192}, "gpus": 2}],
        "workloads": [{"name": "ns/p", "requests": {"cpu": 100, "memory": 100}, "gpu": {"count": 1}}],
    }
    problem = problem_from_dict(doc)
    assert State.with_assignment(problem, np.array([0]), {0: [1]}).gpu_free[0].tolist() == [1000, 0]
    for cards in ([-1], [2], [0, 0]):
        # [-1] silently took card 1 (a Python index); [2] was a bare IndexError.
        with pytest.raises(ValueError, match=r"'ns/p': cards .* are not distinct card indices of node 'g' \(0..1\)"):
            State.with_assignment(problem, np.array([0]), {0: cards})
