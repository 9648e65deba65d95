"""``ClusterState.set_node_usage(nonzero=...)`` on a problem without ``initial_nonzero`` (problem
files, the extender's NodeList mode) is refused naming ``nonzero``: it used to be dropped without
a word. Such a problem takes every node's usage as its NonZeroRequested, and kube-default fixes
that rule per problem, so a node with its own non-zero requests would score by another rule.

Scores worked by hand: nodes of 2000m / 4096 MiB, pod 500m / 512 MiB. LeastAllocated
``(alloc - req) * 100 // alloc`` per resource, then their mean (int64); BalancedAllocation
``int64((1 - |f_cpu - f_mem| / 2) * 100)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed import ClusterState, problem_from_dict
from tests.solvers.test_kd_whatif_scores import HELD, fit_and_balance

EMPTY = {"cpu": 0, "memory": 0}


def problem(nonzero: bool) -> Any:
    node: dict[str, Any] = {"domain": "az", "capacity": {"cpu": 2000, "memory": 4096}}
    a, b = dict(node, name="a", allocated=HELD), dict(node, name="b", allocated=EMPTY)
    if nonzero:
        a["nonzero_allocated"], b["nonzero_allocated"] = HELD, EMPTY
    return problem_from_dict({"domains": [{"name": "az"}], "resources": ["cpu", "memory"], "nodes": [a, b],
                              "workloads": [{"name": "p", "requests": {"cpu": 500, "memory": 512}}]})


# a: cpu (2000 - 1500) * 100 // 2000 = 25, memory (4096 - 1536) * 100 // 4096 = 62 -> 43,
# balanced |0.75 - 0.375| / 2 -> 81; b: cpu 75, memory 87 -> 81, balanced |0.25 - 0.125| / 2 -> 93.
BEFORE = ([43, 81], [81, 93])


def test_nonzero_is_refused_without_initial_nonzero_and_nothing_changes():
    p = problem(nonzero=False)
    assert p.initial_nonzero is None
    solver = solvers.make("kube-default")
    solver.reset(p)
    state = ClusterState(p)
    assert fit_and_balance(solver, state) == BEFORE
    with pytest.raises(ValueError, match="nonzero is given but the problem has no initial_nonzero"):
        state.set_node_usage(0, np.zeros(2), p.gpu_free[0], nonzero=np.array([100.0, 200.0]))
    assert state.allocated[0].tolist() == [1000.0, 1024.0] and state.journal == [] and state.initial_nonzero is None
    assert fit_and_balance(solver, state) == BEFORE
    # Left out, the what-if's usage is the node's NonZeroRequested, as for every other node:
    # a emptied scores as b (cpu 75, memory 87 -> 81; balanced 93).
    state.set_node_usage(0, np.zeros(2), p.gpu_free[0])
    assert fit_and_balance(solver, state) == ([81, 81], [93, 93])


def test_nonzero_is_still_taken_where_the_problem_has_initial_nonzero():
    p = problem(nonzero=True)
    solver = solvers.make("kube-default")
    solver.reset(p)
    state = ClusterState(p)
    assert fit_and_balance(solver, state) == BEFORE
    # a holds only a best-effort pod: 0 requested, 100m / 200 MiB non-zero.
    state.set_node_usage(0, np.zeros(2), p.gpu_free[0], nonzero=np.array([100.0, 200.0]))
    assert state.initial_nonzero[0].tolist() == [100.0, 200.0]
    # a: cpu (2000 - 600) * 100 // 2000 = 70, memory (4096 - 712) * 100 // 4096 = 82 -> 76; balanced on
    # the actual requests, 0.25 vs 0.125 -> 93.
    assert fit_and_balance(solver, state) == ([76, 81], [93, 93])
