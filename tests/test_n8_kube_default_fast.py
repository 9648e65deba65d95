"""kube-default's per-node tables kept from the journal, its windowed filter scan and its scores.

The tables (NonZeroRequested and usage per node in kube's units, the scan's room / GPU rows in
node-tree order) are refreshed per changed node in ``apply_changes``: after any sequence of
places and removes they must equal a fresh solver's recount of the same state. The scan tests
windows of the node order; it must find exactly the nodes (and advance ``nextStartNodeIndex``
exactly as far as) a scan over every node's ``feasible_nodes`` does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.problem_io import MIN_CAPACITY
from solvers.kube_default import PLUGIN_WEIGHTS, KubeDefault, kube_units

MIB = 1024 * 1024
ZONE = "topology.kubernetes.io/zone"


def random_problem(seed: int, n: int, pods: int, whole: bool, nonzero: bool) -> Any:
    """Nodes over three zones with partly used cpu / memory (fractional when not ``whole``), some
    with GPUs, some with a PreferNoSchedule or NoSchedule taint; pods of cpu / memory (some
    best-effort), some with a GPU share or whole cards, some tolerating the taints."""
    rng = np.random.default_rng(seed)

    def amount(high: float) -> float:
        v = float(rng.uniform(0, high))
        return v if not whole else float(int(v))

    nodes = []
    for i in range(n):
        cpu, mem = float(rng.choice([2000, 4000, 16000, 64000])), float(rng.choice([4096, 16384, 65536]))
        node: dict[str, Any] = {"name": f"n{i}", "domain": f"z{i % 3}", "capacity": {"cpu": cpu, "memory": mem},
                                "allocated": {"cpu": amount(cpu * 0.6), "memory": amount(mem * 0.6)},
                                "labels": {ZONE: f"z{i % 3}"}}
        if nonzero:
            node["nonzero_allocated"] = {"cpu": float(int(node["allocated"]["cpu"]) + 100),
                                         "memory": float(int(node["allocated"]["memory"]) + 200)}
        if rng.random() < 0.05:  # no allocatable cpu (the snapshot's stand-in): memory alone scores
            node["capacity"]["cpu"], node["allocated"]["cpu"] = MIN_CAPACITY, 0.0
            node.pop("nonzero_allocated", None)
            if nonzero:
                node["nonzero_allocated"] = {"cpu": 0.0, "memory": float(math.ceil(node["allocated"]["memory"]))}
        if rng.random() < 0.3:
            node.update(gpus=4, gpu_model="V100", gpu_free_milli=[int(v) for v in rng.choice([0, 500, 1000], size=4)])
        t = rng.random()
        if t < 0.2:
            node["taints"] = [{"key": "burst", "value": "true", "effect": "PreferNoSchedule"}]
        elif t < 0.25:
            node["taints"] = [{"key": "site", "value": "edge", "effect": "NoSchedule"}]
        nodes.append(node)
    workloads = []
    for i in range(pods):
        best_effort = rng.random() < 0.1
        wl: dict[str, Any] = {"name": f"p{i}", "requests": {} if best_effort else
                              {"cpu": amount(3000) + 1, "memory": amount(6000) + 1}}
        if not best_effort and rng.random() < 0.1:  # memory only: fits the nodes without cpu, which score memory alone
            wl["requests"]["cpu"] = 0.0
        g = rng.random()
        if g < 0.15:
            wl["gpu"] = {"count": 1, "milli": int(rng.choice([200, 500]))}
        elif g < 0.2:
            wl["gpu"] = {"count": 2, "milli": 1000}
        if rng.random() < 0.3:
            wl["tolerations"] = [{"key": "burst", "operator": "Exists"}]
        workloads.append(wl)
    doc = {"resources": ["cpu", "memory"], "domains": [{"name": f"z{i}"} for i in range(3)], "nodes": nodes,
           "workloads": workloads}
    return problem_from_dict(doc)


CACHES = ("_node_rows",)


def assert_caches_equal_a_recount(solver: KubeDefault, state: ClusterState) -> None:
    fresh = solvers.make("kube-default")
    fresh.reset(state.problem)
    fresh.sync(state)
    solver.sync(state)
    for name in CACHES:
        assert np.array_equal(getattr(solver, name), getattr(fresh, name)), name


@pytest.mark.parametrize(("whole", "nonzero"), [(True, False), (True, True), (False, False), (False, True)])
def test_node_tables_kept_from_the_journal_equal_a_recount(whole: bool, nonzero: bool) -> None:
    problem = random_problem(1, 40, 120, whole, nonzero)
    assert problem.initial_nonzero is not None if nonzero else problem.initial_nonzero is None
    rng = np.random.default_rng(2)
    solver = solvers.make("kube-default", seed=0)
    solver.reset(problem)
    state = ClusterState(problem)
    solver.sync(state)
    placed: list[int] = []
    for step in range(300):
        if placed and rng.random() < 0.4:
            # Removes, down to an empty node now and then (its usage returns to the base exactly).
            state.remove(placed.pop(int(rng.integers(len(placed)))))
        else:
            w = int(rng.integers(problem.num_workloads))
            if state.assignment[w] >= 0:
                continue
            d = solver.decide(state, w)
            if d.node < 0:
                continue
            state.place(w, d.node, d.cards)
            placed.append(w)
        if step % 3 == 0:  # a batch of one to three journal entries per sync
            assert_caches_equal_a_recount(solver, state)
    assert_caches_equal_a_recount(solver, state)


def full_scan(solver: KubeDefault, state: ClusterState, w: int) -> tuple[np.ndarray, int]:
    """The scan over every node's feasibility (the scan as it was): candidates and the next start."""
    n = state.problem.num_nodes
    positions = np.flatnonzero(feasible_nodes(state, w)[solver.node_order])
    start = solver.next_start_node_index
    i = int(np.searchsorted(positions, start))
    rotated = np.concatenate((positions[i:], positions[:i]))
    if rotated.size >= solver.num_to_find:
        rotated = rotated[: solver.num_to_find]
        processed = int((rotated[-1] - start) % n) + 1
    else:
        processed = n
    return solver.node_order[rotated], (start + processed) % n


@pytest.mark.parametrize("percentage", [0, 5, 40, 100])
def test_the_windowed_scan_finds_what_a_scan_of_every_node_finds(percentage: int) -> None:
    problem = random_problem(3, 600, 400, True, False)
    solver = solvers.make("kube-default", seed=0, percentage_of_nodes_to_score=percentage)
    solver.reset(problem)
    state = ClusterState(problem)
    sizes = set()
    for w in range(problem.num_workloads):
        want, next_start = full_scan(solver, state, w)
        got = solver.candidates(state, w)
        assert got.tolist() == want.tolist()
        assert solver.next_start_node_index == next_start
        sizes.add(got.size < solver.num_to_find)
        if got.size:
            node = int(got[solver.choose(state, w, got)])
            state.place(w, node, solver.choose_cards(state, w, node))
    assert sizes == ({False, True} if percentage < 100 else {True})  # scans that filled up and ones that ran out


def least_allocated(requested: int, allocatable: int) -> int:
    """Upstream's ``leastRequestedScore`` of one resource (least_allocated.go): the reference."""
    if allocatable == 0 or requested > allocatable:
        return 0
    return (allocatable - requested) * 100 // allocatable


def reference_scores(solver: KubeDefault, state: ClusterState, w: int, cand: np.ndarray) -> dict[str, list[int]]:
    """Fit, BalancedAllocation and TaintToleration from the formulas (a whole problem): the
    node's NonZeroRequested is its base (given, else its usage) plus each placed pod's non-zero
    request (less its actual one when the usage holds it)."""
    p = state.problem
    scales = [1, MIB]
    pod_actual = kube_units(p.demand, np.array(scales, dtype=np.float64))
    nz_given = p.initial_nonzero is not None
    pod_nz = kube_units(p.nonzero_demand, np.array(scales, dtype=np.float64)) if p.nonzero_demand is not None else \
        np.where(pod_actual == 0, np.array([100, 200 * MIB]), pod_actual)
    fit, balanced, taint = [], [], []
    prefer = [i for i, t in enumerate(p.taint_table[0]) if t.effect == "PreferNoSchedule"]
    tolerates = bool(p.workloads[w].tolerations)
    counts = [0 if tolerates else int(sum(p.taint_table[1][n, c] for c in prefer)) for n in cand]
    for n in cand.tolist():
        shares, fractions, scored = [], [], 0
        for j, scale in enumerate(scales):
            cap = 0 if p.capacity[n, j] <= MIN_CAPACITY else int(kube_units(p.capacity[n, j], scale))  # none of it
            used = int(math.ceil(state.allocated[n, j] * scale))
            placed = [v for v in np.flatnonzero(state.assignment == n).tolist()]
            add = sum(int(pod_nz[v, j]) - (0 if nz_given else int(pod_actual[v, j])) for v in placed)
            base = int(kube_units(p.initial_nonzero[n, j], scale)) if nz_given else used
            requested = base + add + int(pod_nz[w, j])
            shares.append(least_allocated(requested, cap))
            fractions.append(min((used + int(pod_actual[w, j])) / max(cap, 1), 1.0))
            scored += cap > 0
        fit.append(sum(shares) // max(scored, 1))  # over the resources with allocatable > 0
        std = abs((fractions[0] - fractions[1]) / 2) if scored == 2 else 0.0
        balanced.append(0 if not pod_actual[w].any() else int((1 - std) * 100))
        high = max(counts)
        taint.append(100 if high == 0 else 100 - 100 * counts[len(fit) - 1] // high)
    return {"NodeResourcesFit": fit, "NodeResourcesBalancedAllocation": balanced, "TaintToleration": taint}


@pytest.mark.parametrize("nonzero", [False, True])
def test_scores_are_the_plugin_formulas_over_a_run(nonzero: bool) -> None:
    problem = random_problem(4, 30, 80, True, nonzero)
    solver = solvers.make("kube-default", seed=0)
    solver.reset(problem)
    state = ClusterState(problem)
    rng = np.random.default_rng(5)
    for w in range(problem.num_workloads):
        if w % 7 == 6:
            gone = np.flatnonzero(state.assignment >= 0)
            if gone.size:
                state.remove(int(rng.choice(gone)))
        cand = solver.candidates(state, w)
        if not cand.size:
            continue
        got = solver.plugin_scores(state, w, cand)
        want = reference_scores(solver, state, w, cand)
        for name, values in want.items():
            assert got[name].tolist() == values, (w, name)
        assert got["NodeAffinity"].tolist() == [0] * cand.size
        total = sum(PLUGIN_WEIGHTS[name] * np.array(v) for name, v in got.items())
        assert solver.score(state, w, cand).tolist() == total.astype(float).tolist()
        node = int(cand[solver.choose(state, w, cand)])
        state.place(w, node, solver.choose_cards(state, w, node))


@pytest.mark.parametrize(("demand", "fit"), [(1.0, 49), (0.5, 49)])
def test_a_node_usage_with_float_noise_rounds_up_as_a_recount_does(demand: float, fit: int) -> None:
    # 100m plus float noise is 100m (kube_units' tolerance): the node refreshed after a place
    # must round it as the recount does. Whole demand: 100 + 1 -> 101m, + the pod's 1m -> (200 -
    # 102) * 100 // 200 = 49 (50 would be 101m, 48 the noise taken as a millicore); half
    # millicores: 100m + 1m (0.5 rounds up) + 1m alike.
    noisy = 100.0 + 1e-14
    assert noisy != 100.0
    doc = {"resources": ["cpu"], "domains": [{"name": "az"}],
           "nodes": [{"name": "n", "domain": "az", "capacity": {"cpu": 200}, "allocated": {"cpu": noisy}}],
           "workloads": [{"name": f"p{i}", "requests": {"cpu": demand}} for i in range(2)]}
    problem = problem_from_dict(doc)
    solver = solvers.make("kube-default")
    solver.reset(problem)
    state = ClusterState(problem)
    solver.sync(state)
    state.place(0, 0)
    assert_caches_equal_a_recount(solver, state)
    assert solver.plugin_scores(state, 1, np.array([0]))["NodeResourcesFit"].tolist() == [fit]


def test_new_states_of_a_run_start_from_the_problems_tables_not_a_changed_states() -> None:
    # A state with an empty journal takes a copy of the first such state's tables: places on
    # one state must not show in the next one's (the extender builds a state per snapshot).
    problem = random_problem(6, 50, 60, True, False)
    solver = solvers.make("kube-default", seed=0)
    solver.reset(problem)
    for _ in range(3):
        state = ClusterState(problem)
        assert_caches_equal_a_recount(solver, state)
        for w in range(0, problem.num_workloads, 3):
            d = solver.decide(state, w)
            if d.node >= 0:
                state.place(w, d.node, d.cards)
        assert_caches_equal_a_recount(solver, state)
