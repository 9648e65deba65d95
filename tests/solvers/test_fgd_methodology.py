"""FGD's score against hand computations on a three-node openb cluster (shared/spec/fgd-replay.md):
100 * sigmoid((F_before - F_after) / 1000) truncated, every fitting card tried for a share pod and
the first best card kept, CPU shortage counted in F, and typical tasks handed over by the replay."""

from __future__ import annotations

import math

import numpy as np
import pytest

import solvers
from iro_fed.feasibility import feasible_nodes
from iro_fed.fragmentation import typical_tasks
from iro_fed.model import ClusterState
from iro_fed.traces.openb import OpenbNode, OpenbPod, build_problem

NODES = [
    OpenbNode("n0", 16000, 65536, 2, "T4"),
    OpenbNode("n1", 8000, 65536, 4, "V100"),
    OpenbNode("n2", 32000, 65536, 0, ""),
]
TYPICAL = (
    [OpenbPod(f"s{i:02d}", 4000, 1024, 1, 500) for i in range(10)]
    + [OpenbPod(f"w{i}", 8000, 1024, 2, 1000, ("V100", "A100")) for i in range(6)]
    + [OpenbPod(f"c{i}", 2000, 1024, 0, 0) for i in range(3)]
    + [OpenbPod("rare", 1000, 1024, 1, 300)]
)
# Typical tasks: share 500 (4 CPUs) 10/19, two cards for V100|A100 (8 CPUs) 6/19, CPU-only 3/19.
PODS = [OpenbPod("share", 1000, 1024, 1, 500), OpenbPod("cpu", 3000, 1024, 0, 0)]


def fgd_score(delta_f: float) -> int:
    return math.trunc(100 / (1 + math.exp(-delta_f / 1000)))


def fgd_on(gpu_free: list[list[int]]):
    problem = build_problem(NODES, PODS)
    problem = problem.with_cluster(problem.allocated, np.array(gpu_free))
    solver = solvers.make("fgd", seed=0)
    solver.use_typical_tasks(typical_tasks(build_problem(NODES, TYPICAL)))
    solver.reset(problem)
    return problem, solver, ClusterState(problem)


def scores(solver, state, w):
    cand = np.flatnonzero(feasible_nodes(state, w))
    return dict(zip(cand.tolist(), np.asarray(solver.score(state, w, cand)).tolist(), strict=True))


def test_share_pod_tries_every_card_and_keeps_the_first_best():
    _, solver, state = fgd_on([[1000, 1000, -1, -1], [1000, 700, 500, 1000], [-1, -1, -1, -1]])
    # n1 before (8000 CPUs): the share loses nothing, the two-card pod loses 700 + 500, the
    # CPU-only task all 3200: F = (6 * 1200 + 3 * 3200) / 19. Placing the share leaves 7000 CPUs,
    # too few for the two-card pod, which then loses all 2700:
    # card 0 or 3 (-> 500) or card 2 (-> 0): F = 9 * 2700 / 19; card 1 (-> 200): + 10 * 200 / 19.
    before = (6 * 1200 + 3 * 3200) / 19
    on_card = [fgd_score(before - 9 * 2700 / 19), fgd_score(before - (10 * 200 + 9 * 2700) / 19)]
    assert on_card == [40, 37]
    # n0 (T4): the two-card pod has no access and the CPU-only task no use for GPUs either way:
    # F goes from 9 * 2000 / 19 to 9 * 1500 / 19 on either card.
    n0 = fgd_score(9 * 500 / 19)
    assert n0 == 55
    assert scores(solver, state, 0) == {0: 55, 1: 40}
    decision = solver.decide(state, 0)
    assert (decision.node, decision.cards) == (0, (0,))
    # On n1 alone, cards 0, 2 and 3 tie at 40: the first (card 0) is used, as in the simulator.
    assert solver.choose_cards(state, 0, 1) == (0,)


def test_cpu_only_pod_is_charged_for_the_gpus_it_strands():
    _, solver, state = fgd_on([[1000, 1000, -1, -1], [1000, 1000, 1000, 1000], [-1, -1, -1, -1]])
    # n1 has 8000 CPUs: after a 3000-CPU pod the two-card task (8000) no longer fits, so its 4000
    # free milli become fragmented: F from 3 * 4000 / 19 to 9 * 4000 / 19. n0 (16,000 CPUs) and
    # n2 (no GPUs) do not change: score 50.
    assert scores(solver, state, 1) == {0: 50, 1: fgd_score(-6 * 4000 / 19), 2: 50}
    assert fgd_score(-6 * 4000 / 19) == 22


def test_typical_tasks_for_other_nodes_are_refused():
    solver = solvers.make("fgd", seed=0)
    solver.use_typical_tasks(typical_tasks(build_problem(NODES, TYPICAL)))
    with pytest.raises(ValueError, match="typical tasks: computed for 3 nodes, the problem has 2"):
        solver.reset(build_problem(NODES[:2], PODS))
    solver.use_typical_tasks(None)  # back to the problem's own workloads
    solver.reset(build_problem(NODES[:2], PODS))
    assert sorted(solver.tasks.milli.tolist()) == [0, 500]
