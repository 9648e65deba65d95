"""``check_placement`` reports only the violations a placement causes or worsens: a node already
used past its cpu capacity (a cluster snapshot) is no violation of a placement that adds no
cpu there, as kube-scheduler's NodeResourcesFit (``fitsRequest``) skips the resources a pod asks
0 of. It used to flag the node's own overcommit, so every solver's answer read as invalid."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed import problem_from_dict
from iro_fed.feasibility import check_placement

DOMAINS = [{"name": "az", "kind": "zone", "carbon_intensity": 100.0, "price_per_hour": {"cpu": 0.03, "memory": 0.004}}]


def overcommitted(pods: list[dict]):
    """n0 holds 1500 of its 1000 cpu (files refuse that; a snapshot may have it); n1 is empty."""
    problem = problem_from_dict({
        "domains": DOMAINS,
        "nodes": [{"name": "n0", "domain": "az", "capacity": {"cpu": 1000, "memory": 1000}},
                  {"name": "n1", "domain": "az", "capacity": {"cpu": 100, "memory": 100}}],
        "workloads": pods,
    })
    allocated = problem.allocated.copy()
    allocated[0, problem.resource_index["cpu"]] = 1500.0
    return problem.with_cluster(allocated, problem.gpu_free)


MEMORY_ONLY = {"name": "m", "requests": {"cpu": 0, "memory": 400}}
CPU = {"name": "c", "requests": {"cpu": 10, "memory": 10}}


def test_a_pod_asking_no_cpu_on_a_cpu_overcommitted_node_is_valid():
    problem = overcommitted([MEMORY_ONLY])
    assert check_placement(problem, np.array([0]), {}) == []  # was: n0 cpu over capacity (1500 > 1000)
    assert check_placement(problem, np.array([-1]), {}) == []


def test_adding_cpu_to_the_overcommitted_node_is_still_a_violation():
    problem = overcommitted([MEMORY_ONLY, CPU])
    assert check_placement(problem, np.array([0, 0]), {}) == ["node n0: cpu over capacity (1510 > 1000)"]
    assert check_placement(problem, np.array([0, 1]), {}) == []
    # The memory the placement adds is checked as before.
    two = overcommitted([MEMORY_ONLY, dict(MEMORY_ONLY, name="m2", requests={"cpu": 0, "memory": 700})])
    assert check_placement(two, np.array([0, 0]), {}) == ["node n0: memory over capacity (1100 > 1000)"]


@pytest.mark.parametrize("name", ["best-fit", "kube-default", "greedy-objective", "cpsat"])
def test_solvers_answers_on_an_overcommitted_node_are_valid(name: str):
    if name == "cpsat":
        pytest.importorskip("ortools")
    problem = overcommitted([MEMORY_ONLY])
    settings = {"time_limit_s": 5.0, "max_deterministic_time": 1.0} if name == "cpsat" else {}
    placement = solvers.make(name, seed=0, **settings).solve(problem)
    assert placement.assignment.tolist() == [0]  # only n0 has the memory
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []
