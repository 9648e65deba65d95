"""The search's regret neighbourhoods (solvers.cpsat._regret_nodes) and the objective's
node-dependent pair values they read (iro_fed.objective.pair_values)."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.feasibility import feasible_nodes
from iro_fed.model import ClusterState
from iro_fed.objective import marginal, pair_values
from iro_fed.testing import random_problem
from solvers.cpsat import _neighbourhood, _regret_nodes, _search_pools


@pytest.mark.parametrize("seed", range(6))
def test_pair_values_are_what_tells_two_on_nodes_apart_in_the_marginal(seed: int) -> None:
    p = random_problem(seed, nodes=6, pods=8)
    state = ClusterState(p)
    for n in range(p.num_nodes):  # every node on: the marginal's power-on part is then the same
        if not state.on[n]:
            state.set_node_usage(n, p.capacity[n] * 0.01, state.gpu_free[n].copy())
    assert state.on.all()
    nodes = np.arange(p.num_nodes)
    for w in range(p.num_workloads):
        diff = marginal(p, state, w) - pair_values(p, np.full(p.num_nodes, w), nodes)
        assert np.allclose(diff, diff[0], rtol=0, atol=1e-12)  # the rest is the same on every node
    grid = pair_values(p, np.arange(p.num_workloads)[:, None], nodes[None, :])
    assert grid.shape == (p.num_workloads, p.num_nodes)
    assert np.allclose(grid[3], pair_values(p, np.full(p.num_nodes, 3), nodes))


def _placed_everywhere(seed: int) -> tuple:
    p = random_problem(seed, nodes=8, pods=10, gpus=False, constraints=False)
    state = ClusterState(p)
    for w in range(p.num_workloads):  # each pod on the node where it is worth least: regret everywhere
        fits = np.flatnonzero(feasible_nodes(state, w))
        if fits.size:
            state.place(w, int(fits[np.argmin(pair_values(p, np.full(fits.size, w), fits))]))
    return p, state


@pytest.mark.parametrize("seed", range(4))
def test_a_regret_neighbourhood_holds_a_pod_and_nodes_where_it_is_worth_more(seed: int) -> None:
    p, state = _placed_everywhere(seed)
    pools = _search_pools(p)
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(20):
        nodes = _regret_nodes(p, state, pools, 3, rng)
        if nodes is None:
            continue
        found += 1
        assert 2 <= nodes.size <= 3 and np.array_equal(nodes, np.unique(nodes))
        # Some pod on one of the nodes is worth more on every other node of the neighbourhood.
        pods = [w for w in np.flatnonzero(np.isin(state.assignment, nodes))]
        assert any(
            all(pair_values(p, np.array([w]), np.array([m]))[0] > pair_values(p, np.array([w]), state.assignment[[w]])[0]
                for m in nodes if m != state.assignment[w])
            for w in pods
        )
    assert found  # the pods were placed where they are worth least: some have regret
    # Larger: the nodes of up to k // 2 pods with regret, and nodes where the first is worth more.
    for _ in range(10):
        nodes = _regret_nodes(p, state, pools, 6, rng)
        if nodes is not None:
            assert 2 <= nodes.size <= 6 and np.array_equal(nodes, np.unique(nodes))
            assert state.on[nodes].all()


def test_no_regret_neighbourhood_where_every_pod_is_at_its_best_node() -> None:
    p = random_problem(0, nodes=8, pods=6, gpus=False, constraints=False)
    state = ClusterState(p)
    pools = _search_pools(p)
    for w in range(p.num_workloads):
        admitted = np.flatnonzero(pools.static[w])
        best = admitted[np.argmax(pair_values(p, np.full(admitted.size, w), admitted))]
        if feasible_nodes(state, w)[best]:
            state.place(w, int(best))
    assert (state.assignment >= 0).any()
    assert _regret_nodes(p, state, pools, 3, np.random.default_rng(0)) is None


def test_regret_is_drawn_only_where_every_node_starts_on() -> None:
    p, state = _placed_everywhere(1)
    assert _search_pools(p).regret == bool(ClusterState(p).on.all())
    empty = p.replace(allocated=np.zeros_like(p.allocated))  # every node off at the start
    assert not _search_pools(empty).regret
    # Without regret the draw is one of the three other kinds, as before regret existed.
    pools = _search_pools(empty)
    rng = np.random.default_rng(5)
    for _ in range(10):
        nodes = _neighbourhood(empty, ClusterState(empty), pools, 3, rng)
        assert 1 <= nodes.size <= 3 and np.array_equal(nodes, np.unique(nodes))
