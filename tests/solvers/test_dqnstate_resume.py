"""DQN training state across ``--resume``: the target network is saved with the run (it restarted
as a copy of the online network, so a resumed run diverged from an uninterrupted one), and
building a ``DQNAgent`` leaves torch's global generator alone (it reseeded it)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

from solvers.dqn.agent import DQNAgent  # noqa: E402
from solvers.dqn.checkpoint import TARGET_STATE, load_checkpoint  # noqa: E402
from solvers.dqn.replay import PrioritizedReplayBuffer  # noqa: E402
from solvers.dqn.train import optimizer_path, train  # noqa: E402
from tests.solvers.test_dqn_train import CFG, K, PickBestEnv  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# Acting draws no random numbers (no noisy layers, epsilon 0) and the PER beta stays at 1: the
# seeded streams restart in a resumed run, everything else must carry over. The target syncs every
# 20 gradient steps: the cut at step 96 (33 gradient steps) lies between two syncs.
DETERMINISTIC = CFG.replace(noisy=False, epsilon_start=0.0, epsilon_end=0.0, priority_beta0=1.0,
                            target_update_every=20)


class World:
    """Where an env's world stands: the env steps taken in it, by whichever run or env object."""

    def __init__(self) -> None:
        self.steps = 0


class WorldEnv(PickBestEnv):
    """PickBestEnv whose observations depend on the world's step count alone (not on a reset's
    seed), so a resumed run sees what an uninterrupted one sees at the same step."""

    def __init__(self, world: World) -> None:
        super().__init__(length=8)
        self.world = world

    def _obs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([7, self.world.steps])
        cand = rng.random((K, 3), dtype=np.float32)
        mask = (rng.random(K) < 0.75).astype(np.int8)
        mask[rng.integers(K)] = 1
        self.current = {"candidates": cand, "context": np.full(2, self.t / self.length, np.float32), "mask": mask}
        return self.current

    def step(self, action: int):
        self.world.steps += 1
        return super().step(action)


def _train(cfg: Any, steps: int, world: World, buffer: Any, **kwargs: Any):
    return train([lambda: WorldEnv(world)], cfg, steps=steps, seed=0, progress=False, track_emissions=False,
                 replay=buffer, **kwargs)


def _buffer(cfg: Any) -> PrioritizedReplayBuffer:
    return PrioritizedReplayBuffer(cfg.buffer_size, cfg.priority_alpha, cfg.priority_eps, seed=0)


