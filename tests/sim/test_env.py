"""The gymnasium environment: env checker, masks never violated, vectorized use."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from iro_fed.feasibility import EPS  # noqa: E402
from iro_fed.objective import marginal  # noqa: E402
from iro_fed.sim.engine import PENDING  # noqa: E402
from iro_fed.sim.env import CANDIDATE_FEATURES, CONTEXT_FEATURES, PlacementEnv, greedy_action  # noqa: E402

from .helpers import needs_data  # noqa: E402

pytestmark = needs_data


def test_check_env_passes():
    env = PlacementEnv("bank", hours=1, k=4, seed=2, settings={"start": "2020-03-02 13:00:00", "promo_day": 0})
    check_env(env, skip_render_check=True)
    assert env.observation_space["candidates"].shape == (4, len(CANDIDATE_FEATURES))
    assert env.observation_space["context"].shape == (len(CONTEXT_FEATURES),)
    assert env.observation_space["mask"].n == 5


def test_random_masked_episode_never_violates_the_mask_or_capacity():
    env = PlacementEnv("promo-surge", hours=11, k=6, seed=1, settings={"surge_start_h": 10.0, "surge_hours": 0.5})
    obs, info = env.reset(seed=3)
    rng = np.random.default_rng(0)
    steps, placed, total = 0, 0, 0.0
    truncated = False
    while not truncated:
        mask = info["action_mask"]
        assert np.array_equal(obs["mask"].astype(bool), mask)
        assert mask[-1] == (obs["context"][CONTEXT_FEATURES.index("deferrable")] > 0)  # only jobs with slack wait
        valid = np.flatnonzero(mask)
        # The valid flag in the observation agrees with the mask.
        flags = obs["candidates"][:, 0]
        assert np.array_equal(flags > 0, mask[:-1])
        assert env.observation_space.contains(obs)
        action = int(rng.choice(valid))
        before = env.sim.state.assignment.copy()
        obs, reward, terminated, truncated, info = env.step(action)
        assert not terminated  # the run's end is a time limit
        total += reward
        st = env.sim.state
        assert np.all(st.allocated <= env.sim.capacity + EPS)
        placed += int(((before < 0) & (st.assignment >= 0)).sum())
        steps += 1
    assert steps > 20 and placed > 10
    assert "totals" in info and info["totals"]["rejected_decisions"] == 0


def test_reward_is_the_objective_change_and_greedy_is_best_per_step():
    env = PlacementEnv("bank", hours=2, k=8, seed=1, settings={"start": "2020-03-02 14:00:00", "promo_day": 0})
    obs, info = env.reset(seed=1)
    rewards = []
    done = False
    while not done:
        req = env._req
        cands = env._cands.copy()
        w_u = req.problem.weights.unplaced
        expected = (marginal(req.problem, req.state, req.local, cands) * req.problem.num_workloads - w_u) / w_u
        assert expected[0] == pytest.approx(expected.max())  # slot 0 is the objective's greedy choice
        action = greedy_action(info)
        obs, r, _, done, info = env.step(action)
        # pods then found with no feasible node (none in this light hour) cost one unplaced pod each
        assert r == pytest.approx((expected[0] if action == 0 else -1.0) - info["unplaceable"])
        rewards.append(r)
    assert len(rewards) > 5
    # the terms differ between placements (powering a node on costs, packing gains utilization)
    assert max(rewards) - min(rewards) > 0.1


def test_leaving_a_pod_pending_costs_one_unplaced_pod():
    # More slots (64) than the cluster has nodes (60): some slots are always empty.
    env = PlacementEnv("bank", hours=2, k=64, seed=1, settings={"start": "2020-03-02 14:00:00", "promo_day": 0})
    _, info = env.reset(seed=1)
    invalid = np.flatnonzero(~info["action_mask"][:-1])
    assert invalid.size
    _, reward, _, _, _ = env.step(int(invalid[0]))
    assert reward == -1.0


def test_pods_left_without_a_feasible_node_are_charged_to_the_last_decision():
    # More surge than capacity: the greedy packer strands pods, which then find no node at all.
    env = PlacementEnv("promo-surge", hours=11, k=4, seed=1,
                       settings={"gpu_nodes": 2, "cpu_nodes": 2, "load": 1.6, "surge_hours": 0.5})
    obs, info = env.reset(seed=1)
    charged, charged_steps = 0, 0
    done = False
    while not done:
        req = env._req
        w_u = req.problem.weights.unplaced
        action = greedy_action(info)  # greedy-objective's node (not always the first candidate: the GPU guard)
        gain = marginal(req.problem, req.state, req.local, env._cands[action : action + 1])[0] * req.problem.num_workloads
        obs, r, _, done, info = env.step(action)
        assert r == pytest.approx((gain - w_u) / w_u - info["unplaceable"])
        charged += info["unplaceable"]
        charged_steps += info["unplaceable"] > 0
    # No capacity frees before the sale ends (18 h), so every stranded pod was found once:
    # the charges add up to the pods still pending at the end, none of which was ever offered.
    pending = env.sim.status == PENDING
    assert charged > 0 and charged_steps > 0
    assert charged == int(pending.sum())
    assert (env.sim.first_placed[pending] < 0).all()


def test_sync_vector_env():
    venv = gym.vector.SyncVectorEnv([lambda: PlacementEnv("edge-iot", hours=1, k=4, seed=1) for _ in range(2)])
    obs, info = venv.reset(seed=7)
    assert obs["candidates"].shape == (2, 4, len(CANDIDATE_FEATURES)) and obs["mask"].shape == (2, 5)
    assert info["action_mask"].shape == (2, 5)
    for _ in range(30):
        actions = np.array([0 if m[0] else 4 for m in info["action_mask"]])
        obs, reward, term, trunc, info = venv.step(actions)
        assert obs["context"].shape[0] == 2 and np.isfinite(reward).all()
    venv.close()
