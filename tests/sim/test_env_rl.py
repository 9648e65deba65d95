"""The env as a learner sees it: time-limit truncation with a decision to bootstrap from, and the
defer action's re-offer and reward."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from iro_fed.features import CONTEXT_FEATURES, candidate_features, order_candidates  # noqa: E402
from iro_fed.sim.engine import PENDING  # noqa: E402
from iro_fed.sim.env import PlacementEnv, greedy_action  # noqa: E402
from solvers.dqn.replay import NStepAccumulator  # noqa: E402

from .helpers import needs_data  # noqa: E402

pytestmark = needs_data

EVENING = {"start": "2020-03-02 19:30:00", "promo_day": 0}  # the bank's batch jobs (with deadlines) arrive at 20 h


def test_the_time_limit_truncates_and_offers_a_decision_to_bootstrap_from() -> None:
    env = PlacementEnv("bank", hours=1, k=4, seed=2, settings={"start": "2020-03-02 13:00:00", "promo_day": 0})
    obs, info = env.reset(seed=2)
    acc = NStepAccumulator(3, gamma=0.9)
    out = []
    steps = 0
    for _ in range(5000):
        action = greedy_action(info)
        nxt, reward, terminated, truncated, info = env.step(action)
        steps += 1
        assert not terminated  # the run's end is a time limit, never a terminal state (was terminated=True)
        out += acc.push(obs, action, reward, nxt, terminated, truncated)
        obs = nxt
        if truncated:
            break
    assert steps > 20
    # The final observation is a real decision: the last pod offered again on the final cluster
    # (no pod is pending in this light hour), ranked and featurized as any other decision.
    final = env._final
    assert final is not None and final.pod == env._last_pod
    assert obs["mask"].any() and np.array_equal(obs["mask"].astype(bool), info["action_mask"])
    assert env.observation_space.contains(obs)
    nodes, gains = order_candidates(final.state, final.local, final.candidates, 4)
    assert np.allclose(obs["candidates"], np.clip(candidate_features(final.state, final.local, nodes, gains, 4), -1e3, 1e3))
    assert final.state.allocated.sum() == pytest.approx(env.sim.state.allocated[env.sim.node_state == 2].sum())
    # so the n-step windows that end here bootstrap (gamma^m), with a next state that has a valid action
    tail = out[-3:]
    assert [t.discount for t in tail] == pytest.approx([0.9**3, 0.9**2, 0.9])
    assert all(t.next_obs["mask"].any() for t in tail)
    # stepping past the end changes nothing
    again = env.step(0)
    assert again[1:4] == (0.0, False, True) and np.array_equal(again[0]["mask"], obs["mask"])


def test_a_pod_still_pending_at_the_end_is_the_bootstrap_decision() -> None:
    # Half an hour: the jobs of 19:45-19:52 still have slack at the end (15 steps each).
    env = PlacementEnv("bank", hours=0.5, k=4, seed=1, settings=EVENING)
    _, info = env.reset(seed=1)
    done, deferred = False, 0
    while not done:
        defer = bool(info["action_mask"][-1])
        deferred += defer
        _, _, terminated, truncated, info = env.step(4 if defer else greedy_action(info))
        done = terminated or truncated
    sim = env.sim
    pending = sim._pending_order(np.flatnonzero(sim.status == PENDING))
    assert deferred and pending.size
    assert env._final.pod == int(pending[0])  # the engine's next pod (it fits: the jobs were held back by choice)
    assert info["action_mask"][-1]  # a deferrable job


def test_a_deferred_pod_is_offered_again_in_the_next_step_at_minus_one_per_round() -> None:
    env = PlacementEnv("bank", hours=1, k=4, seed=1, settings=EVENING)
    _, info = env.reset(seed=1)
    waiting: dict[str, int] = {}  # pod -> step it was deferred in
    delays = []
    done = False
    while not done:
        pod, step = info["pod"], info["step"]
        if pod in waiting:
            delays.append(step - waiting.pop(pod))
        if info["action_mask"][-1] and len(delays) < 10:
            waiting[pod] = step
            _, reward, terminated, truncated, info = env.step(4)
            assert reward == -1.0 - info["unplaceable"]
        else:
            _, _, terminated, truncated, info = env.step(greedy_action(info))
        done = terminated or truncated
    # The engine retried old pending pods only once capacity freed (delays of 2-3 steps here, with
    # no charge meanwhile); a pod held back by choice fits, so it is offered again next step.
    assert len(delays) >= 5 and set(delays) == {1}


def test_a_job_whose_slack_is_spent_cannot_be_deferred() -> None:
    # Before: any batch job with a deadline could be held back, even one that would miss the
    # deadline by waiting (slack 0 or less), so a policy could defer it past its deadline.
    env = PlacementEnv("bank", hours=1, k=4, seed=1, settings=EVENING)
    _, info = env.reset(seed=1)
    sim = env.sim
    checked = 0
    done = False
    while not done:
        pod, step = env._req.pod, info["step"]
        if sim.is_batch[pod] and sim.deadline[pod] >= 0:
            slack = int(sim.deadline[pod] - step - sim.remaining[pod])
            assert bool(info["action_mask"][-1]) == (slack >= 1)
            if slack >= 1:
                saved = int(sim.deadline[pod])
                sim.deadline[pod] = step + sim.remaining[pod]  # no slack left: it must start now
                assert not env.action_mask()[-1]
                assert env._obs()["context"][CONTEXT_FEATURES.index("deferrable")] == 0.0
                sim.deadline[pod] = saved
                assert env.action_mask()[-1]
                checked += 1
        _, _, terminated, truncated, info = env.step(greedy_action(info))
        done = terminated or truncated
    assert checked > 0
