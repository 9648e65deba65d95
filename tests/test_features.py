"""Decision features: candidate pre-selection and hand-computed feature values."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES, observation, preselect
from iro_fed.objective import marginal
from iro_fed.testing import random_problem

C = {name: i for i, name in enumerate(CANDIDATE_FEATURES)}
X = {name: i for i, name in enumerate(CONTEXT_FEATURES)}


def _problem():
    return problem_from_dict({
        "resources": ["cpu", "memory"],
        "domains": [{"name": "edge-1", "kind": "edge", "carbon_intensity": 300.0},
                    {"name": "cloud", "kind": "cloud", "carbon_intensity": 100.0}],
        "latency_ms": {"users": {"edge-1": 5.0, "cloud": 40.0}},
        "nodes": [
            {"name": "g", "domain": "edge-1", "capacity": {"cpu": 8000, "memory": 16384},
             "allocated": {"cpu": 2000, "memory": 4096}, "gpus": 2, "gpu_free_milli": [1000, 400]},
            {"name": "c", "domain": "cloud", "capacity": {"cpu": 16000, "memory": 32768}},
            {"name": "tiny", "domain": "cloud", "capacity": {"cpu": 500, "memory": 512}},
        ],
        "workloads": [
            {"name": "share", "requests": {"cpu": 1000, "memory": 1024}, "gpu": {"count": 1, "milli": 300},
             "user_region": "users", "max_latency_ms": 20},
            {"name": "job", "requests": {"cpu": 4000, "memory": 2048}, "class": "batch", "deadline_s": 3600},
        ],
    })


def test_share_pod_features_by_hand() -> None:
    p = _problem()
    state = ClusterState(p)
    obs, slots = observation(state, 0, k=4)
    assert slots.tolist() == [0, -1, -1, -1]  # only the GPU node fits
    row = obs["candidates"][0]
    assert row[C["valid"]] == 1.0
    assert row[C["cpu_free_after"]] == pytest.approx((8000 - 2000 - 1000) / 8000)
    assert row[C["memory_free_after"]] == pytest.approx((16384 - 4096 - 1024) / 16384)
    # best-fit card: the 400 one -> cards [1000, 100]
    assert row[C["gpu_free_after"]] == pytest.approx(1100 / 2000)
    assert row[C["gpu_full_cards_after"]] == pytest.approx(0.5)
    assert row[C["gpu_frag_after"]] == pytest.approx(100 / 2000)
    assert row[C["latency"]] == pytest.approx(5 / 20)
    assert row[C["latency_slack"]] == pytest.approx(0.75)
    assert row[C["carbon"]] == pytest.approx(0.3)
    assert row[C["kind_edge"]] == 1.0 and row[C["kind_cloud"]] == 0.0
    assert not obs["candidates"][1:].any()  # padding
    assert obs["mask"].tolist() == [1, 0, 0, 0, 0]  # an online pod cannot be deferred
    assert obs["context"][X["class_online"]] == 1.0
    assert obs["context"][X["feasible_share"]] == pytest.approx(1 / 3)


def test_batch_job_may_be_deferred_and_candidates_follow_the_objective() -> None:
    p = _problem()
    state = ClusterState(p)
    obs, slots = observation(state, 1, k=2, context={"hour": 6})
    gains = marginal(p, state, 1, np.array([0, 1]))
    assert slots.tolist() == [0, 1] if gains[0] >= gains[1] else [1, 0]
    assert obs["mask"].tolist() == [1, 1, 1]
    assert obs["context"][X["deferrable"]] == 1.0
    assert obs["context"][X["hour_sin"]] == pytest.approx(1.0)
    assert obs["candidates"][:, C["delta_r_rank"]].tolist() == [0.0, 1.0]
    assert obs["candidates"][0, C["delta_r"]] == pytest.approx(1.0) or gains.max() <= 0


@pytest.mark.parametrize("seed", range(5))
def test_preselect_takes_the_best_feasible_nodes(seed: int) -> None:
    p = random_problem(seed, nodes=30, pods=10)
    state = ClusterState(p)
    for w in range(p.num_workloads):
        nodes, gains, num_feasible = preselect(state, w, 8)
        feasible = np.flatnonzero(feasible_nodes(state, w))
        assert num_feasible == feasible.size and nodes.size == min(8, feasible.size)
        assert set(nodes.tolist()) <= set(feasible.tolist())
        if feasible.size:
            all_gains = marginal(p, state, w, feasible)
            assert gains[0] == pytest.approx(all_gains.max())
            assert np.all(np.diff(np.round(gains, 12)) <= 0)
            obs, slots = observation(state, w, 8)
            assert obs["candidates"].shape == (8, len(CANDIDATE_FEATURES))
            assert np.isfinite(obs["candidates"]).all() and np.isfinite(obs["context"]).all()
            assert obs["mask"][: nodes.size].all() and not obs["mask"][nodes.size : 8].any()
            state.place(w, int(nodes[0]))


def test_gpu_feeding_and_pressure_features_by_hand() -> None:
    p = _problem()
    state = ClusterState(p)
    obs, slots = observation(state, 1, k=4)  # the CPU-only job: fits g and c
    rows = {int(n): obs["candidates"][i] for i, n in enumerate(slots) if n >= 0}
    assert set(rows) == {0, 1}
    g = rows[0]
    # After the job, g keeps 2000/8000 CPU and 10240/16384 memory: at its own ratio that feeds
    # 0.25 * 2000 milli of the 1400 free -> 900 milli stranded; before, 0.75 fed all of it.
    assert g[C["gpu_unfed_after"]] == pytest.approx(900 / 2000)
    assert g[C["gpu_unfed_delta"]] == pytest.approx(900 / 2000)
    assert rows[1][C["gpu_unfed_after"]] == 0.0 and rows[1][C["gpu_unfed_delta"]] == 0.0  # no GPUs on c
    ctx = obs["context"]
    # both pods wait: 5000 m CPU of 22500 free, 300 milli-GPU of 1400 free
    assert ctx[X["pressure_cpu"]] == pytest.approx(5000 / 22500)
    assert ctx[X["pressure_gpu"]] == pytest.approx(300 / 1400)
    # the share pod on g: 5000 CPU and 11264 memory stay, which feed all of the 1100 milli left
    state.place(0, 0)
    obs, slots = observation(state, 1, k=4)
    assert obs["context"][X["pressure_cpu"]] == pytest.approx(4000 / 21500)
    assert obs["context"][X["pressure_gpu"]] == 0.0


def _identical_nodes_problem(cpu_allocated: list[int]):
    """Identical nodes in one domain, all running something: equal marginal gains, different fits."""
    return problem_from_dict({
        "resources": ["cpu", "memory"],
        "domains": [{"name": "z", "kind": "zone", "carbon_intensity": 200.0}],
        "nodes": [{"name": f"n{i}", "domain": "z", "capacity": {"cpu": 8000, "memory": 16384},
                   "allocated": {"cpu": a, "memory": 1024}} for i, a in enumerate(cpu_allocated)],
        "workloads": [{"name": "w", "requests": {"cpu": 1000, "memory": 1024}}],
    })


def test_preselect_breaks_ties_to_the_tighter_fit_then_the_lower_index() -> None:
    p = _identical_nodes_problem([2000, 1000, 3000, 1000, 3000, 500])
    state = ClusterState(p)
    gains = marginal(p, state, 0, np.arange(6))
    assert np.ptp(gains) < 1e-15  # a true tie on R
    # tightest first (3000 used: n2, n4), then n0 (2000), n1, n3 (1000), n5 (500)
    assert preselect(state, 0, 6)[0].tolist() == [2, 4, 0, 1, 3, 5]
    # the k-th place falls inside a tie: the tie is still decided by fit and index, not by partition order
    assert preselect(state, 0, 1)[0].tolist() == [2]
    assert preselect(state, 0, 2)[0].tolist() == [2, 4]
    assert preselect(state, 0, 4)[0].tolist() == [2, 4, 0, 1]
    assert all(preselect(state, 0, 4)[0].tolist() == [2, 4, 0, 1] for _ in range(5))


@pytest.mark.parametrize("seed", range(4))
def test_preselect_equals_a_full_sort_for_every_k(seed: int) -> None:
    """The partition shortcut keeps exactly the full sort's head: the best node is never dropped."""
    p = random_problem(100 + seed, nodes=40, pods=6)
    state = ClusterState(p)
    for w in range(p.num_workloads):
        feasible = np.flatnonzero(feasible_nodes(state, w))
        if feasible.size == 0:
            continue
        g = marginal(p, state, w, feasible)
        full = feasible[np.lexsort((feasible, state.free_share[feasible], -np.round(g, 12)))]
        for k in range(1, feasible.size + 2):
            nodes, gains, num = preselect(state, w, k)
            assert nodes.tolist() == full[:k].tolist()
            assert num == feasible.size and gains[0] == pytest.approx(g.max())


