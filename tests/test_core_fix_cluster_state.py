"""ClusterState.set_node_usage keeps the state's bookkeeping: its journal (which per-node solver
caches follow), the node's base usage that removing its last pod returns to, its power-on and
its NonZeroRequested; bad arguments are refused by name before anything changes."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed import ClusterState, problem_from_dict

FIELDS = ("allocated", "free", "gpu_free", "gpu_full", "gpu_max_free", "gpu_left", "gpu_used", "on",
          "util_used_total", "util_cap_on", "util_free", "free_share")


def gpu_doc(cards_free: list[int] | None = None, alloc_cpu: float = 0.0) -> dict:
    """Two 8-card nodes; node 0 with ``cards_free`` and ``alloc_cpu``; share and whole-GPU pods."""
    cards_free = cards_free or [1000] * 8
    return {
        "domains": [{"name": "az"}],
        "nodes": [
            {"name": "g0", "domain": "az", "capacity": {"cpu": 64000, "memory": 262144}, "gpus": 8,
             "gpu_free_milli": cards_free, "allocated": {"cpu": alloc_cpu}},
            {"name": "g1", "domain": "az", "capacity": {"cpu": 64000, "memory": 262144}, "gpus": 8,
             "gpu_free_milli": [1000, 1000, 1000, 1000, 1000, 1000, 600, 1000]},
        ],
        "workloads": [
            {"name": "share", "requests": {"cpu": 2000, "memory": 4096}, "gpu": {"count": 1, "milli": 500}},
            {"name": "whole", "requests": {"cpu": 8000, "memory": 32768}, "gpu": {"count": 2, "milli": 1000}},
            {"name": "cpu", "requests": {"cpu": 1000, "memory": 1024}},
        ],
    }


WHAT_IF_CARDS = [250, 250, 1000, 1000, 1000, 1000, 1000, 1000]


def test_a_solver_ranking_on_a_what_if_state_sees_the_new_usage():
    # fgd keeps each node's fragmentation in a cache refreshed from the state's journal. Before,
    # set_node_usage wrote no journal entry: a solver that had ranked the state once kept node
    # g0's old fragmentation and ranked the what-if as if g0 still had its cards free.
    problem = problem_from_dict(gpu_doc())
    state = ClusterState(problem)
    solver = solvers.make("fgd")
    solver.rank(state, 0)  # builds the caches on this state
    state.set_node_usage(0, problem.allocated[0], np.array(WHAT_IF_CARDS))
    fresh = solvers.make("fgd")
    assert solver.rank(state, 0) == fresh.rank(state, 0)
    # and the state of a problem with that usage from the start ranks the same
    same = ClusterState(problem_from_dict(gpu_doc(WHAT_IF_CARDS)))
    assert solvers.make("fgd").rank(same, 0) == fresh.rank(state, 0)


def test_removing_the_last_pod_returns_the_node_to_its_what_if_usage():
    # Before, removing the last pod put the problem's allocated back while the cards kept the
    # what-if's: a node that was half the old usage and half the new one.
    problem = problem_from_dict(gpu_doc())
    state = ClusterState(problem)
    alloc = np.array([16000.0, 0.0])
    state.set_node_usage(0, alloc, np.array(WHAT_IF_CARDS))
    state.place(2, 0)
    state.remove(2)
    expected = ClusterState(problem_from_dict(gpu_doc(WHAT_IF_CARDS, alloc_cpu=16000.0)))
    for f in FIELDS:
        assert np.allclose(getattr(state, f), getattr(expected, f)), f
    # a node the what-if leaves empty is off once its last pod leaves (it was on by the problem's usage)
    busy = problem_from_dict(gpu_doc(alloc_cpu=4000.0))
    state = ClusterState(busy)
    state.set_node_usage(0, np.zeros(2), np.full(8, 1000))
    state.place(2, 0)
    state.remove(2)
    assert not state.on[0]
    assert np.allclose(state.util_cap_on, ClusterState(problem_from_dict(gpu_doc())).util_cap_on)


def test_set_node_usage_sets_the_nodes_nonzero_requested():
    # Before, initial_nonzero stayed the problem's: the what-if node (without its victims) still
    # counted the victims' non-zero requests.
    base = problem_from_dict(gpu_doc(alloc_cpu=4000.0))
    problem = base.replace(initial_nonzero=np.array([[4100.0, 300.0], [0.0, 0.0]]))
    state = ClusterState(problem)
    assert state.initial_nonzero.tolist() == [[4100.0, 300.0], [0.0, 0.0]]
    state.set_node_usage(0, np.array([1000.0, 512.0]), problem.gpu_free[0])
    assert state.initial_nonzero[0].tolist() == [1000.0, 512.0]  # the usage, as for a problem without it
    state.set_node_usage(0, np.array([1000.0, 512.0]), problem.gpu_free[0], nonzero=np.array([1100.0, 600.0]))
    assert state.initial_nonzero[0].tolist() == [1100.0, 600.0]
    state.set_node_usage(0, problem.allocated[0], problem.gpu_free[0])  # put back: the problem's again
    assert state.initial_nonzero.tolist() == [[4100.0, 300.0], [0.0, 0.0]]
    assert problem.initial_nonzero.tolist() == [[4100.0, 300.0], [0.0, 0.0]]
    for original in (state, ClusterState(problem)):  # a copy has its own, what-if or not
        copy = original.copy()
        copy.set_node_usage(1, np.array([10.0, 0.0]), problem.gpu_free[1])
        assert copy.initial_nonzero[1].tolist() == [10.0, 0.0]
        assert original.initial_nonzero[1].tolist() == [0.0, 0.0] and original.initial_on[1] == problem.initial_on[1]


@pytest.mark.parametrize(
    ("node", "allocated", "cards", "message"),
    [
        (0, [1000.0], None, "allocated must have shape (2,)"),  # was broadcast to every resource
        (0, [1000.0, float("nan")], None, "allocated must be finite and >= 0"),
        (0, [-1.0, 0.0], None, "allocated must be finite and >= 0"),
        (-1, [0.0, 0.0], None, "node index -1 is out of range 0..1"),  # was the last node
        (0, [0.0, 0.0], [1000] * 9, "gpu_free must list at most 8 card(s)"),
        (0, [0.0, 0.0], [1500] + [1000] * 7, "gpu_free must be whole milli -1..1000"),
    ],
)
def test_bad_arguments_are_refused_by_name_and_change_nothing(node, allocated, cards, message):
    problem = problem_from_dict(gpu_doc())
    state = ClusterState(problem)
    before = {f: np.array(getattr(state, f), copy=True) for f in FIELDS}
    with pytest.raises(ValueError) as err:
        state.set_node_usage(node, np.array(allocated), np.array(cards if cards is not None else [1000] * 8))
    assert message in str(err.value)
    for f in FIELDS:
        assert np.array_equal(getattr(state, f), before[f]), f
    assert state.journal == []