def _states(agent: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return agent.online.state_dict(), agent.target.state_dict()


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_resumed_run_gives_the_weights_of_one_uninterrupted_run(tmp_path) -> None:
    torch.set_num_threads(1)
    whole, _ = _train(DETERMINISTIC, 160, World(), _buffer(DETERMINISTIC))

    world, buffer = World(), _buffer(DETERMINISTIC)
    first = tmp_path / "policy.pt"
    cut, run = _train(DETERMINISTIC, 96, world, buffer, out=first)  # 12 whole episodes
    assert run.updates == 33 and world.steps == 96
    # the target is the online network of gradient step 20, not of step 33 (what resuming restarted it as)
    assert not _equal(*_states(cut))

    # the cut run's schedule ran over its own 96 steps; here it spans the 160 (the beta is 1 throughout)
    resumed, result = _train(DETERMINISTIC, 64, world, buffer, resume=first)
    assert result.steps == 160 and resumed.updates == whole.updates
    (online, target), (whole_online, whole_target) = _states(resumed), _states(whole)
    assert _equal(target, whole_target)
    assert _equal(online, whole_online)  # bit for bit


def test_the_saved_target_network_is_the_one_resuming_starts_from(tmp_path) -> None:
    first = tmp_path / "policy.pt"
    cut, run = _train(DETERMINISTIC, 96, World(), _buffer(DETERMINISTIC), out=first)
    assert not _equal(*_states(cut))
    # saved beside Adam's state; the file the dqn solver loads holds the online network alone, as before
    assert _equal(torch.load(optimizer_path(first), weights_only=True)[TARGET_STATE], cut.target.state_dict())
    state, meta = load_checkpoint(first)
    assert _equal(state, cut.online.state_dict()) and meta["schedule"] == {"origin": 0, "horizon": 96, "updates": 33}
    # one more env step without a gradient step (the buffer is refilled first): nothing moves
    resumed, result = train([PickBestEnv], DETERMINISTIC, steps=1, seed=3, resume=first, progress=False,
                            track_emissions=False)
    assert result.updates == 0
    assert _equal(resumed.target.state_dict(), cut.target.state_dict())
    assert not _equal(resumed.target.state_dict(), resumed.online.state_dict())


def test_an_older_training_state_resumes_with_the_target_as_a_copy_and_says_so(tmp_path, caplog) -> None:
    first = tmp_path / "policy.pt"
    cut, _ = _train(DETERMINISTIC, 96, World(), _buffer(DETERMINISTIC), out=first)
    saved = torch.load(optimizer_path(first), weights_only=True)
    # an older release read this file with Optimizer.load_state_dict alone: the extra key is ignored
    older = torch.optim.Adam(cut.online.parameters(), lr=1.0)
    older.load_state_dict(saved)
    assert older.state_dict().keys() == {"state", "param_groups"}

    # as an older version wrote it: Adam's state only
    del saved[TARGET_STATE]
    torch.save(saved, optimizer_path(first))
    with caplog.at_level(logging.WARNING, logger="solvers.dqn.train"):
        resumed, result = train([PickBestEnv], DETERMINISTIC, steps=1, resume=first, progress=False,
                                track_emissions=False)
    assert result.steps == 97 and result.updates == 0
    assert _equal(resumed.target.state_dict(), resumed.online.state_dict())
    assert any("no target network saved with it" in r.getMessage() and str(first) in r.getMessage()
               for r in caplog.records)


def test_a_target_network_that_does_not_fit_is_an_error_naming_the_file(tmp_path) -> None:
    first = tmp_path / "policy.pt"
    _train(DETERMINISTIC, 10, World(), _buffer(DETERMINISTIC), out=first)
    saved = torch.load(optimizer_path(first), weights_only=True)
    saved[TARGET_STATE] = {"encoder.0.weight": torch.zeros(2, 2)}
    torch.save(saved, optimizer_path(first))
    out = tmp_path / "more.pt"
    with pytest.raises(ValueError, match="the target network in .*policy.optim.pt does not fit its config"):
        train([PickBestEnv], DETERMINISTIC, steps=1, resume=first, out=out, progress=False, track_emissions=False)
    assert not out.exists()


# The policy the package ships (benchmarks/results/ is not in the repository: a clean clone has none).
@pytest.mark.parametrize("policy", ["solvers/dqn/policies/default.pt"])
def test_shipped_policies_still_load_and_resume(tmp_path, policy, caplog) -> None:
    import solvers
    from iro_fed.sim.env import PlacementEnv
    from iro_fed.testing import random_problem

    src = REPO / policy
    assert solvers.make("dqn", policy=str(src)).solve(random_problem(1, nodes=3, pods=2)) is not None
    copy = tmp_path / src.name
    shutil.copy(src, copy)
    if optimizer_path(src).is_file():  # promo-surge's: Adam's state only, written before the target was saved
        shutil.copy(optimizer_path(src), optimizer_path(copy))
    state, meta = load_checkpoint(copy)
    from solvers.dqn.config import DQNConfig

    cfg = DQNConfig.from_dict(meta["config"])
    with caplog.at_level(logging.WARNING, logger="solvers.dqn.train"):
        agent, result = train([lambda: PlacementEnv("bank", hours=6.0, k=cfg.top_k, seed=0)], cfg, steps=1,
                              resume=copy, progress=False, track_emissions=False)
    assert result.steps == meta["steps"] + 1
    assert _equal(agent.target.state_dict(), state)  # a copy of the online network, as resuming did
    assert any("no target network saved with it" in r.getMessage() for r in caplog.records)


# --- DQNAgent leaves torch's global generator alone ----------------------------------------------


def test_building_an_agent_leaves_the_global_generator_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    DQNAgent(CFG, 3, 2, seed=5)
    assert torch.equal(torch.rand(4), expected)  # was the stream of manual_seed(5) after the initial weights


def test_an_agent_is_the_same_whatever_the_host_drew() -> None:
    obs = {"candidates": np.random.default_rng(0).random((16, K, 3), dtype=np.float32),
           "context": np.zeros((16, 2), np.float32), "mask": np.ones((16, K), bool)}
    runs = []
    for host_seed in (1, 2):
        agent = DQNAgent(CFG, 3, 2, seed=5)
        torch.manual_seed(host_seed)  # the host draws from its own stream in between
        torch.rand(3)
        actions = [agent.act(obs) for _ in range(5)]  # noisy exploration: the agent's own stream
        runs.append(({k: v.clone() for k, v in agent.online.state_dict().items()}, actions))
    (w1, a1), (w2, a2) = runs
    assert _equal(w1, w2)
    assert all(np.array_equal(x, y) for x, y in zip(a1, a2, strict=True))


@pytest.mark.parametrize(("content", "message"), [(b"not a torch file", "not a readable torch file"),
                                                   (None, "expected a mapping, got Tensor")])
def test_a_damaged_training_state_is_an_error_naming_the_file(tmp_path, content, message) -> None:
    from solvers.dqn.checkpoint import CheckpointError

    first = tmp_path / "policy.pt"
    _train(DETERMINISTIC, 10, World(), _buffer(DETERMINISTIC), out=first)
    if content is None:
        torch.save(torch.zeros(3), optimizer_path(first))
    else:
        optimizer_path(first).write_bytes(content)
    out = tmp_path / "more.pt"
    with pytest.raises(CheckpointError, match=message) as info:
        train([PickBestEnv], DETERMINISTIC, steps=1, resume=first, out=out, progress=False, track_emissions=False)
    assert f"optimizer state {str(optimizer_path(first))!r}" in str(info.value)
    assert not out.exists()
