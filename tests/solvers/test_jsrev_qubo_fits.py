"""qubo's one-node fit check (``_BatchModel._fits``) and its per-shape candidate cache key are
``feasible_nodes`` and ``marginal`` in other form: checked against them on random problems with
every constraint (GPU shares and whole cards, node selectors, taints, latency limits, allowed
domains), on clusters partly filled and with overcommitted nodes (a snapshot's usage past
capacity), where the identity tests' problems have none."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dimod")

from iro_fed import problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.model import ClusterState, Problem
from iro_fed.objective import marginal
from iro_fed.testing import random_problem_doc
from solvers.qubo import _BatchModel, _greedy


def _state(seed: int, twins: bool = False) -> ClusterState:
    rng = np.random.default_rng(seed)
    doc = random_problem_doc(seed, int(rng.integers(2, 9)), int(rng.integers(3, 16)), constraints=True)
    if twins:  # each pod again, as it is (the cache's hits) or with one thing changed (misses)
        doc["workloads"] += [_twin(wl, rng) for wl in doc["workloads"]]
    p = problem_from_dict(doc)
    if seed % 2:  # some nodes used past their capacity
        allocated = p.allocated.copy()
        over = rng.random(p.num_nodes) < 0.4
        allocated[over] = p.capacity[over] * rng.uniform(0.9, 1.3, size=(int(over.sum()), p.capacity.shape[1]))
        p = p.with_cluster(allocated, p.gpu_free)
    state = ClusterState(p)
    for w in rng.permutation(p.num_workloads)[: p.num_workloads // 2]:
        fits = np.flatnonzero(feasible_nodes(state, int(w)))
        if fits.size:
            state.place(int(w), int(rng.choice(fits)))
    return state


def _twin(wl: dict, rng: np.random.Generator) -> dict:
    twin = {**wl, "name": wl["name"] + "-twin"}
    change = rng.integers(8)
    if change == 1:
        twin["node_selector"] = {} if wl.get("node_selector") else {"tier": "gold"}
    elif change == 2:
        twin["tolerations"] = [] if wl.get("tolerations") else [{"key": "dedicated", "operator": "Exists"}]
    elif change == 3:
        twin["allowed_domains"] = [] if wl.get("allowed_domains") else ["az-1", "cloud"]
    elif change == 4:
        twin["user_region"] = "users-b" if wl.get("user_region") == "users-a" else "users-a"
        twin["max_latency_ms"] = 25.0
    elif change == 5 and "gpu" in wl:
        twin["gpu"] = {**wl["gpu"], "models": [] if wl["gpu"].get("models") else ["T4"]}
    elif change == 6 and "gpu" in wl and wl["gpu"]["count"] == 1:
        twin["gpu"] = {**wl["gpu"], "milli": 1000 if wl["gpu"]["milli"] < 1000 else 500}
    elif change == 7:
        twin["requests"] = {**wl["requests"], "cpu": wl["requests"]["cpu"] * 2}
    return twin


@pytest.mark.parametrize("seed", range(0, 120, 3))
def test_fits_is_feasible_nodes_node_by_node(seed: int):
    state = _state(seed)
    p = state.problem
    model = _BatchModel(p, state, np.arange(p.num_workloads), 8, "unbalanced")
    for w in range(p.num_workloads):
        mask = feasible_nodes(state, w)
        assert [model._fits(state, w, n) for n in range(p.num_nodes)] == mask.tolist()


@pytest.mark.parametrize("seed", range(40))
def test_pods_with_one_cache_key_have_the_same_candidates_and_gains(seed: int):
    state = _state(seed, twins=True)
    p = state.problem
    groups: dict[tuple, list[int]] = {}
    for w in range(p.num_workloads):
        key = (
            p.demand[w].tobytes(), p.util_demand[w].tobytes(), int(p.wl_gpu_count[w]), int(p.wl_gpu_milli[w]),
            int(p.wl_region[w]), p.workloads[w].constraint_key,
        )
        groups.setdefault(key, []).append(w)
    for ws in groups.values():
        first = ws[0]
        for w in ws[1:]:
            assert feasible_nodes(state, w).tolist() == feasible_nodes(state, first).tolist()
            assert marginal(p, state, w).tolist() == marginal(p, state, first).tolist()


def candidates_pod_by_pod(p: Problem, state: ClusterState, pods: np.ndarray, k: int) -> tuple[list[int], list[int]]:
    """``_BatchModel``'s ``(pw, pn)`` as it built them pod by pod before the cache (feasible nodes
    ranked by marginal gain, the best k - 1 and the greedy reference node, or k without one)."""
    ref = state.copy()
    _greedy(p, ref, pods)
    pw, pn = [], []
    for i, w in enumerate(pods):
        n0 = int(ref.assignment[w])
        cand = np.flatnonzero(feasible_nodes(state, int(w)))
        if cand.size == 0:
            continue
        top = cand[np.argsort(-marginal(p, state, int(w), cand), kind="stable")[: k - (n0 >= 0)]]
        nodes = np.unique(np.concatenate([top, [n0]] if n0 >= 0 else [top]))
        pw += [i] * nodes.size
        pn += nodes.tolist()
    return pw, pn


@pytest.mark.parametrize("seed", range(40))
def test_the_batch_candidates_are_each_pods_own_best_nodes(seed: int):
    state = _state(seed, twins=True)
    p = state.problem
    pods = np.arange(p.num_workloads)
    for k in (1, 2, 8):
        model = _BatchModel(p, state, pods, k, "unbalanced")
        pw, pn = candidates_pod_by_pod(p, state, pods, k)
        assert model.pw.tolist() == pw and model.pn.tolist() == pn
