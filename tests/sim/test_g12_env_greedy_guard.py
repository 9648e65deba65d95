"""The DQN env's greedy baseline is the greedy-objective solver's own choice, GPU-stranding guard
included (GPU_POWER_MODEL_NOTES.md item 3: greedy_action took the first candidate by marginal,
the guard's unguarded argmax, so the baseline and the solver disagreed on GPU scenarios)."""

from __future__ import annotations

import pytest

pytest.importorskip("gymnasium")

import solvers  # noqa: E402
from iro_fed.features import order_candidates  # noqa: E402
from iro_fed.sim.env import PlacementEnv, greedy_action  # noqa: E402

# A small promo-surge with the surge from the first hour: 2 GPU and 2 CPU nodes, ~30 decisions,
# two of which the guard decides (the best marginal would strand GPUs on a GPU node).
SETTINGS = {"gpu_nodes": 2, "cpu_nodes": 2, "surge_start_h": 0.0, "surge_hours": 2.0}


def test_greedy_action_is_greedy_objectives_node_where_the_guard_matters():
    env = PlacementEnv("promo-surge", hours=3.0, k=4, seed=1, settings=SETTINGS)
    _, info = env.reset(seed=1)
    solver = solvers.make("greedy-objective")
    decisions = guarded = 0
    while env._req is not None:
        req = env._req
        action = greedy_action(info)
        assert info["action_mask"][action]
        pick = solver.decide(req.state, req.local).node
        assert int(env._cands[action]) == pick, f"step {req.step}: env baseline and greedy-objective disagree"
        best_marginal = int(order_candidates(req.state, req.local, req.candidates, 1)[0][0])
        if best_marginal != pick:  # the best marginal strands GPUs: the guard decided
            solver.sync(req.state)
            assert solver.guard.strands(req.state, req.local, req.candidates[req.candidates == best_marginal]) is not None
            guarded += 1
        decisions += 1
        _, _, terminated, truncated, info = env.step(action)
        assert not terminated
    assert decisions > 20 and guarded >= 1


def test_greedy_choice_outside_the_top_k_takes_the_last_slot():
    # k=1: where the guard moves the choice off the best marginal, the one slot is the choice.
    env = PlacementEnv("promo-surge", hours=3.0, k=1, seed=1, settings=SETTINGS)
    _, info = env.reset(seed=1)
    solver = solvers.make("greedy-objective")
    moved = 0
    while env._req is not None:
        req = env._req
        pick = solver.decide(req.state, req.local).node
        assert greedy_action(info) == 0 and env._cands.tolist() == [pick]
        assert env._obs()["mask"].tolist()[0] == 1
        best_marginal = int(order_candidates(req.state, req.local, req.candidates, 1)[0][0])
        moved += best_marginal != pick
        _, _, _, _, info = env.step(greedy_action(info))
    assert moved >= 1


def test_greedy_action_refuses_an_info_without_the_baseline():
    with pytest.raises(KeyError, match="greedy_action"):
        greedy_action({"action_mask": [True, False]})
