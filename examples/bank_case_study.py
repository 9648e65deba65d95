#!/usr/bin/env python
"""The seed's bank case study as an A/B run in the simulator.

A credit-card core system in three zones (``iro_fed.sim.scenarios.bank``): online transaction
services in the primary zone (Frankfurt), nightly batch in the secondary (Paris), a public-cloud
region (London) for bursts; a daily peak at 14:00-16:00 and one promotion day at 12x the peak.

* **A (kube-default)**: plain Kubernetes: kube-scheduler's default scoring, no carbon deferral,
  no consolidation; empty nodes power down and the cloud group autoscales (same for both).
* **B (IRO-Fed)**: the best available solver (``greedy-objective``: argmax of the shared
  objective, whose carbon term moves flexible pods to greener zones) with carbon-aware deferral
  of batch jobs and consolidation of lightly used nodes.
* **A+ (kube-default on IRO's engine)**: kube-default's choices with B's consolidation,
  power-down and make-room but no deferral: ``B vs A+`` is what the carbon-aware scheduler and
  deferral add; most of ``B vs A`` is consolidating and powering down nodes.

Same seed, same traffic, same jobs. The table shows request success, utilization of powered
nodes, batch completion time, carbon, cost and pending pods at the peak, with what the seed
reported where it gave a number.

    .venv/bin/python examples/bank_case_study.py             # 7 days, promotion on day 4 (~15 s)
    .venv/bin/python examples/bank_case_study.py --days 30   # the seed's 30-day test (~1-2 min)
    .venv/bin/python examples/bank_case_study.py --short     # one promotion day (< 30 s), for `make demo`
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

import solvers
from iro_fed.limits import MAX_HOURS
from iro_fed.sim import PLAIN_KUBERNETES, simulate
from solvers import MAX_SEED

#: What the project brief (the seed document) reported or asked for IRO-Fed where it gave a number (None: none).
#: Request success: the simulator issue's target for the whole bank (docs/simulator.md); the 99.99 %
#: SLA the seed gives its online services is not that target.
SEED_REPORTED = {
    "success_rate_pct": ">= 99.9",
    "utilization_pct": "68",
    "batch_completion_min": "within 15 min of schedule",
    "carbon_kg": None,
    "cost": None,
    "pending_at_peak_pct": None,
}
PREFERRED = ("greedy-objective", "best-fit")


def best_solver() -> str:
    """The first preferred solver that is installed."""
    available = set(solvers.available())
    return next(name for name in PREFERRED if name in available)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="one promotion day (for make demo)")
    parser.add_argument("--days", type=int, default=7, help="simulated days (default 7)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--solver", default=None, help="solver for B (default: the best available)")
    args = parser.parse_args(argv)
    # Checked before A runs: a bad --solver or --seed failed with a traceback (exit 1) only
    # after the whole kube-default run, minutes with --days 30.
    if not 1 <= args.days <= MAX_HOURS // 24:
        parser.error(f"--days must be 1..{MAX_HOURS // 24}, got {args.days}")
    if not 0 <= args.seed <= MAX_SEED:
        parser.error(f"--seed must be 0..{MAX_SEED}, got {args.seed}")
    hours = 24.0 if args.short else 24.0 * args.days
    promo_day = 0 if args.short else min(4, args.days - 1)
    ours = args.solver or best_solver()
    try:
        solvers.make(ours, seed=args.seed)
    except solvers.SolverError as exc:  # unknown, or its optional dependency is not installed
        parser.error(f"--solver: {exc}")
    console = Console(width=None if sys.stdout.isatty() else 170)
    runs = {}
    # A+ separates what the engine gives any scheduler (consolidation, power-down, make-room) from
    # what the carbon-aware scheduler and deferral add: most of B's saving against A is the former.
    for label, solver, settings in (
        ("A kube-default", "kube-default", PLAIN_KUBERNETES),
        ("A+ kube-default+consol", "kube-default", {"deferral": "none"}),
        (f"B IRO-Fed ({ours})", ours, {}),
    ):
        start = time.perf_counter()
        with console.status(f"simulating {hours:g} h of the bank with {solver}", spinner="dots"):
            result = simulate("bank", solver, seed=args.seed, hours=hours, settings={"promo_day": promo_day, **settings})
        runs[label] = (result.totals, time.perf_counter() - start)
    (a, _), (a_plus, _), (b, _) = runs.values()
    table = Table(title=f"bank case study: {hours / 24:g} day(s), promotion on day {promo_day}, seed {args.seed}")
    table.add_column("metric")
    for label in runs:
        table.add_column(label, justify="right")
    table.add_column("B vs A", justify="right")
    table.add_column("B vs A+", justify="right")
    table.add_column("project brief (target)", justify="right")

    def change(base: Any, value: Any, points: bool = False) -> str:
        if base is None or value is None:
            return "-"
        if points:  # a percentage's change is a difference in points, not a ratio of percentages
            return f"{value - base:+.1f} pp"
        return "-" if base == 0 else f"{100.0 * (value - base) / abs(base):+.1f} %"

    def row(name: str, key: str, digits: int = 1, lower_better: bool = False) -> None:
        values = (a[key], a_plus[key], b[key])
        cells = ["-" if v is None else f"{v:,.{digits}f}" for v in values]
        points = key.endswith("_pct")
        table.add_row(name, *cells, change(a[key], b[key], points), change(a_plus[key], b[key], points),
                      SEED_REPORTED.get(key) or "-")

    row("request success %", "success_rate_pct", 3)
    row("P99 latency ms", "p99_latency_ms", 0)
    row("utilization % of powered nodes", "utilization_pct")
    row("pending % at peak (all pods)", "pending_at_peak_pct", 2)
    row("pending % at peak (online replicas)", "pending_at_peak_online_pct", 2)
    row("batch completion min (mean)", "batch_completion_min")
    row("batch deadline misses", "deadline_misses", 0)
    row("carbon kg CO2", "carbon_kg")
    row("cost", "cost")
    row("energy kWh (IT)", "energy_kwh")
    row("pods burst to the cloud", "burst_pods", 0)
    console.print(table)
    for label, (_, wall) in runs.items():
        console.print(f"{label}: {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
