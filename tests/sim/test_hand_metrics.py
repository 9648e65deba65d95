"""Every reported metric on scenarios small enough to compute by hand (the numbers in the comments).

Nodes of ``tiny_scenario``: own zone 4000 m / 8192 MiB, 40 W idle / 100 W peak, PUE 1.2,
0.02 per core-hour + 0.002 per GiB-hour = 0.096 per hour; cloud 4000 m / 8192 MiB, 30 / 80 W,
PUE 1.1, 0.04 + 0.004 per unit = 0.192 per hour. A step is 60 s = 1/60 h unless said otherwise.
Power of a node with pods: idle + (peak - idle) * CPU requests / capacity (on a GPU node, the
objective's CPU and GPU shares: see the GPU test); gCO2/h = W * PUE *
intensity / 1000; energy is IT energy (before PUE).
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import solvers
from iro_fed.model import Domain
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.model import NodePool, PodSpec, Scenario, Service
from iro_fed.sim.scenarios.common import bump, hour_windows
from iro_fed.sim.signals import data_dir, load_carbon_csv, parse_time

from .helpers import needs_data, random_pods, tiny_scenario

FIXTURES = Path(__file__).parent / "fixtures"


def run(sc: Scenario, solver: str = "first-fit", **settings) -> tuple[Simulator, dict, dict]:
    sim = Simulator(sc, solvers.make(solver), SimConfig(**settings))
    r = sim.run()
    return sim, r.totals, r.series


# --- energy, cost, carbon -----------------------------------------------------------------


def test_energy_cost_carbon_by_hand():
    # Two own nodes stay on (power_down off). Pod a (2000 m, 4096 MiB) runs in steps 1 and 2:
    # it arrives at 1 and departs at 3, so step 3 no longer counts it.
    carbon = {"zone": np.array([100.0, 200.0, 300.0, 400.0]), "cloud": np.full(4, 999.0)}
    sc = tiny_scenario(steps=4, pods=[PodSpec("a", "online", 2000, 4096, arrival=1, departure=3)], carbon=carbon,
                       own_nodes=2, cloud_nodes=0)
    _, t, s = run(sc, power_down=False)
    assert s["running"] == [0, 1, 1, 0]
    # Power: 2 x 40 idle; with the pod 40 + 60 * 0.5 = 70 on node 0.
    assert s["power_w"] == pytest.approx([80.0, 110.0, 110.0, 80.0])
    assert s["cost_per_hour"] == pytest.approx([0.192] * 4)
    # gCO2/h at that step's intensity: 80 * 1.2 * 100 / 1000 = 9.6, 110 * 1.2 * 200 / 1000 = 26.4, ...
    assert s["carbon_g_per_hour"] == pytest.approx([9.6, 26.4, 39.6, 38.4])
    assert t["energy_kwh"] == pytest.approx(380.0 / 60 / 1000)  # (80 + 110 + 110 + 80) W x 1/60 h
    assert t["cost"] == pytest.approx(0.192 * 4 / 60)
    assert t["carbon_kg"] == pytest.approx(114.0 / 60 / 1000)  # (9.6 + 26.4 + 39.6 + 38.4) g/h x 1/60 h
    # Requests 2000 m x 2 steps over 8000 m x 4 steps; memory 4096 x 2 over 16384 x 4: 12.5 % both.
    assert t["utilization_pct"] == pytest.approx(12.5)
    assert t["cpu_utilization_pct"] == pytest.approx(12.5)
    assert s["utilization_pct"] == pytest.approx([0.0, 25.0, 25.0, 0.0])
    assert t["hours"] == pytest.approx(4 / 60)


def test_score_every_thins_out_the_score_only():
    # The run above scoring every 2nd step: step 1 was costed with step 0's 80 W and 9.6 g/h,
    # so energy read (80 + 80 + 110 + 80) / 60 Wh instead of 380 / 60.
    carbon = {"zone": np.array([100.0, 200.0, 300.0, 400.0]), "cloud": np.full(4, 999.0)}
    sc = tiny_scenario(steps=4, pods=[PodSpec("a", "online", 2000, 4096, arrival=1, departure=3)], carbon=carbon,
                       own_nodes=2, cloud_nodes=0)
    _, t, s = run(sc, power_down=False, score_every=2)
    assert s["power_w"] == pytest.approx([80.0, 110.0, 110.0, 80.0])
    assert s["carbon_g_per_hour"] == pytest.approx([9.6, 26.4, 39.6, 38.4])
    assert t["energy_kwh"] == pytest.approx(380.0 / 60 / 1000)
    assert t["carbon_kg"] == pytest.approx(114.0 / 60 / 1000)
    assert s["score"][1] == s["score"][0]  # the score itself is held between scored steps


def _evaluate_step(sim: Simulator, t: int) -> tuple[float, float, float]:
    """Cost/h, gCO2/h and W of step t the objective's way: evaluate() of the running and pending
    pods, plus idle draw, idle carbon and full price of powered empty nodes."""
    from iro_fed.objective import coefficients, evaluate

    active = np.sort(np.flatnonzero((sim.status == 2) | (sim.status == 3)))
    sub = sim._score_problem(t, active)
    br = evaluate(sub, sim.state.assignment[active])
    coef = coefficients(sub)
    empty_on = (sim.node_state != 0) & (sim.state.pods_on_node == 0)
    return (br.cost_per_hour + float(coef.node_cost[empty_on].sum()),
            br.carbon_g_per_hour + float(coef.carbon_idle[empty_on].sum()),
            br.power_w + float(sim.power_idle[empty_on].sum()))


def test_step_energy_cost_carbon_agree_with_the_objective_every_step():
    # The engine costs each step from the objective's per-node coefficients; evaluate() of the
    # step's placement plus the powered empty nodes must give the same numbers (one definition).
    steps = 80
    carbon = {"zone": 100.0 + 50.0 * np.sin(np.arange(steps) / 7.0) + 60.0, "cloud": np.linspace(20.0, 400.0, steps)}
    sc = tiny_scenario(steps=steps, pods=random_pods(5, steps, 70, batch=False), carbon=carbon, own_nodes=3, cloud_nodes=2)
    sim = Simulator(sc, solvers.make("greedy-objective"), SimConfig(idle_off_steps=3))
    want: list[tuple[float, float, float]] = []
    r = sim.run(progress=lambda step, total: want.append(_evaluate_step(sim, step - 1)))
    got = list(zip(r.series["cost_per_hour"], r.series["carbon_g_per_hour"], r.series["power_w"], strict=True))
    assert np.allclose(np.array(got), np.round(np.array(want), 4), atol=1e-4)
    assert len(set(r.series["powered_nodes"])) > 1  # nodes booted and powered down on the way


def two_zone_scenario(pods: list[PodSpec], carbon: dict[str, np.ndarray], steps: int) -> Scenario:
    """Zones a (PUE 1.5, 0.01 per core-hour) and b (PUE 1.0, 0.03), one 2000 m node each
    (a: 10 / 30 W, b: 20 / 60 W)."""
    domains = [Domain("a", "zone", "", 0.0, {"cpu": 0.01}, 1.5), Domain("b", "zone", "", 0.0, {"cpu": 0.03}, 1.0)]
    pools = [NodePool("pa", "a", 1, 2000, 4096, power_idle_w=10, power_peak_w=30),
             NodePool("pb", "b", 1, 2000, 4096, power_idle_w=20, power_peak_w=60)]
    return Scenario(name="two-zone", description="test", domains=domains, regions=["users"],
                    latency_ms=np.array([[5.0, 5.0]]), pools=pools, services=[], pods=pods, carbon=carbon,
                    history=0, steps=steps)


def test_carbon_takes_each_nodes_own_domain_at_that_step():
    # x (1000 m) runs in a all along; y (2000 m) in b at steps 1 and 2. The two series differ and
    # move in opposite directions, so another domain's value, a mean or a shifted step would show.
    carbon = {"a": np.array([100.0, 100.0, 700.0, 700.0]), "b": np.array([50.0, 400.0, 400.0, 50.0])}
    pods = [PodSpec("x", "online", 1000, 1024, arrival=0, allowed_domains=("a",)),
            PodSpec("y", "online", 2000, 1024, arrival=1, departure=3, allowed_domains=("b",))]
    sim, t, s = run(two_zone_scenario(pods, carbon, 4), power_down=False)
    assert sim.node_domain[sim.state.assignment[0]] == 0
    # a: 10 + 20 * 0.5 = 20 W x PUE 1.5; b: 20 W idle or 60 W full x PUE 1.0.
    # W * PUE * gCO2/kWh, then / 1000 for g/h: step 0: 20*1.5*100 + 20*50 = 4000; step 1: 3000 +
    # 60*400 = 27000; step 2: 20*1.5*700 + 24000 = 45000; step 3: 21000 + 20*50 = 22000.
    assert s["carbon_g_per_hour"] == pytest.approx([4.0, 27.0, 45.0, 22.0])
    assert s["power_w"] == pytest.approx([40.0, 80.0, 80.0, 40.0])
    assert t["carbon_kg"] == pytest.approx(98.0 / 60 / 1000)
    assert t["energy_kwh"] == pytest.approx(240.0 / 60 / 1000)
    assert t["cost"] == pytest.approx((2 * 0.01 + 2 * 0.03) * 4 / 60)  # per hour x hours, empty or not
    # The report's intensity series are the realized values per domain, step by step.
    r = sim.result()
    assert r.series["carbon_intensity.a"] == [100.0, 100.0, 700.0, 700.0]
    assert r.series["carbon_intensity.b"] == [50.0, 400.0, 400.0, 50.0]


def test_booting_cloud_node_is_powered_costed_and_in_the_utilization_denominator():
    # p0 (3000 m) fills the own node; p1 (3000 m) waits for a cloud node booting at 0, on at 3.
    pods = [PodSpec(f"p{i}", "online", 3000, 2048, arrival=0) for i in range(2)]
    sc = tiny_scenario(steps=5, pods=pods, own_nodes=1, cloud_nodes=1, boot_steps=3)
    sim, t, s = run(sc)
    assert sim.first_placed.tolist() == [0, 3]
    assert s["powered_nodes"] == [2] * 5
    # own: 40 + 60 * 0.75 = 85 W; cloud booting 30 W idle, then 30 + 50 * 0.75 = 67.5 W.
    assert s["power_w"] == pytest.approx([115.0] * 3 + [152.5] * 2)
    # own 85 * 1.2 * 300 / 1000 = 30.6; cloud idle 30 * 1.1 * 100 / 1000 = 3.3, busy 67.5 * 0.11 = 7.425
    assert s["carbon_g_per_hour"] == pytest.approx([33.9] * 3 + [38.025] * 2)
    assert s["cost_per_hour"] == pytest.approx([0.288] * 5)  # the cloud node is billed while it boots
    assert t["energy_kwh"] == pytest.approx(650.0 / 60 / 1000)
    assert t["carbon_kg"] == pytest.approx(177.75 / 60 / 1000)
    assert t["cost"] == pytest.approx(0.288 * 5 / 60)
    # CPU: (3000 * 3 + 6000 * 2) / (8000 * 5) = 52.5 %; memory (2048 * 3 + 4096 * 2) / (16384 * 5) = 17.5 %.
    assert t["cpu_utilization_pct"] == pytest.approx(52.5)
    assert t["utilization_pct"] == pytest.approx(35.0)
    assert t["pending_pct"] == pytest.approx(50.0) and t["mean_pending_min"] == pytest.approx(3.0)
    assert t["burst_pods"] == 1


def test_step_length_scales_every_time_integral_and_wait():
    # The same run with 120 s steps: each step is 1/30 h, a 3-step wait is 6 minutes.
    pods = [PodSpec(f"p{i}", "online", 3000, 2048, arrival=0) for i in range(2)]
    sc = dataclasses.replace(tiny_scenario(steps=5, pods=pods, own_nodes=1, cloud_nodes=1, boot_steps=3), step_s=120.0)
    _, t, s = run(sc)
    assert t["energy_kwh"] == pytest.approx(650.0 / 30 / 1000)
    assert t["carbon_kg"] == pytest.approx(177.75 / 30 / 1000)
    assert t["cost"] == pytest.approx(0.288 * 5 / 30)
    assert t["mean_pending_min"] == pytest.approx(6.0)
    assert t["hours"] == pytest.approx(10 / 60)
    assert s["t_min"] == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_utilization_is_over_powered_node_hours_not_the_time_mean():
    # p (4000 m, 4096 MiB) fills node 0; node 1 is empty and powers down after 2 idle steps
    # (headroom 0), so 2, 2, 1, 1 nodes are powered. Off nodes are not in the denominator.
    sc = tiny_scenario(steps=4, pods=[PodSpec("p", "online", 4000, 4096, arrival=0)], own_nodes=2, cloud_nodes=0)
    _, t, s = run(sc, idle_off_steps=2, headroom=0.0)
    assert s["powered_nodes"] == [2, 2, 1, 1]
    # Per step: cpu 0.5, 0.5, 1, 1 and memory 0.25, 0.25, 0.5, 0.5.
    assert s["utilization_pct"] == pytest.approx([37.5, 37.5, 75.0, 75.0])
    assert t["utilization_time_mean_pct"] == pytest.approx(56.25)
    # Node-hours: cpu 16000 / 24000, memory 16384 / 49152: (66.67 + 33.33) / 2 = 50 %.
    assert t["utilization_pct"] == pytest.approx(50.0)
    assert t["cpu_utilization_pct"] == pytest.approx(200.0 / 3)
    assert s["power_w"] == pytest.approx([140.0, 140.0, 100.0, 100.0])


def test_gpu_cards_are_a_utilization_resource_and_power_follows_cpu_and_gpus():
    # One node with 2 cards; the pod takes 2000 m (0.5), 2048 MiB (0.25) and half a card (500 of
    # 2000 milli, 0.25): utilization (0.5 + 0.25 + 0.25) / 3. Power: the GPUs' default share of
    # the dynamic range is 600 / (5 * 4 + 600) = 30 / 31, so 100 + 200 * (0.5 / 31 + 0.25 * 30 / 31)
    # = 100 + 200 * 8 / 31 = 151.6129 W (it was 100 + 200 * 0.5, CPU only).
    domains = [Domain("g", "zone", "", 0.0, {"cpu": 0.0, "gpu": 1.5}, 1.0)]
    pools = [NodePool("gpu", "g", 1, 4000, 8192, gpus=2, gpu_model="A10", power_idle_w=100, power_peak_w=300)]
    pod = PodSpec("share", "online", 2000, 2048, arrival=0, gpu_count=1, gpu_milli=500)
    sc = Scenario(name="gpu", description="test", domains=domains, regions=["users"], latency_ms=np.array([[5.0]]),
                  pools=pools, services=[], pods=[pod], carbon={"g": np.full(3, 200.0)}, history=0, steps=3)
    _, t, s = run(sc, power_down=False)
    assert s["utilization_pct"] == pytest.approx([100.0 / 3] * 3, abs=1e-4)  # series keep 4 decimals
    assert t["utilization_pct"] == pytest.approx(100.0 / 3)
    watts = 100 + 200 * 8 / 31
    assert s["power_w"] == pytest.approx([watts] * 3, abs=1e-4)  # series keep 4 decimals
    assert s["cost_per_hour"] == pytest.approx([3.0] * 3)  # 2 cards x 1.5 per card-hour
    assert s["carbon_g_per_hour"] == pytest.approx([watts * 0.2] * 3, abs=1e-4)  # W x PUE 1.0 x 200 g/kWh


def test_idle_clock_starts_when_a_node_comes_on():
    # p (3500 m) leaves the own node short of 15 % headroom: one cloud node boots at 0 (12 steps)
    # and comes on empty at 12. It was idle-timed from step 0, so it was deprovisioned in the
    # very step it came on (12 - 0 >= 10) and booted again at 13: 2 boots, 1 powered node at 12.
    sc = tiny_scenario(steps=20, pods=[PodSpec("p", "online", 3500, 2048, arrival=0)], own_nodes=1, cloud_nodes=1,
                       boot_steps=12)
    _, t, s = run(sc)
    assert t["node_boots"] == 1
    assert s["powered_nodes"] == [2] * 20  # on from 12, idle for 8 < 10 steps by the end


# --- pending, batch, departures -----------------------------------------------------------


def test_never_placed_pods_wait_until_they_leave_or_the_run_ends():
    # Neither pod fits the 4000 m node. "stuck" is ready at 2 and still pending at the end (10):
    # 8 steps; "gone" is ready at 2 and departs at 5 while pending (dropped): 3 steps.
    pods = [PodSpec("stuck", "online", 9000, 1024, arrival=2), PodSpec("gone", "online", 9000, 1024, arrival=2, departure=5)]
    sc = tiny_scenario(steps=10, pods=pods, own_nodes=1, cloud_nodes=0)
    _, t, s = run(sc)
    assert t["pending_pct"] == 100.0 and t["pending_pods"] == 2 and t["never_placed_pods"] == 2
    assert t["mean_pending_min"] == pytest.approx(5.5)  # (8 + 3) / 2; was 0.0
    assert t["mean_pending_placed_min"] == 0.0
    assert s["pending"] == [0, 0, 2, 2, 2, 1, 1, 1, 1, 1]
    assert t["pods"] == {"arrived": 2, "deferred": 0, "pending": 1, "running": 0, "completed": 0, "dropped": 1}


def test_departure_and_deadline_boundaries():
    # a: 4 steps of work from 0 -> done at the end of step 3 (finished = 4), deadline 4: in time.
    # b: the same with deadline 3: late. c: never fits, due at 5 inside the run: a miss.
    # d: never fits, due at 8 = the run's end: due, a miss.
    pods = [
        PodSpec("a", "batch", 1000, 1024, arrival=0, duration=4, deadline=4),
        PodSpec("b", "batch", 1000, 1024, arrival=0, duration=4, deadline=3),
        PodSpec("c", "batch", 9000, 1024, arrival=0, duration=2, deadline=5),
        PodSpec("d", "batch", 9000, 1024, arrival=0, duration=2, deadline=8),
        PodSpec("x", "online", 1000, 1024, arrival=1, departure=3),
    ]
    sc = tiny_scenario(steps=8, pods=pods, own_nodes=1, cloud_nodes=0)
    sim, t, s = run(sc, deferral="none")
    names = [w.name for w in sim.workloads]
    assert sim.finished[names.index("a")] == 4 and sim.finished[names.index("b")] == 4
    assert s["running"] == [2, 3, 3, 2, 0, 0, 0, 0]  # x counts at 1 and 2, not at its departure step 3
    assert t["batch_jobs"] == 4 and t["batch_completed"] == 2
    assert t["deadline_misses"] == 3
    assert t["batch_completion_min"] == pytest.approx(4.0)
    assert t["pending_pct"] == pytest.approx(40.0)  # c and d of 5 ready pods
    assert t["mean_pending_min"] == pytest.approx(8.0)  # both wait from 0 to the end (8)


def test_success_rate_counts_the_requests_of_steps_without_a_running_replica():
    # One replica (1000 m) of a 30 req/s service; a higher-priority pod holds the only node until
    # it departs at 3. Steps 0-2: all 30 * 60 requests time out; 3-4: served in 5 + 2 / 0.7 ms.
    steps = 5
    svc = Service("api", "users", 1000, 1024, mu=100.0, service_ms=2.0, sla_ms=200.0, traffic=np.full(steps, 30.0),
                  min_replicas=1, max_replicas=1)
    hog = PodSpec("hog", "online", 4000, 1024, arrival=0, departure=3, priority=1000)
    sc = tiny_scenario(steps=steps, services=[svc], pods=[hog], own_nodes=1, cloud_nodes=0)
    _, t, s = run(sc)
    assert t["requests"] == pytest.approx(30.0 * 60 * 5)
    assert t["failed_requests"] == pytest.approx(30.0 * 60 * 3)
    assert t["success_rate_pct"] == pytest.approx(40.0)
    assert s["success_rate_pct"] == [0.0, 0.0, 0.0, 100.0, 100.0]
    assert s["p99_latency_ms"][3] == pytest.approx(5 + 2 / 0.7, abs=1e-3)
    assert t["p99_latency_ms"] == 201.0  # 60 % of the requests at the 200 ms SLA, 1 ms bins, upper edge
    assert t["pending_pct"] == 50.0 and t["mean_pending_min"] == pytest.approx(3.0)  # the hog was placed at once


# --- signals: alignment, coverage, resampling ---------------------------------------------


def test_a_carbon_series_shorter_than_the_run_is_an_error_before_it_starts():
    carbon = {"zone": np.full(9, 300.0), "cloud": np.full(10, 100.0)}
    with pytest.raises(ValueError, match=r"carbon series of domain 'zone' has 9 values, the run needs 10"):
        Simulator(tiny_scenario(steps=10, carbon=carbon), solvers.make("first-fit"))
    with pytest.raises(ValueError, match=r"no carbon series for domain 'cloud'"):
        Simulator(tiny_scenario(steps=10, carbon={"zone": np.full(10, 1.0)}), solvers.make("first-fit"))
    with pytest.raises(ValueError, match=r"'zone' must be finite and >= 0"):
        Simulator(tiny_scenario(steps=2, carbon={"zone": np.array([1.0, np.nan]), "cloud": np.ones(2)}),
                  solvers.make("first-fit"))


def test_carbon_window_is_the_mean_over_each_step():
    s = load_carbon_csv(FIXTURES / "ger_ci_slice.csv")  # 15-minute values from 2019-12-20 00:00 UTC
    t0 = parse_time("2019-12-20 00:00:00")
    v = s.values
    # 60 s steps lie inside one sample: exactly that sample, step by step.
    assert s.window(t0, 30, 60.0).tolist() == [v[0]] * 15 + [v[1]] * 15
    # Hourly steps take the mean of their four samples, not the one at :00.
    assert s.window(t0, 2, 3600.0) == pytest.approx([v[0:4].mean(), v[4:8].mean()], rel=1e-12)
    # A 30-minute step from 00:10 covers 5 min of v0, 15 of v1, 10 of v2.
    assert s.window(t0 + 600, 1, 1800.0)[0] == pytest.approx((5 * v[0] + 15 * v[1] + 10 * v[2]) / 30)
    # The series ends 15 minutes after its last sample: no wrap-around, no extension.
    end = s.times[-1] + 900
    assert s.window(end - 900, 1, 900.0)[0] == v[-1]
    with pytest.raises(ValueError, match="covers"):
        s.window(end - 900, 1, 1800.0)


def test_hour_windows_and_promotion_follow_the_utc_clock():
    # A 24 h run from 18:00: the 14:00-16:00 peak is at hours 20-22 of the run (was [(-240, -120)]).
    assert hour_windows(1440, 60.0, 14.0, 16.0, start_hour=18.0) == [(1200, 1320)]
    # From 12:00: 10:00-14:00 is the first 2 hours and the last 2 hours (was only the first).
    assert hour_windows(1440, 60.0, 10.0, 14.0, start_hour=12.0) == [(0, 120), (1320, 1440)]
    assert hour_windows(2880, 60.0, 14.0, 16.0) == [(840, 960), (2280, 2400)]
    # The promotion of day 1 (the day after the start's date) peaks 14:00-16:00 UTC that day.
    b = bump(1440, 60.0, 1, (14.0, 16.0), 3.0, start_hour=18.0)
    assert np.flatnonzero(b == 1.0).tolist() == list(range(1200, 1321))
    assert b[1200 - 180] == 0.0 and b[1200 - 90] == pytest.approx(0.5)  # 3 h ramp from 11:00 UTC


def _csv_value(name: str, when: str, column: str) -> float:
    with (data_dir() / "carbon" / name).open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            key = "Time" if "Time" in row else "Datetime (UTC)"
            if row[key] == when:
                return float(row[column])
    raise AssertionError(f"{when} not in {name}")


@needs_data
def test_scenarios_read_each_domain_series_at_utc_time():
    from iro_fed.sim.scenarios import build_scenario

    sc = build_scenario("bank", seed=1, hours=2, promo_day=-1)
    h = sc.history
    # Step 75 is 01:15 UTC: DE has a 01:15 row; FR (30 min) holds its 01:00 value; GB likewise.
    assert sc.carbon["zone-a"][h + 75] == _csv_value("ger_ci.csv", "2020-03-02 01:15:00", "Carbon Intensity")
    assert sc.carbon["zone-b"][h + 75] == _csv_value("fr_ci.csv", "2020-03-02 01:00:00", "Carbon Intensity")
    assert sc.carbon["burst-london"][h + 75] == _csv_value("gb_ci.csv", "2020-03-02 01:00:00", "Carbon Intensity")
    # History: index h - 60 is 23:00 UTC the day before.
    assert sc.carbon["zone-a"][h - 60] == _csv_value("ger_ci.csv", "2020-03-01 23:00:00", "Carbon Intensity")
    # The same start written with an offset is the same UTC time.
    other = build_scenario("bank", seed=1, hours=2, promo_day=-1, start="2020-03-02T01:00:00+01:00")
    assert np.array_equal(other.carbon["zone-a"], sc.carbon["zone-a"])
    # Electricity Maps 2022 files are read on the same month, day and UTC time.
    edge = build_scenario("edge-iot", seed=1, hours=2)
    lca = "Carbon Intensity gCO₂eq/kWh (LCA)"  # the life-cycle basis, as DE/GB/FR (carbon_basis=lca)
    assert edge.carbon["edge-madrid"][edge.history + 75] == _csv_value("ES_2022_hourly.csv", "2022-03-02 01:00:00", lca)
    assert edge.carbon["edge-oslo"][edge.history + 59] == _csv_value("NO_2022_hourly.csv", "2022-03-02 00:00:00", lca)


@needs_data
def test_runs_outside_the_carbon_data_are_clear_errors():
    from iro_fed.sim.engine import SimConfigError
    from iro_fed.sim.scenarios import build_scenario

    # The first day of the data: the forecast's day of history lies before it.
    with pytest.raises(SimConfigError, match=r"covers 2019-12-20 00:00:00 .*outside it: the run needs 2019-12-19 00:00:00 .*24 h of history"):
        build_scenario("bank", hours=2, start="2019-12-20 00:00:00")
    # (A start on February 29 reads the 2022 series' February 28: test_calendar_and_input.py.)
    with pytest.raises(SimConfigError, match=r"'ES' covers .* 2023-01-01 00:00:00; asked for a time outside it: the run needs"):
        build_scenario("edge-iot", hours=24, start="2020-12-31 12:00:00")


@needs_data
def test_a_run_shorter_than_one_step_exits_2(capsys):
    from iro_fed.cli import main

    # 0.001 h rounds to 0 steps: the engine used to fail with an IndexError traceback.
    assert main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "0.001"]) == 2
    assert "--hours: must cover at least one step of 60 s, got 0.001" in capsys.readouterr().err


@needs_data
def test_bank_peak_and_promotion_for_an_evening_start():
    from iro_fed.sim.scenarios import build_scenario

    sc = build_scenario("bank", seed=1, hours=24, start="2020-03-02 18:00:00", promo_day=1)
    assert sc.peak_windows == [(1200, 1320)]  # 14:00-16:00 UTC on 2020-03-03
    traffic = sum(s.traffic for s in sc.services)
    assert 1200 <= int(np.argmax(traffic)) < 1320  # the 12x promotion lands on the daily peak


@pytest.mark.skipif(not (data_dir() / "alibaba-openb-2023").is_dir() or not (data_dir() / "carbon").is_dir(),
                    reason="openb trace or carbon data not found")
def test_openb_fit_keeps_the_last_created_pod():
    from iro_fed.sim.scenarios import build_scenario

    sc = build_scenario("openb", hours=2, nodes=3)
    assert len(sc.pods) == 8152  # every pod of the production list (was 8151: the last one fell off the end)
    assert max(p.arrival for p in sc.pods) == sc.steps - 1


# --- fragmentation (FGD) ------------------------------------------------------------------


def test_fgd_fragmentation_by_hand():
    from iro_fed import problem_from_dict
    from iro_fed.fragmentation import fragmentation, typical_tasks

    share = {"requests": {"cpu": 1000, "memory": 100}, "gpu": {"count": 1, "milli": 250}}
    two = {"requests": {"cpu": 2000, "memory": 100}, "gpu": {"count": 2, "models": ["V100M16"]}}
    cpu = {"requests": {"cpu": 500, "memory": 100}}
    workloads = ([dict(share, name=f"s{i}") for i in range(12)] + [dict(two, name=f"t{i}") for i in range(7)]
                 + [dict(cpu, name="c")])
    problem = problem_from_dict({
        "domains": [{"name": "az"}],
        "nodes": [
            {"name": "p100", "domain": "az", "capacity": {"cpu": 64000, "memory": 262144}, "gpus": 2, "gpu_model": "P100"},
            {"name": "v100", "domain": "az", "capacity": {"cpu": 32000, "memory": 131072}, "gpus": 4,
             "gpu_model": "V100M16", "gpu_free_milli": [300, 1000, 1000, 600]},
        ],
        "workloads": workloads,
    })
    # 95 % of 20 pods = 19: the share (12) and 2-GPU (7) groups; popularity 12/19 and 7/19.
    tasks = typical_tasks(problem)
    assert tasks.popularity.tolist() == pytest.approx([12 / 19, 7 / 19])
    cards = np.array([[1000, 1000, -1, -1], [300, 1000, 1000, 600]])
    got = fragmentation(tasks, np.array([0, 1]), np.array([64000.0, 32000.0]), cards)
    # p100: shares fit every card (0); the 2-GPU task wants V100M16: all 2000 milli -> 7/19 * 2000.
    # v100: shares 0; 2 whole cards free, the 300 + 600 cards cannot host it -> 7/19 * 900.
    assert got.tolist() == pytest.approx([7 / 19 * 2000, 7 / 19 * 900])
    # Too little CPU for the 2-GPU task (2000 m): all 2900 free milli are fragmented for it.
    assert fragmentation(tasks, np.array([1]), np.array([1500.0]), cards[1:]).tolist() == pytest.approx([7 / 19 * 2900])
    # All three groups: the CPU-only task finds every free milli fragmented.
    every = typical_tasks(problem, coverage=1.0)
    assert fragmentation(every, np.array([1]), np.array([32000.0]), cards[1:]).tolist() == pytest.approx(
        [(12 * 0 + 7 * 900 + 1 * 2900) / 20])
