"""FGD's fragmentation, typical tasks and baselines against the paper's simulator
(hkust-adsl/kubernetes-scheduler-simulator: ``utils.NodeGpuShareFragAmount``, ``GetTypicalPods``
with ``TargetPodList.Less``, ``GpuClusteringScorePlugin``), on nodes small enough to check by hand."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

import solvers
from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.fragmentation import fragmentation, typical_tasks
from iro_fed.traces.openb import OpenbNode, OpenbPod, build_problem

T4 = [OpenbNode("n0", 4000, 65536, 4, "T4")]


def scores(solver, problem, state, w):
    solver.reset(problem)
    cand = np.flatnonzero(feasible_nodes(state, w))
    return dict(zip(cand.tolist(), np.asarray(solver.score(state, w, cand)).tolist(), strict=True))


def test_equal_counts_at_the_95_percent_cut_keep_the_simulators_group():
    # 18 shares, then two groups of one pod each: 18 of 20 is short of 95 %, so exactly one of the
    # two is kept. The simulator sorts sort.Reverse(TargetPodList): equal counts by PodResource.Less
    # reversed, the larger CPU first, so the 2-core pod is typical and the 1-core pod is not.
    pods = [OpenbPod(f"s{i:02d}", 4000, 1024, 1, 500) for i in range(18)]
    pods += [OpenbPod("small", 1000, 1024, 1, 1000), OpenbPod("big", 2000, 1024, 1, 1000)]
    tasks = typical_tasks(build_problem(T4, pods))
    assert tasks.cpu.tolist() == [4000.0, 2000.0]
    assert tasks.popularity.tolist() == pytest.approx([18 / 19, 1 / 19])
    # Same CPU, milli and count: the GPU model string decides ("T4" > "A100"), as on gpuspec10.
    pods = [OpenbPod(f"s{i:02d}", 4000, 1024, 1, 500) for i in range(18)]
    pods += [OpenbPod("a100", 1000, 1024, 1, 1000, ("A100",)), OpenbPod("t4", 1000, 1024, 1, 1000, ("T4",))]
    tasks = typical_tasks(build_problem(T4, pods))
    assert tasks.access[:, 0].tolist() == [True, True]  # the kept group accepts the T4 node


def test_coverage_is_checked():
    problem = build_problem(T4, [OpenbPod("p", 1000, 1024, 1, 500)])
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="coverage"):
            typical_tasks(problem, coverage=bad)


def test_a_placement_that_leaves_fragmentation_unchanged_scores_50():
    # Typical tasks, 1/3 each: a 300 share (1 core), a 500 share (2 cores), a 300 share (2 cores).
    # Node: four T4 cards [1000, 1000, 1000, 300], 4 cores. Only the 500 task strands the 300
    # card: F = 300 / 3 = 100. A 100-milli share (1 core) on a full card leaves 3 cores, every
    # task still fits, the 900 card strands nothing: F stays 100, dF = 0, 100 * sigmoid(0) = 50
    # (the simulator's score). On the 300 card (-> 200) every task strands it: F = 200, 47.
    # Summed as popularity-weighted floats, F after came out 100.00000000000034: score 49.
    typical = [OpenbPod("a", 1000, 1, 1, 300), OpenbPod("b", 2000, 1, 1, 500), OpenbPod("c", 2000, 1, 1, 300)]
    tasks = typical_tasks(build_problem(T4, typical))
    cards = np.array([[1000, 1000, 1000, 300], [900, 1000, 1000, 300]])
    got = fragmentation(tasks, np.array([0, 0]), np.array([4000.0, 3000.0]), cards)
    assert got[0] == got[1] == 100.0
    problem = build_problem(T4, [OpenbPod("p", 1000, 1, 1, 100)])
    problem = problem.with_cluster(problem.allocated, np.array([[1000, 1000, 1000, 300]]))
    solver = solvers.make("fgd", seed=0)
    solver.use_typical_tasks(tasks)
    state = ClusterState(problem)
    assert scores(solver, problem, state, 0) == {0: 50}
    assert solver.choose_cards(state, 0, 0) == (0,)


def paper_fragmentation(model: str, cpu_left: int, cards: list[int], groups: Counter) -> Fraction:
    """The paper's definition, task by task: all free milli when the task cannot run on the node
    (CPU-only, GPU model refused, too little CPU, too few cards with its milli), otherwise the
    milli of the cards that individually cannot host it; popularity-weighted, exactly."""
    total = sum(groups.values())
    free = sum(cards)
    frag = Fraction(0)
    for (cpu, milli, k, spec), n in groups.items():
        runs = milli > 0 and (not spec or model in spec) and cpu_left >= cpu and sum(c >= milli for c in cards) >= k
        frag += Fraction(n, total) * (sum(c for c in cards if c < milli) if runs else free)
    return frag


@pytest.mark.parametrize("seed", range(4))
def test_fragmentation_equals_the_papers_definition_on_random_tiny_nodes(seed: int) -> None:
    rng = random.Random(seed)
    models = ["T4", "V100", "A100"]
    nodes = [OpenbNode(f"n{i}", rng.choice([4000, 16000]), 65536, rng.choice([1, 2, 4, 8]), rng.choice(models)) for i in range(4)]
    pods = []
    for j in range(12):
        spec = tuple(rng.sample(models, rng.randint(1, 2))) if rng.random() < 0.4 else ()
        kind = rng.random()
        if kind < 0.2:
            pods.append(OpenbPod(f"p{j}", rng.choice([1000, 6000]), 1, 0, 0))
        elif kind < 0.6:
            pods.append(OpenbPod(f"p{j}", rng.choice([1000, 6000]), 1, 1, rng.choice([250, 500, 700]), spec))
        else:
            pods.append(OpenbPod(f"p{j}", rng.choice([1000, 6000]), 1, rng.choice([1, 2, 4]), 1000, spec))
    tasks = typical_tasks(build_problem(nodes, pods), coverage=1.0)
    groups = Counter((p.cpu_milli, p.gpu_milli, p.num_gpu, p.gpu_spec) for p in pods)
    width = max(n.gpus for n in nodes)
    for _ in range(25):
        cards = np.full((len(nodes), width), -1)
        for i, n in enumerate(nodes):
            cards[i, : n.gpus] = [rng.choice([0, 250, 300, 500, 1000, 1000]) for _ in range(n.gpus)]
        cpu_left = np.array([rng.choice([0, 2000, n.cpu_milli]) for n in nodes])  # 0: CPU exhausted
        got = fragmentation(tasks, np.arange(len(nodes)), cpu_left.astype(float), cards)
        for i, n in enumerate(nodes):
            row = cards[i, : n.gpus].tolist()
            want = paper_fragmentation(n.model, int(cpu_left[i]), row, groups)
            assert got[i] == pytest.approx(float(want), abs=1e-9), (n, row, cpu_left[i])
            if cpu_left[i] == 0:  # no task has CPU: every free milli is fragmented
                assert got[i] == pytest.approx(sum(row))


def test_clustering_base_truncates_toward_zero_on_nodes_with_more_than_eight_cards():
    # GpuClusteringScorePlugin: MaxNodeScore / 4 * (MaxSpecGpu - left) / MaxSpecGpu in Go int64,
    # truncated toward zero. n0 has 16 cards, 8100 milli free: 25 * -100 / 8000 = -0.3 -> 0 (floor
    # would give -1); n1 has 8 idle cards: 0. Both idle nodes get + 25: a tie, not n1 ahead.
    doc = {
        "domains": [{"name": "az"}],
        "nodes": [
            {"name": "n0", "domain": "az", "capacity": {"cpu": 64000, "memory": 65536}, "gpus": 16, "gpu_model": "A",
             "gpu_free_milli": [1000] * 8 + [100] + [0] * 7},
            {"name": "n1", "domain": "az", "capacity": {"cpu": 64000, "memory": 65536}, "gpus": 8, "gpu_model": "A"},
        ],
        "workloads": [{"name": "w", "requests": {"cpu": 1000}, "gpu": {"count": 1}}],
    }
    problem = problem_from_dict(doc)
    assert scores(solvers.make("fgd-clustering", seed=0), problem, ClusterState(problem), 0) == {0: 25, 1: 25}
