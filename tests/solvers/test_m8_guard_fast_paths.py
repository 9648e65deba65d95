"""The GPU guard's faster paths (m8) answer as the float formula they replaced.

``_card_growth`` with several multi-card sizes now works in int64 on ``full % k``, and
``_grown_few`` (Python, a few nodes) no longer falls back to the arrays for several sizes or
for a multi-card pod: both must give the answers of the original float expression.
"""

from __future__ import annotations

import numpy as np

import solvers
from iro_fed import problem_from_dict
from iro_fed.model import GPU_MILLI, ClusterState, Problem
from solvers.gpu_guard import _FULL, _PARTIAL, STRAND_TOL_MILLI, GpuStrandingGuard


# The GPU-guard tests' problem builders (n1, n9 and n10 use them too).
def _node(name: str, cpu: int, gpus: int, used: int) -> dict:
    node = {
        "name": name, "domain": "green" if used % 2 else "grey", "capacity": {"cpu": cpu, "memory": 65536},
        "allocated": {"cpu": 1000 * (used % 4), "memory": 2048 * (used % 3)},
    }
    if gpus:
        node.update(gpus=gpus, gpu_model="A10")
    return node


def _pod(name: str, cpu: int, count: int = 0, milli: int = GPU_MILLI) -> dict:
    pod = {"name": name, "requests": {"cpu": cpu, "memory": 1024}}
    if count:
        pod["gpu"] = {"count": count, "milli": milli}
    return pod


def _doc(nodes: list[dict], pods: list[dict]) -> Problem:
    price = {"cpu": 0.03, "memory": 0.004, "gpu": 2.0}
    domains = [{"name": z, "kind": "zone", "carbon_intensity": ci, "price_per_hour": price, "pue": 1.2}
               for z, ci in (("green", 50.0), ("grey", 400.0))]
    return problem_from_dict({"domains": domains, "nodes": nodes, "workloads": pods})


def _problem(seed: int, num_nodes: int = 30, num_pods: int = 90, multi: tuple[int, ...] = (2, 4, 8)) -> Problem:
    # multi-card pods of the sizes ``multi``, shares, single cards and CPU pods on 1-8 card nodes
    rng = np.random.default_rng(seed)
    nodes = [_node(f"n{i}", 16000 + 8000 * int(rng.integers(0, 3)), int(rng.choice([1, 2, 4, 8])), i)
             for i in range(num_nodes)]
    pods = []
    for i in range(num_pods):
        kind = int(rng.integers(0, 3 + len(multi)))
        if kind == 0:
            pods.append(_pod(f"cpu{i}", 1000 + 500 * int(rng.integers(0, 6))))
        elif kind == 1:
            pods.append(_pod(f"share{i}", 1000, 1, int(rng.choice([100, 250, 500, 700]))))
        elif kind == 2:
            pods.append(_pod(f"one{i}", 2000, 1))
        else:
            pods.append(_pod(f"multi{i}", 3000, multi[kind - 3]))
    return _doc(nodes, pods)


def _old_card_growth(guard: GpuStrandingGuard, rows: np.ndarray, w: int, nodes: np.ndarray, own_group: int) -> np.ndarray:
    """The general case of _card_growth before m8 (float floor division, float sum)."""
    k, milli = guard.problem.gpu_shape[w]
    share = k == 1 and milli < GPU_MILLI
    full_before = rows[_FULL]
    full_after = full_before - (rows[_PARTIAL] < milli) if share else full_before - k
    pods = guard.waiting_multi[:, nodes]
    if own_group >= 0 and guard.group_multi[own_group] >= 0:
        pods = pods.copy()
        pods[guard.group_multi[own_group]] -= guard.runs[own_group, nodes]
    ks = guard.multi_cards[:, None]
    lost = ks * GPU_MILLI * (full_before // ks - full_after // ks) - float(guard.problem.wl_gpu_total[w])
    return ((pods * lost).sum(axis=0) > STRAND_TOL_MILLI) & guard.keepable[nodes]


def test_card_growth_and_few_nodes_answer_as_the_float_formula():
    checked = 0
    for seed in range(4):
        problem = _problem(seed)
        solver = solvers.make("greedy-objective")
        state = ClusterState(problem)
        rng = np.random.default_rng(seed)
        for w in rng.permutation(problem.num_workloads).tolist():
            decision = solver.decide(state, w)
            if decision.node >= 0:
                state.place(w, decision.node, decision.cards)
            if rng.random() < 0.15:
                placed = np.flatnonzero(state.assignment >= 0)
                if placed.size:
                    state.remove(int(rng.choice(placed)))
            solver.sync(state)
            guard = solver.guard
            assert guard.multi_cards.tolist() == [2, 4, 8]
            nodes = np.arange(problem.num_nodes)
            rows = guard.table
            gpu_pods = np.flatnonzero(problem.wl_gpu_total > 0)
            unplaced = gpu_pods[state.assignment[gpu_pods] < 0]  # a multi-card pod keeps no room for itself
            for v in np.concatenate([rng.choice(gpu_pods, 3), unplaced[:6]]).tolist():
                g = int(guard.group_of[v])
                own = g if g >= 0 and state.assignment[v] < 0 else -1
                new = guard._card_growth(rows, v)
                old = _old_card_growth(guard, rows, v, nodes, own)
                assert np.array_equal(new, old), v
                assert guard._grown_few(state, v, nodes.tolist()) == guard._grown(state, v, nodes).tolist(), v
                checked += int(old.any())
    assert checked > 0  # the card rule did strand some placements
