"""The training loop on a tiny gymnasium env: it learns, checkpoints, and resumes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

from solvers.dqn.checkpoint import load_checkpoint  # noqa: E402
from solvers.dqn.config import DQNConfig  # noqa: E402
from solvers.dqn.train import optimizer_path, train  # noqa: E402

K, F, C = 4, 3, 2
CFG = DQNConfig(top_k=K, defer_action=False, embed_dim=16, hidden_dim=32, attention_heads=2, atoms=21,
                v_min=-3.0, v_max=3.0, batch_size=32, buffer_size=2000, learning_starts=64,
                target_update_every=50, learning_rate=2e-3, n_step=2, gamma=0.5)


class PickBestEnv(gym.Env):
    """Each step shows K candidates; the reward is a hidden mix of the chosen one's features."""

    def __init__(self, length: int = 8) -> None:
        self.length = length
        self.observation_space = gym.spaces.Dict({
            "candidates": gym.spaces.Box(0.0, 1.0, (K, F), np.float32),
            "context": gym.spaces.Box(0.0, 1.0, (C,), np.float32),
            "mask": gym.spaces.MultiBinary(K),
        })
        self.action_space = gym.spaces.Discrete(K)

    def _obs(self) -> dict[str, np.ndarray]:
        cand = self.np_random.random((K, F), dtype=np.float32)
        mask = (self.np_random.random(K) < 0.75).astype(np.int8)
        mask[self.np_random.integers(K)] = 1
        self.current = {"candidates": cand, "context": np.full(C, self.t / self.length, np.float32), "mask": mask}
        return self.current

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int):
        assert self.current["mask"][action], "masked action taken"
        c = self.current["candidates"][action]
        reward = float(c[0] - 0.5 * c[1])
        self.t += 1
        return self._obs(), reward, self.t >= self.length, False, {}


def _greedy_return(agent, episodes: int = 40) -> tuple[float, float]:
    env = PickBestEnv()
    rng = np.random.default_rng(7)
    learned = random = 0.0
    for e in range(episodes):
        obs, _ = env.reset(seed=1000 + e)
        done = False
        while not done:
            valid = np.flatnonzero(obs["mask"])
            values = obs["candidates"][:, 0] - 0.5 * obs["candidates"][:, 1]
            random += float(values[rng.choice(valid)])
            batch = {k: v[None] for k, v in obs.items()}
            action = int(agent.act(batch, explore=False)[0])
            obs, r, term, trunc, _ = env.step(action)
            learned += r
            done = term or trunc
    return learned / episodes, random / episodes


def test_training_beats_random_and_checkpoints(tmp_path) -> None:
    torch.set_num_threads(1)
    out = tmp_path / "policy.pt"
    agent, result = train([PickBestEnv, PickBestEnv], CFG, steps=1200, seed=0, out=out, progress=False,
                          track_emissions=False, metadata={"scenario": "pick-best"})
    learned, random = _greedy_return(agent)
    assert learned > random + 0.5, (learned, random)  # random ~ 1.1 per episode, best ~ 3.2
    assert result.steps == 1200 and result.episodes == 150 and result.updates > 0
    state, meta = load_checkpoint(out)
    assert meta["scenario"] == "pick-best" and meta["steps"] == 1200 and meta["config"] == CFG.to_dict()
    assert optimizer_path(out).is_file()

    again, resumed = train([PickBestEnv], CFG, steps=100, seed=1, out=tmp_path / "more.pt", resume=out,
                           progress=False, track_emissions=False)
    assert resumed.steps == 1300
    assert load_checkpoint(tmp_path / "more.pt")[1]["steps"] == 1300


def test_mismatched_env_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="top_k 16"):
        train([PickBestEnv], DQNConfig(), steps=10, progress=False, track_emissions=False)


class NoDecisionEnv(PickBestEnv):
    """An episode in which nothing is ever placeable (e.g. a scenario cut before its pods arrive)."""

    def _obs(self) -> dict[str, np.ndarray]:
        obs = super()._obs()
        obs["mask"][:] = 0
        return obs


def test_env_without_decisions_is_a_clear_error(tmp_path) -> None:
    out = tmp_path / "policy.pt"
    with pytest.raises(ValueError, match="offers no decision"):
        train([PickBestEnv, NoDecisionEnv], CFG, steps=10, out=out, progress=False, track_emissions=False)
    assert not out.exists()


# --- `iro train` counts without an upper bound: exit 2 from the real command, before any work ---


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # each env is a simulator built up front: this ran out of memory building them
        (["--envs", "100000000"], "--envs: must be between 1 and 256, got 100000000"),
        (["--envs", "0"], "--envs: must be between 1 and 256, got 0"),
        (["--steps", "1000000000000"], "--steps: must be between 1 and 100000000"),  # years of training
        (["--steps", "0"], "--steps: must be between 1 and 100000000, got 0"),
        (["--eval-episodes", "1000000000"], "--eval-episodes: must be between 0 and 1000"),  # each a whole episode
        (["--hours", "1e9"], "--hours: must be > 0 and finite, at most 8784"),  # every step recorded: MemoryError
    ],
)
def test_train_counts_out_of_range_exit_2_naming_the_flag(tmp_path, argv, message) -> None:
    iro = Path(sys.executable).parent / "iro"
    # A timeout only so that a regression fails instead of hanging; a passing run exits at once.
    proc = subprocess.run([str(iro), "train", "--scenario", "bank", "--no-emissions", *argv], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())  # no policy.pt, no metadata


def test_a_damaged_optimizer_state_is_refused_without_torchs_advice(tmp_path) -> None:
    """torch's own text for a file it refuses advises ``weights_only=False``, which would run any
    code pickled into the file; the message says what is wrong in a few words instead."""
    from solvers.dqn.checkpoint import CheckpointError

    torch.set_num_threads(1)
    out = tmp_path / "policy.pt"
    train([PickBestEnv], CFG, steps=50, seed=0, out=out, progress=False, track_emissions=False)
    optimizer_path(out).write_text("{}")
    with pytest.raises(CheckpointError) as caught:
        train([PickBestEnv], CFG, steps=10, seed=1, out=tmp_path / "more.pt", resume=out, progress=False,
              track_emissions=False)
    assert str(caught.value) == f"optimizer state {str(optimizer_path(out))!r}: not a readable torch file (not a file torch.save wrote)"
