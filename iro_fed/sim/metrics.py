"""Simulator metrics: per-step time series and run totals, with their definitions.

Definitions (what the report's keys mean):

* ``pending_pct``: pods that were not placed in the step they became ready (arrival, or the
  start a carbon-aware deferral chose) as a percent of those that became ready (None, JSON
  null, when no pod became ready); ``pending_at_peak_pct`` the same over pods ready inside the
  scenario's peak windows; ``pending_at_peak_online_pct`` the same over service replicas only
  (each None when no such pod became ready inside a peak window, e.g. a scenario without
  services);
  ``mean_pending_min``: mean minutes pods that waited spent pending, from ready to their first
  placement, or for a pod never placed to when it left or the run ended (a step counts as
  ``step_s`` seconds); ``mean_pending_placed_min`` the same over the waiting pods that were
  placed; ``never_placed_pods``: ready pods never placed. A placement that a preemption undoes
  in the same step, before the pod ran, is no placement here (the pod was pending all along).
* ``utilization_pct``: requested resource-hours over powered-on resource-hours (nodes booting
  or running, empty or not; the usual cluster-utilization ratio), per resource, averaged over cpu
  and memory (and GPU when present); ``utilization_time_mean_pct`` is the plain time mean of
  the per-step ratio (nights with few powered nodes weigh as much as busy hours).
* ``success_rate_pct``: requests served within their SLA over all requests of online
  services (see :mod:`iro_fed.sim.engine` for the service model); None (JSON null) when the
  run had no requests, and in the per-step series for a step without requests.
* ``p99_latency_ms``: the 99th percentile of request latency over all requests of the run
  (each request takes its replica's latency in its step; 1 ms histogram bins); None without
  requests.
* ``cost``, ``carbon_kg``, ``energy_kwh``: integrals over the run of the objective module's cost
  per hour, gCO2 per hour and power for non-empty nodes, plus the idle draw, idle carbon and
  full price of powered-on empty nodes (the objective's own per-node coefficients). Each step
  counts ``step_s / 3600`` hours at the values of that step: the carbon intensity of each
  node's own domain at that step (UTC), the node's power at its CPU requests. ``energy_kwh`` is
  IT energy (before PUE); carbon applies the domain's PUE once: a node's gCO2 per hour is
  ``power_w * pue * intensity / 1000``. Booting nodes count as powered (idle draw, full price).
* ``batch_completion_min``: mean minutes from arrival to completion of the finished batch jobs
  due inside the run (a job whose deadline lies past the run's end is left out, finished or
  not; one without a deadline counts once finished); ``deadline_misses``: batch jobs that
  finished after their deadline or had not finished when the deadline passed inside the run.
* ``burst_pods``: pods that ran at least one step on a node of a ``cloud`` domain (a placement
  there undone in the same step, by a preemption or a move, does not count).
* ``score``: mean over steps of the objective R (``iro_fed.objective.evaluate``) of the step's
  placement of the active pods (running and pending).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

LATENCY_BIN_MS = 1.0
LATENCY_BINS = 20000

SERIES = (
    "pending", "running", "arrivals", "powered_nodes", "utilization_pct", "success_rate_pct", "p99_latency_ms",
    "cost_per_hour", "carbon_g_per_hour", "power_w", "score", "requests_per_s",
)


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """The smallest value v with at least ``q`` percent of the total weight at or below v."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    keep = weights > 0
    if not keep.any():
        return None
    v, w = values[keep], weights[keep]
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order])
    idx = int(np.searchsorted(cum, q / 100.0 * cum[-1] * (1 - 1e-12), side="left"))
    return float(v[order][min(idx, v.size - 1)])


def histogram_percentile(hist: np.ndarray, q: float, bin_ms: float = LATENCY_BIN_MS) -> float | None:
    """Percentile from a latency histogram (upper edge of the bin holding the q-th percent)."""
    total = float(hist.sum())
    if total <= 0:
        return None
    cum = np.cumsum(hist)
    idx = int(np.searchsorted(cum, q / 100.0 * total * (1 - 1e-12), side="left"))
    return float((idx + 1) * bin_ms)


