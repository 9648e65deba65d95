"""The replay against the FGD paper's methodology (shared/spec/fgd-replay.md), on traces small
enough to compute every number by hand: typical tasks and their 95 % rule, the fragmentation
metric per node, the replay loop (failed pods dropped, their GPU still arrived), and that the
metric uses the typical tasks of the original pod list, not of the tuned arrival sequence."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed.fragmentation import fragmentation, typical_tasks
from iro_fed.replay import replay_problem, replay_trace
from iro_fed.traces.openb import OpenbNode, OpenbPod, arrival_sequence, build_problem

NODES = [
    OpenbNode("n0", 16000, 65536, 2, "T4"),
    OpenbNode("n1", 8000, 65536, 4, "V100"),
    OpenbNode("n2", 32000, 65536, 0, ""),
]


def twenty_pods() -> list[OpenbPod]:
    """10 shares of 500 (4 CPUs), 6 two-card pods for V100 or A100 (8 CPUs), 3 CPU-only pods
    (2 CPUs) and one 300-milli share: 19 of 20 is exactly 95 %, so the last group is not typical."""
    pods = [OpenbPod(f"s{i:02d}", 4000, 1024, 1, 500) for i in range(10)]
    pods += [OpenbPod(f"w{i}", 8000, 1024, 2, 1000, ("V100", "A100")) for i in range(6)]
    pods += [OpenbPod(f"c{i}", 2000, 1024, 0, 0) for i in range(3)]
    return [*pods, OpenbPod("rare", 1000, 1024, 1, 300)]


def test_typical_tasks_keep_the_smallest_prefix_covering_95_percent():
    tasks = typical_tasks(build_problem(NODES, twenty_pods()))
    # By count: shares (10), two-card pods (6), CPU-only (3) cover 19 of 20 = 95 %: the 300-milli
    # share is left out and the popularity is renormalized over the 19.
    assert tasks.milli.tolist() == [500, 1000, 0]
    assert tasks.count.tolist() == [1, 2, 0]
    assert tasks.cpu.tolist() == [4000.0, 8000.0, 2000.0]
    assert tasks.popularity.tolist() == pytest.approx([10 / 19, 6 / 19, 3 / 19])
    # gpu_spec "V100|A100": only n1 (V100) is accessible; the share and CPU-only tasks take any node.
    assert tasks.access.tolist() == [[True, True, True], [False, True, False], [True, True, True]]


def test_fragmentation_per_node_by_hand():
    tasks = typical_tasks(build_problem(NODES, twenty_pods()))
    cards = np.array([[1000, 300, -1, -1], [1000, 1000, 400, 0], [-1, -1, -1, -1]])
    nodes = np.arange(3)
    got = fragmentation(tasks, nodes, np.array([6000.0, 7000.0, 32000.0]), cards)
    # n0 (T4, 1300 free): the share fits (only the 300 card is fragmented for it); the V100/A100
    # pod cannot use a T4 at all and the CPU-only task uses no GPU: all 1300 milli are fragmented.
    # n1 (V100, 2400 free, 7000 CPU left): the share leaves out the 400 and 0 cards; the two-card
    # pod lacks CPU (8000 > 7000), so all 2400 are fragmented for it, as for the CPU-only task.
    # n2 has no GPUs: nothing to fragment.
    assert got.tolist() == pytest.approx([(10 * 300 + 6 * 1300 + 3 * 1300) / 19, (10 * 400 + 6 * 2400 + 3 * 2400) / 19, 0.0])
    # With 9000 CPUs left on n1 the two-card pod fits: only the 400 (and the empty) card is lost to it.
    more_cpu = fragmentation(tasks, nodes, np.array([6000.0, 9000.0, 32000.0]), cards)
    assert more_cpu[1] == pytest.approx((10 * 400 + 6 * 400 + 3 * 2400) / 19)
    # With three cards needed and two full ones, the whole node is fragmented for that task.
    three = typical_tasks(build_problem(NODES, [OpenbPod("t", 1000, 1, 3, 1000)]))
    assert fragmentation(three, nodes, np.array([6000.0, 9000.0, 32000.0]), cards).tolist() == [1300.0, 2400.0, 0.0]


def hand_replay_pods() -> list[OpenbPod]:
    return [
        OpenbPod("p1", 1000, 1024, 2, 1000, ("V100", "A100")),  # two whole cards, only n1 is a V100
        OpenbPod("p2", 1000, 1024, 1, 1000, ("A100",)),  # no A100 in the cluster: fails
        OpenbPod("p3", 4000, 1024, 0, 0),  # CPU-only: best fit is the GPU-less n2 (score 100)
        OpenbPod("p4", 1000, 1024, 3, 1000),  # three free cards nowhere (n0 has 2, n1 has 2 left): fails
        OpenbPod("p5", 1000, 1024, 1, 500, ("T4", "V100")),  # a share, n1 scores 88 against n0's 87
    ]


def test_replay_loop_by_hand():
    nodes = [OpenbNode("n0", 8000, 65536, 2, "T4"), OpenbNode("n1", 8000, 65536, 4, "V100"), OpenbNode("n2", 4000, 65536, 0, "")]
    problem = build_problem(nodes, hand_replay_pods())
    solver = solvers.make("fgd-bestfit", seed=0)
    result = replay_problem(problem, solver, seed=0)
    # Arrived GPU (of 6000 milli): 2000, 3000 (p2 fails but counts), 3000, 6000 (p4 fails), 6500.
    # Allocated: 2000 until p5 adds 500; each pod is tried once and the next one still arrives.
    assert result.failed_pods == 2 and result.failed_gpu_milli == 1000 + 3000
    assert result.alloc_gpu_pct["33"] == 33.33
    assert result.alloc_gpu_pct["50"] == 33.33  # p2 and p3
    assert result.alloc_gpu_pct["100"] == 33.33 and result.unallocated_gpu_pct_at_100 == 66.67
    assert result.alloc_gpu_pct["108"] == 41.67
    assert result.alloc_gpu_pct["0"] is None and result.alloc_gpu_pct["75"] is None
    # The typical tasks are the five pods, 1/5 each. After p1 (n1 cards [0, 0, 1000, 1000]):
    # n0 (T4): p1's and p2's kinds have no access, p3 is CPU-only, p4 lacks a third card, p5 fits:
    # 4/5 of 2000; n1: p1 and p5 fit with no card lost, p2 (A100), p3 and p4 lose all 2000: 3/5 of
    # 2000; 2800 of 6000 milli.
    assert result.frag_gpu_pct["33"] == 46.67
    # CPU of 20,000: 5 % after p2 (which failed: only p1's 1000), 25 % after p3: the mean is 15.
    assert result.alloc_cpu_pct["50"] == 15.0


def test_metric_uses_the_typical_tasks_of_the_original_pod_list():
    nodes = [OpenbNode("n0", 64000, 65536, 1, "T4")]
    pods = [OpenbPod(f"c{i}", 1000, 1024, 0, 0) for i in range(3)] + [OpenbPod("g", 1000, 1024, 1, 600)]
    sequence = arrival_sequence(pods, 0, 1000)
    # Seed 0 arrives c2, c0, c1 (arrived 0 %), g (60 %), then copies: six CPU-only pods and a
    # second g, so the sequence is 9 CPU-only pods and 2 shares where the pod list has 3 and 1.
    assert [p.name for p in sequence[:4]] == ["c2", "c0", "c1", "g"]
    assert sum(p.num_gpu == 0 for p in sequence) == 9 and len(sequence) == 11
    result = replay_trace(nodes, pods, "fgd", seed=0)
    # While the card is free only the CPU-only task (3/4 of the original pods) fragments it:
    # 75 % (the sequence's 9/11 would give 81.82).
    assert result.frag_gpu_pct["0"] == 75.0
    # After g, 400 milli are left: no typical task can use them.
    assert result.frag_gpu_pct["60"] == 40.0
    assert result.failed_pods == 1  # the second g does not fit the 400 left


def test_replay_hands_its_typical_tasks_to_the_fgd_policies():
    problem = build_problem(NODES, hand_replay_pods())
    tasks = typical_tasks(build_problem(NODES, twenty_pods()))
    for policy in ("fgd", "iro-frag"):
        solver = solvers.make(policy, seed=0)
        replay_problem(problem, solver, seed=0, tasks=tasks)
        assert solver.tasks is tasks
    with pytest.raises(ValueError, match="tasks: computed for 3 nodes, the problem has 1"):
        replay_problem(build_problem(NODES[:1], hand_replay_pods()), solvers.make("fgd"), seed=0, tasks=tasks)
