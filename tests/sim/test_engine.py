"""Simulator invariants on hand-made scenarios: conservation, capacity, determinism, timing."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed.feasibility import EPS
from iro_fed.sim import SimConfig, Simulator, simulate
from iro_fed.sim.engine import COMPLETED, SimConfigError
from iro_fed.sim.model import PodSpec, Service

from .helpers import needs_data, random_pods, tiny_scenario


@pytest.mark.parametrize("solver", ["first-fit", "kube-default", "greedy-objective"])
def test_conservation_and_no_capacity_overrun_every_step(solver):
    sc = tiny_scenario(steps=90, pods=random_pods(3, 90, 80), own_nodes=3, cloud_nodes=2)
    sim = Simulator(sc, solvers.make(solver, seed=1), SimConfig(idle_off_steps=2))
    seen = []

    def check(step: int, total: int) -> None:
        st = sim.state
        assert np.all(st.allocated <= sim.capacity + EPS), f"capacity overrun at step {step}"
        # Only powered-on nodes carry pods.
        assert np.all(st.pods_on_node[sim.node_state == 0] == 0)
        c = sim.counts()
        arrived = int((sim.arrival < step).sum())
        assert c["arrived"] == arrived
        assert c["arrived"] == c["running"] + c["pending"] + c["deferred"] + c["completed"] + c["dropped"]
        seen.append(c)

    result = sim.run(progress=check)
    assert len(seen) == 90
    pods = result.totals["pods"]
    assert pods["arrived"] == 80 and pods["completed"] > 40
    assert result.totals["rejected_decisions"] == 0


@needs_data
def test_same_seed_same_run_and_other_seed_differs():
    a = simulate("bank", "kube-default", seed=4, hours=3, settings={"promo_day": -1})
    b = simulate("bank", "kube-default", seed=4, hours=3, settings={"promo_day": -1})
    c = simulate("bank", "kube-default", seed=5, hours=3, settings={"promo_day": -1})
    assert a.totals == b.totals and a.series == b.series
    assert a.series["requests_per_s"] != c.series["requests_per_s"]


def test_batch_job_on_an_empty_cluster_takes_its_duration():
    sc = tiny_scenario(steps=40, pods=[PodSpec("job", "batch", 1000, 1000, arrival=5, duration=10)])
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig(deferral="none"))
    r = sim.run()
    assert r.totals["batch_completion_min"] == pytest.approx(10.0)
    assert sim.status[0] == COMPLETED and sim.finished[0] == 15
    assert r.totals["pending_pct"] == 0.0 and r.totals["deadline_misses"] == 0


def test_cloud_burst_waits_for_provisioning():
    pods = [PodSpec(f"p{i}", "online", 3000, 2048, arrival=0) for i in range(2)]
    sc = tiny_scenario(steps=20, pods=pods, own_nodes=1, cloud_nodes=2, boot_steps=3)
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig())
    r = sim.run()
    t = r.totals
    assert t["burst_pods"] == 1
    assert t["pending_pct"] == pytest.approx(50.0)
    assert t["mean_pending_min"] == pytest.approx(3.0)
    assert sim.first_placed.tolist() == [0, 3]


def test_carbon_deferral_moves_a_job_into_the_forecast_dip():
    day = 1440
    steps = 120
    zone = np.full(day + steps, 300.0)
    zone[30:40] = 50.0  # yesterday's dip: the persistence forecast expects it again at 30..40
    zone[day + 30: day + 40] = 50.0
    carbon = {"zone": zone, "cloud": np.full(day + steps, 300.0)}
    job = PodSpec("job", "batch", 1000, 1000, arrival=0, duration=5, deadline=100)
    sc = tiny_scenario(steps=steps, pods=[job], carbon=carbon, history=day, cloud_nodes=0)
    runs = {}
    for mode in ("carbon", "none"):
        sim = Simulator(sc, solvers.make("first-fit"), SimConfig(deferral=mode, power_down=False))
        runs[mode] = (sim, sim.run())
    deferred, plain = runs["carbon"][0], runs["none"][0]
    assert deferred.first_placed[0] == 30 and plain.first_placed[0] == 0
    assert runs["carbon"][1].totals["deferred_pods"] == 1
    assert runs["carbon"][1].totals["deadline_misses"] == 0
    assert runs["carbon"][1].totals["pending_pct"] == 0.0  # deferred is not pending
    assert runs["carbon"][1].totals["carbon_kg"] < runs["none"][1].totals["carbon_kg"]


def test_overloaded_service_serves_mu_and_times_out_the_rest():
    steps = 30
    svc = Service("api", "users", 1000, 1024, mu=100.0, service_ms=2.0, sla_ms=200.0, traffic=np.full(steps, 150.0),
                  min_replicas=1, max_replicas=1)
    sc = tiny_scenario(steps=steps, services=[svc], own_nodes=1, cloud_nodes=0)
    r = Simulator(sc, solvers.make("first-fit"), SimConfig()).run()
    t = r.totals
    assert t["requests"] == pytest.approx(150.0 * 60 * steps)
    assert t["success_rate_pct"] == pytest.approx(100.0 / 1.5)
    # 2/3 of requests at 5 + 2 * 50 = 105 ms, 1/3 timed out at the 200 ms SLA.
    assert 200.0 <= t["p99_latency_ms"] <= 201.0


def test_service_without_replicas_fails_everything():
    steps = 10
    svc = Service("api", "users", 9000, 1024, mu=100.0, service_ms=2.0, sla_ms=200.0, traffic=np.full(steps, 50.0))
    sc = tiny_scenario(steps=steps, services=[svc], own_nodes=1, cloud_nodes=0)
    r = Simulator(sc, solvers.make("first-fit"), SimConfig()).run()
    assert r.totals["success_rate_pct"] == 0.0 and r.totals["pending_pct"] == 100.0


def test_score_is_the_objective_of_the_step_placement():
    from iro_fed.objective import evaluate

    pods = [PodSpec("a", "online", 1000, 1024, arrival=0, user_region="users"), PodSpec("b", "online", 9000, 1024, arrival=0)]
    sc = tiny_scenario(steps=3, pods=pods, own_nodes=1, cloud_nodes=0)
    sim = Simulator(sc, solvers.make("first-fit"), SimConfig())
    r = sim.run()
    # b never fits: the step's problem has a placed and an unplaced pod.
    sub = sim._score_problem(2, np.array([0, 1]))
    expected = evaluate(sub, sim.state.assignment[[0, 1]]).score
    assert r.series["score"][2] == pytest.approx(expected, abs=1e-4)
    assert r.totals["score"] == pytest.approx(np.mean(r.series["score"]), abs=1e-4)


def test_config_errors_name_the_setting():
    with pytest.raises(SimConfigError, match="unknown simulator setting 'nope'"):
        SimConfig().with_settings({"nope": 1})
    with pytest.raises(SimConfigError, match="setting 'headroom'"):
        SimConfig().with_settings({"headroom": "1.5"})
    with pytest.raises(SimConfigError, match="setting 'power_down': cannot read 'maybe' as bool"):
        SimConfig().with_settings({"power_down": "maybe"})
    assert SimConfig().with_settings({"deferral": "none", "idle_off_steps": "4"}).idle_off_steps == 4


@needs_data
@pytest.mark.parametrize(
    ("scenario", "hours", "params"),
    [
        ("edge-iot", 3.0, {"jobs_per_hour": 10}),
        ("promo-surge", 10.5, {"surge_start_h": 10.0, "surge_hours": 0.5}),
        ("openb", 2.0, {"nodes": 30}),
    ],
)
def test_every_scenario_keeps_the_invariants(scenario, hours, params):
    from iro_fed.sim.scenarios import build_scenario

    sc = build_scenario(scenario, seed=2, hours=hours, **params)
    config = SimConfig().with_settings(sc.engine_defaults)
    sim = Simulator(sc, solvers.make("best-fit"), config)

    def check(step: int, total: int) -> None:
        assert np.all(sim.state.allocated <= sim.capacity + EPS)
        assert np.all(sim.state.gpu_free[sim.gpu_free0 >= 0] >= 0)
        c = sim.counts()
        assert c["arrived"] == c["running"] + c["pending"] + c["deferred"] + c["completed"] + c["dropped"]

    r = sim.run(progress=check)
    assert r.totals["pods"]["arrived"] > 10
    assert r.totals["rejected_decisions"] == 0
