"""The simulator's preemption follows kube-scheduler's DefaultPreemption (PostFilter):

* victims per node (SelectVictimsOnNode): all pods of lower priority off, the preemptor must fit,
  then each is reprieved (put back), most important first (priority, then earlier start), while
  the preemptor still fits; the rest are the victims;
* the node (pickOneNodeForPreemption): lowest highest-victim priority, smallest sum of victim
  priorities, fewest victims, latest start of the highest-priority victims, first node;
* every pending pod that fits nowhere is tried (no cap of 20 per step); GPU pods preempt and are
  preempted like the others (cards counted exactly); a pod that fits some node preempts nothing.

Real runs of :class:`~iro_fed.sim.Simulator` with first-fit on hand-made clusters (one step is one
minute; consolidation off so that nothing moves but by preemption).
"""

from __future__ import annotations

import numpy as np

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.model import NodePool, PodSpec
from tests.sim.helpers import tiny_scenario


def run(pods: list[PodSpec], pools: list[NodePool] | None = None, own_nodes: int = 1, steps: int = 5,
        solver=None) -> tuple[Simulator, dict]:
    sc = tiny_scenario(steps=steps, pods=pods, own_nodes=own_nodes, cloud_nodes=0)
    if pools is not None:
        sc.pools = pools
    sim = Simulator(sc, solver or solvers.make("first-fit"), SimConfig(power_down=False, consolidate_every=0))
    totals = sim.run().totals
    assert np.all(sim.state.gpu_free[sim.gpu_free0 >= 0] >= 0)
    return sim, totals


def where(sim: Simulator) -> dict[str, str | None]:
    """Each pod's node at the end (None: not running)."""
    return {row["name"]: sim.nodes[int(n)].name if (n := sim.state.assignment[i]) >= 0 else None
            for i, row in enumerate(sim.pod_rows)}


def first_placed(sim: Simulator) -> dict[str, int]:
    return {row["name"]: int(sim.first_placed[i]) for i, row in enumerate(sim.pod_rows)}


def test_the_node_whose_highest_victim_has_the_lowest_priority_wins_over_fewer_victims():
    # own-000 holds x (4000 m, priority 500), own-001 y1 and y2 (2000 m, priority 0). h (4000 m,
    # priority 1000) evicts y1 and y2 (highest victim priority 0), not x (one victim, priority
    # 500): the old rule took the fewest victims first.
    pods = [PodSpec("x", "online", 4000, 1, 0, priority=500),
            PodSpec("y1", "online", 2000, 1, 0, priority=0),
            PodSpec("y2", "online", 2000, 1, 0, priority=0),
            PodSpec("h", "online", 4000, 1, 2, priority=1000)]
    sim, t = run(pods, own_nodes=2)
    assert where(sim) == {"x": "own-000", "y1": None, "y2": None, "h": "own-001"}
    assert t["preemptions"] == 2  # was 1 (x)


def test_equal_highest_victim_priority_goes_to_the_smallest_sum_of_priorities():
    # Both nodes would lose two pods with highest priority 5; own-001's victims sum to less (5 + 0).
    pods = [PodSpec("x1", "online", 2000, 1, 0, priority=5),
            PodSpec("x2", "online", 2000, 1, 0, priority=5),
            PodSpec("y1", "online", 2000, 1, 1, priority=5),
            PodSpec("y2", "online", 2000, 1, 1, priority=0),
            PodSpec("h", "online", 4000, 1, 2, priority=10)]
    sim, t = run(pods, own_nodes=2)
    assert where(sim) == {"x1": "own-000", "x2": "own-000", "y1": None, "y2": None, "h": "own-001"}  # was own-000
    assert t["preemptions"] == 2


def test_negative_priorities_sum_shifted_so_fewer_victims_win():
    # own-000: one pod of priority -10; own-001: two of -10. Summed as they are, -20 < -10 would
    # pick own-001; upstream shifts each by 2**31, so the single victim's node wins.
    pods = [PodSpec("x", "online", 4000, 1, 0, priority=-10),
            PodSpec("y1", "online", 2000, 1, 1, priority=-10),
            PodSpec("y2", "online", 2000, 1, 1, priority=-10),
            PodSpec("h", "online", 4000, 1, 2, priority=0)]
    sim, t = run(pods, own_nodes=2)
    assert where(sim) == {"x": None, "y1": "own-001", "y2": "own-001", "h": "own-000"}
    assert t["preemptions"] == 1


