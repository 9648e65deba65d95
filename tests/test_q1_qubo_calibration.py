"""q1: with refinement or the polish after it (and waiting for a feasible read dear against the
budget), the penalty calibration only seeds them; a step with
no feasible read that repaired worse than the step before ends it (the next, higher penalty was
never the best at 100 x 20). The placements stay the seed's: the dropped steps were not the best."""

from __future__ import annotations

import pytest

pytest.importorskip("dimod")
pytest.importorskip("dwave.samplers")

import solvers
from iro_fed.feasibility import check_placement
from iro_fed.testing import random_problem


def _steps(placement):
    (batch,) = placement.info["batches"]
    return batch["steps"]


@pytest.mark.parametrize("seed", [102, 103])  # 101 too before the GPU power term
def test_a_worse_step_with_no_feasible_read_ends_the_calibration_when_refinement_follows(seed):
    problem = random_problem(seed, nodes=25, pods=60)
    # 10 s: every step of 60 pods is dear against it, so the count starts at once (at the default
    # 30 s the calibration goes on to a feasible read).
    default = solvers.make("qubo", seed=1, polish=False, refine_steps=5, time_limit_s=10).solve(problem)
    assert default.info["calibration"] == "with patience from the first step"
    # penalty_patience=0 never stops on patience: the steps a longer calibration runs, same samples.
    full = solvers.make("qubo", seed=1, polish=False, refine_steps=5, penalty_patience=0, time_limit_s=10).solve(problem)
    steps, all_steps = _steps(default), _steps(full)
    assert [s["energy"] for s in steps] == [s["energy"] for s in all_steps[: len(steps)]]
    last, before = steps[-1], steps[-2]
    assert last["feasible_fraction"] == 0.0 and last["best_repaired_score"] < before["best_repaired_score"]
    # No step before the last ended it by the same rule (each was better, or had a feasible read).
    for prev, cur in zip(steps[:-2], steps[1:-1], strict=True):
        assert cur["feasible_fraction"] > 0 or cur["best_repaired_score"] >= prev["best_repaired_score"]
    assert len(steps) < len(all_steps)
    assert check_placement(problem, default.assignment, default.gpu_cards) == []


def test_without_refinement_or_polish_a_worse_step_does_not_end_it():
    # The sampler's answer is the result: a higher penalty is what makes reads feasible, so only
    # the patience (counted from the first feasible read) stops it, as before.
    problem = random_problem(100, nodes=25, pods=60)
    steps = _steps(solvers.make("qubo", seed=1, refine_steps=0, polish=False).solve(problem))
    assert [s["feasible_fraction"] > 0 for s in steps][:2] == [False, False]
    assert len(steps) >= 3
