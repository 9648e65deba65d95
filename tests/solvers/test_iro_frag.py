"""iro-frag against hand-computed fragmentation, and against FGD on a fixed-seed slice of the openb trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import solvers
from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import feasible_nodes
from iro_fed.replay import replay_trace
from iro_fed.traces.openb import load_nodes, load_pods

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "alibaba-openb-2023"

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
    solver = solvers.make("iro-frag", seed=0, gap_balance=1e6)
    solver.reset(problem)
    state = ClusterState(problem)
    score = solver.score(state, 0, np.array([0]))[0]
    assert solver.decide(state, 0).cards == (2,)
    assert 1.5e6 < score < 2.5e6  # -(growth + 1e6 * -2) = 2e6 - growth, the growth a few hundred milli


def test_settings_are_checked():
    with pytest.raises(solvers.InvalidSettingError, match="copies_weight"):
        solvers.make("iro-frag", copies_weight=1.5)
    with pytest.raises(solvers.InvalidSettingError, match="gap_balance"):
        solvers.make("iro-frag", gap_balance=-1)
    with pytest.raises(solvers.InvalidSettingError, match="frag_model"):
        solvers.make("iro-frag", frag_model="exact")


@pytest.fixture(scope="module")
def real_slice():
    if not DATA.exists():
        pytest.skip("shared/data not present")
    nodes = load_nodes(DATA / "openb_node_list_gpu_node.csv")[::12]  # 102 nodes of every shape
    pods = load_pods(DATA / "openb_pod_list_default.csv")[::12]
    return nodes, pods


def test_no_worse_than_fgd_on_a_fixed_seed_slice(real_slice):
    nodes, pods = real_slice
    seed = 42
    fgd = replay_trace(nodes, pods, "fgd", seed=seed)
    iro = replay_trace(nodes, pods, "iro-frag", seed=seed)
    assert iro.arrived_pods == fgd.arrived_pods
    assert iro.unallocated_gpu_pct_at_100 <= fgd.unallocated_gpu_pct_at_100
    assert iro.failed_gpu_milli <= fgd.failed_gpu_milli
