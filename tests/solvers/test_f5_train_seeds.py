"""``iro train``'s envs run disjoint streams of scenario seeds (needs the learning.py change of
task f5: env_seed)."""

from __future__ import annotations

import pytest

gym = pytest.importorskip("gymnasium")

from iro_fed.learning import HELD_OUT, env_factories, env_seed  # noqa: E402
from tests.sim.helpers import needs_data  # noqa: E402

pytestmark = needs_data

QUIET = {"start": "2020-03-02 13:00:00", "promo_day": 0}


def _episode_seeds(seed: int, envs: int, episodes: int) -> list[list[int]]:
    """Scenario seeds each env runs, reset as ``solvers.dqn.train`` resets them: ``reset(seed=seed)``
    (env i gets ``seed + i``), then autoresets without a seed."""
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


def test_training_envs_run_disjoint_episode_streams() -> None:
    # Was: env i's base seed * 1000 + i * 97: env 0's episodes 98, 99, ... were env 1's 1, 2, ...
    # (the audit: 250 bank episodes per env at 20,000 steps, 4 envs, most shared), and env 1's
    # first episode (seed + 1) was env 0's second.
    seen = _episode_seeds(0, 4, 120)
    flat = [s for row in seen for s in row]
    assert len(set(flat)) == len(flat)
    assert not set(flat) & set(HELD_OUT)
    assert [row[0] for row in seen] == [0, 1, 2, 3]  # the vector reset's first episodes, as before
    assert seen[1][1:3] == [env_seed(0, 1) + 1, env_seed(0, 1) + 2]


def test_env_seeds_are_deterministic_and_in_numpys_range() -> None:
    assert env_seed(7, 2) == env_seed(7, 2)
    seeds = {env_seed(s, i) for s in range(4) for i in range(8)}
    assert len(seeds) == 32 and all(0 <= s < 2**32 for s in seeds)
