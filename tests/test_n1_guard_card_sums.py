"""The GPU guard's per-node whole-card sums (n1) and its answers against the rule itself.

``GpuStrandingGuard`` keeps, per node, the sums over the unplaced multi-card pods that could
run there (``_card_sums``: the milli of the copies a share would break, the pods' count and per
whole-card count the milli they would lose), patched from the journal as pods come and go. They
must equal a recount from the state after any sequence of placements and removals, and
``strands`` (its Python path for a few nodes, the gathered and the dense array paths) must answer
as the rule computed from scratch: fed-resource and whole-card stranding, a node keeping room
only while another unplaced GPU pod could use it.
"""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed.model import GPU_MILLI, ClusterState, Problem
from iro_fed.testing import random_problem
from solvers.gpu_guard import _FULL, _SHARED, _WAITING, STRAND_TOL_MILLI, GpuStrandingGuard
from tests.solvers.test_m8_guard_fast_paths import _doc, _node, _pod
from tests.solvers.test_m8_guard_fast_paths import _problem as m8_problem


def _problem(seed: int):
    # multi-card pods of 2, 4 and 8 cards (8 twice as often), shares, single cards and CPU pods
    return m8_problem(seed, num_nodes=24, num_pods=80, multi=(2, 4, 8, 8))


def _states(problem, seed: int):
    """States along random placements (greedy-objective's choices) and removals, with the solver
    whose guard followed them through the journal (removals of multi-card pods included)."""
    solver = solvers.make("greedy-objective")
    state = ClusterState(problem)
    rng = np.random.default_rng(seed)
    for w in rng.permutation(problem.num_workloads).tolist():
        decision = solver.decide(state, w)
        if decision.node >= 0:
            state.place(w, decision.node, decision.cards)
        if rng.random() < 0.3:
            placed = np.flatnonzero(state.assignment >= 0)
            if placed.size:
                for v in rng.choice(placed, min(placed.size, int(rng.integers(1, 3))), replace=False).tolist():
                    state.remove(v)
        solver.sync(state)
        yield solver, state


def _waiting(guard: GpuStrandingGuard, state: ClusterState, besides: int = -1) -> np.ndarray:
    """[K, N] the unplaced multi-card pods of each size that could run on each node, counted pod
    by pod from the state (``besides`` left out)."""
    out = np.zeros((guard.multi_cards.size, guard.problem.num_nodes), dtype=np.int64)
    for v in np.flatnonzero((state.assignment < 0) & (guard.group_of >= 0)).tolist():
        g = int(guard.group_of[v])
        if v != besides and guard.group_multi[g] >= 0:
            out[guard.group_multi[g]] += guard.runs[g]
    return out


def _covered(guard: GpuStrandingGuard, state: ClusterState, besides: int = -1) -> np.ndarray:
    """[N] groups with an unplaced pod (``besides`` left out) that could run on each node."""
    groups = {int(guard.group_of[v]) for v in np.flatnonzero((state.assignment < 0) & (guard.group_of >= 0)).tolist()
              if v != besides}
    return sum((guard.runs[g].astype(np.int64) for g in groups), np.zeros(guard.problem.num_nodes, dtype=np.int64))


