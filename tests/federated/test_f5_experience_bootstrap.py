"""A site's recorded decisions are a continuing stream: each is learned as a 1-step transition to
the next recorded decision (discount gamma), not as an episode end that values it at its reward."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from edge_agent.store import ExperienceStore, PolicySample, Transition
from iro_fed.federated.task import FedConfig, experience_transitions, feature_sizes
from solvers.dqn.replay import ReplayBuffer
from solvers.dqn.replay import Transition as ReplayTransition

torch = pytest.importorskip("torch")

K = 8  # FedConfig's top_k
REWARD = 0.5


def _obs(rng: np.random.Generator, valid: int) -> dict[str, np.ndarray]:
    cand_f, ctx_f = feature_sizes()
    cand = rng.uniform(0, 1, (K, cand_f)).astype(np.float32)
    mask = np.zeros(K + 1, np.int8)
    mask[:valid] = 1  # the defer slot stays masked, as the agent records it
    return {"candidates": cand, "context": rng.uniform(0, 1, ctx_f).astype(np.float32), "mask": mask}


def _decisions(n: int) -> list[PolicySample]:
    rng = np.random.default_rng(0)
    return [PolicySample(_obs(rng, 2 + i % (K - 1)), i % 2, REWARD) for i in range(n)]


def _store(path: Path, samples: list[PolicySample]) -> Path:
    store = ExperienceStore(path)
    for i, s in enumerate(samples):
        store.record(Transition(f"w{i}", "policy", np.zeros(2, np.float32), 0, [], 0.0, policy_sample=s))
    store.close()
    return path


def test_each_decision_leads_to_the_next_one_discounted_by_gamma() -> None:
    samples = _decisions(4)
    got = experience_transitions(samples, 0.9)
    assert len(got) == 3  # the newest has no successor yet: left for a later round
    for t, s, nxt in zip(got, samples, samples[1:], strict=False):
        assert t.discount == pytest.approx(0.9)  # was 0.0: an episode end
        assert t.action == s.action and t.reward == s.reward
        assert t.obs is s.obs
        # the next decision's own mask: its valid slots are what the target's argmax ranges over
        assert all(np.array_equal(t.next_obs[k], nxt.obs[k]) for k in ("candidates", "context", "mask"))
    assert experience_transitions(samples[:1], 0.9) == []


def test_a_decision_whose_successor_row_was_skipped_is_left_out() -> None:
    rows = [
        SimpleNamespace(obs={"x": np.float32([i])}, action=0, reward=0.0, row_id=r) for i, r in enumerate((5, 6, 8, 9))
    ]  # row 7 was skipped (no observation, another top-k)
    got = experience_transitions(rows, 0.5)
    assert [(float(t.obs["x"][0]), float(t.next_obs["x"][0])) for t in got] == [(0, 1), (2, 3)]


def test_learning_on_the_store_keeps_the_bootstrapped_value(tmp_path: Path) -> None:
    """The audit's experiment, small and deterministic: on a continuing stream paying REWARD per
    decision, a policy whose values fit ``Q(s, a) = r + gamma * max Q(s')`` must keep them fitting
    after learning on the store; the terminal targets pulled every ``Q(s, a)`` to ``r`` (the audit:
    Q(s, chosen) 0.95 -> 0.11 after 50 updates on a trained policy)."""
    from iro_fed.federated.task import build_agent, learn_from_experience

    torch.set_num_threads(1)
    samples = _decisions(24)
    db = _store(tmp_path / "exp.db", samples)
    cfg = FedConfig(batch_size=16, learning_rate=3e-3, embed_dim=16, hidden_dim=32, target_update_every=10)
    agent = build_agent(cfg, seed=0)
    batch = {k: np.stack([s.obs[k] for s in samples]) for k in samples[0].obs}
    rows, actions = np.arange(len(samples)), np.array([s.action for s in samples])

    def chosen() -> np.ndarray:
        return agent.q_values(batch)[rows, actions]

    # a trained policy: fitted here to the stream's Bellman fixed point, about REWARD / (1 - gamma) = 5
    fit = ReplayBuffer(len(samples), seed=0)
    for s, nxt in zip(samples, samples[1:], strict=False):
        fit.add(ReplayTransition(s.obs, s.action, s.reward, nxt.obs, cfg.gamma))
    for _ in range(1500):
        agent.learn(fit.sample(16))
    trained = chosen()
    assert trained.mean() > 4.0, trained
    # then a round's experience updates, as the audit's 50
    metrics = learn_from_experience(agent, db, cfg, local_steps=10_000, updates=50, seed=1)
    assert metrics["experience-samples"] == 24 and metrics["experience-updates"] == 50
    after = chosen()
    q = agent.q_values(batch)
    bootstrapped = REWARD + cfg.gamma * q[1:].max(axis=1)  # r + gamma * V(s') of each decision but the newest
    assert np.abs(after[:-1] - bootstrapped).mean() < 0.5, (after, bootstrapped)
    assert np.abs(after - trained).mean() < 0.5  # stays where it was, not pulled to r
    assert after.mean() > 4.0


def test_a_stored_decision_without_an_observation_breaks_the_chain(tmp_path: Path) -> None:
    # needs edge_agent/store.py's row_id (task f5's store patch): the row between decisions 1 and
    # 2 has no observation, so where decision 1 led is not known.
    from edge_agent.store import read_policy_samples

    samples = _decisions(4)
    store = ExperienceStore(tmp_path / "exp.db")
    for i, s in enumerate(samples):
        store.record(Transition(f"w{i}", "policy", np.zeros(2, np.float32), 0, [], 0.0, policy_sample=s))
        if i == 1:
            store.record(Transition("gap", "policy", np.zeros(2, np.float32), 0, [], 0.0))
    store.close()
    found = read_policy_samples(tmp_path / "exp.db", K, *feature_sizes())
    assert [s.row_id for s in found.samples] == [1, 2, 4, 5] and found.without_observation == 1
    got = experience_transitions(found.samples, 0.9)
    first, second, third, fourth = found.samples
    assert len(got) == 2  # 0 -> 1 and 2 -> 3; 1 -> 2 skipped over a decision, 3 is the newest
    assert got[0].obs is first.obs and got[0].next_obs is second.obs
    assert got[1].obs is third.obs and got[1].next_obs is fourth.obs
