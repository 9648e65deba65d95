"""Replay against exact numbers: n-step windows at episode boundaries, prioritized sampling, IS weights."""

from __future__ import annotations

import numpy as np
import pytest

from solvers.dqn.replay import NStepAccumulator, PrioritizedReplayBuffer, Transition


def _obs(value: float) -> dict[str, np.ndarray]:
    return {"x": np.array([value], dtype=np.float32)}


def test_n_step_windows_never_reach_into_the_next_episode() -> None:
    acc = NStepAccumulator(3, gamma=0.5)
    first = acc.push(_obs(0), 0, 1.0, _obs(1), False)
    first += acc.push(_obs(1), 1, 2.0, _obs(99), True)  # episode A ends (terminal) after two steps
    assert [(t.action, t.reward, t.discount) for t in first] == [(0, 1.0 + 0.5 * 2.0, 0.0), (1, 2.0, 0.0)]
    assert all(t.next_obs["x"][0] == 99 for t in first)
    # episode B: its first full window holds only its own rewards
    second = []
    for i, r in enumerate([10.0, 20.0, 40.0, 80.0]):
        second += acc.push(_obs(10 + i), 10 + i, r, _obs(11 + i), False)
    assert [(t.action, t.reward, t.discount) for t in second] == [
        (10, 10.0 + 0.5 * 20.0 + 0.25 * 40.0, 0.125), (11, 20.0 + 0.5 * 40.0 + 0.25 * 80.0, 0.125)]
    assert [t.next_obs["x"][0] for t in second] == [13.0, 14.0]
    # B is cut by the time limit: the two open windows bootstrap from the last state with gamma^m
    third = acc.push(_obs(14), 14, 1.0, _obs(15), False, truncated=True)
    assert [(t.action, t.reward, t.discount) for t in third] == [
        (12, 40.0 + 0.5 * 80.0 + 0.25 * 1.0, 0.125), (13, 80.0 + 0.5 * 1.0, 0.25), (14, 1.0, 0.5)]
    assert all(t.next_obs["x"][0] == 15 for t in third) and not acc.queue


def test_prioritized_sampling_is_stratified_by_p_to_the_alpha() -> None:
    buf = PrioritizedReplayBuffer(8, alpha=0.5, eps=0.0, seed=11)
    for i in range(3):
        buf.add(Transition(_obs(i), i, 0.0, _obs(i), 1.0))
    buf.update_priorities(np.arange(3), np.array([1.0, -1.0, 4.0]))  # |error|: 1, 1, 4 -> p^0.5: 1, 1, 2
    assert buf.tree.get(np.arange(3)).tolist() == [1.0, 1.0, 2.0] and buf.tree.total() == 4.0
    # one draw per quarter of the mass: [0,1) -> 0, [1,2) -> 1, [2,4) -> 2 twice, whatever the generator
    for beta in (0.0, 0.5, 1.0):
        batch = buf.sample(4, beta=beta)
        assert batch["indices"].tolist() == [0, 1, 2, 2]
        probs = np.array([0.25, 0.25, 0.5, 0.5])
        w = (3 * probs) ** -beta  # N is the filled count (3), not the capacity (8)
        assert batch["weights"] == pytest.approx(w / w.max(), rel=1e-6)
    assert buf.sample(4, beta=0.5)["weights"] == pytest.approx([1.0, 1.0, 0.5**0.5, 0.5**0.5], rel=1e-6)


def test_new_transitions_enter_at_the_highest_priority_seen() -> None:
    buf = PrioritizedReplayBuffer(4, alpha=0.5, eps=0.0, seed=0)
    buf.add(Transition(_obs(0), 0, 0.0, _obs(0), 1.0))
    assert buf.tree.get(np.array([0])).tolist() == [1.0]  # before any update: priority 1
    buf.update_priorities(np.array([0]), np.array([9.0]))
    buf.add(Transition(_obs(1), 1, 0.0, _obs(1), 1.0))
    buf.update_priorities(np.array([0]), np.array([0.25]))  # lowering one keeps the maximum seen
    buf.add(Transition(_obs(2), 2, 0.0, _obs(2), 1.0))
    assert buf.tree.get(np.arange(3)).tolist() == [0.5, 3.0, 3.0]
    for i in range(3, 6):  # the ring overwrites slots 0 and 1 at the maximum too
        buf.add(Transition(_obs(i), i, 0.0, _obs(i), 1.0))
    assert buf.tree.get(np.arange(4)).tolist() == [3.0] * 4 and buf.tree.total() == pytest.approx(12.0)
