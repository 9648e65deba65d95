"""The simulator's CPU shares and headroom boots use a node's CPU as it is: they divided by
max(capacity, 1), so a scenario in cores (a 0.5-core node) saw half its nodes' share (a node 60 %
used drained as if 30 %) and booted half the nodes a headroom deficit needs; a node without CPU
divides by nothing and adds no headroom.

Real runs of :class:`~iro_fed.sim.Simulator` with first-fit on hand-made clusters in cores (one
step is one minute; every pod asks 1 MiB of memory, far below the nodes' 8192)."""

from __future__ import annotations

import numpy as np

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.engine import BOOTING, cpu_share
from iro_fed.sim.model import NodePool, PodSpec, Service
from tests.sim.helpers import tiny_scenario


def _sim(
    pools: list[NodePool],
    pods: list[PodSpec],
    services: list[Service] | None = None,
    steps: int = 1,
    **settings: object,
) -> Simulator:
    sc = tiny_scenario(steps=steps, pods=pods, services=services, own_nodes=1, cloud_nodes=0)
    sc.pools = pools
    return Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False, **settings))


def test_cpu_share_below_one_unit_and_at_zero():
    share = cpu_share(np.array([0.3, 0.4, 3.0, 0.0]), np.array([0.5, 0.5, 4.0, 0.0]))
    assert share.tolist() == [0.3 / 0.5, 0.4 / 0.5, 0.75, 0.0]  # old: 0.3, 0.4 (divided by 1)


def _burst_pools(cloud_cpu: float) -> list[NodePool]:
    # Own: one 2-core node; cloud: elastic nodes of cloud_cpu cores, all deprovisioned at the start.
    return [
        NodePool("own", "zone", 1, 2.0, 8192, power_idle_w=40, power_peak_w=100),
        NodePool("burst", "cloud", 4, cloud_cpu, 8192, power_idle_w=30, power_peak_w=80, elastic=True),
    ]


def test_burst_boots_enough_sub_core_nodes_for_the_headroom():
    # 1.9 of 2 cores taken: 0.1 free against a headroom of 0.15 x 2 = 0.3, a deficit of 0.2,
    # that is two 0.125-core cloud nodes (0.25) in the first step. Old: one (0.2 / max(0.125, 1)).
    sim = _sim(_burst_pools(0.125), [PodSpec("big", "online", 1.9, 1, 0)])
    t = sim.run().totals
    assert sim.state.assignment.tolist() == [0]
    assert t["node_boots"] == 2
    assert (sim.node_state[1:] == BOOTING).sum() == 2


def test_burst_boots_no_node_without_cpu():
    # Cloud nodes of 0 cores add no CPU headroom: none boots. Old: ceil(0.2 / max(0, 1)) = 1.
    sim = _sim(_burst_pools(0.0), [PodSpec("big", "online", 1.9, 1, 0)])
    t = sim.run().totals
    assert sim.state.assignment.tolist() == [0]
    assert t["node_boots"] == 0


def _svc(name: str, cpu: float, steps: int) -> Service:
    return Service(
        name,
        "users",
        cpu,
        1,
        mu=100.0,
        service_ms=2.0,
        sla_ms=200.0,
        traffic=np.full(steps, 10.0),
        min_replicas=1,
        max_replicas=1,
        allowed_domains=("zone",),
    )


def test_consolidation_keeps_a_sub_core_node_used_above_the_threshold():
    # Three 0.5-core nodes: first-fit puts a (0.3 cores, 60 % of its node) on the first, b (0.4,
    # 80 %) on the second, the third stays empty. With consolidate_below 0.5 no node is drained.
    # Old: shares 0.3 and 0.4 (divided by 1), so a moved to the empty node at step 2.
    steps = 4
    pools = [NodePool("own", "zone", 3, 0.5, 8192, power_idle_w=40, power_peak_w=100)]
    sim = _sim(pools, [], [_svc("a", 0.3, steps), _svc("b", 0.4, steps)], steps=steps, consolidate_every=2)
    t = sim.run().totals
    assert t["pods_moved"] == 0
    assert sim.state.assignment.tolist() == [0, 1]


def test_consolidation_drains_a_sub_core_node_used_below_the_threshold():
    # The same with a at 0.2 cores (40 % < 50 %): drained onto the empty node (it does not fit
    # the second: 0.4 + 0.2 > 0.5), so consolidation still runs on sub-core nodes.
    steps = 4
    pools = [NodePool("own", "zone", 3, 0.5, 8192, power_idle_w=40, power_peak_w=100)]
    sim = _sim(pools, [], [_svc("a", 0.2, steps), _svc("b", 0.4, steps)], steps=steps, consolidate_every=2)
    t = sim.run().totals
    assert t["pods_moved"] == 1
