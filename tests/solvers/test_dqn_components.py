"""The DQN's parts against hand computations: replay, n-step returns, C51, masks, checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from solvers.dqn.agent import DQNAgent, project_distribution  # noqa: E402
from solvers.dqn.checkpoint import CheckpointError, load_checkpoint, save_checkpoint  # noqa: E402
from solvers.dqn.config import ConfigError, DQNConfig  # noqa: E402
from solvers.dqn.replay import NStepAccumulator, PrioritizedReplayBuffer, ReplayBuffer, SumTree, Transition  # noqa: E402

SMALL = DQNConfig(top_k=4, embed_dim=16, hidden_dim=32, attention_heads=2, atoms=11, v_min=-2.0, v_max=2.0,
                  batch_size=16, buffer_size=512, learning_starts=32, target_update_every=25)


def _obs(value: float) -> dict[str, np.ndarray]:
    return {"x": np.array([value], dtype=np.float32)}


# --- replay --------------------------------------------------------------------------------


def test_sum_tree_prefix_search() -> None:
    tree = SumTree(5)
    tree.update(np.arange(5), np.array([1.0, 2.0, 0.0, 3.0, 4.0]))
    assert tree.total() == pytest.approx(10.0)
    # intervals: [0,1) -> 0, [1,3) -> 1, (empty 2), [3,6) -> 3, [6,10) -> 4
    assert tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99])).tolist() == [0, 0, 1, 1, 3, 3, 4, 4]
    tree.update(np.array([3]), np.array([0.0]))
    assert tree.total() == pytest.approx(7.0)
    assert tree.find(np.array([3.0])).tolist() == [4]


def test_prioritized_sampling_follows_priorities_and_weights() -> None:
    buf = PrioritizedReplayBuffer(8, alpha=1.0, eps=0.0, seed=3)
    for i in range(4):
        buf.add(Transition(_obs(i), i, 0.0, _obs(i), 1.0))
    buf.update_priorities(np.arange(4), np.array([1.0, 1.0, 2.0, 4.0]))
    counts = np.zeros(4)
    for _ in range(400):
        counts += np.bincount(buf.sample(8)["indices"], minlength=4)
    share = counts / counts.sum()
    assert share == pytest.approx([0.125, 0.125, 0.25, 0.5], abs=0.03)
    batch = buf.sample(8, beta=1.0)
    probs = np.array([1.0, 1.0, 2.0, 4.0])[batch["indices"]] / 8.0
    expected = (4 * probs) ** -1.0
    assert batch["weights"] == pytest.approx(expected / expected.max(), rel=1e-5)
    assert batch["obs.x"][:, 0].tolist() == batch["indices"].tolist()


def test_new_transitions_get_the_highest_priority() -> None:
    buf = PrioritizedReplayBuffer(8, alpha=1.0, eps=0.0, seed=0)
    buf.add(Transition(_obs(0), 0, 0.0, _obs(0), 1.0))
    buf.update_priorities(np.array([0]), np.array([5.0]))
    buf.add(Transition(_obs(1), 1, 0.0, _obs(1), 1.0))
    assert buf.tree.get(np.array([0, 1])).tolist() == [5.0, 5.0]


def test_uniform_buffer_wraps_around() -> None:
    buf = ReplayBuffer(3, seed=0)
    for i in range(5):
        buf.add(Transition(_obs(i), i, float(i), _obs(i + 1), 0.9))
    assert len(buf) == 3
    assert sorted(buf.storage["action"].tolist()) == [2, 3, 4]
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(2).sample(1)


# --- n-step returns ------------------------------------------------------------------------


def test_n_step_returns_by_hand() -> None:
    acc = NStepAccumulator(3, gamma=0.5)
    out = []
    out += acc.push(_obs(0), 0, 1.0, _obs(1), False)
    out += acc.push(_obs(1), 1, 2.0, _obs(2), False)
    assert out == []
    out += acc.push(_obs(2), 2, 4.0, _obs(3), False)
    assert len(out) == 1
    assert out[0].reward == pytest.approx(1.0 + 0.5 * 2.0 + 0.25 * 4.0)
    assert out[0].discount == pytest.approx(0.125)
    assert out[0].next_obs["x"][0] == 3.0
    out += acc.push(_obs(3), 3, 8.0, _obs(4), True)  # the episode ends: flush with shorter windows
    assert [t.action for t in out] == [0, 1, 2, 3]
    assert out[1].reward == pytest.approx(2.0 + 0.5 * 4.0 + 0.25 * 8.0)
    assert out[2].reward == pytest.approx(4.0 + 0.5 * 8.0)
    assert out[3].reward == pytest.approx(8.0)
    assert [t.discount for t in out[1:]] == [0.0, 0.0, 0.0]
    assert acc.push(_obs(5), 0, 1.0, _obs(6), False) == []  # a fresh episode starts empty


def test_truncation_keeps_bootstrapping() -> None:
    acc = NStepAccumulator(3, gamma=0.5)
    acc.push(_obs(0), 0, 1.0, _obs(1), False)
    out = acc.push(_obs(1), 1, 1.0, _obs(2), False, truncated=True)
    assert [t.discount for t in out] == [pytest.approx(0.25), pytest.approx(0.5)]


# --- C51 projection ------------------------------------------------------------------------


def test_c51_projection_hand_case() -> None:
    support = torch.linspace(-1.0, 1.0, 5)  # atoms at -1, -0.5, 0, 0.5, 1
    probs = torch.tensor([[0.0, 0.2, 0.5, 0.3, 0.0]])
    out = project_distribution(probs, torch.tensor([0.25]), torch.tensor([1.0]), support)
    # -0.5 -> -0.25 (half to -0.5, half to 0); 0 -> 0.25; 0.5 -> 0.75 (half to 0.5, half to 1)
    expected = torch.tensor([[0.0, 0.1, 0.1 + 0.25, 0.25 + 0.15, 0.15]])
    assert torch.allclose(out, expected, atol=1e-6)
    # terminal: all mass lands on the reward, split between its neighbours
    out = project_distribution(probs, torch.tensor([0.1]), torch.tensor([0.0]), support)
    assert torch.allclose(out, torch.tensor([[0.0, 0.0, 0.8, 0.2, 0.0]]), atol=1e-6)
    # beyond the support: clamped to the edge atom
    out = project_distribution(probs, torch.tensor([5.0]), torch.tensor([0.9]), support)
    assert torch.allclose(out, torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]]), atol=1e-6)


def test_c51_projection_conserves_mass() -> None:
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(32, 51, generator=gen), dim=1)
    out = project_distribution(probs, torch.randn(32, generator=gen) * 3, torch.rand(32, generator=gen),
                               torch.linspace(-10, 10, 51))
    assert torch.allclose(out.sum(dim=1), torch.ones(32), atol=1e-5)
    assert (out >= 0).all()


# --- masks, config, checkpoints ------------------------------------------------------------


@pytest.mark.parametrize("noisy", [True, False])
def test_action_mask_is_never_violated(noisy: bool) -> None:
    cfg = SMALL.replace(noisy=noisy)
    agent = DQNAgent(cfg, candidate_features=5, context_features=3, seed=1)
    rng = np.random.default_rng(0)
    for _ in range(30):
        mask = rng.random((8, cfg.num_actions)) < 0.3
        mask[np.arange(8), rng.integers(0, cfg.num_actions, 8)] = True
        obs = {"candidates": rng.random((8, cfg.top_k, 5), dtype=np.float32),
               "context": rng.random((8, 3), dtype=np.float32), "mask": mask}
        for explore, eps in ((True, 1.0), (True, 0.3), (False, 0.0)):
            actions = agent.act(obs, epsilon=eps, explore=explore)
            assert mask[np.arange(8), actions].all()


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="gamma"):
        DQNConfig(gamma=1.5)
    with pytest.raises(ConfigError, match="attention_heads"):
        DQNConfig(embed_dim=10, attention_heads=4)
    with pytest.raises(ConfigError, match="unknown DQN setting.*learnin_rate"):
        DQNConfig.from_dict({"learnin_rate": 0.1})
    assert DQNConfig().num_actions == 17 and DQNConfig(defer_action=False).num_actions == 16


def test_checkpoint_round_trip(tmp_path) -> None:
    agent = DQNAgent(SMALL, 5, 3, seed=2)
    meta = {"config": SMALL.to_dict(), "candidate_features": 5, "context_features": 3, "steps": 10}
    path = save_checkpoint(tmp_path / "p" / "policy.pt", agent.online.state_dict(), meta)
    state, loaded = load_checkpoint(path)
    assert loaded["steps"] == 10 and loaded["config"] == SMALL.to_dict()
    assert (tmp_path / "p" / "policy.json").is_file()
    other = DQNAgent(DQNConfig.from_dict(loaded["config"]), 5, 3, seed=9)
    other.online.load_state_dict(state)
    rng = np.random.default_rng(0)
    obs = {"candidates": rng.random((2, 4, 5), dtype=np.float32), "context": rng.random((2, 3), dtype=np.float32),
           "mask": np.ones((2, 5), dtype=bool)}
    assert np.allclose(agent.q_values(obs), other.q_values(obs))
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["policy.json", "policy.pt"]  # no temp files


def test_checkpoint_named_json_keeps_its_metadata_beside_it(tmp_path) -> None:
    from solvers.dqn.checkpoint import metadata_path

    assert metadata_path("a/policy.pt") == Path("a/policy.json")  # the usual layout is unchanged
    assert metadata_path("a/policy.json") == Path("a/policy.meta.json")
    agent = DQNAgent(SMALL, 5, 3, seed=2)
    meta = {"config": SMALL.to_dict(), "candidate_features": 5, "context_features": 3, "steps": 7}
    path = save_checkpoint(tmp_path / "policy.json", agent.online.state_dict(), meta)
    state, loaded = load_checkpoint(path)  # the metadata used to overwrite the checkpoint itself
    assert loaded["steps"] == 7 and set(state) == set(agent.online.state_dict())
    assert json.loads((tmp_path / "policy.meta.json").read_text())["steps"] == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.json", "policy.meta.json"]


def test_checkpoint_errors(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "missing.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable"):
        load_checkpoint(bad)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="format"):
        load_checkpoint(foreign)


# --- learning ------------------------------------------------------------------------------


def _bandit_obs(rng: np.random.Generator, batch: int, k: int) -> dict[str, np.ndarray]:
    cand = rng.random((batch, k, 3), dtype=np.float32)
    mask = rng.random((batch, k + 1)) < 0.7
    mask[:, 0] = True
    mask[:, -1] = False  # nothing to defer
    return {"candidates": cand, "context": np.zeros((batch, 2), dtype=np.float32), "mask": mask}


def _reward(obs: dict[str, np.ndarray], actions: np.ndarray) -> np.ndarray:
    # the value of a node is a hidden mix of its features
    value = obs["candidates"][..., 0] - 0.5 * obs["candidates"][..., 1]
    return value[np.arange(len(actions)), actions]


@pytest.mark.parametrize("distributional", [True, False])
def test_short_training_beats_random(distributional: bool) -> None:
    cfg = SMALL.replace(distributional=distributional, n_step=1, gamma=0.0, learning_rate=3e-3)
    agent = DQNAgent(cfg, candidate_features=3, context_features=2, seed=0)
    _train_on_bandit(agent, cfg, PrioritizedReplayBuffer(cfg.buffer_size, alpha=cfg.priority_alpha, seed=0), 300)
    test_rng = np.random.default_rng(123)
    obs = _bandit_obs(test_rng, 500, cfg.top_k)
    learned = _reward(obs, agent.act(obs, explore=False)).mean()
    valid = obs["mask"][:, : cfg.top_k]
    values = obs["candidates"][..., 0] - 0.5 * obs["candidates"][..., 1]
    random_mean = (np.where(valid, values, 0).sum(1) / valid.sum(1)).mean()
    best = np.where(valid, values, -np.inf).max(1).mean()
    # closes most of the gap between a random valid choice and the best one
    assert learned > random_mean + 0.6 * (best - random_mean), (learned, random_mean, best)


def _train_on_bandit(agent: DQNAgent, cfg: DQNConfig, buf: ReplayBuffer, steps: int) -> None:
    """``steps`` rounds of 4 bandit decisions into ``buf``, one learning step per round once it
    holds ``learning_starts`` (priorities updated when the buffer keeps them)."""
    rng = np.random.default_rng(0)
    for _step in range(steps):
        obs = _bandit_obs(rng, 4, cfg.top_k)
        actions = agent.act(obs)
        rewards = _reward(obs, actions)
        for i in range(4):
            one = {k: v[i] for k, v in obs.items()}
            buf.add(Transition(one, int(actions[i]), float(rewards[i]), one, 0.0))
        if len(buf) >= cfg.learning_starts:
            if isinstance(buf, PrioritizedReplayBuffer):
                batch = buf.sample(cfg.batch_size, beta=0.6)
                buf.update_priorities(batch["indices"], agent.learn(batch)["priorities"])
            else:
                agent.learn(buf.sample(cfg.batch_size))


def _drift_after_training(mu: float) -> float:
    """Distance from the start weights after 150 learning steps on the bandit task (same seed)."""
    cfg = SMALL.replace(n_step=1, gamma=0.0, learning_rate=3e-3)
    agent = DQNAgent(cfg, candidate_features=3, context_features=2, seed=0)
    start = {k: v.detach().clone() for k, v in agent.online.named_parameters()}
    agent.set_proximal(mu)
    _train_on_bandit(agent, cfg, ReplayBuffer(cfg.buffer_size, seed=0), 150)
    return float(sum(((p.detach() - start[k]) ** 2).sum() for k, p in agent.online.named_parameters()) ** 0.5)


def test_the_fedprox_term_holds_the_weights_near_their_anchor_in_every_step() -> None:
    """FedProx's mu/2 ||w - w_global||^2 is in each step's loss: the larger mu, the closer training
    stays to the starting (global) weights; mu 0 is the plain DQN."""
    plain, weak, strong = _drift_after_training(0.0), _drift_after_training(1.0), _drift_after_training(100.0)
    assert plain > weak > strong > 0
    assert strong < 0.5 * plain
    agent = DQNAgent(SMALL, 3, 2, seed=0)
    with pytest.raises(ValueError, match="proximal_mu"):
        agent.set_proximal(float("nan"))


@pytest.mark.parametrize(("atoms", "v_min", "v_max"), [(11, -7.3, 2.9), (62, -2.0, 2.0), (60, -3.0, 3.0), (51, -10.0, 10.0)])
def test_c51_projection_at_the_top_of_odd_supports(atoms, v_min, v_max):
    """A return clamped to v_max lands on the last atom, whatever float32 makes of (v_max - v_min) / delta
    (an index one past the end crashed the update for these supports)."""
    support = torch.linspace(v_min, v_max, atoms)
    probs = torch.full((1, atoms), 1.0 / atoms)
    out = project_distribution(probs, torch.tensor([100.0]), torch.tensor([0.0]), support)
    assert out[0, -1].item() == pytest.approx(1.0) and out.sum().item() == pytest.approx(1.0)
