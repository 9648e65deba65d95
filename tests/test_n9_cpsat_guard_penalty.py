"""cpsat's ``gpu_guard`` ranks stranding pairs last instead of forbidding them (n9).

The guard first dropped the pairs where a pod strands GPUs from the model, took the hint's pods
on them out, and put what was left over back one pod at a time, only while the polish's clock
allowed: with a tight limit the answer was far below its own hint (400 pods, 0.2 s: R -7.83 with
270 pods out, the hint -1.93 with 30), and with a generous one the one-by-one placement packed
worse than CP-SAT (20 pods: 5 out against 4). Its mask also kept single-card pods off every node
a multi-card pod of the same batch could use (the whole-card rule), though CP-SAT places those
pods itself. Now every phase maximizes R less a penalty per pod on a guarded pair.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ortools")

import solvers  # noqa: E402
from iro_fed.model import ClusterState, Problem  # noqa: E402
from iro_fed.objective import evaluate  # noqa: E402
from solvers.local_search import guard_mask  # noqa: E402
from tests.solvers.test_m8_guard_fast_paths import _doc, _node, _pod  # noqa: E402 (the guard tests' builders)


def cpu_heavy(npods: int, ncpu: int, ngpu: int) -> Problem:
    """More 9-core pods than the CPU nodes hold (each would strand a 4-card node's GPUs), and
    1-card pods: the reviewer's generator (r8)."""
    nodes = [_node(f"c{i}", 16000, 0, i) for i in range(ncpu)] + [_node(f"g{i}", 32000, 4, i) for i in range(ngpu)]
    pods = [_pod(f"gpu{i}", 6000, 1) if i % 4 == 0 else _pod(f"cpu{i}", 9000) for i in range(npods)]
    return _doc(nodes, pods)


def guarded(p: Problem, assignment: np.ndarray, allowed: np.ndarray | None) -> float:
    """R less half a pod's unplaced weight per pod on a pair the mask drops (computed here)."""
    score = evaluate(p, assignment).score
    if allowed is None:
        return score
    placed = np.flatnonzero(assignment >= 0)
    off = int((~allowed[placed, assignment[placed]]).sum())
    return score - off * 0.5 * p.weights.unplaced / p.num_workloads


def test_stranding_nodes_are_ranked_last_not_forbidden():
    # CPU pods beyond the CPU nodes' room must go to GPU nodes; CP-SAT packs them there itself
    # (the guard dropped the pairs: 5 pods out, placed last one by one, against 4).
    p = cpu_heavy(20, 2, 4)
    on = solvers.make("cpsat", seed=1, time_limit_s=5.0, gpu_guard=True).solve(p)
    off = solvers.make("cpsat", seed=1, time_limit_s=5.0).solve(p)
    assert int((off.assignment < 0).sum()) == 4
    assert int((on.assignment < 0).sum()) == 4
    assert on.status == "feasible" and off.status == "optimal"


def test_a_tight_limit_never_returns_less_than_the_hint_by_the_guarded_score():
    # The hint (best-fit, run whole) is the floor by the guarded score whatever the clock cuts.
    p = cpu_heavy(400, 30, 100)
    allowed = guard_mask(p, ClusterState(p))
    hint = solvers.make("best-fit").solve(p).assignment
    out = solvers.make("cpsat", seed=1, time_limit_s=0.1, gpu_guard=True).solve(p)
    assert guarded(p, out.assignment, allowed) >= guarded(p, hint, allowed) - 1e-9
    assert int((out.assignment < 0).sum()) <= int((hint < 0).sum())


def test_a_guard_cut_by_the_clock_is_reported_as_cut():
    p = cpu_heavy(400, 30, 100)
    for limit in (0.01, 0.03, 0.05):
        info = solvers.make("cpsat", seed=1, time_limit_s=limit, gpu_guard=True).solve(p).info
        if "gpu_guard" in info["skipped"]:  # stopped by time_limit_s, not by its own budget
            assert "gpu_guard" in info["wall_clock_cut"]


def test_the_batch_own_multi_card_pods_do_not_mask_single_card_pods():
    # An 8-card node and a 1-card node; two 8-card pods and three 1-card pods, CPU and memory to
    # spare. The whole-card rule kept the 1-card pods off the 8-card node (they break the copy a
    # waiting 8-card pod needs) though CP-SAT weighs those pods itself: 2 placed against 3.
    nodes = [_node("eight", 64000, 8, 0), _node("one", 16000, 1, 2)]
    pods = [_pod(f"multi{i}", 2000, 8) for i in range(2)] + [_pod(f"single{i}", 2000, 1) for i in range(3)]
    p = _doc(nodes, pods)
    assert guard_mask(p, ClusterState(p)) is None  # nothing strands for later batches
    on = solvers.make("cpsat", seed=1, time_limit_s=5.0, gpu_guard=True).solve(p)
    off = solvers.make("cpsat", seed=1, time_limit_s=5.0).solve(p)
    assert int((on.assignment >= 0).sum()) == int((off.assignment >= 0).sum()) == 3
