"""fgd and iro-frag on nodes with many GPU cards: a share pod's fragmentation is evaluated once per
distinct free milli of a node (not once per card, each over all cards), with every number and
decision equal to the straightforward per-card evaluation kept here as the reference."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.fragmentation import fragmentation, fragmentation_after_share, typical_tasks
from iro_fed.model import GPU_MILLI, Problem
from solvers.fgd import Fgd, pod_numbers
from solvers.iro_frag import IroFrag

SHARES = [50, 100, 250, 300, 470, 500, 530, 700, 810]


def many_card_problem(rng: np.random.Generator, cards: tuple[int, ...] = (1, 8, 64, 300)) -> Problem:
    """1-5 nodes of 1..300 cards (rows padded with -1), free milli from a few values or all
    distinct, and share, whole, multi-GPU and CPU-only pods, some limited to a GPU model."""
    palette = [*rng.choice(np.arange(0, GPU_MILLI + 1, 10), size=int(rng.integers(1, 6)), replace=False).tolist(), GPU_MILLI]
    nodes = []
    for i in range(int(rng.integers(1, 6))):
        g = int(rng.choice(cards))
        free = rng.integers(0, GPU_MILLI + 1, size=g) if rng.random() < 0.3 else rng.choice(palette, size=g)
        nodes.append({
            "name": f"n{i}", "domain": "az", "gpus": g, "gpu_model": str(rng.choice(["A", "B"])),
            "capacity": {"cpu": int(rng.choice([8000, 64000, 512000])), "memory": int(rng.choice([32768, 1048576]))},
            "gpu_free_milli": [int(x) for x in free],
        })
    workloads = []
    for j in range(int(rng.integers(5, 25))):
        wl: dict = {"name": f"w{j}", "requests": {"cpu": int(rng.choice([0, 1000, 8000])), "memory": int(rng.choice([0, 4096, 65536]))}}
        kind = rng.random()
        if kind < 0.55:
            wl["gpu"] = {"count": 1, "milli": int(rng.choice(SHARES))}
        elif kind < 0.8:
            wl["gpu"] = {"count": int(rng.integers(1, 5))}
        if "gpu" in wl and rng.random() < 0.2:
            wl["gpu"]["models"] = [str(rng.choice(["A", "B"]))]
        workloads.append(wl)
    return problem_from_dict({"domains": [{"name": "az"}], "nodes": nodes, "workloads": workloads})


def reference_after_share(tasks, nodes, cpu_left, cards, milli, memory_left, model, copies_weight) -> np.ndarray:
    """F after the share on each card, by evaluating the whole changed row of every fitting card."""
    out = np.full(cards.shape, np.inf)
    rows, fit = np.nonzero(cards >= milli)
    changed = cards[rows].copy()
    changed[np.arange(rows.size), fit] -= milli
    mem = None if memory_left is None else memory_left[rows]
    out[rows, fit] = fragmentation(tasks, nodes[rows], cpu_left[rows], changed, mem, model, copies_weight)
    return out


class _StraightforwardFrag:
    """frag_after as it was before: [C, G, G] variant rows, each evaluated over all its cards."""

    def frag_after(self, state, w, candidates):
        p = state.problem
        cpu, k, milli, _ = pod_numbers(p, w)
        cpu_after = state.free[candidates, p.cpu_index] - cpu
        mem_col = p.resource_index.get("memory")
        mem_after = state.free[candidates, mem_col] - p.demand[w, mem_col] if self.memory_aware and mem_col is not None else None
        cards = state.gpu_free[candidates]
        if k == 1 and milli < GPU_MILLI:
            c, g = cards.shape
            variants = np.repeat(cards[:, None, :], g, axis=1)
            fits = cards >= milli
            idx = np.arange(g)
            variants[:, idx, idx] -= np.where(fits, milli, 0).astype(variants.dtype)
            frag = self.fragment(
                np.repeat(candidates, g), np.repeat(cpu_after, g), variants.reshape(c * g, g),
                None if mem_after is None else np.repeat(mem_after, g),
            ).reshape(c, g)
            return np.where(fits, frag, np.inf), fits
        if k > 0:
            take = (cards == GPU_MILLI) & (np.cumsum(cards == GPU_MILLI, axis=1) <= k)
            cards = np.where(take, 0, cards)
        return self.fragment(candidates, cpu_after, cards, mem_after), np.ones(candidates.size, dtype=bool)


class ReferenceFgd(_StraightforwardFrag, Fgd):
    pass


class ReferenceIroFrag(_StraightforwardFrag, IroFrag):
    pass


@pytest.mark.parametrize("model", ["fgd", "copies", "blend"])
def test_share_fragmentation_equals_the_whole_changed_rows_bit_for_bit(model: str) -> None:
    rng = np.random.default_rng(7)
    for _ in range(12):
        problem = many_card_problem(rng)
        tasks = typical_tasks(problem)
        nodes = np.arange(problem.num_nodes)
        cpu_left = rng.integers(-1000, 300000, problem.num_nodes).astype(np.float64)
        memory = rng.integers(-100, 500000, problem.num_nodes).astype(np.float64)
        for milli in (0, 1, 250, 470, 999):
            for memory_left in (None, memory):
                want = reference_after_share(tasks, nodes, cpu_left, problem.gpu_free, milli, memory_left, model, 0.15)
                got = fragmentation_after_share(tasks, nodes, cpu_left, problem.gpu_free, milli, memory_left, model, 0.15)
                assert np.array_equal(got, want)


def test_share_fragmentation_rejects_a_negative_share() -> None:
    problem = many_card_problem(np.random.default_rng(0))
    tasks = typical_tasks(problem)
    with pytest.raises(ValueError, match="milli"):
        fragmentation_after_share(tasks, np.arange(problem.num_nodes), np.zeros(problem.num_nodes), problem.gpu_free, -1)


SETTINGS = [
    (Fgd, ReferenceFgd, {}),
    (IroFrag, ReferenceIroFrag, {}),
    (IroFrag, ReferenceIroFrag, {"frag_model": "copies", "scoring": "continuous"}),
    (IroFrag, ReferenceIroFrag, {"share_rule": "fgd", "gap_balance": 50.0, "memory_aware": False}),
    (IroFrag, ReferenceIroFrag, {"frag_model": "fgd", "tie_break": "best-fit"}),
]


@pytest.mark.parametrize(("solver", "reference", "params"), SETTINGS)
def test_many_card_placements_equal_the_per_card_reference(solver, reference, params) -> None:
    rng = np.random.default_rng(11)
    for trial in range(4):
        problem = many_card_problem(rng)
        got = solver(seed=trial, **params).solve(problem)
        want = reference(seed=trial, **params).solve(problem)
        assert got.assignment.tolist() == want.assignment.tolist()
        assert got.gpu_cards == want.gpu_cards
        # Every pod's scores and chosen card on the final cluster, too.
        state = ClusterState(problem)
        for w, node in enumerate(got.assignment.tolist()):
            if node >= 0:
                state.place(w, node, got.gpu_cards.get(w))
        a, b = solver(seed=trial, **params), reference(seed=trial, **params)
        a.reset(problem)
        b.reset(problem)
        for w in range(problem.num_workloads):
            cand = np.flatnonzero(feasible_nodes(state, w))
            if cand.size:
                assert np.array_equal(a.score(state, w, cand), b.score(state, w, cand))
                assert a._best_card == b._best_card


@pytest.mark.parametrize("solver", [Fgd, IroFrag])
def test_a_share_decision_on_many_cards_does_not_build_cards_squared_variants(solver) -> None:
    # Four nodes of 1024 cards (the most a node may list) holding 6 distinct free amounts. A
    # variant row over all 1024 cards for each card peaked at 84 MiB for one decision (4 x 1024 x
    # 1024 milli, as int32 and int64 copies); one per distinct amount peaks at 0.24 MiB.
    rng = np.random.default_rng(3)
    nodes = [
        {"name": f"n{i}", "domain": "az", "capacity": {"cpu": 512000, "memory": 1 << 21}, "gpus": 1024, "gpu_model": "A",
         "gpu_free_milli": rng.choice([0, 200, 470, 530, 800, 1000], size=1024).tolist()}
        for i in range(4)
    ]
    workloads = [{"name": "s", "requests": {"cpu": 1000}, "gpu": {"count": 1, "milli": 470}},
                 {"name": "g", "requests": {"cpu": 1000}, "gpu": {"count": 2}}]
    problem = problem_from_dict({"domains": [{"name": "az"}], "nodes": nodes, "workloads": workloads})
    policy = solver(seed=0)
    policy.reset(problem)
    state = ClusterState(problem)
    policy.sync(state)  # the per-node caches: linear in the cards
    tracemalloc.start()
    try:
        decision = policy.decide(state, 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decision.node >= 0 and problem.gpu_free[decision.node, decision.cards[0]] >= 470
    assert peak < 8 * 2**20, f"one share decision peaked at {peak / 2**20:.1f} MiB"
    reference = (ReferenceFgd if solver is Fgd else ReferenceIroFrag)(seed=0)
    reference.reset(problem)
    want = reference.decide(ClusterState(problem), 0)
    assert (decision.node, decision.cards) == (want.node, want.cards)