def _recount(guard: GpuStrandingGuard, state: ClusterState) -> dict[str, np.ndarray]:
    """The card rows of the table, from the state and the formula (copies of m cards per node)."""
    waiting = _waiting(guard, state)
    keep = (state.gpu_left > 0) & (_covered(guard, state) > 0)
    full = state.gpu_full.astype(np.int64)
    shared = np.zeros(full.size, dtype=np.int64)
    lost = np.zeros((guard.whole_cards.size, full.size), dtype=np.int64)
    for i, m in enumerate(guard.multi_cards.tolist()):
        shared += waiting[i] * m * GPU_MILLI * (full % m == 0)
        for j, k in enumerate(guard.whole_cards.tolist()):
            lost[j] += waiting[i] * (m * GPU_MILLI * (full // m - (full - k) // m) - k * GPU_MILLI)
    return {"waiting": waiting.sum(axis=0), "shared": shared * keep, "lost": lost * keep, "keep": keep}


@pytest.mark.parametrize("seed", range(4))
def test_card_sums_kept_from_the_journal_equal_a_recount(seed):
    problem = _problem(seed)
    checked = 0
    for solver, state in _states(problem, seed):
        guard = solver.guard
        assert guard.multi_cards.tolist() == [2, 4, 8]
        want = _recount(guard, state)
        table = guard.table
        assert np.array_equal(guard.keepable, want["keep"])
        assert np.array_equal(guard.waiting_multi, _waiting(guard, state))
        assert np.array_equal(table[_WAITING], want["waiting"])
        assert np.array_equal(table[_SHARED], want["shared"])
        assert np.array_equal(table[guard._whole], want["lost"])
        assert np.array_equal(table[_FULL], state.gpu_full)
        fresh = GpuStrandingGuard(problem)
        fresh.rebuild(state)
        assert np.array_equal(table, fresh.table)
        checked += int(want["lost"].any())
    assert checked  # some states had copies a placement would break


def _reference(guard: GpuStrandingGuard, state: ClusterState, w: int) -> np.ndarray:
    """[N] the rule from scratch: placing w strands where the node keeps room for another
    unplaced GPU pod and the placement grows its fed-resource or whole-card stranding."""
    p = guard.problem
    unplaced = state.assignment[w] < 0
    g = int(guard.group_of[w])
    others = w if unplaced else -1  # w keeps no room for itself
    keep = state.gpu_left > 0
    if not guard.online:
        keep &= _covered(guard, state, besides=others) > 0
    gpu = int(p.wl_gpu_total[w])
    grown = np.zeros(p.num_nodes, dtype=bool)
    inv = np.where(guard.need > 0, 1.0 / np.where(guard.need > 0, guard.need, 1.0), np.inf)
    k, milli = p.gpu_shape[w]
    share = k == 1 and milli < GPU_MILLI
    waiting = _waiting(guard, state, besides=others)
    for n in range(p.num_nodes):
        if not keep[n]:
            continue
        left = int(state.gpu_left[n])
        cols = guard.cols.tolist()
        if cols:
            before = min(max(float(state.free[n, c]), 0.0) * inv[n, c] if guard.need[n, c] > 0 else np.inf for c in cols)
            after = min(max(float(state.free[n, c]) - float(p.demand[w, c]), 0.0) * inv[n, c] if guard.need[n, c] > 0
                        else np.inf for c in cols)
            if max(left - gpu - after, 0.0) > max(left - before, 0.0) + STRAND_TOL_MILLI:
                grown[n] = True
        if gpu and guard.multi_cards.size:
            partial = max((v for v in state.gpu_free[n].tolist() if 0 <= v < GPU_MILLI), default=-1)
            full = int(state.gpu_full[n])
            taken = int(partial < milli) if share else k
            lost = sum(int(waiting[i, n]) * (m * GPU_MILLI * (full // m - (full - taken) // m) - gpu)
                       for i, m in enumerate(guard.multi_cards.tolist()))
            grown[n] |= lost > 0
    assert g >= 0 or gpu == 0
    return grown


def _cpu_pods_only(seed: int):
    # GPU nodes, no GPU pods: the online guard (each card needs its share of the node as provisioned)
    rng = np.random.default_rng(seed)
    nodes = [_node(f"n{i}", 16000, int(rng.choice([1, 2, 4])), i) for i in range(20)]
    pods = [_pod(f"cpu{i}", 1000 + 1500 * int(rng.integers(0, 6))) for i in range(40)]
    return _doc(nodes, pods)


@pytest.mark.parametrize("problem_of", [_problem, _cpu_pods_only, lambda seed: random_problem(900 + seed, nodes=30, pods=50)],
                         ids=["multi-card", "online", "random"])
def test_strands_answers_as_the_rule_on_every_path(problem_of):
    rng = np.random.default_rng(5)
    checked = 0
    for seed in range(2):
        problem = problem_of(seed)
        for step, (solver, state) in enumerate(_states(problem, seed)):
            if step % 3:
                continue
            guard = solver.guard
            if guard is None:
                break
            nodes = np.arange(problem.num_nodes)
            some = np.sort(rng.choice(problem.num_nodes, 12, replace=False))  # gathered (more than 8, under half)
            few = np.sort(rng.choice(problem.num_nodes, 5, replace=False))  # the Python path
            for v in rng.choice(problem.num_workloads, 6, replace=False).tolist():
                want = _reference(guard, state, v)
                for at in (nodes, some, few):
                    got = guard.strands(state, v, at)
                    assert np.array_equal(np.zeros(at.size, bool) if got is None else got, want[at]), (v, at)
                assert [guard.strands_at(state, v, n) for n in few.tolist()] == want[few].tolist(), v
                checked += int(want.any())
    assert checked


def _wide_ties() -> Problem:
    # many alike GPU nodes (ties of dozens of nodes, partly used so that their fits differ)
    nodes = []
    for i in range(60):
        node = _node(f"g{i}", 16000 + 4000 * (i % 2), 4 if i % 4 else 8, i)
        node["domain"] = "green" if i % 3 else "grey"
        nodes.append(node)
    pods = []
    for i in range(150):
        kind = i % 5
        if kind == 0:
            pods.append(_pod(f"web{i}", 2000 + 500 * (i % 4)))
        elif kind == 1:
            pods.append(_pod(f"share{i}", 1000 + 1000 * (i % 3), 1, 300 + 100 * (i % 5)))
        elif kind == 2:
            pods.append(_pod(f"one{i}", 3000, 1))
        else:
            pods.append(_pod(f"multi{i}", 4000, 2 if kind == 3 else 8))
    return _doc(nodes, pods)


@pytest.mark.parametrize(("chunk", "start"), [(1, 0), (4, 0), (32, 2048)])
def test_decide_with_and_without_the_chunk_of_best_fits_chooses_as_the_rule(monkeypatch, chunk, start):
    # Ties of up to _CHUNK_FROM nodes are asked about whole after the best fit; larger ones
    # about a chunk of the best fits first: either way decide chooses select's node on score.
    from solvers import heuristics

    monkeypatch.setattr(heuristics, "_FIT_CHUNK", chunk)
    monkeypatch.setattr(heuristics, "_CHUNK_FROM", start)
    problem = _wide_ties()
    solver = solvers.make("greedy-objective")
    state = ClusterState(problem)
    for w in range(problem.num_workloads):
        decision = solver.decide(state, w)
        cand = solver.candidates(state, w)
        want = int(cand[solver.select(state, w, cand, solver.score(state, w, cand))]) if cand.size else -1
        assert decision.node == want, w
        if decision.node >= 0:
            state.place(w, decision.node, decision.cards)
