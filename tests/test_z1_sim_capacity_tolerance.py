"""The simulator's own capacity decisions (preemption, make-room, waking a node for a pending pod)
use the filters' tolerance (``feasibility.fit_tolerance``: 1e-12 of each node's capacity), not
an absolute 1e-9: at 1e-6 or 1e10 units the old rule planned evictions and boots the filters
then refused, or refused what the filters accept.

Real runs of :class:`~iro_fed.sim.Simulator` with first-fit on hand-made clusters (one step is
one minute; every pod asks 1 MiB of memory, far below the nodes' 8192).
"""

from __future__ import annotations

import numpy as np

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.model import NodePool, PodSpec, Service
from tests.sim.helpers import tiny_scenario

POOL = "iro.example/pool"


def run(pools: list[NodePool], pods: list[PodSpec], services: list[Service] | None = None, steps: int = 6,
        **settings: object) -> tuple[Simulator, dict]:
    sc = tiny_scenario(steps=steps, pods=pods, services=services, own_nodes=1, cloud_nodes=0)
    sc.pools = pools
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False, consolidate_every=0, **settings))
    return sim, sim.run().totals


def where(sim: Simulator) -> dict[str, str | None]:
    """Each pod's node at the end (None: not running)."""
    out: dict[str, str | None] = {}
    for i, row in enumerate(sim.pod_rows):
        n = int(sim.state.assignment[i])
        out[row["name"]] = sim.nodes[n].name if n >= 0 else None
    return out


def test_preemption_evicts_until_the_filters_accept_the_pod_on_a_tiny_node():
    # One node of 1e-6 cpu, full with a (0.5e-6, priority 0) and b (0.5e-6, priority 1). h asks
    # 0.5e-6 + 5e-10 at priority 10. Evicting a leaves h 5e-10 short: the old rule called that
    # enough (within 1e-9), evicted a only, the filters refused h (rejected), and from then on
    # h "fit here" (5e-10 <= 1e-9), so it was never placed. Both must go.
    pools = [NodePool("own", "zone", 1, 1e-6, 8192)]
    pods = [PodSpec("a", "online", 0.5e-6, 1, 0, priority=0),
            PodSpec("b", "online", 0.5e-6, 1, 0, priority=1),
            PodSpec("h", "online", 0.5e-6 + 5e-10, 1, 2, priority=10)]
    sim, t = run(pools, pods)
    assert where(sim)["h"] == "own-000"
    assert t["preemptions"] == 2
    assert t["rejected_decisions"] == 0
    assert int(sim.first_placed[[r["name"] for r in sim.pod_rows].index("h")]) == 2


def test_preemption_stops_at_the_first_victim_the_filters_call_enough_on_a_huge_node():
    # One node of 1e10 cpu (tolerance 0.01), full with a (5e9 + 0.005, priority 0) and
    # b (5e9 - 0.005, priority 1). h asks 5e9 + 0.01: with a gone it is 0.005 short, which the
    # filters accept; the old rule (1e-9) evicted b as well.
    pools = [NodePool("own", "zone", 1, 1e10, 8192)]
    pods = [PodSpec("a", "online", 5e9 + 0.005, 1, 0, priority=0),
            PodSpec("b", "online", 5e9 - 0.005, 1, 0, priority=1),
            PodSpec("h", "online", 5e9 + 0.01, 1, 2, priority=10)]
    sim, t = run(pools, pods)
    assert t["preemptions"] == 1
    assert where(sim) == {"a": None, "b": "own-000", "h": "own-000"}


def test_preemption_skips_no_node_where_the_pod_does_not_fit():
    # A full 1e-6 node and a 1e-9 pod of higher priority: the filters refuse it (0 free + 1e-18
    # tolerance), the old "fits here" test (need 1e-9 <= 1e-9) skipped the node, forever.
    pools = [NodePool("own", "zone", 1, 1e-6, 8192)]
    pods = [PodSpec("a", "online", 1e-6, 1, 0, priority=0),
            PodSpec("h", "online", 1e-9, 1, 1, priority=10)]
    sim, t = run(pools, pods)
    assert t["preemptions"] == 1
    assert where(sim) == {"a": None, "h": "own-000"}


def test_make_room_moves_as_many_replicas_as_the_filters_need():
    # Nodes of 1e-6 cpu in pools a, b, c. Two service replicas (0.5e-6) fill node a; o1 / o2
    # (pinned to b / c) leave 0.5e-6 + 2.5e-10 there: room for one replica each, not for the batch
    # job z (0.5e-6 + 5e-10). Moving one replica off a leaves z 5e-10 short: the old rule moved
    # one (a wasted move), the filters refused z, and it never ran. Both replicas must move.
    pools = [NodePool(name, "zone", 1, 1e-6, 8192) for name in ("a", "b", "c")]
    web = Service("web", "users", 0.5e-6, 1, mu=10.0, service_ms=10.0, sla_ms=100.0,
                  traffic=np.full(6, 1.0), min_replicas=2, max_replicas=2, priority=0)
    pods = [PodSpec("o1", "online", 0.5e-6 - 2.5e-10, 1, 0, node_selector={POOL: "b"}),
            PodSpec("o2", "online", 0.5e-6 - 2.5e-10, 1, 0, node_selector={POOL: "c"}),
            PodSpec("z", "batch", 0.5e-6 + 5e-10, 1, 1, duration=20)]
    sim, t = run(pools, pods, services=[web], deferral="none")
    placed = where(sim)
    assert placed["z"] == "a-000"
    assert sorted([placed["web-r0"], placed["web-r1"]]) == ["b-000", "c-000"]
    assert t["pods_moved"] == 2
    assert t["rejected_decisions"] == 0


def test_no_node_is_woken_for_a_pod_the_filters_refuse_on_it():
    # Elastic 1e-6 nodes and a pod of 1e-6 + 5e-10: too big for any node by the filters; the old
    # rule (capacity >= demand - 1e-9) booted a node for it, which then idled.
    pools = [NodePool("own", "zone", 1, 1e-6, 8192),
             NodePool("burst", "cloud", 2, 1e-6, 8192, elastic=True, boot_steps=1)]
    sim, t = run(pools, [PodSpec("big", "online", 1e-6 + 5e-10, 1, 0)])
    assert t["node_boots"] == 0
    assert where(sim)["big"] is None


def test_a_node_is_woken_for_a_pod_the_filters_accept_on_it():
    # An elastic 1e10 node (tolerance 0.01) and a pod of 1e10 + 0.005: the filters place it on the
    # empty node; the old rule found no node to wake (1e10 < 1e10 + 0.005 - 1e-9), pending for good.
    pools = [NodePool("own", "zone", 1, 1, 8192),
             NodePool("burst", "cloud", 1, 1e10, 8192, elastic=True, boot_steps=1)]
    sim, t = run(pools, [PodSpec("big", "online", 1e10 + 0.005, 1, 0)])
    assert t["node_boots"] == 1
    assert where(sim)["big"] == "burst-000"