@dataclass
class Recorder:
    """Accumulates one run's time series and totals."""

    steps: int
    step_s: float
    series: dict[str, np.ndarray] = field(default_factory=dict)
    latency_hist: np.ndarray = field(default_factory=lambda: np.zeros(LATENCY_BINS))
    requests: float = 0.0
    failed: float = 0.0
    cost: float = 0.0
    carbon_g: float = 0.0
    energy_wh: float = 0.0
    decisions: int = 0
    solver_calls: int = 0
    solver_time_s: float = 0.0
    rejected: int = 0
    used_node_steps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cap_node_steps: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        for name in SERIES:
            self.series[name] = np.full(self.steps, np.nan)

    def add_requests(self, latency_ms: np.ndarray, requests: np.ndarray, failed: float) -> None:
        """Requests of one step: per histogram entry its latency and requests, and the step's
        failed requests (timeouts, misses, no replica)."""
        self.requests += float(requests.sum())
        self.failed += failed
        if latency_ms.size:
            bins = np.minimum((latency_ms / LATENCY_BIN_MS).astype(np.int64), LATENCY_BINS - 1)
            self.latency_hist += np.bincount(bins, weights=requests, minlength=LATENCY_BINS)

    def node_hour_utilization_pct(self) -> float:
        """Requested over powered capacity summed over steps, mean over resources, in percent."""
        cap = np.asarray(self.cap_node_steps, dtype=np.float64)
        valid = cap > 0
        if not valid.any():
            return 0.0
        return 100.0 * float((np.asarray(self.used_node_steps)[valid] / cap[valid]).mean())

    def add_energy(self, cost_per_hour: float, carbon_g_per_hour: float, power_w: float) -> None:
        hours = self.step_s / 3600.0
        self.cost += cost_per_hour * hours
        self.carbon_g += carbon_g_per_hour * hours
        self.energy_wh += power_w * hours


def success_pct(failed: float, requests: float) -> float | None:
    """Requests served within SLA, in percent: 100 x (1 - failed / requests), so a run without a
    failure reads exactly 100 and never more; None when there were no requests (a scenario
    without services served nothing: 100 read as a perfect run next to a P99 of none)."""
    return 100.0 * (1.0 - min(failed / requests, 1.0)) if requests > 0 else None


def pending_stats(
    ready: np.ndarray, placed: np.ndarray, in_peak: np.ndarray, step_min: float, until: np.ndarray | int
) -> dict[str, Any]:
    """Pending metrics over pods that became ready (``ready >= 0``); ``placed`` is the step of
    the first placement (-1 never); ``until`` (per pod, or one step for all) is when a pod that
    was never placed stopped waiting: the step it left (dropped) or the end of the run.

    A pod never placed waited ``until - ready`` steps: leaving it out of ``mean_pending_min``
    would report 0 minutes for a run where nothing could be placed (survivor bias);
    ``mean_pending_placed_min`` is the mean over the pods that waited and were placed.
    """
    r = ready >= 0
    n = int(r.sum())
    waited = r & ((placed < 0) | (placed > ready))
    end = np.broadcast_to(np.asarray(until, dtype=np.int64), ready.shape)
    wait_steps = np.where(placed >= 0, placed - ready, np.maximum(end - ready, 0))
    peak = r & in_peak
    n_peak = int(peak.sum())
    placed_waited = waited & (placed >= 0)
    return {
        "ready_pods": n,
        "pending_pods": int(waited.sum()),
        # None, not 0, without a pod that became ready (nothing to be a share of, as success %
        # without requests) or without pods ready at peak (no services, or a run missing the
        # peak window).
        "pending_pct": 100.0 * float(waited.sum()) / n if n else None,
        "pending_at_peak_pct": 100.0 * float((waited & peak).sum()) / n_peak if n_peak else None,
        "peak_ready_pods": n_peak,
        "mean_pending_min": float(wait_steps[waited].mean() * step_min) if waited.any() else 0.0,
        "mean_pending_placed_min": float(wait_steps[placed_waited].mean() * step_min) if placed_waited.any() else 0.0,
        "never_placed": int((r & (placed < 0)).sum()),
    }
