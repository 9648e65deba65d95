"""A pod placed on a cloud node by a step's decisions and evicted by a preemption in the same step
never ran in the cloud: ``burst_pods`` must not count it. It used to (the placement set the flag).

Nodes of ``tiny_scenario``: own zone 4000 m / 8192 MiB, cloud 4000 m / 8192 MiB (here one kept on).
"""

from __future__ import annotations

import dataclasses

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.model import PodSpec

from .helpers import tiny_scenario


def _one_own_one_cloud_on(steps: int, pods: list[PodSpec]):
    sc = tiny_scenario(steps=steps, pods=pods, own_nodes=1, cloud_nodes=1)
    own, cloud = sc.pools
    return dataclasses.replace(sc, pools=[own, dataclasses.replace(cloud, min_on=1)])


def test_a_pod_evicted_from_the_cloud_in_the_step_it_was_placed_is_not_a_burst_pod():
    # The own node holds o (4000 m, priority 20) until 6; v (3000 m) runs in the cloud from 0.
    # At 2, l (500 m) and h (4000 m, priority 10) arrive: the decisions place l in the cloud
    # (1000 m free), h fits nowhere and evicts l and v there. At 6 o leaves and l and v run on
    # the own node. Burst pods: v (ran in the cloud 0..1) and h, not l.
    pods = [PodSpec("o", "online", 4000, 1024, 0, departure=6, priority=20),
            PodSpec("v", "online", 3000, 1024, 0, priority=0),
            PodSpec("l", "online", 500, 512, 2, priority=0),
            PodSpec("h", "online", 4000, 1024, 2, priority=10)]
    sim = Simulator(_one_own_one_cloud_on(8, pods), solvers.make("first-fit"), SimConfig(power_down=False))
    t = sim.run().totals
    names = [row["name"] for row in sim.pod_rows]
    on_own = {names[i]: sim.nodes[int(n)].name.startswith("own") for i, n in enumerate(sim.state.assignment) if n >= 0}
    assert t["preemptions"] == 2
    assert on_own == {"v": True, "l": True, "h": False}  # o has left
    assert {names[i] for i in range(len(names)) if sim.burst[i]} == {"v", "h"}  # l was in it
    assert t["burst_pods"] == 2  # was 3


def test_a_pod_that_ran_in_the_cloud_before_its_eviction_stays_a_burst_pod():
    # v ran in the cloud from 0 and was evicted at 2 (then ran on the own node): it did burst.
    pods = [PodSpec("o", "online", 4000, 1024, 0, departure=4, priority=20),
            PodSpec("v", "online", 3000, 1024, 0, priority=0),
            PodSpec("h", "online", 4000, 1024, 2, priority=10)]
    sim = Simulator(_one_own_one_cloud_on(6, pods), solvers.make("first-fit"), SimConfig(power_down=False))
    t = sim.run().totals
    assert t["preemptions"] == 1
    assert sim.burst.tolist() == [False, True, True]
    assert t["burst_pods"] == 2
