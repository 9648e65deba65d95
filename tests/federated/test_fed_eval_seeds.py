"""A site's training env never runs the scenario seeds its held-out evaluation runs."""

from __future__ import annotations

import pytest

from iro_fed.federated.task import (
    EVAL_SEED,
    EVAL_SEEDS,
    FedConfig,
    build_agent,
    evaluate_policy,
    get_weights,
    local_train,
)
from iro_fed.sim.env import PlacementEnv

# Episodes of 0.25 h so that 60 steps run several of them.
TINY = {"local_steps": 60, "learning_starts": 8, "batch_size": 4, "buffer_size": 128, "hours": 0.25,
        "track_emissions": False, "eval_episodes": 2}


@pytest.fixture
def run_seeds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The scenario seed of every episode any PlacementEnv runs (the real reset, recorded)."""
    seen: list[int] = []
    reset = PlacementEnv.reset

    def recording_reset(self: PlacementEnv, **kwargs):  # noqa: ANN202
        out = reset(self, **kwargs)
        seen.append(int(self.sim.seed))
        return out

    monkeypatch.setattr(PlacementEnv, "reset", recording_reset)
    return seen


def test_a_sites_training_never_runs_an_evaluation_seed(run_seeds: list[int]) -> None:
    # Was: seed=10 trained site 0 in round 0 on scenario seed 10000 (10 * 1000 + 0 * 97 + 0), then
    # 10001, ...: the episodes evaluate_policy then ran as held out.
    cfg = FedConfig(seed=10, **TINY)
    local_train(get_weights(build_agent(cfg).online), cfg, site=0, server_round=0)
    assert len(run_seeds) >= 2
    assert not set(run_seeds) & set(EVAL_SEEDS), run_seeds


def test_evaluation_still_runs_its_seeds(run_seeds: list[int]) -> None:
    cfg = FedConfig(seed=10, **TINY)
    evaluate_policy(get_weights(build_agent(cfg).online), cfg, site=0)
    assert run_seeds == [EVAL_SEED, EVAL_SEED + 1]
