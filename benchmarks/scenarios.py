#!/usr/bin/env python
"""Scenarios x solvers in the simulator, over several seeds: the carbon and service numbers.

For each scenario (``bank``, ``edge-iot``, ``promo-surge`` by default; ``openb`` on request)
and seed, every variant runs the same scenario (same traffic, jobs and signals):

* ``kube-default``: plain Kubernetes (``PLAIN_KUBERNETES``: no carbon deferral, no
  consolidation); the baseline of every ratio below;
* ``kube-default+consol``: kube-default with consolidation (the same infrastructure as ours,
  still carbon-blind), to separate what the scheduler contributes;
* ``best-fit``, ``iro-frag``, ``greedy-objective``: with carbon deferral and consolidation
  (the engine defaults);
* ``greedy-blind``: ``greedy-objective`` with the carbon weight at 0 and no deferral: the
  carbon-blind run that "carbon saved at equal SLA" is measured against.

Per variant (mean over seeds): pending % at peak (all pods, online replicas), utilization of
powered nodes, request success, P99 latency, carbon kg and its change vs kube-default, cost,
batch completion, deadline misses. Targets on ``bank`` vs kube-default: pending at peak
<= 1 %, utilization >= 68 %, success >= 99.9 %, carbon >= 20 % lower.

    .venv/bin/python benchmarks/scenarios.py                      # 3 seeds, default lengths (a few minutes)
    .venv/bin/python benchmarks/scenarios.py --quick              # bank only, 1 seed, one promotion day
    .venv/bin/python benchmarks/scenarios.py --scenarios bank --seeds 1-5 --hours 168
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from iro_fed.cli import check_hours, parse_seeds
from iro_fed.sim import PLAIN_KUBERNETES, simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import check_names, check_output_file, usage_errors, write_json  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / "results" / "scenarios.json"
BASELINE = "kube-default"
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "kube-default": ("kube-default", dict(PLAIN_KUBERNETES)),
    "kube-default+consol": ("kube-default", {"deferral": "none"}),
    "best-fit": ("best-fit", {}),
    "iro-frag": ("iro-frag", {}),
    "greedy-objective": ("greedy-objective", {}),
    "greedy-blind": ("greedy-objective", {"w_carbon": 0.0, "deferral": "none"}),
}
METRICS = (
    "pending_at_peak_pct", "pending_at_peak_online_pct", "utilization_pct", "success_rate_pct", "p99_latency_ms",
    "carbon_kg", "cost", "batch_completion_min", "deadline_misses", "burst_pods", "score",
)
TARGETS = {  # bank vs kube-default
    "pending_at_peak_pct": ("<=", 1.0),
    "utilization_pct": (">=", 68.0),
    "success_rate_pct": (">=", 99.9),
    "carbon_vs_baseline_pct": ("<=", -20.0),
}


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def run(scenarios: list[str], variants: list[str], seeds: list[int], hours: float | None, extra: dict[str, Any],
        console: Console) -> dict[str, Any]:
    results: dict[str, Any] = {}
    from rich.progress import Progress

    total = len(scenarios) * len(variants) * len(seeds)
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("simulating", total=total)
        for scenario in scenarios:
            per_variant: dict[str, Any] = {}
            for variant in variants:
                solver, settings = VARIANTS[variant]
                runs = []
                for seed in seeds:
                    progress.update(task, description=f"{scenario} / {variant} / seed {seed}")
                    start = time.perf_counter()
                    result = simulate(scenario, solver, seed=seed, hours=hours, settings={**extra.get(scenario, {}), **settings})
                    wall = time.perf_counter() - start
                    runs.append({"seed": seed, "wall_s": wall, **{k: result.totals[k] for k in METRICS},
                                 "pending_pct": result.totals["pending_pct"], "hours": result.totals["hours"]})
                    progress.advance(task)
                per_variant[variant] = {"solver": solver, "settings": settings, "runs": runs,
                                        "mean": {k: _mean([r[k] for r in runs]) for k in (*METRICS, "wall_s")}}
            base = per_variant.get(BASELINE)
            for doc in per_variant.values():
                mean = doc["mean"]
                if base is not None and base["mean"]["carbon_kg"]:
                    # Per seed, then averaged: same seed, same traffic.
                    ratios = [100.0 * (r["carbon_kg"] - b["carbon_kg"]) / b["carbon_kg"] for r, b in zip(doc["runs"], base["runs"], strict=True)]
                    costs = [100.0 * (r["cost"] - b["cost"]) / b["cost"] for r, b in zip(doc["runs"], base["runs"], strict=True)]
                    mean["carbon_vs_baseline_pct"] = float(np.mean(ratios))
                    mean["cost_vs_baseline_pct"] = float(np.mean(costs))
            blind, aware = per_variant.get("greedy-blind"), per_variant.get("greedy-objective")
            summary: dict[str, Any] = {}
            if blind and aware:
                saved = [100.0 * (b["carbon_kg"] - a["carbon_kg"]) / b["carbon_kg"] for a, b in zip(aware["runs"], blind["runs"], strict=True)]
                summary["carbon_saved_vs_blind_pct"] = float(np.mean(saved))
                summary["success_aware_pct"] = aware["mean"]["success_rate_pct"]
                summary["success_blind_pct"] = blind["mean"]["success_rate_pct"]
            results[scenario] = {"variants": per_variant, "carbon_aware_vs_blind": summary}
    return results


def print_tables(results: dict[str, Any], console: Console) -> dict[str, Any]:
    verdicts: dict[str, Any] = {}
    for scenario, doc in results.items():
        seeds = len(next(iter(doc["variants"].values()))["runs"])
        table = Table(title=f"{scenario}: mean over {seeds} seed(s)")
        for col in ("variant", "pend@peak %", "online %", "util %", "success %", "P99 ms", "carbon kg", "vs kube",
                    "cost", "vs kube", "batch min", "misses", "burst", "wall s"):
            table.add_column(col, justify="left" if col == "variant" else "right")

        def f(v: Any, d: int = 1) -> str:
            return "-" if v is None else f"{v:,.{d}f}"

        for variant, vdoc in doc["variants"].items():
            m = vdoc["mean"]
            table.add_row(variant, f(m["pending_at_peak_pct"], 2), f(m["pending_at_peak_online_pct"], 2), f(m["utilization_pct"]),
                          f(m["success_rate_pct"], 3), f(m["p99_latency_ms"], 0), f(m["carbon_kg"]),
                          f(m.get("carbon_vs_baseline_pct")) + " %", f(m["cost"], 0), f(m.get("cost_vs_baseline_pct")) + " %",
                          f(m["batch_completion_min"]), f(m["deadline_misses"]), f(m["burst_pods"], 0), f(m["wall_s"]))
        console.print(table)
        s = doc["carbon_aware_vs_blind"]
        if s:
            console.print(f"  carbon saved by greedy-objective vs its carbon-blind run: {s['carbon_saved_vs_blind_pct']:.1f} % "
                          f"(success {f(s['success_aware_pct'], 3)} % vs {f(s['success_blind_pct'], 3)} %)")
        if scenario == "bank":
            for variant in ("greedy-objective", "best-fit", "iro-frag"):
                if variant not in doc["variants"]:
                    continue
                m = doc["variants"][variant]["mean"]
                checks = {}
                for key, (op, target) in TARGETS.items():
                    value = m.get(key)
                    ok = value is not None and (value <= target if op == "<=" else value >= target)
                    checks[key] = {"value": value, "target": f"{op} {target:g}", "pass": bool(ok)}
                verdicts[variant] = checks
                console.print(f"  bank targets, {variant}: " + ", ".join(
                    f"{k} {f(c['value'], 2)} {c['target']} {'PASS' if c['pass'] else 'SHORT'}" for k, c in checks.items()))
    return verdicts


DEFAULT_SCENARIOS, DEFAULT_SEEDS = "bank,edge-iot,promo-surge", "1-3"
#: ``--quick``: bank, seed 1, one promotion day (24 h), for the flags not given.
QUICK_SCENARIOS, QUICK_SEEDS, QUICK_HOURS = "bank", "1", 24.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, every value checked before any work (exit 2 naming the flag)."""
    parser = argparse.ArgumentParser(description="Scenarios x solvers in the simulator.")
    parser.add_argument("--scenarios", default=None, help=f"comma list (default {DEFAULT_SCENARIOS}; --quick bank)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"subset of {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", default=None, help=f"N, N-M or a comma list (default {DEFAULT_SEEDS}; --quick 1)")
    parser.add_argument("--hours", type=float, default=None,
                        help="simulated hours (default: each scenario's; --quick 24)")
    parser.add_argument("--quick", action="store_true",
                        help="bank only, seed 1, one promotion day (flags given explicitly still apply)")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    usage_errors(parser, lambda: check_values(args))
    return args


def check_values(args: argparse.Namespace) -> None:
    """The flags' values read in place; a UsageError names the flag."""
    from iro_fed.sim.scenarios import SCENARIOS

    quick = args.quick
    args.scenarios = check_names("--scenarios", args.scenarios or (QUICK_SCENARIOS if quick else DEFAULT_SCENARIOS),
                                 tuple(SCENARIOS), "scenario")
    args.variants = check_names("--variants", args.variants, tuple(VARIANTS), "variant")
    args.seeds = parse_seeds(args.seeds if args.seeds is not None else (QUICK_SEEDS if quick else DEFAULT_SEEDS))
    if args.hours is not None:
        check_hours("--hours", args.hours)
    elif quick:
        args.hours = QUICK_HOURS
    # One promotion day when the run reaches it (11:00-19:00 UTC from the default midnight start); a
    # shorter quick run has none, which simulate() refuses to be told otherwise.
    args.extra = {"bank": {"promo_day": 0 if args.hours is None or args.hours > 11 else -1}} if quick else {}
    args.out = check_output_file("--out", args.out)  # a bad --out fails now, not after the run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 170)
    scenarios, variants, seeds, hours, extra = args.scenarios, args.variants, args.seeds, args.hours, args.extra
    start = time.perf_counter()
    results = run(scenarios, variants, seeds, hours, extra, console)
    verdicts = print_tables(results, console)
    machine = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
               "processor": platform.processor() or platform.machine()}
    console.print(f"machine: {machine['platform']}, {machine['cpus']} CPUs; total {time.perf_counter() - start:.0f} s")
    doc = {"created": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine, "seeds": seeds,
           "hours": hours, "quick": args.quick, "results": results, "bank_targets": verdicts}
    write_json(args.out, doc)
    console.print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