def test_features_are_finite_for_zero_capacities_no_gpus_and_missing_latency() -> None:
    base = problem_from_dict({
        "resources": ["cpu", "memory", "ephemeral"],
        "domains": [{"name": "a", "kind": "edge"}, {"name": "b", "kind": "cloud"}],
        "latency_ms": {"users": {"a": 5.0}},  # nothing known about b
        "nodes": [{"name": f"n{i}", "domain": "ab"[i % 2], "capacity": {"cpu": 4000, "memory": 8192, "ephemeral": 10}}
                  for i in range(4)],
        "workloads": [
            {"name": "limited", "requests": {"cpu": 1000}, "user_region": "users", "max_latency_ms": 20},
            {"name": "empty", "requests": {}},
            {"name": "free", "requests": {"cpu": 100}, "user_region": "users"},
        ],
    })
    # What a snapshot can hold but a problem file may not: zero capacities, no power figures.
    cap = base.capacity.copy()
    cap[:, 2] = 0.0
    cap[0, 1] = 0.0
    cap[3] = 0.0
    p = base.replace(capacity=cap, power_peak_w=np.zeros(4), power_idle_w=np.zeros(4))
    state = ClusterState(p)
    for w in range(p.num_workloads):
        obs, slots = observation(state, w, 4)
        assert np.isfinite(obs["candidates"]).all() and np.isfinite(obs["context"]).all(), w
        assert obs["mask"][:4].tolist() == (slots >= 0).astype(int).tolist()
    obs, slots = observation(state, 2, 4)  # no limit: n1 in b is a candidate (n3 has no capacity)
    rows = {int(n): obs["candidates"][i] for i, n in enumerate(slots) if n >= 0}
    assert set(rows) == {0, 1, 2}
    assert rows[0][C["latency"]] == pytest.approx(5 / 100) and rows[0][C["latency_slack"]] == 1.0
    # unknown latency reads as the worst (the objective scores it 0), not as 0 ms (was 0.0)
    assert rows[1][C["latency"]] == 2.0 and rows[1][C["latency_slack"]] == 1.0
    assert rows[1][C["gpu_free_after"]] == 0.0 and rows[1][C["gpu_unfed_after"]] == 0.0
