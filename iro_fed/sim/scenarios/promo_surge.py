"""``promo-surge``: an e-commerce flash sale of heterogeneous pods that fragments capacity.

Two zones of a private cloud (``zone-de`` grid DE, ``zone-fr`` grid FR), each with GPU nodes
(64 cores, 256 GiB, 8 cards) and CPU nodes (32 cores, 128 GiB), no cloud burst. From
``surge_start_h`` (10:00 UTC; a UTC clock hour, the first at or after the run's start) a surge
of long-running pods arrives over ``surge_hours`` (two hours), a mix of the shapes an online shop runs in a
sale: GPU recommendation / vision inference taking a share of a card or whole cards, CPU-heavy
checkout and search pods, memory-heavy cache pods. Its total demand is close to the cluster's
capacity (``load`` of the tighter of CPU and GPU), so the outcome turns on how well a scheduler
packs shapes: spreading leaves many nodes with leftovers that fit no large pod. Each shape is one
Deployment scaled up for the sale (its pods one ReplicaSet, ``ReplicaSet/<shape>``), so
``kube-default`` spreads a shape's pods by kube-scheduler's system default constraints, as a real
cluster does. The sale ends at
``sale_end_h`` (18:00 UTC, the first such clock hour after the surge began, at least
``surge_hours`` after it), when the surge pods leave. Peak window for the pending metric: the surge. Nodes
stay powered (``power_down`` off): the scenario measures packing, not power management.

The surge's whole population is drawn first (up to the load target, whatever the run's length)
and the run keeps the pods that arrive inside it, so a run is the first part of a longer one
with the same seed and start (stopping at the first pod past the run's end dropped later-drawn
pods that arrive inside it). A pod still there at the run's end has ``departure`` -1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from iro_fed.model import Domain, Weights
from iro_fed.sim.model import NodePool, PodSpec, Scenario
from iro_fed.sim.scenarios.common import (
    MAX_NODES,
    WEIGHT_RANGES,
    UserCarbon,
    carbon_window,
    check_ranges,
    latency_between,
    run_steps,
)
from iro_fed.sim.signals import parse_time

PARAMS = {
    "w_carbon": 1.0,
    "w_latency": 1.0,
    "start": "2020-03-06 00:00:00",
    "gpu_nodes": 8,
    "cpu_nodes": 8,
    "load": 1.0,
    "surge_start_h": 10.0,
    "surge_hours": 2.0,
    "sale_end_h": 18.0,
}
DEFAULT_HOURS = 24.0
#: Bound on the surge's size: ``load`` x capacity in pods is built up front (nodes: common.MAX_NODES).
MAX_LOAD = 100.0
#: Inclusive ranges of the node counts; GPU nodes: at least one (the surge is sized on GPU
#: capacity too; with none it is empty).
RANGES: dict[str, tuple[float | None, float | None]] = {
    **WEIGHT_RANGES,
    "gpu_nodes": (1, MAX_NODES),
    "cpu_nodes": (0, MAX_NODES),
}

# (kind, weight, cpu m, memory MiB, gpu count, gpu milli)
SHAPES = (
    ("rec-infer-share", 0.25, 2000, 8192, 1, 250),
    ("vision-share", 0.15, 4000, 16384, 1, 500),
    ("rec-train-1gpu", 0.10, 8000, 32768, 1, 1000),
    ("vision-2gpu", 0.06, 12000, 49152, 2, 1000),
    ("llm-4gpu", 0.03, 16000, 98304, 4, 1000),
    ("checkout", 0.16, 4000, 8192, 0, 0),
    ("search", 0.12, 8000, 16384, 0, 0),
    ("cache", 0.13, 2000, 32768, 0, 0),
)


def carbon_zones(p: Mapping[str, Any]) -> list[str]:
    """The carbon zones the domains read, in domain order."""
    return ["DE", "FR"]


def build(seed: int, hours: float, step_s: float = 60.0, carbon_series: UserCarbon | None = None, **params) -> Scenario:
    """The promo-surge scenario (see the module docstring); ``carbon_series``: a user's own series
    by zone (``--set carbon.DE=FILE``), read in place of the shipped ones."""
    p = {**PARAMS, **params}
    _check(p)
    rng = np.random.default_rng(seed)
    steps = run_steps(hours, step_s)
    history = int(round(86400 / step_s))
    domains = [
        Domain("zone-de", "zone", "DE", 0.0, {"cpu": 0.02, "memory": 0.0027, "gpu": 1.2}, 1.3),
        Domain("zone-fr", "zone", "FR", 0.0, {"cpu": 0.02, "memory": 0.0027, "gpu": 1.2}, 1.3),
    ]
    carbon = {d.name: carbon_window(d.carbon_zone, p["start"], history, steps, step_s, carbon_series) for d in domains}
    pools = []
    for d in domains:
        pools.append(NodePool(f"{d.name}-gpu", d.name, int(p["gpu_nodes"]) // 2 + int(p["gpu_nodes"]) % 2 * (d.name == "zone-de"),
                              64000, 262144, gpus=8, gpu_model="A10", power_idle_w=400, power_peak_w=2600))
        pools.append(NodePool(f"{d.name}-cpu", d.name, int(p["cpu_nodes"]) // 2 + int(p["cpu_nodes"]) % 2 * (d.name == "zone-de"),
                              32000, 131072, power_idle_w=160, power_peak_w=460))
    regions = ["shoppers-de", "shoppers-fr"]
    latency = latency_between({"shoppers-de": "europe-west3", "shoppers-fr": "europe-west9"},
                              {"zone-de": "europe-west3", "zone-fr": "europe-west9"})
    cpu_cap = sum(pl.count * pl.cpu for pl in pools)
    gpu_cap = sum(pl.count * pl.gpus * 1000 for pl in pools)
    weights = np.array([s[1] for s in SHAPES])
    weights = weights / weights.sum()
    per_h = 3600.0 / step_s
    # UTC clock hours, as the bank's peak: the first surge_start_h o'clock at or after the start,
    # the sale's end the first sale_end_h o'clock after the surge began (counting them from the
    # run's start put the surge at 16:00 for a 06:00 start).
    start_hour = (parse_time(p["start"]) % 86400) / 3600.0
    surge_start, sale_end = float(p["surge_start_h"]), float(p["sale_end_h"])
    t0 = int(round(((surge_start - start_hour) % 24.0) * per_h))
    span = max(1, int(round(float(p["surge_hours"]) * per_h)))
    end = t0 + int(round(((sale_end - surge_start) % 24.0) * per_h))
    notes: dict[str, Any] = {}
    if t0 >= steps:  # no surge pod would arrive: simulate() refuses a surge_start_h given, else a note
        notes["outside_run"] = {"surge_start_h": f"the surge at {surge_start:g}:00 UTC begins {t0 / per_h:g} h "
                                                 f"after the start, past this {steps / per_h:g} h run"}
    pods: list[PodSpec] = []
    cpu_sum = gpu_sum = 0.0
    i = 0
    # every pod of the surge is drawn (t0 past the run: none can arrive, nothing to draw)
    while t0 < steps and cpu_sum < float(p["load"]) * cpu_cap and gpu_sum < float(p["load"]) * gpu_cap:
        kind, _, cpu, mem, gc, gm = SHAPES[int(rng.choice(len(SHAPES), p=weights))]
        arrival = t0 + int(rng.integers(span))
        region = regions[int(rng.integers(2))]
        if arrival < steps:  # drawn either way: the population does not depend on the run's length
            pods.append(PodSpec(f"{kind}-{i:04d}", "online", float(cpu), float(mem), arrival,
                                departure=end if end < steps else -1, gpu_count=gc, gpu_milli=gm if gc else 0,
                                user_region=region, priority=100, controller=f"ReplicaSet/{kind}"))
        cpu_sum += cpu
        gpu_sum += gc * gm if gc == 1 else gc * 1000
        i += 1
    return Scenario(
        name="promo-surge", description="E-commerce flash sale of heterogeneous GPU/CPU pods.",
        domains=domains, regions=regions, latency_ms=latency, pools=pools, services=[], pods=pods,
        carbon=carbon, history=history, steps=steps, step_s=step_s, start_time=parse_time(p["start"]),
        weights=Weights(carbon=float(p["w_carbon"]), latency=float(p["w_latency"])), peak_windows=[(t0, t0 + span)], params=p,
        engine_defaults={"power_down": False},
        notes={"cpu_capacity": cpu_cap, "gpu_capacity_milli": gpu_cap, "surge_pods": len(pods), **notes},
    )


def _check(p: dict) -> None:
    """Parameter ranges (the builder loops until the surge reaches ``load`` x capacity)."""
    check_ranges(p, RANGES)
    if not 0.0 < float(p["load"]) <= MAX_LOAD:
        raise ValueError(f"setting 'load': must be > 0 and at most {MAX_LOAD:g}, got {p['load']}")
    for key in ("surge_start_h", "sale_end_h"):
        if not 0.0 <= float(p[key]) < 24.0:
            raise ValueError(f"setting {key!r}: a UTC clock hour in [0, 24), got {p[key]}")
    if not 0.0 < float(p["surge_hours"]) <= 24.0:
        raise ValueError(f"setting 'surge_hours': must be > 0 and at most 24, got {p['surge_hours']}")
    sale = (float(p["sale_end_h"]) - float(p["surge_start_h"])) % 24.0
    if sale < float(p["surge_hours"]):
        raise ValueError(f"setting 'sale_end_h': the sale ends {sale:g} h after the surge starts at "
                         f"{float(p['surge_start_h']):g}:00, before the {float(p['surge_hours']):g} h surge is over "
                         "(a pod arriving after it would never leave)")
