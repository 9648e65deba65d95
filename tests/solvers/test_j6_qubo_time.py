"""The ``qubo`` solver keeps to ``time_limit_s`` in every sampling call, says when the wall clock
cut a phase (``info["wall_clock_cut"]``), bounds ``tabu_restarts``, and calibrates a usable penalty
when every weight is 0.

Timing-free: the module's clock (``time.perf_counter`` as ``solvers.qubo`` sees it) is replaced by
a fake one that moves only when a test moves it, and the sampler by a spy that counts its calls
(and fails, rather than run a sampling call the time limit has no room for)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

pytest.importorskip("dimod")
pytest.importorskip("dwave.samplers")

import iro_fed
import solvers
import solvers.qubo as qubo
from iro_fed.cli import main
from iro_fed.feasibility import check_placement
from iro_fed.testing import random_problem, random_problem_doc
from solvers import InvalidSettingError


class Clock:
    """A fake ``time.perf_counter``, an hour past the real clock (cpsat's polish keeps the real
    one, so it never meets a deadline set on this one)."""

    def __init__(self) -> None:
        self.now = time.perf_counter() + 3600.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(qubo, "time", SimpleNamespace(perf_counter=c))
    return c


@pytest.fixture
def no_sampling(monkeypatch):
    """The sampler must not be called: a call fails the test (instead of running for minutes)."""
    calls = []

    def refuse(self, vectors, seed, reads):
        calls.append(reads)
        raise AssertionError("a sampling call the time limit has no room for")

    monkeypatch.setattr(qubo.Qubo, "_sample", refuse)
    return calls


def _problem():
    return random_problem(11, nodes=5, pods=20)


def test_a_refinement_step_whose_estimate_exceeds_the_time_left_is_planned_out(clock, no_sampling):
    # Was: the step's clock check passed and one sub-QUBO of 8 reads x 10,000,000 sweeps ran
    # (num_sweeps=300,000 on the 20 x 5 benchmark at time_limit_s=1: solve_s 6.5).
    p = _problem()
    placement = solvers.make("qubo", seed=0, time_limit_s=1.0, num_sweeps=10_000_000).solve(p)
    info = placement.info
    assert no_sampling == []
    assert info["plan"] == "greedy-first"  # the batches' estimate did not fit either
    refine = info["refine"]
    assert refine["steps"] == 0 and refine["clock_cut"] is True
    out = refine["planned_out"]
    assert out["step"] == 0 and out["pods"] > 0
    assert out["estimate_s"] > out["left_s"] == pytest.approx(1.0)
    # The refinement from each start is planned out the same way (the clock stands still).
    tried = info["starts"]["tried"]
    assert set(tried) == {"iro-frag", "best-fit"}
    assert all(t["refine"]["steps"] == 0 and t["refine"]["planned_out"] for t in tried.values())
    # And so is each round of the widening.
    assert [r["nodes"] for r in info["widen"]] == [3, 4, 5]
    assert all(r["refine"]["steps"] == 0 and r["refine"]["planned_out"] for r in info["widen"])
    assert info["wall_clock_cut"] == ["refine", "starts", "widen"]
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []


def test_the_batch_estimate_counts_tabu_restarts(clock, no_sampling):
    # Was: the estimate priced a tabu read as one search; 1,001 searches a read were sampled
    # (1,000,000 restarts ran past 60 s at time_limit_s=1).
    p = _problem()
    placement = solvers.make(
        "qubo", seed=0, time_limit_s=1.0, sampler="tabu", tabu_restarts=1000, refine_steps=0, polish=False
    ).solve(p)
    info = placement.info
    assert no_sampling == []
    assert info["plan"] == "sample" and info["batches_sampled"] == 0 and info["batches_greedy"] == 1
    assert info["batches"][0]["estimate_s"] > 1.0
    assert info["wall_clock_cut"] == ["batches"]
    sa = solvers.make("qubo", refine_steps=0)
    tabu = solvers.make("qubo", refine_steps=0, sampler="tabu", tabu_restarts=9)
    assert tabu._sampling_estimate(100, False) > 5 * sa._sampling_estimate(100, False)


def test_a_refinement_with_tabu_restarts_is_planned_out(clock, no_sampling):
    p = _problem()
    info = solvers.make("qubo", seed=0, time_limit_s=1.0, sampler="tabu", tabu_restarts=1000).solve(p).info
    assert no_sampling == []
    assert info["refine"]["steps"] == 0 and info["refine"]["planned_out"]["step"] == 0


def test_tabu_restarts_above_the_maximum_are_refused(tmp_path):
    assert solvers.make("qubo", sampler="tabu", tabu_restarts=qubo.MAX_TABU_RESTARTS).tabu_restarts == 1000
    with pytest.raises(InvalidSettingError, match="tabu_restarts.*<= 1000"):
        solvers.make("qubo", sampler="tabu", tabu_restarts=qubo.MAX_TABU_RESTARTS + 1)
    path = tmp_path / "p.json"
    iro_fed.write_problem(_problem(), path)
    assert main(["solve", str(path), "--solver", "qubo", "--set", "tabu_restarts=1000000"]) == 2


def test_a_higher_penalty_is_tried_only_when_another_sampling_call_fits(clock, monkeypatch):
    """Each sampling call takes 0.6 s of a 1 s budget: the second calibration step would end past
    the limit. Was: it started (its clock check passed at 0.6 s) and the batch ended at 1.2 s."""
    real = qubo.Qubo._sample
    calls = []

    def slow(self, vectors, seed, reads):
        calls.append(reads)
        clock.now += 0.6
        return real(self, vectors, seed, reads)

    monkeypatch.setattr(qubo.Qubo, "_sample", slow)
    p = _problem()
    # penalty_start 1e-6: the first step's lowest read is infeasible, so the calibration goes on.
    placement = solvers.make(
        "qubo", seed=0, time_limit_s=1.0, refine_steps=0, polish=False, penalty_start=1e-6
    ).solve(p)
    info = placement.info
    assert len(calls) == 1
    (batch,) = info["batches"]
    assert len(batch["steps"]) == 1 and not batch["steps"][0]["lowest_energy_feasible"]
    assert batch["clock_cut"] is True and info["wall_clock_cut"] == ["batches"]
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []


def test_no_phase_is_named_when_the_clock_does_not_cut(clock):
    p = _problem()
    runs = [solvers.make("qubo", seed=3, refine_steps=20).solve(p) for _ in range(2)]
    for r in runs:
        assert r.info["wall_clock_cut"] == []
        assert r.info["refine"]["clock_cut"] is False and r.info["refine"]["planned_out"] is None
        assert [b["clock_cut"] for b in r.info["batches"]] == [False]
    assert (runs[0].assignment == runs[1].assignment).all()


def test_a_passed_deadline_names_the_phases_it_stopped(clock):
    p = _problem()
    # The plan is a-priori (greedy-first is no cut); the refinement stops at its first step.
    info = solvers.make("qubo", seed=0, polish=False).solve_until(p, deadline=clock.now - 1.0).info
    assert info["plan"] == "greedy-first" and info["wall_clock_cut"] == ["refine", "starts", "widen"]
    assert info["refine"]["clock_cut"] is True and info["refine"]["planned_out"] is None
    # No start runs past the deadline: each is left out, and said so.
    assert info["starts"]["chosen"] == "batches"
    assert all(t == {"skipped": "time limit"} for t in info["starts"]["tried"].values())
    assert info["widen"] == [{"nodes": n, "skipped": "time limit"} for n in (3, 4, 5)]
    # Without a refinement the plan samples, and the clock places the batch greedily.
    info = solvers.make("qubo", seed=0, refine_steps=0, polish=False).solve_until(p, deadline=clock.now - 1.0).info
    assert info["plan"] == "sample" and info["batches_greedy"] == 1 and info["wall_clock_cut"] == ["batches"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_weight_zero_still_calibrates_a_penalty_that_makes_reads_feasible(seed):
    # Was: the penalty scale was the largest objective bias, 0, so P = 0 and no read was feasible.
    doc = random_problem_doc(seed, nodes=5, pods=12)
    doc["weights"] = {k: 0 for k in ("utilization", "latency", "cost", "carbon", "unplaced")}
    p = iro_fed.problem_from_dict(doc)
    placement = solvers.make("qubo", seed=0, refine_steps=0, polish=False).solve(p)
    info = placement.info
    assert info["penalty"][0] > 0
    assert info["feasible_fraction"] > 0
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []
