"""iro-frag against hand-computed fragmentation, and against FGD on a fixed-seed slice of the openb trace."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.replay import replay_trace

# The workload defines the typical tasks: G (8 cores, one whole card) 3 times, C (8 cores, no GPU)
# once, so popularity G = 0.75, C = 0.25 (both kept by the 95 % coverage).
CPU_ONLY = {"name": "c", "requests": {"cpu": 8000, "memory": 1024}}
WHOLE = {"name": "g", "requests": {"cpu": 8000, "memory": 1024}, "gpu": {"count": 1}}


def two_nodes(first: dict | None = None) -> object:
    workloads = [first or CPU_ONLY] + [dict(WHOLE, name=f"g{i}") for i in range(3)]
    return problem_from_dict(
        {
            "domains": [{"name": "az"}],
            "nodes": [
                # n0: two cards, CPU for exactly two G copies; n1: two cards, CPU for eight.
                {"name": "n0", "domain": "az", "capacity": {"cpu": 16000, "memory": 65536}, "gpus": 2, "gpu_model": "T4"},
                {"name": "n1", "domain": "az", "capacity": {"cpu": 64000, "memory": 262144}, "gpus": 2, "gpu_model": "T4"},
            ],
            "workloads": workloads,
        }
    )


def scores(solver, problem, w: int = 0) -> dict[int, int]:
    solver.reset(problem)
    state = ClusterState(problem)
    cand = np.flatnonzero(feasible_nodes(state, w))
    return dict(zip(cand.tolist(), np.asarray(solver.score(state, w, cand)).tolist(), strict=True))


def test_cpu_only_pod_avoids_stranding_gpus_by_hand():
    problem = two_nodes()
    # FGD: on either node G still fits after the CPU-only pod (n0 keeps 8 cores), so F stays
    # 2000 - 0.75 * 2000 = 500: dF = 0, both score trunc(100 * sigmoid(0)) = 50, a tie.
    assert scores(solvers.make("fgd", seed=0), problem) == {0: 50, 1: 50}
    # copies: n0 feeds min(2 cards, 16000 // 8000) = 2 copies of G before and 8000 // 8000 = 1
    # after, so F goes 2000 - 0.75 * 2000 = 500 -> 2000 - 0.75 * 1000 = 1250 (+750); n1 keeps
    # two copies (+0). Blend with copies_weight 0.5: n0 grows by 375 -> trunc(100 * sigmoid(-0.375)) = 40.
    blend = solvers.make("iro-frag", seed=0, frag_model="blend", copies_weight=0.5)
    assert scores(blend, problem) == {0: 40, 1: 50}
    only_copies = solvers.make("iro-frag", seed=0, frag_model="copies")
    assert scores(only_copies, problem) == {0: 32, 1: 50}  # trunc(100 * sigmoid(-0.75)) = 32
    # The default iro-frag therefore puts the CPU-only pod on n1, whatever the tie order.
    for seed in range(5):
        iro = solvers.make("iro-frag", seed=seed)
        iro.reset(problem)
        assert iro.decide(ClusterState(problem), 0).node == 1


def test_share_pod_takes_the_card_it_fills_by_hand():
    # One node with cards [1000, 530]; a 470-milli share (4 cores). Typical tasks: the share
    # (popularity 1/4) and G (3/4). F (fgd part): 530-card unusable by G -> 0.75 * 530; after
    # the share on card 1 (60 left) F = 60 (no task fits) versus, on card 0, 530 + 530 left
    # -> 0.75 * 1060. Copies agree. The share goes to card 1, as FGD does.
    share = {"name": "s", "requests": {"cpu": 4000, "memory": 1024}, "gpu": {"count": 1, "milli": 470}}
    doc = {
        "domains": [{"name": "az"}],
        "nodes": [
            {"name": "n0", "domain": "az", "capacity": {"cpu": 64000, "memory": 262144}, "gpus": 2, "gpu_model": "T4",
             "gpu_free_milli": [1000, 530]},
        ],
        "workloads": [share] + [dict(WHOLE, name=f"g{i}") for i in range(3)],
    }
    problem = problem_from_dict(doc)
    for name in ("fgd", "iro-frag"):
        solver = solvers.make(name, seed=0)
        solver.reset(problem)
        decision = solver.decide(ClusterState(problem), 0)
        assert (decision.node, decision.cards) == (0, (1,)), name


def test_gap_balance_prefers_the_card_that_keeps_leftovers_spread_by_hand():
    # One node, cards [1000, 700, 400, 700, 400]: N(700) = 2, N(400) = 2 cards with that much left.
    # A 300-milli share changes sum_g N(g)^2 by: 1000 -> 700: 2 * 2 + 1 = +5; 700 -> 400:
    # (1 - 2 * 2) + (2 * 2 + 1) = +2; 400 -> 100: (1 - 2 * 2) + (2 * 0 + 1) = -2. With a dominant
    # gap_balance the share goes to the first 400-milli card.
    share = {"name": "s", "requests": {"cpu": 1000, "memory": 1024}, "gpu": {"count": 1, "milli": 300}}
    doc = {
        "domains": [{"name": "az"}],
        "nodes": [
            {"name": "n0", "domain": "az", "capacity": {"cpu": 64000, "memory": 262144}, "gpus": 5, "gpu_model": "T4",
             "gpu_free_milli": [1000, 700, 400, 700, 400]},
        ],
        "workloads": [share] + [dict(WHOLE, name=f"g{i}") for i in range(3)],
    }
    problem = problem_from_dict(doc)
    solver = solvers.make("iro-frag", seed=0, gap_balance=1e6, share_rule="fgd")
    solver.reset(problem)
    state = ClusterState(problem)
    score = solver.score(state, 0, np.array([0]))[0]
    assert solver.decide(state, 0).cards == (2,)
    assert 1.5e6 < score < 2.5e6  # -(growth + 1e6 * -2) = 2e6 - growth, the growth a few hundred milli


def test_dual_rule_scores_shares_by_reduced_cost_then_growth_by_hand():
    # Typical tasks: a 470 share, a 320 share (1/4 each) and G (1/2). Card-packing LP prices:
    # 470 pairs with itself (940), 320 three times (960), 470 + 320 = 790 strands the rest, so
    # y470 = 1/2, y320 = 1/3 (the only optimal dual). A 320 arriving on cards [1000, 530, 680]
    # gives up value[free] - value[free - 320] - 1/3: card 0: 1 - 2/3 - 1/3 = 0; card 1:
    # 1/2 - 0 - 1/3 = 1/6 (the 470 it could have taken); card 2: 2/3 - 1/3 - 1/3 = 0.
    # FGD's F (p * free milli a task cannot use) before: G 1/2 * (530 + 680) = 605; after on card
    # 0: G 1/2 * 1890 = 945 (+340); on card 2 (360 left): G 445 + 470-task 1/4 * 360 = 535 (-70).
    # Least reduced cost, then least growth: card 2, score -(-70) = 70.
    s470 = {"name": "a", "requests": {"cpu": 1000, "memory": 1024}, "gpu": {"count": 1, "milli": 470}}
    s320 = {"name": "b", "requests": {"cpu": 1000, "memory": 1024}, "gpu": {"count": 1, "milli": 320}}
    doc = {
        "domains": [{"name": "az"}],
        "nodes": [
            {"name": "n0", "domain": "az", "capacity": {"cpu": 64000, "memory": 262144}, "gpus": 3, "gpu_model": "T4",
             "gpu_free_milli": [1000, 530, 680]},
        ],
        "workloads": [s320, s470] + [dict(WHOLE, name=f"g{i}") for i in range(2)],
    }
    problem = problem_from_dict(doc)
    solver = solvers.make("iro-frag", seed=0, frag_model="fgd", share_rule="dual", dual_weight=1e6)
    solver.reset(problem)
    assert solver.prices.price[470] == pytest.approx(0.5) and solver.prices.price[320] == pytest.approx(1 / 3)
    assert solver.prices.reduced_cost(np.array([1000, 530, 680]), 320) == pytest.approx([0.0, 1 / 6, 0.0])
    state = ClusterState(problem)
    assert solver.score(state, 0, np.array([0]))[0] == pytest.approx(70.0)
    assert solver.decide(state, 0).cards == (2,)
    # FGD's integer score ties cards 1 (-55) and 2 (-70): 100 * sigmoid(0.055) and sigmoid(0.07)
    # both truncate to 51, the first card wins, and the 530 card can no longer take a 470.
    plain = solvers.make("fgd", seed=0)
    plain.reset(problem)
    assert plain.decide(ClusterState(problem), 0).cards == (1,)


def test_settings_are_checked():
    with pytest.raises(solvers.InvalidSettingError, match="copies_weight"):
        solvers.make("iro-frag", copies_weight=1.5)
    with pytest.raises(solvers.InvalidSettingError, match="gap_balance"):
        solvers.make("iro-frag", gap_balance=-1)
    with pytest.raises(solvers.InvalidSettingError, match="frag_model"):
        solvers.make("iro-frag", frag_model="exact")
    with pytest.raises(solvers.InvalidSettingError, match="share_rule"):
        solvers.make("iro-frag", share_rule="lp")


def test_no_worse_than_fgd_on_a_fixed_seed_slice(real_slice):
    nodes, pods = real_slice
    seed = 42
    fgd = replay_trace(nodes, pods, "fgd", seed=seed)
    iro = replay_trace(nodes, pods, "iro-frag", seed=seed)
    assert iro.arrived_pods == fgd.arrived_pods
    assert iro.unallocated_gpu_pct_at_100 <= fgd.unallocated_gpu_pct_at_100
    assert iro.failed_gpu_milli <= fgd.failed_gpu_milli