def test_a_full_tie_goes_to_the_node_whose_victims_started_last():
    # a (placed at 0) on own-000 and b (placed at 1) on own-001: same priority, size and count.
    # Upstream evicts the later-started b; the old rule took the first node (a).
    pods = [PodSpec("a", "online", 4000, 1, 0, priority=0),
            PodSpec("b", "online", 4000, 1, 1, priority=0),
            PodSpec("h", "online", 4000, 1, 2, priority=10)]
    sim, t = run(pods, own_nodes=2)
    assert first_placed(sim) == {"a": 0, "b": 1, "h": 2}
    assert where(sim) == {"a": "own-000", "b": None, "h": "own-001"}  # was a evicted
    assert t["preemptions"] == 1


def test_a_lower_priority_pod_is_reprieved_when_the_more_important_victim_frees_enough():
    # A 5000 m node holds A (1000 m, priority 0) and B (4000 m, priority 10); h (4000 m, priority
    # 20): B is put back first and h no longer fits (B is a victim), then A is put back and h
    # fits: only B goes. The old rule evicted the lowest priorities first until h fit: A and B.
    pools = [NodePool("own", "zone", 1, 5000, 8192)]
    pods = [PodSpec("A", "online", 1000, 1, 0, priority=0),
            PodSpec("B", "online", 4000, 1, 0, priority=10),
            PodSpec("h", "online", 4000, 1, 2, priority=20)]
    sim, t = run(pods, pools)
    assert where(sim) == {"A": "own-000", "B": None, "h": "own-000"}
    assert t["preemptions"] == 1  # was 2


def test_reprieve_over_four_potential_victims_keeps_every_pod_that_can_stay():
    # A 10000 m node: a (1000, priority 0), b (1000, 1), c (4000, 2), d (4000, 3); h asks 5000 at
    # priority 10. All off: 10000 free. Put back d: 6000 >= 5000, stays; c: 2000, a victim; b:
    # 5000, stays; a: 4000, a victim. Victims c and a; the old prefix a, b, c evicted three.
    pools = [NodePool("own", "zone", 1, 10000, 8192)]
    pods = [PodSpec("a", "online", 1000, 1, 0, priority=0),
            PodSpec("b", "online", 1000, 1, 0, priority=1),
            PodSpec("c", "online", 4000, 1, 0, priority=2),
            PodSpec("d", "online", 4000, 1, 0, priority=3),
            PodSpec("h", "online", 5000, 1, 2, priority=10)]
    sim, t = run(pods, pools)
    assert where(sim) == {"a": None, "b": "own-000", "c": None, "d": "own-000", "h": "own-000"}
    assert t["preemptions"] == 2  # was 3


def test_same_priority_victims_reprieve_the_earlier_started_pod():
    # a1 (placed at 0) and a2 (placed at 1) fill a 4000 m node at priority 0; h needs 2000: a1
    # (earlier start: more important) is reprieved, a2 goes.
    pods = [PodSpec("a1", "online", 2000, 1, 0, priority=0),
            PodSpec("a2", "online", 2000, 1, 1, priority=0),
            PodSpec("h", "online", 2000, 1, 2, priority=5)]
    sim, t = run(pods)
    assert where(sim) == {"a1": "own-000", "a2": None, "h": "own-000"}
    assert t["preemptions"] == 1


def test_every_pending_pod_that_fits_nowhere_is_tried_in_the_same_step():
    # 25 pods of priority 10 arrive at 2 on a 25000 m node full of 25 pods of priority 0: each
    # evicts one in step 2. The old cap (20 per step) left 5 of them to step 3.
    pools = [NodePool("own", "zone", 1, 25000, 8192)]
    low = [PodSpec(f"l{i:02d}", "online", 1000, 1, 0, priority=0) for i in range(25)]
    high = [PodSpec(f"h{i:02d}", "online", 1000, 1, 2, priority=10) for i in range(25)]
    sim, t = run(low + high, pools)
    placed = first_placed(sim)
    assert [placed[f"h{i:02d}"] for i in range(25)] == [2] * 25  # 5 were 3
    assert t["preemptions"] == 25


class HoldBack:
    """first-fit, but it leaves pod ``h`` pending (a solver that holds a pod on purpose)."""

    name = "hold-back"

    def __init__(self) -> None:
        self.inner = solvers.make("first-fit")

    def solve(self, problem):
        placement = self.inner.solve(problem)
        for i, w in enumerate(problem.workloads):
            if w.name == "h":
                placement.assignment[i] = -1
        return placement


def test_a_pod_that_fits_some_node_preempts_nothing():
    # own-001 is empty and h would fit there: the solver held it back. Upstream's PostFilter runs
    # only for a pod that fits no node; the old rule skipped own-001 and evicted v on own-000.
    pods = [PodSpec("v", "online", 4000, 1, 0, priority=0),
            PodSpec("h", "online", 4000, 1, 2, priority=10)]
    sim, t = run(pods, own_nodes=2, solver=HoldBack())
    assert where(sim) == {"v": "own-000", "h": None}
    assert t["preemptions"] == 0  # was 1


def gpu_pools(gpus: int = 2) -> list[NodePool]:
    return [NodePool("own", "zone", 1, 8000, 8192, gpus=gpus, gpu_model="T4")]


def gpu_setup(h: PodSpec) -> tuple[Simulator, dict]:
    # One node, two cards: s_b (600 milli, priority 5) and s_a (500 milli, priority 0) on
    # different cards (400 and 500 milli left). h arrives at 2.
    pods = [PodSpec("s_a", "online", 1000, 1, 0, gpu_count=1, gpu_milli=500, priority=0),
            PodSpec("s_b", "online", 1000, 1, 0, gpu_count=1, gpu_milli=600, priority=5), h]
    sim, t = run(pods, gpu_pools())
    return sim, t


def test_a_gpu_share_pod_preempts_the_share_whose_card_then_fits_it():
    # h asks 700 milli: no card has it. With both shares off both cards are free; s_b (more
    # important) is put back and a card still has 1000; s_a is put back and none has 700: s_a
    # goes, h takes its card. GPU pods used to neither preempt nor be preempted (h pending).
    sim, t = gpu_setup(PodSpec("h", "online", 1000, 1, 2, gpu_count=1, gpu_milli=700, priority=10))
    assert where(sim) == {"s_a": None, "s_b": "own-000", "h": "own-000"}
    assert t["preemptions"] == 1  # was 0
    names = [row["name"] for row in sim.pod_rows]
    cards = {names[w]: c for w, c in sim.state.gpu_cards.items()}
    assert cards["h"] != cards["s_b"]
    assert sorted(sim.state.gpu_free[0, :2].tolist()) == [300, 400]


def test_a_whole_card_pod_needs_whole_free_cards_from_its_victims():
    # h asks 2 whole cards: both shares must go (each leaves its card partly used).
    sim, t = gpu_setup(PodSpec("h", "online", 1000, 1, 2, gpu_count=2, gpu_milli=1000, priority=10))
    assert where(sim) == {"s_a": None, "s_b": None, "h": "own-000"}
    assert t["preemptions"] == 2  # was 0
    assert sim.state.gpu_free[0, :2].tolist() == [0, 0]


def test_a_cpu_pod_that_needs_no_card_evicts_a_gpu_pod_for_its_cpu():
    # The node's 8000 m: g (7000 m, one whole card, priority 0) and h (2000 m, no GPU, priority
    # 10): g is evicted for its CPU and its card is free again.
    pods = [PodSpec("g", "online", 7000, 1, 0, gpu_count=1, gpu_milli=1000, priority=0),
            PodSpec("h", "online", 2000, 1, 2, priority=10)]
    sim, t = run(pods, gpu_pools())
    assert where(sim) == {"g": None, "h": "own-000"}
    assert t["preemptions"] == 1  # was 0
    assert sim.state.gpu_free[0, :2].tolist() == [1000, 1000]
