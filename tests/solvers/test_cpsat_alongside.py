"""cpsat on the wall clock with several cores: the large-neighbourhood search runs alongside
CP-SAT's whole model (``_solve_alongside``), with several neighbourhoods at once where there are
cores for them (``_lns_parallel``), merged only where nothing they touch changed (``_lns_merge``)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("ortools")

import solvers
from iro_fed.feasibility import check_placement
from iro_fed.model import ClusterState
from iro_fed.objective import evaluate
from iro_fed.testing import brute_force, random_problem
from solvers.cpsat import PROVED_ALONGSIDE, _lns_merge, _Offer


def _same_usage(a: ClusterState, b: ClusterState) -> bool:
    return (
        np.allclose(a.allocated, b.allocated) and np.allclose(a.free, b.free) and np.array_equal(a.gpu_free, b.gpu_free)
        and np.array_equal(a.pods_on_node, b.pods_on_node) and np.array_equal(a.on, b.on)
    )


@pytest.mark.parametrize("seed", range(6))
def test_alongside_reaches_the_brute_force_optimum_on_tiny_problems(seed: int) -> None:
    p = random_problem(seed, nodes=3, pods=5)
    best = brute_force(p).objective.score
    placement = solvers.make("cpsat", seed=0, deterministic=False, num_workers=2, time_limit_s=20).solve(p)
    info = placement.info
    assert info["lns"]["alongside_cpsat"] == {"cpsat_workers": 1, "threads": 1}
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []
    assert placement.objective.score == pytest.approx(best, abs=1e-9)
    if info["status"] == "optimal":  # proved by CP-SAT: its placement is the answer
        assert info["lns"]["kept"] == "cpsat"


def test_alongside_with_four_cores_solves_two_neighbourhoods_at_once() -> None:
    p = random_problem(3, nodes=40, pods=160)
    placement = solvers.make("cpsat", seed=0, deterministic=False, num_workers=4, time_limit_s=4).solve(p)
    info = placement.info
    assert info["lns"]["alongside_cpsat"] == {"cpsat_workers": 2, "threads": 2}
    assert info["lns"]["threads"] == 2 and info["lns"]["iterations"] >= 1
    assert info["start"] == "hint" and info["lns"]["kept"] in ("search", "cpsat", "hint")
    assert check_placement(p, placement.assignment, placement.gpu_cards) == []
    assert placement.objective.score >= info["hint"]["polished_score"] - 1e-12


def test_parallel_search_keeps_its_cluster_state_consistent_and_never_loses_r() -> None:
    p = random_problem(5, nodes=40, pods=160)
    solver = solvers.make("cpsat", seed=1, deterministic=False)
    start, _, _ = solvers.make("best-fit").run(p)
    start_score = evaluate(p, start.assignment).score
    state, stats = solver._lns(p, start.copy(), time.perf_counter() + 3.0, None, None, threads=2)
    assert stats["threads"] == 2 and stats["iterations"] >= 1
    assert stats["improvements"] + stats["conflicts"] <= stats["iterations"]
    # The merged state's usage is what its assignment and cards give (no pod lost or counted twice).
    rebuilt = ClusterState.with_assignment(p, state.assignment, state.gpu_cards)
    assert _same_usage(state, rebuilt)
    assert check_placement(p, state.assignment, state.gpu_cards) == []
    assert evaluate(p, state.assignment).score == pytest.approx(stats["end_score"], abs=1e-12)
    assert stats["end_score"] >= start_score


def test_a_set_stop_event_ends_the_search_before_its_first_neighbourhood() -> None:
    p = random_problem(2, nodes=40, pods=60)
    solver = solvers.make("cpsat", seed=0, deterministic=False)
    start, _, _ = solvers.make("best-fit").run(p)
    proved = threading.Event()
    proved.set()
    for threads in (1, 2):
        state, stats = solver._lns(p, start.copy(), time.perf_counter() + 30.0, None, None, threads, stop=proved)
        assert stats["stopped"] == PROVED_ALONGSIDE and stats["iterations"] == 0
        assert np.array_equal(state.assignment, start.assignment)


def _merge_case() -> tuple:
    p = random_problem(4, nodes=4, pods=6)
    found, _, _ = solvers.make("best-fit").run(p)
    pods = np.flatnonzero(found.assignment >= 0)
    assert pods.size, "best-fit places some pod of this problem"
    nodes = np.unique(found.assignment[pods])
    current = ClusterState(p)  # nothing placed: placing found's pods raises R by their unplaced penalty
    shared = {"state": current, "current": evaluate(p, current.assignment).score, "stall": 3}
    return p, found, pods, nodes, current, shared


def test_merge_sets_aside_a_result_whose_nodes_changed_since_its_snapshot() -> None:
    p, found, pods, nodes, current, shared = _merge_case()
    version = np.zeros(p.num_nodes, dtype=np.int64)
    seen = version.copy()
    version[nodes[0]] += 1  # another neighbourhood's result landed on one of its nodes
    stats = {"conflicts": 0, "improvements": 0}
    _lns_merge(p, shared, found, pods, nodes, version, seen, None, stats)
    assert stats == {"conflicts": 1, "improvements": 0}
    assert shared["state"] is current and (current.assignment < 0).all()


def test_merge_keeps_an_improving_result_and_marks_the_nodes_it_touched() -> None:
    p, found, pods, nodes, current, shared = _merge_case()
    version = np.zeros(p.num_nodes, dtype=np.int64)
    stats = {"conflicts": 0, "improvements": 0}
    _lns_merge(p, shared, found, pods, nodes, version, version.copy(), None, stats)
    assert stats == {"conflicts": 0, "improvements": 1} and shared["stall"] == 0
    merged = shared["state"]
    assert merged is not current and (current.assignment < 0).all()  # the old state is not changed
    assert np.array_equal(merged.assignment[pods], found.assignment[pods])
    assert shared["current"] == pytest.approx(evaluate(p, found.assignment).score)
    assert (version[nodes] == 1).all() and version.sum() == nodes.size
    assert _same_usage(merged, ClusterState.with_assignment(p, merged.assignment, merged.gpu_cards))
    # The same result again changes nothing (no gain).
    _lns_merge(p, shared, found, pods, nodes, version, version.copy(), None, stats)
    assert stats["improvements"] == 1 and shared["state"] is merged


@pytest.mark.parametrize(
    ("params", "nodes", "plan"),
    [
        ({"num_workers": 2}, 40, (1, 1)),
        ({"num_workers": 3}, 40, (2, 1)),
        ({"num_workers": 8}, 40, (4, 4)),
        ({"num_workers": 16}, 40, (12, 4)),
        ({"num_workers": 8}, 10, (7, 1)),  # too few nodes for a neighbourhood per thread
        ({"num_workers": 1}, 40, None),  # one core: one after the other
        ({"num_workers": 4, "deterministic": True}, 40, None),  # reproducible: one after the other
    ],
)
def test_how_the_cores_are_shared(params: dict, nodes: int, plan: tuple | None) -> None:
    p = random_problem(0, nodes=nodes, pods=8)
    solver = solvers.make("cpsat", **{"deterministic": False, **params})
    assert solver._alongside(p) == plan


def test_a_pruned_model_proved_optimal_does_not_stop_the_search() -> None:
    # The pruned model's optimum is not R's (the search places pods on any feasible node): the
    # search goes on to its own end, and the answer is the better of the two.
    p = random_problem(6, nodes=40, pods=60)
    placement = solvers.make("cpsat", seed=0, deterministic=False, num_workers=2, max_candidates=2,
                             time_limit_s=20).solve(p)
    info = placement.info
    assert info["pruned"] and info["status"] == "optimal" and not info["exact_model"]
    assert placement.status == "feasible"
    assert info["lns"]["stopped"] != PROVED_ALONGSIDE and info["lns"]["iterations"] >= 1
    assert placement.objective.score >= max(info["objective"], info["hint"]["polished_score"]) - 1e-9


def test_offer_gives_a_better_placement_once() -> None:
    p = random_problem(1, nodes=4, pods=6)
    good, _, _ = solvers.make("best-fit").run(p)
    offer = _Offer()
    assert offer.take(-1e9) is None  # nothing offered yet
    offer.put(good, 0.5)
    offer.put(ClusterState(p), 0.1)  # a worse one does not replace it
    assert offer.take(0.6) is None  # not better than the taker's own
    state, score = offer.take(0.4)
    assert state is good and score == 0.5
    assert offer.take(0.4) is None  # taken once


@pytest.mark.parametrize("threads", [1, 2])
def test_the_search_adopts_a_better_placement_cpsat_offers(threads: int) -> None:
    p = random_problem(5, nodes=40, pods=160)
    offered, _, _ = solvers.make("best-fit").run(p)
    offered_score = evaluate(p, offered.assignment).score
    empty = ClusterState(p)
    assert offered_score > evaluate(p, empty.assignment).score
    offer = _Offer()
    offer.put(offered, offered_score)
    solver = solvers.make("cpsat", seed=0, deterministic=False)
    state, stats = solver._lns(p, empty, time.perf_counter() + 1.0, None, None, threads, offer=offer)
    assert stats["adopted"] == 1
    assert stats["end_score"] >= offered_score
    assert check_placement(p, state.assignment, state.gpu_cards) == []
    assert _same_usage(state, ClusterState.with_assignment(p, state.assignment, state.gpu_cards))


@pytest.mark.parametrize("usable", [1, 3])
def test_num_workers_zero_gives_cpsat_the_cores_this_process_may_use(monkeypatch, usable: int) -> None:
    # One after the other (lns off, so no search alongside): CP-SAT was given num_workers 0, which it
    # reads as every core of the machine, past the process's CPU affinity or a container's cpuset.
    import solvers.cpsat as cpsat

    monkeypatch.setattr(cpsat, "_usable_cores", lambda: usable)
    given: list[int] = []
    solve = cpsat.PlacementModel.solve

    def spy(self, seed, wall_limit, deterministic_limit, workers=1, *args, **kwargs):
        given.append(workers)
        return solve(self, seed, wall_limit, deterministic_limit, workers, *args, **kwargs)

    monkeypatch.setattr(cpsat.PlacementModel, "solve", spy)
    p = random_problem(4, nodes=4, pods=8)
    placement = solvers.make("cpsat", deterministic=False, num_workers=0, lns=False, time_limit_s=20).solve(p)
    assert given == [usable]
    assert placement.objective.score == pytest.approx(brute_force(p).objective.score, abs=1e-9)
