"""``iro replay --batch-window N`` with an online policy: the policy decides each queued pod in
arrival order against the live cluster, one run over the whole replay, so its curve is exactly
the online one (a window used to be a fresh ``solve`` that reseeded the policy and knew nothing
of the pods already placed)."""

from __future__ import annotations

import pytest

import solvers
from iro_fed.replay import replay_problem
from iro_fed.traces.openb import OpenbNode, OpenbPod, arrival_sequence, build_problem, gpu_capacity


def mixed_trace() -> tuple[list[OpenbNode], list[OpenbPod]]:
    nodes = [OpenbNode(f"n{i}", 32000 + 16000 * (i % 3), 262144, 2 + 2 * (i % 4), "T4") for i in range(10)]
    pods = []
    for i in range(60):
        if i % 4 == 0:
            cards, milli = 1 + i % 3, 1000  # whole cards (1, 2 or 3)
        else:
            cards, milli = 1, 150 * (1 + i % 6)  # a share of one card
        pods.append(OpenbPod(f"p{i:02d}", 1000 + 500 * (i % 7), 2048, cards, milli))
    return nodes, pods


CURVES = ("alloc_gpu_pct", "frag_gpu_pct", "alloc_cpu_pct", "alloc_mem_pct")


@pytest.mark.parametrize("policy", ["random", "fgd-clustering", "fgd"])
def test_an_online_policy_gives_its_online_curve_with_any_window(policy):
    nodes, pods = mixed_trace()
    sequence = arrival_sequence(pods, 3, gpu_capacity(nodes))
    problem = build_problem(nodes, sequence)
    online = replay_problem(problem, solvers.make(policy, seed=3), seed=3)
    assert 0 < online.failed_pods < problem.num_workloads  # a full cluster: decisions matter
    for window in (2, 5, 1000):
        batched = replay_problem(problem, solvers.make(policy, seed=3), seed=3, batch_window=window)
        assert batched.batch_window == window
        assert batched.failed_pods == online.failed_pods, (window, batched.failed_pods, online.failed_pods)
        assert batched.failed_gpu_milli == online.failed_gpu_milli
        for name in CURVES:
            assert getattr(batched, name) == getattr(online, name), (window, name)
