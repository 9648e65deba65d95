"""``edge-iot``: four edge sites and two cloud regions.

Edge sites (each 4 nodes x 8 cores / 32 GiB, low-power servers) sit next to their users:
``edge-madrid`` (grid ES, 2022 hourly), ``edge-oslo`` (grid NO, 2022 hourly; latency of GCP
europe-north1), ``edge-frankfurt`` (DE) and ``edge-london`` (GB), 2 ms from local users and GCP
round trips to everything else. Cloud regions ``cloud-paris`` (FR, europe-west9) and
``cloud-frankfurt`` (DE, europe-west3) autoscale up to 16 nodes x 16 cores each (3 minutes).

IoT ingest services are tied to their site's users with a 10 ms latency bound (so they can
only run at their own edge site). Analytics jobs (hourly, 30-90 minutes of work, due 6-12 hours
later) may run anywhere: the carbon term moves them to green sites and regions, and deferral
waits for low-carbon hours within their slack. Peak window for the pending metric: 10:00-14:00.

Random draws come from streams derived from the seed with a fixed key per purpose (each
service's traffic noise; each hour's analytics jobs, every job drawing all its values before
the run's window skips it), so a run is the first part of a longer one with the same seed and
start: the draws for a step never depend on ``hours`` (one shared stream gave a 2 h run other
traffic and jobs than the first 2 h of a 4 h run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from iro_fed.model import Domain, Weights
from iro_fed.sim.model import NodePool, PodSpec, Scenario, Service
from iro_fed.sim.scenarios.common import (
    IOT_PROFILE,
    MAX_JOBS,
    MAX_NODES,
    MAX_RPS,
    WEIGHT_RANGES,
    UserCarbon,
    carbon_window,
    check_ranges,
    daily_curve,
    hour_windows,
    latency_between,
    run_steps,
    stream,
)
from iro_fed.sim.signals import parse_time

PARAMS = {
    "w_carbon": 1.0,
    "w_latency": 1.0,
    "start": "2020-03-02 00:00:00",
    "edge_nodes": 4,
    "cloud_nodes": 16,
    "sensor_rps": 1500.0,
    "jobs_per_hour": 6,
}
DEFAULT_HOURS = 24.0
#: Inclusive ranges of the numeric parameters (nodes per site or region, telemetry req/s, jobs).
RANGES: dict[str, tuple[float | None, float | None]] = {
    **WEIGHT_RANGES,
    "edge_nodes": (0, MAX_NODES),
    "cloud_nodes": (0, MAX_NODES),
    "sensor_rps": (0.0, MAX_RPS),
    "jobs_per_hour": (0, MAX_JOBS),
}

SITES = (
    # name, grid zone, GCP region for latency, users
    ("edge-madrid", "ES", "europe-southwest1", "users-madrid"),
    ("edge-oslo", "NO", "europe-north1", "users-oslo"),
    ("edge-frankfurt", "DE", "europe-west3", "users-frankfurt"),
    ("edge-london", "GB", "europe-west2", "users-london"),
)
CLOUDS = (("cloud-paris", "FR", "europe-west9"), ("cloud-frankfurt", "DE", "europe-west3"))

#: Stream keys, one per purpose: ``(seed, key, index)`` (service index; hour of the run).
NOISE_STREAM, JOB_STREAM = 0, 1


def carbon_zones(p: Mapping[str, Any]) -> list[str]:
    """The carbon zones the domains read, in domain order."""
    return list(dict.fromkeys(zone for _, zone, *_ in SITES + CLOUDS))


def build(seed: int, hours: float, step_s: float = 60.0, carbon_series: UserCarbon | None = None, **params) -> Scenario:
    """The edge-IoT scenario (see the module docstring); ``carbon_series``: a user's own series
    by zone (``--set carbon.DE=FILE``), read in place of the shipped ones."""
    p = {**PARAMS, **params}
    check_ranges(p, RANGES)
    steps = run_steps(hours, step_s)
    history = int(round(86400 / step_s))
    start_hour = (parse_time(p["start"]) % 86400) / 3600.0
    domains, carbon, pools = [], {}, []
    for name, zone, _, _ in SITES:
        domains.append(Domain(name, "edge", zone, 0.0, {"cpu": 0.03, "memory": 0.004}, 1.3))
        carbon[name] = carbon_window(zone, p["start"], history, steps, step_s, carbon_series)
        pools.append(NodePool(f"{name}-n", name, int(p["edge_nodes"]), 8000, 32768, power_idle_w=40, power_peak_w=120,
                              labels={"iro.example/site": name}, min_on=1))
    for name, zone, _ in CLOUDS:
        domains.append(Domain(name, "cloud", zone, 0.0, {"cpu": 0.0388, "memory": 0.0052}, 1.1))
        carbon[name] = carbon_window(zone, p["start"], history, steps, step_s, carbon_series)
        pools.append(NodePool(f"{name}-n", name, int(p["cloud_nodes"]), 16000, 65536, power_idle_w=70, power_peak_w=210,
                              elastic=True, boot_steps=max(1, int(round(180 / step_s))), min_on=1))
    regions = [s[3] for s in SITES]
    latency = latency_between(
        {s[3]: s[2] for s in SITES},
        {**{s[0]: s[2] for s in SITES}, **{c[0]: c[2] for c in CLOUDS}},
        local_ms={(s[3], s[0]): 2.0 for s in SITES},
    )
    base = daily_curve(IOT_PROFILE, steps, step_s, start_hour)
    services: list[Service] = []
    for name, _, _, users in SITES:
        for kind, cpu, mem, mu, ms, sla in (("ingest", 500, 1024, 200.0, 3.0, 50.0), ("control", 1000, 2048, 100.0, 5.0, 30.0)):
            noise = np.exp(stream(seed, NOISE_STREAM, len(services)).normal(0, 0.05, steps))
            traffic = float(p["sensor_rps"]) * (1.0 if kind == "ingest" else 0.3) * base * noise
            services.append(Service(f"{kind}-{name}", users, cpu, mem, mu, ms, sla, traffic, min_replicas=1, max_replicas=60,
                                    target_rho=0.6, max_latency_ms=10.0, priority=1000))
    pods: list[PodSpec] = []
    per_h = 3600.0 / step_s
    for h in range(int(np.ceil(hours))):
        rng = stream(seed, JOB_STREAM, h)
        for j in range(int(p["jobs_per_hour"])):
            # every value drawn before the window check: a job outside the run shifts no other one
            arrival = int(round((h + rng.random()) * per_h))
            duration = int(round(rng.uniform(30, 90) * 60 / step_s))
            slack = int(round(rng.uniform(6, 12) * per_h))
            cpu = float(rng.choice([2000, 4000]))
            if arrival >= steps:
                continue
            name = f"analytics-h{h}-{j}"
            pods.append(PodSpec(name, "batch", cpu, cpu * 4, arrival, duration=duration,
                                deadline=arrival + duration + slack, priority=10, controller=f"Job/{name}"))
    return Scenario(
        name="edge-iot", description="Edge sites with site-bound IoT services and analytics that may run anywhere.",
        domains=domains, regions=regions, latency_ms=latency, pools=pools, services=services, pods=pods,
        carbon=carbon, history=history, steps=steps, step_s=step_s, start_time=parse_time(p["start"]),
        weights=Weights(carbon=float(p["w_carbon"]), latency=float(p["w_latency"])), peak_windows=hour_windows(steps, step_s, 10.0, 14.0, start_hour), params=p,
    )
