"""``check_placement`` flags a node's additive resources exactly when kube-scheduler's
NodeResourcesFit would refuse one of the placed pods, the pods arriving one by one in any
order: ``fitsRequest`` compares each resource a pod requests (more than 0) with what the node
has left, and skips the ones it asks 0 of, so a node already past its capacity (a snapshot) in
one resource still takes pods that ask none of it, and refuses any pod that asks some. Random
problems with overcommitted nodes and random (often invalid) assignments."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.feasibility import EPS, check_placement
from iro_fed.model import Problem
from iro_fed.testing import random_problem


def _kube_refuses(p: Problem, assignment: np.ndarray, order: np.ndarray) -> set[tuple[int, int]]:
    """(node, resource) pairs where some pod, arriving in ``order``, asked more than was left."""
    free = p.capacity - p.allocated
    refused: set[tuple[int, int]] = set()
    for w in order:
        n = int(assignment[w])
        if n < 0:
            continue
        d = p.demand[w]
        for r in np.flatnonzero(d > 0):
            if d[r] > free[n, r] + EPS:
                refused.add((n, int(r)))
        free[n] -= d  # kube's cache counts the pod's requests either way (we check them all)
    return refused


def _problem(seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    p = random_problem(seed, int(rng.integers(2, 6)), int(rng.integers(4, 14)), gpus=False, constraints=False)
    allocated = p.allocated.copy()
    over = rng.random(allocated.shape) < 0.3
    allocated[over] = p.capacity[over] * rng.uniform(1.0, 1.4, size=int(over.sum()))
    demand = p.demand.copy()
    demand[rng.random(demand.shape) < 0.3] = 0.0  # pods asking none of a resource
    return p.with_cluster(allocated, p.gpu_free).replace(demand=demand)


@pytest.mark.parametrize("seed", range(60))
def test_resource_violations_are_what_kube_refuses_in_any_order(seed: int):
    rng = np.random.default_rng([seed, 1])
    p = _problem(seed)
    for _ in range(5):
        assignment = rng.integers(-1, p.num_nodes, size=p.num_workloads)
        errors = check_placement(p, assignment, {})
        flagged = {(n, r) for n in range(p.num_nodes) for r in range(len(p.resources))
                   if any(e.startswith(f"node {p.nodes[n].name}: {p.resources[r]} over capacity") for e in errors)}
        for _ in range(3):
            assert flagged == _kube_refuses(p, assignment, rng.permutation(p.num_workloads))
