"""greedy-objective's GPU-stranding guard (solvers/gpu_guard.py): a pod does not take the CPU,
memory or whole cards that free GPUs need while a node without that cost fits; CPU-only
problems place exactly as the plain argmax."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed import problem_from_dict
from iro_fed.model import ClusterState
from iro_fed.testing import random_problem
from solvers.heuristics import GreedyObjective


class PlainArgmax(GreedyObjective):
    """greedy-objective without the guard (the rule before it)."""

    def reset(self, problem):
        super().reset(problem)
        self.guard = None


def _doc(nodes: list[dict], pods: list[dict]) -> dict:
    price = {"cpu": 0.03, "memory": 0.004, "gpu": 2.0}
    return {
        "domains": [
            {"name": "green", "kind": "zone", "carbon_intensity": 50.0, "price_per_hour": price, "pue": 1.2},
            {"name": "grey", "kind": "zone", "carbon_intensity": 400.0, "price_per_hour": price, "pue": 1.2},
        ],
        "nodes": nodes,
        "workloads": pods,
    }


def _node(name: str, domain: str, cpu: int, gpus: int = 0) -> dict:
    node = {"name": name, "domain": domain, "capacity": {"cpu": cpu, "memory": 65536},
            "allocated": {"cpu": 1000, "memory": 1024}}
    if gpus:
        node.update(gpus=gpus, gpu_model="A10")
    return node


def _pod(name: str, cpu: int, gpus: int = 0) -> dict:
    pod = {"name": name, "requests": {"cpu": cpu, "memory": 4096}}
    if gpus:
        pod["gpu"] = {"count": gpus, "milli": 1000}
    return pod


WEB_AND_INFERENCE = _doc(
    [_node("gpu", "green", 16000, gpus=2), _node("cpu", "grey", 16000)],
    [_pod("web", 8000), _pod("infer-a", 6000, gpus=1), _pod("infer-b", 6000, gpus=1)],
)


def test_cpu_pod_leaves_the_gpu_nodes_cpu_to_its_gpu_pods():
    # A core on the green GPU node is cheaper: the plain argmax puts the web pod there and its
    # 15 free cores then feed one 6-core GPU pod, not two.
    problem = problem_from_dict(WEB_AND_INFERENCE)
    assert PlainArgmax().solve(problem).assignment.tolist() == [0, 0, -1]
    placement = solvers.make("greedy-objective").solve(problem)
    assert placement.assignment.tolist() == [1, 0, 0]
    assert placement.objective.score > PlainArgmax().solve(problem).objective.score


def test_one_gpu_pod_keeps_the_pair_a_two_gpu_pod_needs():
    doc = _doc([_node("pair", "green", 32000, gpus=2), _node("single", "grey", 32000, gpus=1)],
               [_pod("one", 1000, gpus=1), _pod("two", 1000, gpus=2)])
    problem = problem_from_dict(doc)
    assert PlainArgmax().solve(problem).assignment.tolist() == [0, -1]
    assert solvers.make("greedy-objective").solve(problem).assignment.tolist() == [1, 0]


def test_cpu_pod_alone_avoids_gpu_nodes_unless_nothing_else_fits():
    # No GPU pod in the problem (one pod from the Kubernetes scheduler): each card keeps its
    # share of the node's CPU; the GPU node is used when the CPU node is too small.
    alone = problem_from_dict({**WEB_AND_INFERENCE, "workloads": [_pod("web", 8000)]})
    assert PlainArgmax().solve(alone).assignment.tolist() == [0]
    assert solvers.make("greedy-objective").solve(alone).assignment.tolist() == [1]
    small = _doc([_node("gpu", "green", 16000, gpus=2), _node("cpu", "grey", 4000)], [_pod("web", 8000)])
    assert solvers.make("greedy-objective").solve(problem_from_dict(small)).assignment.tolist() == [0]


def test_rank_leads_with_the_decided_node_under_the_guard():
    problem = problem_from_dict(WEB_AND_INFERENCE)
    solver = solvers.make("greedy-objective")
    state = ClusterState(problem)
    ranked = solver.rank(state, 0)
    assert [n for n, _ in ranked] == [1, 0]  # the GPU node scores higher but strands: last
    assert ranked[0][0] == solver.decide(state, 0).node
    # and on random GPU problems, pod by pod (decide asks the guard about the best candidates
    # first, 64 and 512 of them on the larger ones; rank about all)
    for seed, nodes, pods in [(300 + s, 8, 12) for s in range(10)] + [(400, 150, 60), (401, 600, 40)]:
        problem = random_problem(seed, nodes=nodes, pods=pods)
        solver = solvers.make("greedy-objective")
        state = ClusterState(problem)
        for w in range(problem.num_workloads):
            decision = solver.decide(state, w)
            ranked = solver.rank(state, w, k=problem.num_nodes)
            assert (ranked[0][0] if ranked else -1) == decision.node, (seed, w)
            if decision.node >= 0:
                state.place(w, decision.node, decision.cards)


@pytest.mark.parametrize("seed", range(12))
def test_cpu_only_problems_place_as_the_plain_argmax(seed):
    problem = random_problem(500 + seed, nodes=10, pods=25, gpus=False)
    guarded = solvers.make("greedy-objective")
    plain = PlainArgmax()
    assert np.array_equal(guarded.solve(problem).assignment, plain.solve(problem).assignment)
    state = ClusterState(problem)
    for w in range(problem.num_workloads):
        assert guarded.rank(state, w, k=problem.num_nodes) == plain.rank(state, w, k=problem.num_nodes)
    assert guarded.guard is None


def test_guard_follows_the_state_when_pods_are_removed():
    # The unplaced counts per GPU-pod group track the state's journal: with the GPU pods placed
    # (none left to keep room for) the web pod may take the GPU node; removed again, it may not.
    problem = problem_from_dict({**WEB_AND_INFERENCE, "workloads": [_pod("web", 8000), _pod("infer-a", 6000, gpus=1)]})
    solver = solvers.make("greedy-objective")
    state = ClusterState(problem)
    assert solver.decide(state, 0).node == 1
    state.place(1, 0)
    assert solver.decide(state, 0).node == 0
    state.remove(1)
    assert solver.decide(state, 0).node == 1


def test_promo_surge_pending_during_the_surge():
    # Seed 1: 9.9 % of the surge pods pending without the guard (kube-default 2.1 %).
    from iro_fed.sim import simulate

    totals = simulate("promo-surge", "greedy-objective", seed=1).totals
    assert totals["pending_at_peak_pct"] <= 4.0


# --- the guard's cached rows and shortcuts give the answers of the full evaluation ---------


def _wide_ties(copies: int = 60) -> dict:
    # Many alike GPU nodes in two zones (ties of dozens of nodes), partly used so their fits
    # differ, and a stream of CPU pods, GPU shares, whole cards and multi-card pods.
    nodes = []
    for i in range(copies):
        node = _node(f"g{i}", "green" if i % 3 else "grey", 16000 + 4000 * (i % 2), gpus=4 if i % 4 else 8)
        node["allocated"] = {"cpu": 1000 * (i % 5), "memory": 1024 * (i % 3)}
        nodes.append(node)
    nodes.append(_node("cpu", "grey", 64000))
    pods = []
    for i in range(3 * copies):
        kind = i % 6
        if kind in (0, 3):
            pods.append(_pod(f"web{i}", 2000 + 500 * (i % 4)))
        elif kind == 1:
            pod = _pod(f"share{i}", 1000 + 1000 * (i % 3))
            pod["gpu"] = {"count": 1, "milli": 300 + 100 * (i % 5)}
            pods.append(pod)
        elif kind == 2:
            pods.append(_pod(f"one{i}", 3000, gpus=1))
        elif kind == 4:
            pods.append(_pod(f"two{i}", 4000, gpus=2))
        else:
            pods.append(_pod(f"eight{i}", 8000, gpus=8 if i % 12 == 5 else 4))
    return _doc(nodes, pods)


def _problems():
    yield problem_from_dict(_wide_ties())
    for seed in range(6):
        yield random_problem(700 + seed, nodes=40, pods=60)


def _reference_choice(solver, state, w):
    """decide's node by the rule itself: select on score (the guard asked about every candidate)."""
    cand = solver.candidates(state, w)
    if cand.size == 0:
        return -1
    return int(cand[solver.select(state, w, cand, solver.score(state, w, cand))])


@pytest.mark.parametrize("chunk", [32, 4, 1, 10_000])
def test_decide_asks_the_guard_about_few_nodes_and_agrees_with_the_rule(monkeypatch, chunk):
    # decide asks the guard about the best fit of the tie first, then a chunk of the best fits,
    # then the whole tie: every branch chooses the node the rule chooses.
    from solvers import heuristics

    monkeypatch.setattr(heuristics, "_FIT_CHUNK", chunk)
    for problem in _problems():
        solver = solvers.make("greedy-objective")
        state = ClusterState(problem)
        for w in range(problem.num_workloads):
            decision = solver.decide(state, w)
            assert decision.node == _reference_choice(solver, state, w), w
            if decision.node >= 0:
                state.place(w, decision.node, decision.cards)
        for w in range(0, problem.num_workloads, 4):  # removed pods give the guard back its room
            if state.assignment[w] >= 0:
                state.remove(w)
        for w in range(0, problem.num_workloads, 4):
            assert solver.decide(state, w).node == _reference_choice(solver, state, w), w


def test_guard_rows_follow_the_journal_and_few_nodes_match_the_arrays():
    # The per-node rows kept from the journal equal rows rebuilt from the state, and the
    # Python path for a few nodes gives the array path's answers.
    from solvers.gpu_guard import GpuStrandingGuard

    for problem in _problems():
        solver = solvers.make("greedy-objective")
        state = ClusterState(problem)
        rng = np.random.default_rng(3)
        for w in rng.permutation(problem.num_workloads).tolist():
            decision = solver.decide(state, w)
            if decision.node >= 0:
                state.place(w, decision.node, decision.cards)
            if rng.random() < 0.2:
                placed = np.flatnonzero(state.assignment >= 0)
                if placed.size:
                    state.remove(int(rng.choice(placed)))
            solver.sync(state)
            fresh = GpuStrandingGuard(problem)
            fresh.rebuild(state)
            guard = solver.guard
            assert np.array_equal(guard.table, fresh.table)
            assert np.array_equal(guard.keepable, fresh.keepable)
            assert np.array_equal(guard.covered, fresh.covered)
            assert np.array_equal(guard.waiting_multi, fresh.waiting_multi)
            assert np.array_equal(guard.remaining, fresh.remaining)
            nodes = np.arange(problem.num_nodes)
            for v in rng.choice(problem.num_workloads, 5).tolist():
                whole = guard._grown(state, v, nodes)
                few = guard._grown_few(state, v, nodes.tolist())
                if few is not None:
                    assert few == whole.tolist(), v
