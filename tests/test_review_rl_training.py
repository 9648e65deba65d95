"""RL review of ``iro train``: training episodes never use the held-out evaluation seeds, and a bad
``--set`` value read before training is a usage error."""

from __future__ import annotations

import pytest

gym = pytest.importorskip("gymnasium")

from iro_fed.cli import main  # noqa: E402
from iro_fed.learning import EVAL_SEED_OFFSET, MAX_EVAL_EPISODES, env_factories, env_seed  # noqa: E402
from iro_fed.sim.env import PlacementEnv  # noqa: E402

from .sim.helpers import needs_data  # noqa: E402

pytestmark = needs_data

EVALUATED = range(EVAL_SEED_OFFSET, EVAL_SEED_OFFSET + MAX_EVAL_EPISODES)
QUIET = {"start": "2020-03-02 13:00:00", "promo_day": 0}


def _episode_seeds(seed: int, envs: int, episodes: int) -> list[list[int]]:
    """Scenario seeds each training env runs, reset as ``solvers.dqn.train`` resets them: the vector
    env's ``reset(seed=seed)`` (env i gets ``seed + i``), then autoresets without a seed."""
    venv = gym.vector.SyncVectorEnv(env_factories("bank", envs, seed, 0.25, 4, QUIET))
    try:
        venv.reset(seed=seed)
        seen = [[env.sim.seed] for env in venv.envs]
        for _ in range(episodes - 1):
            for i, env in enumerate(venv.envs):
                env.reset()
                seen[i].append(env.sim.seed)
        return seen
    finally:
        venv.close()


@pytest.mark.parametrize(("seed", "envs"), [(10, 1), (9_999, 4)])
def test_training_never_runs_a_held_out_evaluation_seed(seed: int, envs: int) -> None:
    # Before: --seed 10 trained env 0 on 10, 10001, 10002, ... (its stream is seed * 1000 + episode)
    # and --seed 9999 --envs 4 started on 9999..10002: the episodes evaluate_policy reports as held out.
    seen = _episode_seeds(seed, envs, 4)
    assert not {s for row in seen for s in row} & set(EVALUATED)
    assert all(len(set(row)) == len(row) for row in seen)  # still one scenario per episode


def test_training_streams_and_evaluation_episodes() -> None:
    # each env's stream is its own (env_seed; it was seed * 1000 + env * 97, shared after 97 episodes)
    b0, b1 = env_seed(0, 0), env_seed(0, 1)
    assert _episode_seeds(0, 2, 3) == [[0, b0 + 1, b0 + 2], [1, b1 + 1, b1 + 2]]
    env = PlacementEnv("bank", hours=0.25, k=4, seed=0, settings=QUIET)  # as evaluate_policy builds it
    env.reset(seed=EVAL_SEED_OFFSET + 1)
    assert env.sim.seed == EVAL_SEED_OFFSET + 1


def test_a_held_out_range_must_be_a_plain_range() -> None:
    with pytest.raises(ValueError, match="held_out"):
        PlacementEnv("bank", hours=0.25, k=4, held_out=range(0, 10, 2))


@pytest.mark.parametrize(("sets", "message"), [
    (["top_k=0"], "--set top_k: expected a positive integer, got 0"),  # was a ConfigError traceback, exit 1
    (["top_k=8", "gamma=2"], "--set gamma: expected a number in [0, 1], got 2.0"),
])
def test_iro_train_refuses_a_bad_config_before_training(tmp_path, capsys, sets: list[str], message: str) -> None:
    argv = ["train", "--scenario", "bank", "--steps", "8", "--envs", "1", "--hours", "0.2", "--eval-episodes", "0",
            "--no-emissions", "--out", str(tmp_path / "p.pt")]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
