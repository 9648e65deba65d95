"""The hot paths' fast forms (scalar paths, cached per-workload constants, row views) give the
same bits as the vector code they replaced: each old form is kept here verbatim as a reference
and compared on random problems with float amounts (where summation order would show)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from iro_fed.feasibility import fit_tolerance, resource_fit, static_filter
from iro_fed.model import GPU_MILLI, ClusterState, Problem
from iro_fed.objective import _ratio, _utilization, coefficients, evaluate, marginal
from iro_fed.testing import random_problem

# --- the replaced code, verbatim ----------------------------------------------------------


def old_utilization(used_on: np.ndarray, cap_on: np.ndarray) -> float:
    valid = cap_on > 0
    if not valid.any():
        return 0.0
    shares = used_on[valid] / cap_on[valid]
    return float(shares.sum() / shares.size)


def old_marginal(problem: Problem, state: ClusterState, w: int, nodes: np.ndarray | None = None) -> np.ndarray:
    p = problem
    coef = coefficients(p)
    wts = p.weights

    def take(a: np.ndarray) -> np.ndarray:
        return a if nodes is None else a[nodes]

    size = p.num_nodes if nodes is None else len(nodes)
    base = wts.unplaced * _ratio(1.0, p.num_workloads)
    if size == 0:
        return np.zeros(0)
    d = p.util_demand[w]
    used_after = state.util_used_total + d
    u_before = old_utilization(state.util_used_total, state.util_cap_on)
    u_on = old_utilization(used_after, state.util_cap_on)
    cap_after = state.util_cap_on + coef.shape_capacity
    valid = cap_after > 0
    ratios = np.where(valid, used_after / np.where(valid, cap_after, 1.0), 0.0)
    u_off_shape = ratios.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)
    off_gain = wts.utilization * (u_off_shape - u_before)
    delta = take(coef.off_gain_base)
    delta = delta + off_gain[take(coef.capacity_shape)]
    delta = np.where(take(state.on), wts.utilization * (u_on - u_before), delta)
    delta += base
    region = int(p.wl_region[w])
    if region >= 0 and coef.n_with_region:
        delta += take(coef.latency_weighted[region])
    cpu = p.demand[w, p.cpu_index]
    if cpu:
        delta -= cpu * take(coef.carbon_per_milli_weighted)
    gpu = p.wl_gpu_total[w]
    if gpu:  # (not verbatim: the power model's GPU term, added after the hot paths)
        delta -= gpu * take(coef.carbon_per_gpu_milli_weighted)
    return delta


def old_resource_fit(state: ClusterState, w: int, nodes: np.ndarray | None = None) -> np.ndarray:
    p = state.problem
    demand = p.demand[w]
    free = state.free if nodes is None else state.free[nodes]
    tol = fit_tolerance(p) if nodes is None else fit_tolerance(p)[nodes]
    size = p.num_nodes if nodes is None else len(nodes)
    ok = np.ones(size, dtype=bool)
    for r in np.flatnonzero(demand > 0):
        ok &= free[:, r] + tol[:, r] >= demand[r]
    count = int(p.wl_gpu_count[w])
    if count > 0:
        milli = int(p.wl_gpu_milli[w])
        if count == 1 and milli < GPU_MILLI:
            gmax = state.gpu_max_free if nodes is None else state.gpu_max_free[nodes]
            ok &= gmax >= milli
        else:
            full = state.gpu_full if nodes is None else state.gpu_full[nodes]
            ok &= full >= count
    return ok


class OldState(ClusterState):
    """ClusterState with the former place / remove / card choice / GPU row refresh."""

    def _refresh_gpu_row(self, n: int) -> None:
        row = self.gpu_free[n].tolist()
        self.gpu_full[n] = row.count(GPU_MILLI)
        self.gpu_max_free[n] = max(row)
        self.gpu_left[n] = sum(v for v in row if v > 0)
        self.gpu_used[n] = float(sum(GPU_MILLI - v for v in row if v >= 0))

    def default_cards(self, w: int, n: int) -> tuple[int, ...]:
        p = self.problem
        k = int(p.wl_gpu_count[w])
        if k <= 0:
            return ()
        row = self.gpu_free[n]
        if k == 1 and p.wl_gpu_milli[w] < GPU_MILLI:
            milli = int(p.wl_gpu_milli[w])
            fits = np.flatnonzero(row >= milli)
            if fits.size == 0:
                raise ValueError("no card")
            return (int(fits[np.argmin(row[fits])]),)
        full = np.flatnonzero(row == GPU_MILLI)
        if full.size < k:
            raise ValueError("too few cards")
        return tuple(int(c) for c in full[:k])

    def place(self, w: int, n: int, cards: Sequence[int] | None = None) -> tuple[int, ...]:
        p = self.problem
        cards = self.default_cards(w, n) if cards is None else tuple(int(c) for c in cards)
        d = p.demand[w]
        self.allocated[n] += d
        self.free[n] -= d
        if cards:
            take = GPU_MILLI if p.wl_gpu_count[w] > 1 else int(p.wl_gpu_milli[w])
            for c in cards:
                self.gpu_free[n, c] -= take
            self._refresh_gpu_row(n)
            self.gpu_cards[w] = cards
        self.assignment[w] = n
        self.pods_on_node[n] += 1
        self.journal.append((w, n, 1))
        self.util_used_total += p.util_demand[w]
        self.util_free[n] -= p.util_demand[w]
        self.free_share[n] -= p.util_demand[w] @ p.util_inv_capacity[n]
        if not self.on[n]:
            self.on[n] = True
            self.util_cap_on += p.util_capacity[n]
        return cards

    def remove(self, w: int) -> None:
        n = int(self.assignment[w])
        p = self.problem
        self.allocated[n] -= p.demand[w]
        self.free[n] += p.demand[w]
        cards = self.gpu_cards.pop(w, ())
        if cards:
            give = GPU_MILLI if p.wl_gpu_count[w] > 1 else int(p.wl_gpu_milli[w])
            for c in cards:
                self.gpu_free[n, c] += give
            self._refresh_gpu_row(n)
        self.assignment[w] = -1
        self.pods_on_node[n] -= 1
        self.journal.append((w, n, -1))
        self.util_used_total -= p.util_demand[w]
        self.util_free[n] += p.util_demand[w]
        self.free_share[n] += p.util_demand[w] @ p.util_inv_capacity[n]
        if self.pods_on_node[n] == 0:
            base = self.base_allocated[n]
            self.allocated[n] = base
            self.free[n] = p.capacity[n] - base
            row = p.util_columns(base)
            used = np.append(row, self.gpu_used[n]) if p.has_gpus else row
            self.util_free[n] = p.util_capacity[n] - used
            self.free_share[n] = (self.util_free[n] * p.util_inv_capacity[n]).sum()
        if not self._node_is_on(n):
            self.on[n] = False
            self.util_cap_on -= p.util_capacity[n]


# --- helpers ------------------------------------------------------------------------------

STATE_ARRAYS = ("allocated", "free", "gpu_free", "assignment", "gpu_full", "gpu_max_free", "gpu_left", "gpu_used",
                "pods_on_node", "on", "util_used_total", "util_cap_on", "util_free", "free_share")


def float_problem(seed: int, nodes: int = 12, pods: int = 30, gpus: bool = True) -> Problem:
    """A random problem whose amounts are floats with many significant digits."""
    p = random_problem(seed, nodes=nodes, pods=pods, gpus=gpus)
    rng = np.random.default_rng(seed + 1000)
    capacity = p.capacity * rng.uniform(1.0, 1.7, p.capacity.shape)
    return p.replace(
        capacity=capacity,
        allocated=np.minimum(p.allocated * rng.uniform(0.5, 1.3, p.allocated.shape), capacity),
        demand=p.demand * rng.uniform(0.1, 1.3, p.demand.shape),
    )


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def random_walk(p: Problem, seed: int, steps: int = 120):
    """Yield (new state, old state) after each of ``steps`` random places and removes, on
    default or given cards, the same on both."""
    rng = np.random.default_rng(seed)
    new, old = ClusterState(p), OldState(p)
    for _ in range(steps):
        placed = np.flatnonzero(new.assignment >= 0)
        if placed.size and rng.random() < 0.35:
            w = int(rng.choice(placed))
            new.remove(w)
            old.remove(w)
        else:
            unplaced = np.flatnonzero(new.assignment < 0)
            if not unplaced.size:
                continue
            w = int(rng.choice(unplaced))
            fits = np.flatnonzero(static_filter(p, w).mask & old_resource_fit(old, w))
            if not fits.size:
                continue
            n = int(rng.choice(fits))
            cards = None
            if p.wl_gpu_count[w] and rng.random() < 0.3:  # explicit cards (the solvers' packing)
                cards = old.default_cards(w, n)
            assert new.place(w, n, cards) == old.place(w, n, cards)
        yield new, old


# --- tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", range(0, 11))
def test_utilization_scalar_path_gives_the_vector_bits(size):
    rng = np.random.default_rng(size)
    for _ in range(400):
        cap = rng.uniform(0, 1, size) * 10.0 ** rng.integers(-3, 10, size)
        cap[rng.random(size) < 0.25] = 0.0
        used = rng.uniform(0, 1.2, size) * cap + rng.uniform(0, 1, size) * 10.0 ** rng.integers(-6, 3, size)
        got, want = _utilization(used, cap), old_utilization(used, cap)
        assert type(got) is float
        assert got.hex() == want.hex()


@pytest.mark.parametrize("seed", range(6))
def test_place_and_remove_keep_every_aggregate_bit_identical(seed):
    p = float_problem(seed)
    for new, old in random_walk(p, seed):
        for name in STATE_ARRAYS:
            assert same_bits(getattr(new, name), getattr(old, name)), name
        assert new.gpu_cards == old.gpu_cards and new.journal == old.journal


@pytest.mark.parametrize("seed", range(6))
def test_marginal_fit_and_cards_as_before_along_a_random_walk(seed):
    p = float_problem(seed, gpus=seed % 3 != 0)
    rng = np.random.default_rng(seed)
    for i, (new, old) in enumerate(random_walk(p, seed, steps=60)):
        if i % 3:
            continue
        for w in range(p.num_workloads):
            subset = np.sort(rng.choice(p.num_nodes, size=int(rng.integers(1, p.num_nodes + 1)), replace=False))
            for nodes in (None, subset, subset[:1], np.array([], dtype=np.int64)):
                assert same_bits(marginal(p, new, w, nodes), old_marginal(p, old, w, nodes))
                assert same_bits(resource_fit(new, w, nodes), old_resource_fit(old, w, nodes))
            for n in range(p.num_nodes):
                try:
                    want = old.default_cards(w, n)
                except ValueError:
                    with pytest.raises(ValueError):
                        new.default_cards(w, n)
                else:
                    assert new.default_cards(w, n) == want


def test_marginal_when_every_node_is_on_skips_nothing_that_counts():
    """Every node already powered on (the shortcut that leaves the power-on terms out): the
    same bits as the full expression, and still the change of evaluate's R."""
    p = float_problem(3, nodes=6, pods=20, gpus=False)
    state = ClusterState(p)
    for n in range(p.num_nodes):  # one small pod on each node
        w = next(int(w) for w in np.flatnonzero(state.assignment < 0)
                 if static_filter(p, int(w)).mask[n] and resource_fit(state, int(w))[n])
        state.place(w, n)
    assert state.on.all()
    for w in np.flatnonzero(state.assignment < 0):
        got = marginal(p, state, int(w))
        assert same_bits(got, old_marginal(p, state, int(w)))
        before = evaluate(p, state.assignment).score
        for n in np.flatnonzero(static_filter(p, int(w)).mask & resource_fit(state, int(w))):
            after = state.assignment.copy()
            after[w] = n
            assert evaluate(p, after).score - before == pytest.approx(got[n], abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_evaluate_initial_usage_is_the_fresh_state_usage(seed):
    p = float_problem(seed)
    assert same_bits(coefficients(p).initial_used, ClusterState(p).util_used())
    assert not coefficients(p).initial_used.flags.writeable
    a = np.full(p.num_workloads, -1)
    first = evaluate(p, a)
    assert first.score == evaluate(p, a).score  # the cached base was copied, not added into


def test_gpu_row_refresh_with_an_overdrawn_card_counts_it_nowhere_as_before():
    """Explicit cards that do not fit drive a card below 0 (-300): the fast sums assume -1 or
    0..1000 and fall back to the former rule, which leaves it out of free and used milli."""
    p = random_problem(1, nodes=6, pods=12)
    gpu_nodes = np.flatnonzero(p.gpu_count >= 1)
    pods = np.flatnonzero((p.wl_gpu_count == 1) & (p.wl_gpu_milli < GPU_MILLI))
    if not gpu_nodes.size or not pods.size:
        pytest.skip("the seed has no share pod or no GPU node")
    new, old = ClusterState(p), OldState(p)
    n = int(gpu_nodes[0])
    for st in (new, old):
        st.gpu_free[n, 0] = 100
        st._refresh_gpu_row(n)
        st.place(int(pods[0]), n, (0,))  # takes 250..500 milli of a card with 100 free
    assert new.gpu_free[n, 0] < -1
    for name in ("gpu_full", "gpu_max_free", "gpu_left", "gpu_used"):
        assert same_bits(getattr(new, name), getattr(old, name)), name


def test_fit_requests_and_gpu_shape_are_the_problem_arrays():
    p = float_problem(5)
    for w in range(p.num_workloads):
        assert p.fit_requests(w) == tuple((int(r), float(p.demand[w, r])) for r in np.flatnonzero(p.demand[w] > 0))
        assert p.fit_requests(np.int64(w)) is p.fit_requests(w)
        assert p.gpu_shape[w] == (int(p.wl_gpu_count[w]), int(p.wl_gpu_milli[w]))
    assert static_filter(p, np.int64(2)) is static_filter(p, 2)


def test_feasible_nodes_returns_a_fresh_array_each_call():
    """Callers write into the mask (drain_nodes clears the node it empties): the static mask
    and-ed in place must not be the cached one, nor the result shared between calls."""
    from iro_fed.feasibility import feasible_nodes

    p = float_problem(2)
    st = ClusterState(p)
    for w in range(p.num_workloads):
        static = static_filter(p, w).mask.copy()
        first = feasible_nodes(st, w)
        want = static & old_resource_fit(st, w)
        assert same_bits(first, want)
        first[:] = ~first
        assert same_bits(feasible_nodes(st, w), want)
        assert same_bits(static_filter(p, w).mask, static)
