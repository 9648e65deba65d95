"""The solver contract: settings, registry, properties and the composites."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed.feasibility import check_placement
from iro_fed.model import ClusterState
from iro_fed.testing import random_problem
from solvers import InvalidSettingError, OnlineSolver, SolverProperties


def test_registry_lists_the_foundation_solvers():
    names = set(solvers.available())
    expected = {"first-fit", "best-fit", "worst-fit", "dot-product", "random", "greedy-objective", "kube-default"}
    assert expected | {"fallback", "time-budget"} <= names


def test_unknown_solver_names_the_registered_ones():
    with pytest.raises(InvalidSettingError, match="unknown solver 'nope'.*best-fit"):
        solvers.make("nope")


@pytest.mark.parametrize("name", solvers.available())
def test_unknown_setting_is_an_error_naming_it(name):
    with pytest.raises(InvalidSettingError, match="unknown setting.*bogus"):
        solvers.make(name, bogus=1)


@pytest.mark.parametrize("name", solvers.available())
def test_get_params_rebuilds_the_same_solver(name):
    solver = solvers.make(name, seed=5)
    params = solver.get_params()
    assert params["seed"] == 5
    assert solvers.make(name, **params).get_params() == params


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"seed": -1}, "must be >= 0"),
        ({"seed": "x"}, "cannot read 'x' as int"),
        ({"seed": 1.5}, "expected int"),
        ({"order": "sideways"}, "must be one of given, priority, largest-first"),
        ({"percentage_of_nodes_to_score": 101}, "must be <= 100"),
        ({"seed": True}, "expected a number"),
    ],
)
def test_invalid_values_name_the_setting(settings, message):
    with pytest.raises(InvalidSettingError, match=message) as err:
        solvers.make("kube-default", **settings)
    assert repr(next(iter(settings))) in str(err.value)


def test_settings_from_strings_are_converted():
    solver = solvers.make("kube-default", seed="3", percentage_of_nodes_to_score="50")
    assert solver.get_params()["seed"] == 3 and solver.percentage_of_nodes_to_score == 50


def test_composites_validate_their_inner_solvers():
    with pytest.raises(InvalidSettingError, match="'primary'.*unknown solver 'nope'"):
        solvers.make("fallback", primary="nope")
    with pytest.raises(InvalidSettingError, match="'solver_params'|'solver'.*unknown setting"):
        solvers.make("time-budget", solver_params={"bogus": 1})
    with pytest.raises(InvalidSettingError, match="cannot wrap itself"):
        solvers.make("fallback", primary="fallback")


class Exploding(OnlineSolver):
    name = "test-exploding"
    properties = SolverProperties("online", False, "Raises on every decision (test double).")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        raise RuntimeError("boom")


class Overbooking(OnlineSolver):
    """Puts every pod on node 0 whether it fits or not (test double for the invalid-result path)."""

    name = "test-overbooking"
    properties = SolverProperties("batch", False, "Ignores capacity (test double).")

    def _solve(self, problem, deadline):
        from iro_fed.placement import Placement

        return Placement(assignment=np.zeros(problem.num_workloads, dtype=np.int64))

    def score(self, state, w, candidates):  # pragma: no cover - not used
        return np.zeros(candidates.size)


@pytest.fixture
def doubles():
    for cls in (Exploding, Overbooking):
        solvers.register(cls)
    yield
    for cls in (Exploding, Overbooking):
        solvers._REGISTRY.pop(cls.name)


def test_fallback_on_error_records_why(doubles):
    problem = random_problem(1, nodes=6, pods=8)
    placement = solvers.make("fallback", primary="test-exploding", fallback="best-fit").solve(problem)
    assert placement.solver == "fallback"
    assert placement.info["solved_by"] == "best-fit"
    assert "RuntimeError: boom" in placement.info["fallback_reason"]
    assert placement.assignment.tolist() == solvers.make("best-fit").solve(problem).assignment.tolist()


def test_fallback_on_invalid_result(doubles):
    problem = random_problem(2, nodes=3, pods=12, constraints=False)
    placement = solvers.make("fallback", primary="test-overbooking").solve(problem)
    assert placement.info["solved_by"] == "best-fit"
    assert "invalid placement" in placement.info["fallback_reason"]


def test_fallback_on_timeout():
    problem = random_problem(3, nodes=6, pods=8)
    placement = solvers.make("fallback", primary="greedy-objective", time_limit_s=0.0).solve(problem)
    assert placement.info["solved_by"] == "best-fit"
    assert "DeadlineExceeded" in placement.info["fallback_reason"]


def test_fallback_keeps_a_good_primary():
    problem = random_problem(4, nodes=6, pods=8)
    placement = solvers.make("fallback").solve(problem)
    assert placement.info == {"solved_by": "greedy-objective", "fallback_reason": None, "inner": {}}
    assert placement.assignment.tolist() == solvers.make("greedy-objective").solve(problem).assignment.tolist()


def test_time_budget_hands_the_rest_to_then():
    problem = random_problem(5, nodes=6, pods=10)
    spent = solvers.make("time-budget", budget_s=0.0).solve(problem)
    assert spent.info["budget_exhausted"] and spent.info["pods_after_budget"] == 10
    assert spent.assignment.tolist() == solvers.make("first-fit").solve(problem).assignment.tolist()
    dropped = solvers.make("time-budget", budget_s=0.0, then="none").solve(problem)
    assert (dropped.assignment == -1).all()
    assert all("time budget" in r for r in dropped.reasons.values())
    ample = solvers.make("time-budget", budget_s=60.0).solve(problem)
    assert not ample.info["budget_exhausted"]
    assert ample.assignment.tolist() == solvers.make("greedy-objective").solve(problem).assignment.tolist()


def test_rank_returns_top_k_feasible_best_first():
    problem = random_problem(6, nodes=20, pods=3, constraints=False)
    solver = solvers.make("best-fit")
    state = ClusterState(problem)
    ranked = solver.rank(state, 0, k=5)
    assert 0 < len(ranked) <= 5
    scores = [s for _, s in ranked]
    assert scores == sorted(scores, reverse=True)
    assert ranked[0][0] == solver.decide(state, 0).node


@pytest.mark.parametrize("name", solvers.available())
def test_seed_above_int32_is_refused_naming_seed(name):
    # OR-Tools and numpy take signed 32-bit seeds: solvers.base.MAX_SEED = 2**31 - 1.
    with pytest.raises(InvalidSettingError, match="'seed'") as err:
        solvers.make(name, seed=2**31)
    assert "2147483647" in str(err.value)


@pytest.mark.parametrize("name", ["cpsat", "random", "kube-default"])
def test_largest_seed_is_accepted_and_solves(name):
    if name not in solvers.available():
        pytest.skip(f"{name} is not installed")
    problem = random_problem(3)
    settings = {"time_limit_s": 5} if name == "cpsat" else {}
    solver = solvers.make(name, seed=2**31 - 1, **settings)
    assert solver.get_params()["seed"] == 2**31 - 1
    placement = solver.solve(problem)
    assert placement.assignment.shape == (problem.num_workloads,) and placement.num_placed > 0


def test_fallback_keeps_a_valid_placement_that_ends_late():
    """A batch primary returns its best placement at the deadline (cpsat: at least its hint); one
    that ended past the limit was thrown away for the fallback's, which ended later still."""
    problem = random_problem(6, nodes=6, pods=10)
    placement = solvers.make("fallback", primary="cpsat", primary_params={"hint": "greedy-objective"},
                             fallback="first-fit", time_limit_s=0.0).solve(problem)
    assert placement.info["solved_by"] == "cpsat" and placement.info["fallback_reason"] is None
    assert placement.info["late_s"] > 0
    assert not check_placement(problem, placement.assignment, placement.gpu_cards)
    hint = solvers.make("greedy-objective").solve(problem)
    assert placement.objective.score >= hint.objective.score - 1e-9
