"""Preemption leftovers in the simulator:

* a pod's start (DefaultPreemption orders victims by it) is its current placement's step: a pod
  evicted and run again is a new pod to kube, not as old as its first placement; the pending
  metrics still count its wait from readiness to its first placement;
* make-room (moving service replicas off a node for a waiting job, not DefaultPreemption) takes
  GPU jobs too, with their cards counted exactly (replicas hold none).
"""

from __future__ import annotations

import numpy as np

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.model import NodePool, PodSpec, Service
from tests.sim.helpers import tiny_scenario

POOL = "iro.example/pool"


def where(sim: Simulator) -> dict[str, str | None]:
    return {row["name"]: sim.nodes[int(n)].name if (n := sim.state.assignment[i]) >= 0 else None
            for i, row in enumerate(sim.pod_rows)}


def index(sim: Simulator, name: str) -> int:
    return next(i for i, row in enumerate(sim.pod_rows) if row["name"] == name)


def test_a_pod_run_again_after_eviction_is_the_latest_started_victim():
    # a runs on p0 from step 0, b on p1 from step 1. x (priority 5, only p0) evicts a at step 2
    # and leaves at step 4, when a runs again on p0. h (priority 10) at step 6 must evict one of
    # them: upstream the node whose victim started last, p0 (a: step 4), not p1 (b: step 1). The
    # old code ordered by the first placement (a: step 0) and evicted b.
    pools = [NodePool("p0", "zone", 1, 4000, 8192), NodePool("p1", "zone", 1, 4000, 8192)]
    pods = [PodSpec("a", "online", 4000, 1, 0),
            PodSpec("b", "online", 4000, 1, 1),
            PodSpec("x", "online", 4000, 1, 2, departure=4, priority=5, node_selector={POOL: "p0"}),
            PodSpec("h", "online", 4000, 1, 6, priority=10)]
    sc = tiny_scenario(steps=8, pods=pods, own_nodes=2, cloud_nodes=0)
    sc.pools = pools
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False, consolidate_every=0))
    totals = sim.run().totals
    assert where(sim) == {"a": None, "b": "p1-000", "x": None, "h": "p0-000"}
    assert totals["preemptions"] == 2
    # The wait metrics keep their meaning: a waited 0 steps (first placement at its readiness).
    a = index(sim, "a")
    assert int(sim.first_placed[a]) == 0 and int(sim.ready[a]) == 0
    assert int(sim.started[index(sim, "b")]) == 1 and int(sim.started[a]) == -1  # (a is pending again)


def gpu_scenario(job: PodSpec, extra: list[PodSpec] | None = None):
    """A GPU node (1 card, 4 cores) listed first and a CPU node; one web replica of 3 cores lands
    on the GPU node (first-fit); ``job`` arrives at step 1."""
    svc = Service("web", "users", 3000, 1024, mu=100.0, service_ms=10.0, sla_ms=500.0, traffic=np.full(6, 1.0))
    sc = tiny_scenario(steps=6, services=[svc], pods=[job, *(extra or [])], own_nodes=2, cloud_nodes=0)
    sc.pools = [NodePool("gpu", "zone", 1, 4000, 8192, gpus=1, gpu_model="A10"),
                NodePool("cpu", "zone", 1, 4000, 8192)]
    return sc


def run(sc) -> tuple[Simulator, dict]:
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False, consolidate_every=0))
    totals = sim.run().totals
    assert np.all(sim.state.gpu_free[sim.gpu_free0 >= 0] >= 0)
    return sim, totals


def test_make_room_moves_replicas_off_a_gpu_node_for_a_gpu_job():
    # The job (1 card, 2 cores, priority 0) fits nowhere: the card's node has 1 core free, and
    # preemption cannot evict the replica (priority 100). Make-room moves the replica to the CPU
    # node and starts the job on the card. Old code: GPU jobs were skipped, pending to the end.
    job = PodSpec("train", "batch", 2000, 1024, 1, duration=20, gpu_count=1, gpu_milli=1000)
    sim, totals = run(gpu_scenario(job))
    assert where(sim) == {"web-r0": "cpu-000", "train": "gpu-000"}
    assert totals["pods_moved"] == 1 and totals["preemptions"] == 0
    assert sim.state.gpu_cards[index(sim, "train")] == (0,)


def test_make_room_moves_nothing_when_the_gpu_jobs_cards_are_taken():
    # The card is held by another job (a share of 600 m); the new job asks 500 m of one card: the
    # card has 400 m free, so moving the replica would not start it: nothing moves.
    holder = PodSpec("hold", "batch", 500, 512, 0, duration=50, gpu_count=1, gpu_milli=600)
    job = PodSpec("infer", "batch", 2000, 1024, 1, duration=20, gpu_count=1, gpu_milli=500)
    sim, totals = run(gpu_scenario(job, [holder]))
    assert where(sim)["infer"] is None
    assert totals["pods_moved"] == 0 and totals["rejected_decisions"] == 0


def test_make_room_places_a_gpu_share_beside_another_share():
    # The card holds a 400 m share; a 500 m share fits beside it once the replica's CPU is gone.
    holder = PodSpec("hold", "batch", 500, 512, 0, duration=50, gpu_count=1, gpu_milli=400)
    job = PodSpec("infer", "batch", 2000, 1024, 1, duration=20, gpu_count=1, gpu_milli=500)
    sim, totals = run(gpu_scenario(job, [holder]))
    assert where(sim) == {"hold": "gpu-000", "web-r0": "cpu-000", "infer": "gpu-000"}
    assert totals["pods_moved"] == 1 and totals["rejected_decisions"] == 0
    assert int(sim.state.gpu_free[0, 0]) == 100
