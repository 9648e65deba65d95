"""``bank``: the seed's credit-card core system in three zones.

* ``zone-a`` (Frankfurt, primary, grid DE): online transaction services; 12 nodes x 32 cores.
* ``zone-b`` (Paris, secondary, grid FR): nightly batch (statements, risk, settlement); its
  nodes carry ``iro.example/batch-zone: PreferNoSchedule``, so online services go there only
  when the primary is full; 8 nodes x 32 cores.
* ``burst-london`` (public cloud, GCP europe-west2, grid GB): an autoscaling group of up to 40
  n2-standard-16 nodes, provisioned in 3 minutes at list price; tainted
  ``iro.example/burst: PreferNoSchedule``.

Online traffic follows a retail payment day (peak 14:00-16:00 UTC) from three user regions;
on ``promo_day`` (a day index counted from the start's UTC date, -1 for none; a day the run does
not reach is in ``notes["outside_run"]``, which ``simulate`` reads) a promotion multiplies the 14:00-16:00 UTC peak ``promo_factor`` times (12x by default), ramping over three
hours on each side. Hours (traffic, peak windows, promotion, batch) are UTC clock hours, also
for a start that is not midnight. Batch: nightly jobs submitted
20:00-23:00 that must finish by 06:00 (deferrable), and daytime jobs every hour that tolerate
15 minutes of delay (not deferrable); batch runs in the bank's own zones only. Online and batch
compete for the same nodes. Latency: GCP round trips between europe-west3/9/2 (5 ms inside a
region). Carbon: the 2020 DE / FR / GB series of ``shared/data/carbon``. Prices and power as in
``examples/problems/bank-three-zone.json``.

Random draws come from streams derived from the seed with a fixed key per purpose (each
service's traffic noise; each day's nightly and each day's daytime jobs, every job drawing all
its values before the run's window skips it), so a run is the first part of a longer one with
the same seed and start: the draws for a step never depend on ``hours`` (one shared stream gave
a 2 h run other traffic and jobs than the first 2 h of a 4 h run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from iro_fed.model import Domain, Taint, Toleration, Weights
from iro_fed.sim.model import NodePool, PodSpec, Scenario, Service
from iro_fed.sim.scenarios.common import (
    MAX_FACTOR,
    MAX_JOBS,
    MAX_NODES,
    MAX_RPS,
    PAYMENT_PROFILE,
    WEIGHT_RANGES,
    UserCarbon,
    bump,
    carbon_setting,
    carbon_source,
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
    "promo_day": 1,
    "promo_factor": 12.0,
    "peak_rps": 5000.0,
    "zone_a_nodes": 12,
    "zone_b_nodes": 8,
    "cloud_nodes": 40,
    "night_jobs": 80,
    "day_jobs_per_hour": 4,
    "carbon_de": "DE",
    "carbon_fr": "FR",
    "carbon_gb": "GB",
}
DEFAULT_HOURS = 48.0
#: Inclusive ranges of the numeric parameters: counts >= 0; ``promo_day`` a day index or -1
#: (none); ``promo_factor`` multiplies the peak (< 1 a dip, never negative traffic).
RANGES: dict[str, tuple[float | None, float | None]] = {
    **WEIGHT_RANGES,
    "promo_day": (-1, None),
    "promo_factor": (0.0, MAX_FACTOR),
    "peak_rps": (0.0, MAX_RPS),
    "zone_a_nodes": (0, MAX_NODES),
    "zone_b_nodes": (0, MAX_NODES),
    "cloud_nodes": (0, MAX_NODES),
    "night_jobs": (0, MAX_JOBS),
    "day_jobs_per_hour": (0, MAX_JOBS),
}

#: Stream keys, one per purpose: ``(seed, key, index)`` (service index; day + 1, as day -1 holds
#: the jobs carried in from the day before the start and keys are non-negative).
NOISE_STREAM, NIGHT_STREAM, DAY_STREAM = 0, 1, 2

BATCH_TAINT = Taint("iro.example/batch-zone", "true", "PreferNoSchedule")
BURST_TAINT = Taint("iro.example/burst", "true", "PreferNoSchedule")

# (name, region, traffic share, cpu m, memory MiB, mu req/s, service ms, SLA ms)
SERVICES = (
    ("card-auth-de", "users-de", 0.35, 1000, 3072, 120.0, 10.0, 250.0),
    ("card-auth-fr", "users-fr", 0.15, 1000, 3072, 120.0, 10.0, 250.0),
    ("card-auth-gb", "users-gb", 0.15, 1000, 3072, 120.0, 10.0, 250.0),
    ("fraud-scoring", "users-de", 0.20, 2000, 8192, 90.0, 20.0, 400.0),
    ("api-gateway", "users-de", 0.15, 500, 1024, 180.0, 5.0, 200.0),
)


#: The settings that name each domain's carbon source, in domain order.
CARBON_SETTINGS = ("carbon_de", "carbon_fr", "carbon_gb")


def carbon_zones(p: Mapping[str, Any]) -> list[str]:
    """The shipped carbon series the domains read (``carbon_de/fr/gb`` naming one), in domain order."""
    sources = (carbon_source(p[key]) for key in CARBON_SETTINGS)
    return list(dict.fromkeys(s for s in sources if not s.startswith(("const:", "codecarbon:"))))


def build(seed: int, hours: float, step_s: float = 60.0, carbon_series: UserCarbon | None = None, **params) -> Scenario:
    """The bank scenario for ``hours`` from ``start`` (see the module docstring); ``carbon_series``:
    a user's own series by zone (``--set carbon.DE=FILE``), read in place of the shipped ones."""
    p = {**PARAMS, **params}
    check_ranges(p, RANGES)
    for key in CARBON_SETTINGS:  # one spelling per source (es -> ES), an unreadable one named
        p[key] = carbon_setting(key, p[key])
    steps = run_steps(hours, step_s)
    history = int(round(86400 / step_s))
    start_hour = (parse_time(p["start"]) % 86400) / 3600.0
    domains = [
        Domain("zone-a", "zone", "DE", 0.0, {"cpu": 0.019, "memory": 0.0026}, 1.4),
        Domain("zone-b", "zone", "FR", 0.0, {"cpu": 0.017, "memory": 0.0023}, 1.4),
        Domain("burst-london", "cloud", "GB", 0.0, {"cpu": 0.0388, "memory": 0.0052}, 1.1),
    ]
    carbon = {
        "zone-a": carbon_window(p["carbon_de"], p["start"], history, steps, step_s, carbon_series),
        "zone-b": carbon_window(p["carbon_fr"], p["start"], history, steps, step_s, carbon_series),
        "burst-london": carbon_window(p["carbon_gb"], p["start"], history, steps, step_s, carbon_series),
    }
    regions = ["users-de", "users-fr", "users-gb"]
    latency = latency_between(
        {"users-de": "europe-west3", "users-fr": "europe-west9", "users-gb": "europe-west2"},
        {"zone-a": "europe-west3", "zone-b": "europe-west9", "burst-london": "europe-west2"},
    )
    pools = [
        NodePool("fra-a", "zone-a", int(p["zone_a_nodes"]), 32000, 131072, power_idle_w=160, power_peak_w=460,
                 labels={"bank.example/pci": "true"}, min_on=1),
        NodePool("par-b", "zone-b", int(p["zone_b_nodes"]), 32000, 131072, power_idle_w=160, power_peak_w=460,
                 taints=(BATCH_TAINT,)),
        NodePool("lon-burst", "burst-london", int(p["cloud_nodes"]), 16000, 65536, power_idle_w=70, power_peak_w=210,
                 taints=(BURST_TAINT,), elastic=True, boot_steps=max(1, int(round(180 / step_s)))),
    ]
    base = daily_curve(PAYMENT_PROFILE, steps, step_s, start_hour)
    mult = np.ones(steps)
    notes: dict[str, Any] = {}
    if int(p["promo_day"]) >= 0:
        day, (span, days) = int(p["promo_day"]), run_days(steps, step_s, start_hour)
        promo = bump(steps, step_s, day, (14.0, 16.0), 3.0, start_hour)
        # silently no promotion before; simulate() refuses it when given (a window of a run may miss it)
        if day >= days:
            notes["outside_run"] = {"promo_day": f"day {day} is outside this run (it has {span}, counted from the "
                                                 "start's UTC date; -1: no promotion)"}
        elif not promo.any():  # the day is reached, its 11:00-19:00 UTC promotion (with the ramps) is not
            notes["outside_run"] = {"promo_day": f"the promotion of day {day} (11:00-19:00 UTC with its ramps) is "
                                                 f"not in this run (it has {span}, counted from the start's UTC date; "
                                                 "-1: no promotion)"}
        mult += (float(p["promo_factor"]) - 1.0) * promo
    tolerate_all = (Toleration(operator="Exists"),)
    services = []
    for i, (name, region, share, cpu, mem, mu, ms, sla) in enumerate(SERVICES):
        noise = np.exp(stream(seed, NOISE_STREAM, i).normal(0.0, 0.03, steps))
        traffic = float(p["peak_rps"]) * share * base * mult * noise
        services.append(Service(name, region, cpu, mem, mu, ms, sla, traffic, min_replicas=2, max_replicas=600,
                                target_rho=0.6, tolerations=tolerate_all, priority=1000))
    pods: list[PodSpec] = []
    per_h = 3600.0 / step_s
    batch_domains = ("zone-a", "zone-b")
    batch_tol = (Toleration("iro.example/batch-zone", "Exists"),)
    days = int(np.ceil(hours / 24.0)) + 1
    for day in range(-1, days):
        # Nightly jobs: submitted 20:00-23:00, due 06:00 the next morning.
        rng = stream(seed, NIGHT_STREAM, day + 1)
        for j in range(int(p["night_jobs"])):
            # every value drawn before the window check: a job outside the run shifts no other one
            arrival = int(round((24 * day + 20 + 3 * rng.random() - start_hour) * per_h))
            duration = int(round(rng.uniform(30, 150) * 60 / step_s))
            cpu = float(rng.choice([4000, 6000, 8000]))
            deadline = int(round((24 * (day + 1) + 6 - start_hour) * per_h))
            if arrival < 0 or arrival >= steps:
                continue
            name = f"night-d{day}-{j:03d}"
            pods.append(PodSpec(name, "batch", cpu, cpu * 4, arrival, duration=duration, deadline=deadline,
                                allowed_domains=batch_domains, tolerations=batch_tol, priority=10, controller=f"Job/{name}"))
        # Daytime jobs (reports, settlement): 08:00-20:00, 15 minutes of tolerated delay.
        rng = stream(seed, DAY_STREAM, day + 1)
        for h in range(8, 20):
            for j in range(int(p["day_jobs_per_hour"])):
                arrival = int(round((24 * day + h + rng.random() - start_hour) * per_h))
                duration = int(round(rng.uniform(10, 40) * 60 / step_s))
                cpu = float(rng.choice([2000, 4000]))
                if arrival < 0 or arrival >= steps:
                    continue
                name = f"day-d{day}-h{h}-{j}"
                pods.append(PodSpec(name, "batch", cpu, cpu * 4, arrival, duration=duration,
                                    deadline=arrival + duration + int(round(15 * 60 / step_s)),
                                    allowed_domains=batch_domains, tolerations=batch_tol, priority=50, controller=f"Job/{name}"))
    return Scenario(
        name="bank", description="Credit-card core system: online transactions, nightly batch, public-cloud burst.",
        domains=domains, regions=regions, latency_ms=latency, pools=pools, services=services, pods=pods,
        carbon=carbon, history=history, steps=steps, step_s=step_s, start_time=parse_time(p["start"]),
        weights=Weights(carbon=float(p["w_carbon"]), latency=float(p["w_latency"])), peak_windows=hour_windows(steps, step_s, 14.0, 16.0, start_hour), params=p,
        notes=notes,
    )


def run_days(steps: int, step_s: float, start_hour: float) -> tuple[str, int]:
    """The UTC days a run reaches, from the start's date (``promo_day``'s count): ``("days 0..1",
    2)``, ``("day 0 only", 1)``. A promotion day past them was silently no promotion at all."""
    days = max(1, int(np.ceil((start_hour + steps * step_s / 3600.0) / 24.0 - 1e-9)))
    return ("day 0 only" if days == 1 else f"days 0..{days - 1}"), days
