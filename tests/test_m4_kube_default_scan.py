"""kube-default keeps nextStartNodeIndex across solves on the same nodes (as kube-scheduler keeps it
across scheduling cycles), modulo the node count when nodes come and go; a node list sharing no name
with the last one, or a new solver, starts at 0."""

from __future__ import annotations

import numpy as np

import solvers
from iro_fed.problem_io import problem_from_dict
from solvers.kube_default import num_feasible_nodes_to_find

N = 200


def _problem(alloc: np.ndarray, prefix: str = "n") -> object:
    return problem_from_dict({
        "resources": ["cpu", "memory"], "domains": [{"name": "d"}],
        "nodes": [{"name": f"{prefix}{i:03d}", "domain": "d", "capacity": {"cpu": 8000, "memory": 32768},
                   "allocated": {"cpu": float(alloc[i]), "memory": 0.0}} for i in range(len(alloc))],
        "workloads": [{"name": "p", "requests": {"cpu": 500, "memory": 512}}]})


def test_one_pod_per_solve_rotates_the_scan_as_kube_scheduler_does():
    # the auditor's scan.py: 200 equal nodes, a fresh problem per step (the simulator's way)
    s = solvers.make("kube-default", seed=1)
    alloc = np.zeros(N)
    used = []
    for _ in range(60):
        node = int(s.solve(_problem(alloc)).assignment[0])
        alloc[node] += 500
        used.append(node)
    # each cycle scans num_to_find nodes on from where the last stopped: the next cycle's nodes
    k = num_feasible_nodes_to_find(0, N)
    assert k == 100
    assert max(used) > 100  # was at most 78: every solve restarted the scan at node 0
    assert s.next_start_node_index == (60 * k) % N
    for step, node in enumerate(used):
        start = (step * k) % N
        assert (node - start) % N < k  # chosen among the nodes that cycle scanned


def test_a_single_solve_is_as_before_and_other_nodes_restart_the_scan():
    p = _problem(np.zeros(N))
    first = [int(solvers.make("kube-default", seed=3).solve(p).assignment[0]) for _ in range(3)]
    assert len(set(first)) == 1  # a new solver: the same seed, the same answer
    s = solvers.make("kube-default", seed=3)
    s.solve(p)
    assert s.next_start_node_index == 100
    s.solve(_problem(np.zeros(N), prefix="m"))  # another node list: from 0 again
    assert s.next_start_node_index == 100
    s.solve(_problem(np.zeros(N - 1), prefix="m"))  # one node fewer: on from 100 (modulo 199), as upstream
    assert s.next_start_node_index == (100 + 100) % (N - 1)
