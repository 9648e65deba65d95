"""A pod placed by a step's decisions and evicted by a preemption in the same step never ran: for
the pending metrics it was pending until the placement that holds. It used to keep the evicted
placement's step as ``first_placed``, so it read as placed on arrival (0 minutes pending).

Nodes of ``tiny_scenario``: own zone 4000 m / 8192 MiB; a step is 60 s = 1 minute.
"""

from __future__ import annotations

import pytest

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.model import PodSpec

from .helpers import tiny_scenario


def test_a_pod_evicted_in_the_step_it_was_placed_counts_as_pending_until_it_runs():
    # One 4000 m node. v (3000 m) runs from 0. At 2, l (500 m) and h (4000 m, priority 10) arrive:
    # the decisions place l (1000 m free), h fits nowhere and evicts l (placed last) and v; l and
    # v wait for h to leave at 6, then both run. l was placed at 6, not 2: 4 minutes pending.
    pods = [PodSpec("v", "online", 3000, 1024, 0, priority=0),
            PodSpec("l", "online", 500, 512, 2, priority=0),
            PodSpec("h", "online", 4000, 1024, 2, departure=6, priority=10)]
    sc = tiny_scenario(steps=8, pods=pods, own_nodes=1, cloud_nodes=0)
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False))
    r = sim.run()
    t = r.totals
    first = {row["name"]: int(sim.first_placed[i]) for i, row in enumerate(sim.pod_rows)}
    assert t["preemptions"] == 2
    assert r.series["running"] == [1, 1, 1, 1, 1, 1, 2, 2]
    assert r.series["pending"][2:6] == [2, 2, 2, 2]  # l pending from the step it arrived
    assert first == {"v": 0, "l": 6, "h": 2}  # l was 2
    assert t["pending_pods"] == 1 and t["pending_pct"] == pytest.approx(100.0 / 3)  # was 0
    assert t["mean_pending_min"] == pytest.approx(4.0)  # was 0.0
    assert t["never_placed_pods"] == 0


def test_a_pod_that_ran_before_its_eviction_keeps_its_first_placement():
    # v ran from 0 and was evicted at 2: its first placement (0) stands, as the metric defines.
    pods = [PodSpec("v", "online", 3000, 1024, 0, priority=0),
            PodSpec("h", "online", 4000, 1024, 2, departure=4, priority=10)]
    sc = tiny_scenario(steps=6, pods=pods, own_nodes=1, cloud_nodes=0)
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False))
    t = sim.run().totals
    assert t["preemptions"] == 1
    assert [int(x) for x in sim.first_placed] == [0, 2]
    assert t["pending_pods"] == 0 and t["mean_pending_min"] == 0.0
