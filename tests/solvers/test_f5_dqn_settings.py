"""DQN settings that could never train are refused up front, and a diverged update stops with a
clear error instead of NaN priorities failing later inside the replay's sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.dqn.config import ConfigError, DQNConfig

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

from solvers.dqn.agent import DQNAgent, NonFiniteLoss  # noqa: E402
from solvers.dqn.train import train  # noqa: E402
from tests.solvers.test_dqn_train import CFG, C, F, PickBestEnv  # noqa: E402


@pytest.mark.parametrize(
    ("changes", "which"),
    [
        ({"buffer_size": 32}, "learning_starts"),  # iro train --set buffer_size=32: learning_starts 500
        ({"buffer_size": 20, "learning_starts": 10, "batch_size": 32}, "batch_size"),
    ],
)
def test_a_buffer_too_small_to_ever_learn_is_refused_naming_buffer_size(changes: dict, which: str) -> None:
    # Was accepted: training waits for max(learning_starts, batch_size) transitions, which a
    # smaller buffer never holds, and wrote a policy that had never learned (exit 0).
    with pytest.raises(ConfigError, match=rf"^buffer_size: {changes['buffer_size']} holds fewer .*lower {which}$"):
        DQNConfig(**changes)


def test_a_buffer_exactly_as_large_as_needed_is_accepted() -> None:
    assert DQNConfig(buffer_size=500, learning_starts=500, batch_size=64).buffer_size == 500


@pytest.mark.parametrize(
    "name", ["v_max", "v_min", "learning_rate", "adam_eps", "grad_clip", "noisy_sigma0", "priority_eps"]
)
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_every_float_setting_must_be_finite(name: str, value: float) -> None:
    # Was: v_max=inf passed (an IndexError traceback in the C51 projection), learning_rate=inf too
    # (an OverflowError in the replay's sampling).
    with pytest.raises(ConfigError, match=rf"^{name}: expected a "):
        DQNConfig(**{name: value})


def test_infinite_v_max_without_distributional_is_refused_too() -> None:
    with pytest.raises(ConfigError, match=r"^v_max: expected a finite number, got inf$"):
        DQNConfig(distributional=False, v_max=math.inf)


def _batch(reward: float, n: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    k = CFG.top_k
    obs = {
        "candidates": rng.random((n, k, F), dtype=np.float32),
        "context": np.zeros((n, C), np.float32),
        "mask": np.ones((n, k), np.int8),
    }
    out = {f"obs.{key}": v for key, v in obs.items()}
    out.update({f"next.{key}": v.copy() for key, v in obs.items()})
    out.update(
        action=np.zeros(n, np.int64),
        reward=np.full(n, reward, np.float32),
        discount=np.full(n, 0.5, np.float32),
        weights=np.ones(n, np.float32),
        indices=np.arange(n),
    )
    return out


@pytest.mark.parametrize("distributional", [True, False])
def test_a_non_finite_loss_stops_the_update_naming_it_and_changes_nothing(distributional: bool) -> None:
    agent = DQNAgent(CFG.replace(distributional=distributional), F, C, seed=0)
    agent.learn(_batch(0.5))
    before = {k: v.clone() for k, v in agent.online.state_dict().items()}
    # Was: the step went through, NaN weights and priorities (update_priorities takes NaN)
    with pytest.raises(NonFiniteLoss, match=r"^loss became non-finite at update 2 "):
        agent.learn(_batch(math.nan))
    assert agent.updates == 1
    after = agent.online.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_diverging_training_run_says_so() -> None:
    # Was: a huge learning rate gave NaN weights, NaN priorities, and then "OverflowError: Range
    # exceeds valid bounds" from numpy inside the prioritized replay's sampling.
    cfg = CFG.replace(learning_rate=1e30, grad_clip=1e30, batch_size=8, learning_starts=8)
    with pytest.raises(NonFiniteLoss, match=r"^loss became non-finite at update \d+ "):
        train([PickBestEnv], cfg, steps=400, seed=0, progress=False, track_emissions=False)
