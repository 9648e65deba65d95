"""FGD and iro-frag keep, per pod shape, each node's fragmentation after placing that shape
(``Fgd.frag_after``), recomputing only the rows of nodes a pod landed on or left since: the
numbers must be those computed afresh, through placements, removals and evictions of shapes."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
import solvers.fgd as fgd
from iro_fed.model import ClusterState
from iro_fed.testing import random_problem
from solvers.fgd import pod_numbers

POLICIES = [("fgd", {}), ("iro-frag", {}), ("iro-frag", {"memory_aware": False}), ("iro-frag", {"scoring": "fgd"})]


def _walk(solver, p, rng: np.random.Generator, checked: list[int]) -> list[tuple[int, int, tuple[int, ...]]]:
    """Decide every pod in turn, removing a random placed pod now and then; every frag_after
    answer is compared with the rows computed afresh. Returns the decisions."""
    original = solver.frag_after

    def frag_after(state, w, candidates):
        after, fits = original(state, w, candidates)
        cpu, k, milli, _ = pod_numbers(p, w)
        mem_col = p.resource_index.get("memory")
        mem = float(p.demand[w, mem_col]) if solver.memory_aware and mem_col is not None else None
        fresh = solver._frag_after_rows(state, cpu, k, milli, mem, mem_col, candidates)
        np.testing.assert_array_equal(after, fresh)
        checked.append(candidates.size)
        return after, fits

    solver.frag_after = frag_after
    state = ClusterState(p)
    decisions = []
    for w in range(p.num_workloads):
        d = solver.decide(state, w)
        decisions.append((w, d.node, tuple(d.cards)))
        if d.node >= 0:
            state.place(w, d.node, d.cards)
        placed = np.flatnonzero(state.assignment >= 0)
        if placed.size and rng.random() < 0.3:
            state.remove(int(rng.choice(placed)))
    return decisions


@pytest.mark.parametrize(("name", "params"), POLICIES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_rows_equal_fresh_ones_through_placements_and_removals(name: str, params: dict, seed: int) -> None:
    p = random_problem(seed, nodes=12, pods=80)
    assert p.has_gpus
    checked: list[int] = []
    _walk(solvers.make(name, seed=seed, **params), p, np.random.default_rng(seed), checked)
    assert len(checked) > 20  # the comparison ran on most decisions


@pytest.mark.parametrize(("name", "params"), POLICIES[:2])
def test_evicting_shapes_changes_no_decision(name: str, params: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    p = random_problem(7, nodes=12, pods=80)
    kept = _walk(solvers.make(name, seed=0, **params), p, np.random.default_rng(0), [])
    # Room for about one shape at a time: shapes are dropped and computed again all along.
    monkeypatch.setattr(fgd, "AFTER_CACHE_CELLS", p.num_nodes)
    solver = solvers.make(name, seed=0, **params)
    evicted = _walk(solver, p, np.random.default_rng(0), [])
    assert evicted == kept
    assert len(solver._after) == 1 and solver._after_cells <= p.num_nodes * 16
