"""kube-default keeps nextStartNodeIndex modulo the node count when nodes come and go (upstream reads
``(nextStartNodeIndex + i) % len(allNodes)``); only a node list sharing no name with the last one
(another cluster) or a new solver starts at 0 (m6 item 6)."""

from __future__ import annotations

import numpy as np

import solvers
from iro_fed.problem_io import problem_from_dict

N = 200


def _problem(names: list[str]) -> object:
    return problem_from_dict({
        "resources": ["cpu", "memory"], "domains": [{"name": "d"}],
        "nodes": [{"name": n, "domain": "d", "capacity": {"cpu": 8000, "memory": 32768}, "allocated": {"cpu": 0.0, "memory": 0.0}}
                  for n in names],
        "workloads": [{"name": "p", "requests": {"cpu": 500, "memory": 512}}]})


def test_a_node_added_or_removed_keeps_the_scan_going_modulo_the_node_count():
    names = [f"n{i:03d}" for i in range(N)]
    s = solvers.make("kube-default", seed=1)
    s.solve(_problem(names))
    s.solve(_problem(names))
    assert s.next_start_node_index == 0  # 2 x 100 of 200
    s.solve(_problem(names))
    assert s.next_start_node_index == 100
    # one node gone (199 nodes, 100 to find): on from 100, not from 0 (which the old rule did)
    node = int(s.solve(_problem(names[:-1])).assignment[0])
    assert s.next_start_node_index == (100 + 100) % (N - 1)
    assert node >= 100  # among the nodes scanned from 100 on
    # a node added: 201 nodes, on from 1
    s.solve(_problem([*names, "n999"]))
    assert s.next_start_node_index == (1 + 100) % (N + 1)


def test_the_index_is_taken_modulo_a_smaller_node_list():
    names = [f"n{i:03d}" for i in range(N)]
    s = solvers.make("kube-default", seed=1)
    s.solve(_problem(names))
    assert s.next_start_node_index == 100
    s.solve(_problem(names[:150]))  # 150 nodes, 100 to find: from 100 % 150
    assert s.next_start_node_index == (100 + 100) % 150
    s.solve(_problem(names[:40]))  # fewer than 100: every node, from 50 % 40 = 10; all processed
    assert s.next_start_node_index == 10


def test_another_cluster_starts_at_zero():
    s = solvers.make("kube-default", seed=1)
    s.solve(_problem([f"n{i:03d}" for i in range(N)]))
    assert s.next_start_node_index == 100
    s.solve(_problem([f"m{i:03d}" for i in range(N - 1)]))  # no name shared: from 0
    assert s.next_start_node_index == 100
    assert np.array_equal(s.node_order, np.arange(N - 1))
