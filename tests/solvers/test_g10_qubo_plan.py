"""The ``qubo`` solver plans its time: when sampling every batch (with its penalty calibration)
and a reserve for the refinement do not fit in the budget, every batch is placed greedily and the
time goes to the refinement ("greedy-first"); with enough time the batches are sampled as before.

Timing-free: the module's clock (``time.perf_counter`` as ``solvers.qubo`` sees it) is frozen, so
no deadline passes while solving and only the budget given decides the plan. The frozen reading is
an hour past the real clock, so the polish (cpsat's own clock) never meets the deadline either."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("dimod")
pytest.importorskip("dwave.samplers")

import solvers
import solvers.qubo as qubo
from iro_fed.feasibility import check_placement
from iro_fed.model import ClusterState
from iro_fed.objective import evaluate
from iro_fed.testing import random_problem


@pytest.fixture
def frozen(monkeypatch):
    now = time.perf_counter() + 3600.0
    monkeypatch.setattr(qubo, "time", SimpleNamespace(perf_counter=lambda: now))
    return now


def _problem():
    return random_problem(7, nodes=30, pods=200)  # two batches of 100


def _greedy_score(p) -> float:
    """R of every batch placed greedily in order, nothing after (greedy-first without refinement)."""
    state = ClusterState(p)
    qubo._greedy(p, state, np.arange(p.num_workloads))
    return evaluate(p, state.assignment).score


def test_a_budget_too_small_to_sample_every_batch_places_them_greedily_and_refines(frozen):
    p = _problem()
    # Sampling both batches with their calibration is estimated far above 0.5 s, the least work of
    # one batch (0.47 s) is not: without a plan both were sampled here (in real time the first
    # one's calibration took the budget, the second was placed greedily and nothing refined).
    placement = solvers.make("qubo", seed=0, time_limit_s=0.5, refine_steps=40).solve(p)
    info = placement.info
    assert info["batches_sampled"] == 0 and info["batches_greedy"] == 2
    assert [b["skipped"] for b in info["batches"]] == ["time limit"] * 2
    assert info["plan"] == "greedy-first"
    solver = solvers.make("qubo", refine_steps=40)
    assert info["plan_estimate_s"]["sampling"] == pytest.approx(2 * solver._sampling_estimate(100, False))
    least = 100 * (qubo.BATCH_BUILD_S_PER_POD + qubo.SAMPLE_S_PER_POD_SWEEP * 16 * 300 + qubo.DECODE_S_PER_POD)
    assert info["plan_estimate_s"]["sampling"] > 0.5 > least
    assert info["plan_estimate_s"]["refine_reserve"] == pytest.approx(40 * qubo.REFINE_STEP_S)
    assert info["refine"]["steps"] > 0 and info["refine"]["accepted"] > 0
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []
    greedy = _greedy_score(p)
    assert placement.objective.score >= greedy + info["refine"]["gain"] - 1e-9
    assert placement.objective.score > greedy


def test_a_caller_deadline_sooner_than_the_limit_plans_too(frozen):
    p = _problem()
    solver = solvers.make("qubo", seed=0, refine_steps=20, polish=False)  # time_limit_s: the default 30 s
    info = solver.solve_until(p, deadline=frozen + 0.5).info
    assert info["batches_greedy"] == 2
    assert info["plan"] == "greedy-first" and info["plan_estimate_s"]["left"] == pytest.approx(0.5)


def test_enough_time_samples_every_batch_as_before(frozen):
    p = _problem()
    info = solvers.make("qubo", seed=0, refine_steps=20).solve(p).info  # default 30 s
    assert info["plan"] == "sample"
    assert info["batches_sampled"] == 2 and info["batches_greedy"] == 0
    assert all(b["steps"] for b in info["batches"])


def test_without_refinement_the_batches_are_sampled_while_their_least_work_fits(frozen):
    # Nothing to give the time to: today's path, batch by batch (the frozen clock leaves 0.5 s,
    # more than a batch's least work, before each).
    p = _problem()
    info = solvers.make("qubo", seed=0, time_limit_s=0.5, refine_steps=0, polish=False).solve(p).info
    assert info["plan"] == "sample" and info["batches_sampled"] == 2


@pytest.mark.parametrize(
    ("settings", "steps"),
    [
        ({}, 3),
        ({"penalty": 1.0}, 1),
        ({"penalty_patience": 0}, 12),
        ({"penalty_patience": 9, "max_penalty_steps": 4}, 4),
    ],
)
def test_the_plan_compares_sampling_and_the_refinement_reserve_with_the_time_left(settings, steps):
    solver = solvers.make("qubo", **settings)
    per_step = solver.num_reads * (qubo.SAMPLE_S_PER_POD_SWEEP * solver.num_sweeps + qubo.DECODE_S_PER_POD)
    assert solver._sampling_estimate(100, False) == pytest.approx(100 * (qubo.BATCH_BUILD_S_PER_POD + steps * per_step))
    # Calibrating to a feasible read: every step (but with a fixed penalty, one).
    full = 1 if "penalty" in settings else solver.max_penalty_steps
    assert solver._sampling_estimate(100, True) == pytest.approx(100 * (qubo.BATCH_BUILD_S_PER_POD + full * per_step))
    need = solver._sampling_estimate(100, False) + solver._sampling_estimate(40, False)
    reserve = qubo.REFINE_STEP_S * min(solver.refine_steps, qubo.REFINE_RESERVE_STEPS)
    assert solver._plan([100, 40], need / qubo.PLAN_PESSIMISM + reserve, False)[0] == "sample"
    assert solver._plan([100, 40], need / qubo.PLAN_PESSIMISM + reserve - 1e-6, False)[0] == "greedy-first"
    assert solvers.make("qubo", refine_steps=0, **settings)._plan([100, 40], 1e-6, True)[0] == "sample"
    # The reserve stops growing at REFINE_RESERVE_STEPS steps (the refinement's stall ends it anyway).
    many = solvers.make("qubo", refine_steps=10_000, **settings)
    assert many._plan([100], many._sampling_estimate(100, False) / qubo.PLAN_PESSIMISM + reserve, False)[0] == "sample"


def test_the_default_budget_samples_two_thousand_pods():
    """The default 30 s samples every batch of 2,000 pods (the plan's estimate is the pessimistic
    a-priori one: taken whole it placed them greedily, R -1.61 instead of -1.45 on 400 nodes)."""
    solver = solvers.make("qubo")
    sizes = [solver.batch_size] * (2000 // solver.batch_size)
    assert not solver._calibrates_to_feasible(sizes, solver.time_limit_s)
    assert solver._plan(sizes, solver.time_limit_s, False)[0] == "sample"
    # ... and a budget that cannot hold half the estimate plus the reserve gives the time to the refinement.
    assert solver._plan(sizes, 5.0, False)[0] == "greedy-first"
