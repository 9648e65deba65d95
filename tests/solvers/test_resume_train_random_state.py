"""Training's seeded randomness is its own: it reseeded torch's and numpy's global generators (and
left torch's thread count at its own), changing a library caller's streams. Same seed, same weights."""

from __future__ import annotations

import random

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

from solvers.dqn.replay import ReplayBuffer, Transition  # noqa: E402
from solvers.dqn.train import train  # noqa: E402
from tests.solvers.test_dqn_train import CFG, PickBestEnv  # noqa: E402


def _train(**kwargs):
    return train([PickBestEnv], CFG, steps=100, seed=4, progress=False, track_emissions=False, **kwargs)


def _batch() -> dict:
    buf = ReplayBuffer(32, seed=0)
    env = PickBestEnv()
    obs, _ = env.reset(seed=0)
    for _ in range(32):
        action = int(np.flatnonzero(obs["mask"])[0])
        buf.add(Transition(obs, action, 1.0, obs, 0.0))
        obs, *_ = env.step(action)
        if env.t >= env.length:
            obs, _ = env.reset(seed=1)
    return buf.sample(16)


def test_training_leaves_the_callers_generators_and_threads_as_they_were() -> None:
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        torch.manual_seed(123)
        np.random.seed(5)
        random.seed(6)
        expected = (torch.rand(4), np.random.random(3), random.random())
        torch.manual_seed(123)
        np.random.seed(5)
        random.seed(6)
        _train(torch_threads=1)
        assert torch.equal(torch.rand(4), expected[0])  # was the stream torch.manual_seed(4) left after training
        assert np.array_equal(np.random.random(3), expected[1])  # was np.random.seed(4)'s
        assert random.random() == expected[2]
        assert torch.get_num_threads() == 2  # was left at torch_threads
    finally:
        torch.set_num_threads(threads)


def test_a_seed_gives_the_same_policy_and_further_updates_whatever_the_host_drew() -> None:
    batch = _batch()
    runs = []
    for host_seed in (1, 2):
        torch.manual_seed(host_seed)
        agent, _ = _train()
        trained = {k: v.clone() for k, v in agent.online.state_dict().items()}
        torch.manual_seed(100 + host_seed)  # the host draws from its own stream in between
        torch.rand(7)
        # e.g. a federated site's steps on its experience store after the simulator steps
        loss = agent.learn(batch)["loss"]
        runs.append((trained, loss, {k: v.clone() for k, v in agent.online.state_dict().items()}))
    (first, loss1, after1), (second, loss2, after2) = runs
    assert all(torch.equal(first[k], second[k]) for k in first)
    # the update's noise continued the run's seeded stream (it came from the host's)
    assert loss1 == loss2 and all(torch.equal(after1[k], after2[k]) for k in after1)
