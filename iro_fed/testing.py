"""Test support that ships with the library: random small problems, a brute-force oracle and
the conformance checks every registered solver must pass (used by ``tests/solvers``; a new
solver can run them on itself)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from iro_fed.feasibility import check_placement, feasible_nodes, over_capacity, static_filter
from iro_fed.model import GPU_MILLI, ClusterState, Problem
from iro_fed.objective import evaluate
from iro_fed.placement import STATUSES, Placement
from iro_fed.problem_io import problem_from_dict

GPU_MODELS = ("T4", "V100M32")


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition", interval: float = 0.05) -> Any:
    """The first truthy value of ``predicate``, polled every ``interval`` s; an AssertionError
    naming ``what`` after ``timeout`` s (for tests that wait on servers and processes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def random_problem_doc(
    seed: int, nodes: int = 4, pods: int = 5, gpus: bool = True, constraints: bool = True
) -> dict[str, Any]:
    """A small random problem document with every kind of constraint the model has."""
    rng = np.random.default_rng(seed)
    domains = [
        {"name": "edge-1", "kind": "edge", "carbon_intensity": float(rng.uniform(20, 500)),
         "price_per_hour": {"cpu": 0.05, "memory": 0.006, "gpu": 1.2}, "pue": 1.5},
        {"name": "az-1", "kind": "zone", "carbon_intensity": float(rng.uniform(20, 500)),
         "price_per_hour": {"cpu": 0.03, "memory": 0.004, "gpu": 2.5}, "pue": 1.2},
        {"name": "cloud", "kind": "cloud", "carbon_intensity": float(rng.uniform(20, 500)),
         "price_per_hour": {"cpu": 0.08, "memory": 0.01, "gpu": 3.0}, "pue": 1.1},
    ]
    latency = {
        "users-a": {"edge-1": 3.0, "az-1": float(rng.uniform(8, 30)), "cloud": float(rng.uniform(30, 90))},
        "users-b": {"edge-1": float(rng.uniform(20, 60)), "az-1": float(rng.uniform(5, 20)), "cloud": 40.0},
    }
    node_docs = []
    for i in range(nodes):
        cards = int(rng.choice([0, 0, 1, 2, 4])) if gpus else 0
        cap = {"cpu": int(rng.choice([2000, 4000, 8000, 16000])), "memory": int(rng.choice([4096, 8192, 16384, 32768]))}
        node: dict[str, Any] = {
            "name": f"n{i}",
            "domain": domains[int(rng.integers(3))]["name"],
            "capacity": cap,
            "allocated": {"cpu": int(rng.integers(0, 3)) * cap["cpu"] // 8, "memory": int(rng.integers(0, 3)) * cap["memory"] // 8},
            "labels": {"tier": str(rng.choice(["gold", "silver"]))},
        }
        if cards:
            node["gpus"] = cards
            node["gpu_model"] = str(rng.choice(GPU_MODELS))
            node["gpu_free_milli"] = [int(rng.choice([1000, 1000, 500, 250])) for _ in range(cards)]
        if constraints and rng.random() < 0.3:
            node["taints"] = [{"key": "dedicated", "value": "batch", "effect": str(rng.choice(["NoSchedule", "PreferNoSchedule"]))}]
        node_docs.append(node)
    wl_docs = []
    for j in range(pods):
        wl: dict[str, Any] = {
            "name": f"p{j}",
            "requests": {"cpu": int(rng.choice([250, 500, 1000, 2000, 4000])), "memory": int(rng.choice([256, 1024, 2048, 8192]))},
            "class": str(rng.choice(["online", "batch"])),
            "priority": int(rng.integers(0, 3)),
        }
        if gpus and rng.random() < 0.4:
            k = int(rng.choice([1, 1, 2]))
            wl["gpu"] = {"count": k, "milli": int(rng.choice([250, 500, 1000])) if k == 1 else 1000}
            if constraints and rng.random() < 0.3:
                wl["gpu"]["models"] = [str(rng.choice(GPU_MODELS))]
        if rng.random() < 0.6:
            wl["user_region"] = str(rng.choice(["users-a", "users-b"]))
            if constraints and rng.random() < 0.3:
                wl["max_latency_ms"] = float(rng.choice([10.0, 25.0, 60.0]))
        if constraints:
            if rng.random() < 0.3:
                wl["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
            if rng.random() < 0.2:
                wl["node_selector"] = {"tier": "gold"}
            if rng.random() < 0.15:
                wl["allowed_domains"] = ["az-1", "cloud"]
        wl_docs.append(wl)
    weights = {"utilization": 1.0, "latency": 1.0, "cost": 1.0, "carbon": 1.0, "unplaced": 10.0}
    return {"domains": domains, "latency_ms": latency, "nodes": node_docs, "workloads": wl_docs, "weights": weights}


def random_problem(seed: int, nodes: int = 4, pods: int = 5, gpus: bool = True, constraints: bool = True) -> Problem:
    return problem_from_dict(random_problem_doc(seed, nodes, pods, gpus, constraints))


def _card_options(state: ClusterState, w: int, n: int) -> list[tuple[int, ...]]:
    """Distinct card choices for w on n; cards with equal free milli are interchangeable."""
    p = state.problem
    k = int(p.wl_gpu_count[w])
    if k == 0:
        return [()]
    row = state.gpu_free[n]
    if k == 1 and p.wl_gpu_milli[w] < GPU_MILLI:
        fits = np.flatnonzero(row >= p.wl_gpu_milli[w])
        seen: dict[int, int] = {}
        for c in fits:
            seen.setdefault(int(row[c]), int(c))
        return [(c,) for c in seen.values()]
    full = np.flatnonzero(row == GPU_MILLI)
    return [tuple(int(c) for c in full[:k])] if full.size >= k else []


def all_placements(problem: Problem, limit: int = 500_000) -> Iterator[tuple[np.ndarray, dict[int, tuple[int, ...]]]]:
    """Every distinct placement that :func:`check_placement` accepts (unplaced allowed), by
    depth-first search in pod order.

    Capacity is tested as check_placement tests it (:func:`over_capacity` of each node's totals,
    added up in pod order as its ``np.add.at`` does), not by the filters: they subtract one pod at
    a time from what is free, which rounds otherwise, so at a rounding edge the search in index
    order missed placements that check_placement accepts and a solver found (then an optimum
    above the oracle's). Totals only grow, so a node past capacity stays past it: pruned there."""
    state = ClusterState(problem)  # the card choices
    used = problem.allocated.copy()
    count = 0

    def rec(w: int) -> Iterator[tuple[np.ndarray, dict[int, tuple[int, ...]]]]:
        nonlocal count
        if w == problem.num_workloads:
            count += 1
            if count > limit:
                raise ValueError(f"brute force: more than {limit} placements; use a smaller problem")
            yield state.assignment.copy(), dict(state.gpu_cards)
            return
        yield from rec(w + 1)  # w stays unplaced
        d = problem.demand[w]
        asks = d > 0
        for n in np.flatnonzero(static_filter(problem, w).mask):
            n = int(n)
            before = used[n].copy()
            used[n] += d
            if not over_capacity(problem, used[n], n)[asks].any():
                for cards in _card_options(state, w, n):
                    state.place(w, n, cards)
                    yield from rec(w + 1)
                    state.remove(w)
            used[n] = before  # restored exactly, not by a subtraction that rounds

    yield from rec(0)


def brute_force(problem: Problem, limit: int = 500_000) -> Placement:
    """The placement with the highest objective, by enumeration (tiny problems only)."""
    best: Placement | None = None
    best_score = -np.inf
    for assignment, cards in all_placements(problem, limit):
        score = evaluate(problem, assignment).score
        if score > best_score + 1e-12:
            best_score = score
            best = Placement(assignment=assignment, gpu_cards=cards, solver="brute-force", status="optimal")
    assert best is not None
    best.objective = evaluate(problem, best)
    return best


def conformance_failures(solver_name: str, problem: Problem, optimum: float | None = None, **params: Any) -> list[str]:
    """What a solver does wrong on ``problem`` (empty when it conforms).

    Checks: the placement respects capacity and every constraint; the reported objective is
    :func:`evaluate`'s; the status is known; every unplaced pod has a reason and pods that fit
    nowhere on the empty cluster are unplaced; the same seed gives the same answer (unless a
    wall-clock limit cut a run short, as ``info["wall_clock_cut"]`` says); the score is
    not above the brute-force ``optimum`` when one is given.
    """
    import solvers

    failures: list[str] = []
    placement = solvers.make(solver_name, **params).solve(problem)
    failures += [f"constraint: {v}" for v in check_placement(problem, placement.assignment, placement.gpu_cards)]
    if placement.objective is None:
        failures.append("no objective")
    else:
        ref = evaluate(problem, placement).score
        if not np.isclose(placement.objective.score, ref, rtol=0, atol=1e-9):
            failures.append(f"objective {placement.objective.score} != evaluate {ref}")
        if optimum is not None and placement.objective.score > optimum + 1e-9:
            failures.append(f"score {placement.objective.score} above the brute-force optimum {optimum}")
    if placement.status not in STATUSES:
        failures.append(f"unknown status {placement.status!r}")
    for w in range(problem.num_workloads):
        placed = placement.assignment[w] >= 0
        if not placed and not placement.reasons.get(w):
            failures.append(f"{problem.workloads[w].name}: unplaced without a reason")
        if placed and w in placement.reasons:
            failures.append(f"{problem.workloads[w].name}: placed but has a reason")
    empty = ClusterState(problem)
    for w in range(problem.num_workloads):
        if not static_filter(problem, w).mask.any() or not feasible_nodes(empty, w).any():
            if placement.assignment[w] >= 0:
                failures.append(f"{problem.workloads[w].name}: fits nowhere but was placed")
    again = solvers.make(solver_name, **params).solve(problem)
    # A solver promises the seed's placement only when no wall-clock limit cut it short (cpsat
    # names such phases in info["wall_clock_cut"]; on a loaded machine its 10 s can pass first).
    cut = placement.info.get("wall_clock_cut") or again.info.get("wall_clock_cut")
    if (not np.array_equal(placement.assignment, again.assignment) or placement.gpu_cards != again.gpu_cards) and not cut:
        failures.append("same seed gave a different placement")
    return failures
