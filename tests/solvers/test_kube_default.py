"""kube-default against scores computed by hand from kube-scheduler's formulas."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed import ClusterState, problem_from_dict
from solvers.kube_default import num_feasible_nodes_to_find, zone_interleaved_order


def two_nodes(pod=None, n2=None):
    n2_doc = {"name": "n2", "domain": "az", "capacity": {"cpu": 8000, "memory": 4096}, "labels": {"zone": "b"}}
    n2_doc.update(n2 or {})
    return problem_from_dict(
        {
            "domains": [{"name": "az"}],
            "nodes": [
                {"name": "n1", "domain": "az", "capacity": {"cpu": 4000, "memory": 8192},
                 "allocated": {"cpu": 1000, "memory": 2048}, "labels": {"zone": "a"}},
                n2_doc,
            ],
            "workloads": [dict({"name": "p", "requests": {"cpu": 1000, "memory": 1024}}, **(pod or {}))],
        }
    )


def plugin_scores(problem):
    solver = solvers.make("kube-default")
    solver.reset(problem)
    scores = solver.plugin_scores(ClusterState(problem), 0, np.arange(problem.num_nodes))
    return {k: v.tolist() for k, v in scores.items()}, solver


def test_scores_by_hand():
    problem = two_nodes()
    scores, solver = plugin_scores(problem)
    # n1: cpu (4000-2000)*100/4000 = 50, memory (8192-3072)*100/8192 = 62 -> (50+62)/2 = 56
    # n2: cpu (8000-1000)*100/8000 = 87, memory (4096-1024)*100/4096 = 75 -> 81
    assert scores["NodeResourcesFit"] == [56, 81]
    # n1: fractions 0.5 and 0.375 -> (1 - 0.0625) * 100 = 93; n2: 0.125 and 0.25 -> 93
    assert scores["NodeResourcesBalancedAllocation"] == [93, 93]
    assert scores["TaintToleration"] == [100, 100]  # no taints: every node gets the max (reverse)
    assert scores["NodeAffinity"] == [0, 0]
    total = solver.score(ClusterState(problem), 0, np.arange(2))
    assert total.tolist() == [300 + 56 + 93, 300 + 81 + 93]
    assert solvers.make("kube-default").solve(problem).assignment.tolist() == [1]


def test_prefer_no_schedule_taint_weighs_three():
    problem = two_nodes(n2={"taints": [{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]})
    scores, _ = plugin_scores(problem)
    assert scores["TaintToleration"] == [100, 0]
    assert solvers.make("kube-default").solve(problem).assignment.tolist() == [0]  # 449 > 174
    tolerating = two_nodes(
        pod={"tolerations": [{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}]},
        n2={"taints": [{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]},
    )
    assert plugin_scores(tolerating)[0]["TaintToleration"] == [100, 100]


def test_preferred_node_affinity_weighs_two():
    problem = two_nodes(pod={"preferred_node_affinity": [{"weight": 50, "match_labels": {"zone": "a"}}]})
    scores, _ = plugin_scores(problem)
    assert scores["NodeAffinity"] == [100, 0]
    assert solvers.make("kube-default").solve(problem).assignment.tolist() == [0]  # 649 > 474


def test_best_effort_pod_uses_non_zero_defaults_and_skips_balance():
    problem = two_nodes(pod={"requests": {"cpu": 0, "memory": 0}})
    scores, _ = plugin_scores(problem)
    # n1: cpu 1000 + 100m default -> 72; memory 2048 MiB + 200 MiB -> (8192-2248)*100/8192 = 72
    # n2: cpu 100m -> (8000-100)*100/8000 = 98; memory 200 MiB -> (4096-200)*100/4096 = 95 -> 96
    assert scores["NodeResourcesFit"] == [72, 96]
    assert scores["NodeResourcesBalancedAllocation"] == [0, 0]


@pytest.mark.parametrize(
    ("nodes", "expected"), [(50, 50), (99, 99), (100, 100), (200, 100), (1000, 420), (5000, 500), (20000, 1000)]
)
def test_num_feasible_nodes_to_find(nodes, expected):
    assert num_feasible_nodes_to_find(0, nodes) == expected


def test_explicit_percentage():
    assert num_feasible_nodes_to_find(100, 5000) == 5000
    assert num_feasible_nodes_to_find(1, 5000) == 100


def many_identical(n, zones=("z1",), pods=3):
    return problem_from_dict(
        {
            "domains": [{"name": "az"}],
            "nodes": [
                {"name": f"n{i:04d}", "domain": "az", "capacity": {"cpu": 64000, "memory": 262144},
                 "labels": {"topology.kubernetes.io/zone": zones[i % len(zones)] if len(zones) > 1 else zones[0]}}
                for i in range(n)
            ],
            "workloads": [{"name": f"p{j}", "requests": {"cpu": 100, "memory": 100}} for j in range(pods)],
        }
    )


def test_scan_starts_where_the_last_one_stopped():
    problem = many_identical(300)
    solver = solvers.make("kube-default")
    solver.reset(problem)
    state = ClusterState(problem)
    k = num_feasible_nodes_to_find(0, 300)  # 300 * (50 - 2) / 100 = 144
    assert k == 144
    first = solver.candidates(state, 0)
    assert first.tolist() == list(range(144))
    assert solver.next_start_node_index == 144
    second = solver.candidates(state, 1)
    assert second.tolist() == list(range(144, 288))
    third = solver.candidates(state, 2)
    assert third.tolist() == list(range(288, 300)) + list(range(0, 132))
    assert solver.next_start_node_index == 132


def test_zone_round_robin_order():
    nodes = ["a", "a", "b", "b", "c"]
    problem = problem_from_dict(
        {
            "domains": [{"name": "az"}],
            "nodes": [
                {"name": f"n{i}", "domain": "az", "capacity": {"cpu": 1000, "memory": 1000},
                 "labels": {"topology.kubernetes.io/zone": z}}
                for i, z in enumerate(nodes)
            ],
            "workloads": [],
        }
    )
    assert zone_interleaved_order(problem).tolist() == [0, 2, 4, 1, 3]


def test_ties_break_randomly_but_reproducibly():
    problem = many_identical(20, pods=1)
    picks = {int(solvers.make("kube-default", seed=s).solve(problem).assignment[0]) for s in range(30)}
    assert len(picks) > 5  # random among the 20 tied nodes
    again = [int(solvers.make("kube-default", seed=7).solve(problem).assignment[0]) for _ in range(3)]
    assert len(set(again)) == 1


def test_priority_order():
    problem = problem_from_dict(
        {
            "domains": [{"name": "az"}],
            "nodes": [{"name": "n", "domain": "az", "capacity": {"cpu": 1000, "memory": 1000}}],
            "workloads": [
                {"name": "low", "requests": {"cpu": 1000}, "priority": 0},
                {"name": "high", "requests": {"cpu": 1000}, "priority": 10},
            ],
        }
    )
    assert solvers.make("kube-default").solve(problem).assignment.tolist() == [-1, 0]
    assert solvers.make("kube-default", order="given").solve(problem).assignment.tolist() == [0, -1]
