"""Review findings in the simulator's step accounting, on scenarios small enough to check by hand.

Nodes of ``tiny_scenario``: own zone 4000 m / 8192 MiB; a step is 60 s = 1 minute.
"""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.model import PodSpec, Service

from .helpers import tiny_scenario


def test_capacity_left_over_by_a_preemption_is_offered_to_older_pending_pods():
    # One 4000 m node. v (3000 m, priority 0) runs from 0. q (2000 m, priority 0) arrives at 1:
    # 1000 m free, and it may not preempt v (same priority), so it waits. p (2000 m, priority 10)
    # arrives at 2 and evicts v: 4000 m free, p takes 2000. q fits the other 2000 and is placed in
    # the next decision round (step 3); v (3000 m) fits nowhere. q used to wait to the run's end
    # (8): preemption freed capacity without saying so, and only new pods were offered again.
    pods = [PodSpec("v", "online", 3000, 1024, 0, priority=0),
            PodSpec("q", "online", 2000, 1024, 1, priority=0),
            PodSpec("p", "online", 2000, 1024, 2, priority=10)]
    sc = tiny_scenario(steps=8, pods=pods, own_nodes=1, cloud_nodes=0)
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False))
    r = sim.run()
    t = r.totals
    first = {row["name"]: int(sim.first_placed[i]) for i, row in enumerate(sim.pod_rows)}
    assert first == {"v": 0, "q": 3, "p": 2}
    assert r.series["running"] == [1, 1, 1, 2, 2, 2, 2, 2]
    assert t["preemptions"] == 1
    assert t["pending_pct"] == pytest.approx(100.0 / 3)  # q of v, q, p (p took v's place at once)
    assert t["mean_pending_min"] == pytest.approx(2.0)  # q: ready at 1, placed at 3 (was 7: to the end)
    assert t["never_placed_pods"] == 0


@pytest.mark.parametrize("replicas", [6, 7, 13, 15])
def test_success_rate_without_a_failure_is_exactly_100(replicas):
    # ``replicas`` replicas at 0.6 x replicas + 0.07 req/s, all within the SLA: nothing fails.
    # The total was served / requests of two arrays summed in different orders and read
    # 100.00000000000001 (13 replicas; the bank demo too) or 99.99999999999999 (6).
    steps = 3
    svc = Service("s", "users", 100, 128, mu=10.0, service_ms=1.0, sla_ms=1000.0,
                  traffic=np.full(steps, 0.6 * replicas + 0.07), min_replicas=replicas, max_replicas=replicas)
    sc = tiny_scenario(steps=steps, services=[svc], own_nodes=1, cloud_nodes=0)
    t = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False)).run().totals
    assert t["requests"] == pytest.approx((0.6 * replicas + 0.07) * 60 * steps)
    assert t["failed_requests"] == 0.0
    assert t["success_rate_pct"] == 100.0


def test_success_rate_counts_timeouts_and_orphans_as_failed():
    # The failures counted where they happen agree with the old served / requests: one replica
    # at rho_p = 1.5 serves 2/3 of 150 req/s and times out the rest, 150 * 60 * 3 / 3 = 9000.
    steps = 3
    svc = Service("api", "users", 1000, 1024, mu=100.0, service_ms=2.0, sla_ms=200.0, traffic=np.full(steps, 150.0),
                  min_replicas=1, max_replicas=1)
    sc = tiny_scenario(steps=steps, services=[svc], own_nodes=1, cloud_nodes=0)
    t = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False)).run().totals
    assert t["failed_requests"] == pytest.approx(150.0 * 60 * steps / 3)
    assert t["success_rate_pct"] == pytest.approx(200.0 / 3)


@pytest.mark.parametrize(("dip", "release"), [(None, -1), (20, 20)])
def test_a_zero_duration_job_is_deferred_only_for_a_real_saving(dip, release):
    # A batch job of duration 0 (it runs one step) due at 60: slack 60 - 0 - 15 (margin) = 45 starts.
    # Flat 300 g/kWh: nothing to save, it starts at once. A day of history with 100 g/kWh at
    # minute 20 (the persistence forecast repeats it): it starts at 20. Both used to hold it to
    # 45, the last start, whose forecast window was empty (mean 0: a 100 % "saving").
    history, steps = 1440, 70
    zone = np.full(history + steps, 300.0)
    if dip is not None:
        zone[dip] = 100.0  # yesterday at minute ``dip``
    carbon = {"zone": zone, "cloud": np.full(history + steps, 300.0)}
    job = PodSpec("z", "batch", 1000, 1024, 0, duration=0, deadline=60)
    sc = tiny_scenario(steps=steps, pods=[job], carbon=carbon, own_nodes=1, cloud_nodes=0, history=history)
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig(power_down=False))
    t = sim.run().totals
    assert int(sim.release[0]) == release
    assert int(sim.first_placed[0]) == max(release, 0)
    assert t["deferred_pods"] == (1 if dip is not None else 0)
    assert t["batch_completion_min"] == pytest.approx(max(release, 0) + 1.0)  # one step of work
