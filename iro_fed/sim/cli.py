"""``iro simulate``: run a scenario with a solver, print the totals, write the report.

    iro simulate --scenario bank --solver greedy-objective --seed 1 --hours 24 \
        --set promo_day=0 --out report.json --plot timeline.png
    iro simulate --scenario bank --solver kube-default --plain      # the plain-Kubernetes baseline

Exit status 2 (with a message naming it) for an unknown scenario, solver or setting.
"""

from __future__ import annotations

import argparse
from typing import Any

REPORT_KEYS = (
    "score", "pending_pct", "utilization_pct", "success_rate_pct", "p99_latency_ms", "cost", "carbon_kg",
    "batch_completion_min", "deadline_misses", "burst_pods",
)


def register(sub: Any) -> None:
    """Add ``simulate`` to the ``iro`` subcommands."""
    p = sub.add_parser("simulate", help="run a cross-domain scenario in the simulator and write a report")
    p.add_argument("--scenario", required=True, metavar="NAME", help="bank, edge-iot, promo-surge or openb")
    p.add_argument("--solver", required=True, metavar="NAME", help="registered solver (see `iro solvers`)")
    p.add_argument("--seed", type=int, default=0, help="scenario and solver seed (default 0)")
    p.add_argument("--hours", type=float, default=None, help="simulated hours (default: the scenario's)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="scenario parameter or engine setting (e.g. promo_day=0, deferral=none); repeat for several")
    p.add_argument("--plain", action="store_true",
                   help="plain-Kubernetes engine settings (no deferral, consolidation or make-room), as for the kube-default baseline")
    p.add_argument("--solver-set", action="append", metavar="KEY=VALUE", help="solver setting; repeat for several")
    p.add_argument("--out", metavar="FILE", help="write the JSON report here")
    p.add_argument("--plot", metavar="PNG", help="write a timeline plot here")
    p.set_defaults(func=cmd_simulate)


def _pairs(pairs: list[str] | None, flag: str) -> dict[str, str]:
    from iro_fed.cli import split_pairs

    return {key: value.strip() for key, value in split_pairs(pairs, flag)}


def cmd_simulate(args: argparse.Namespace) -> int:
    import solvers
    from iro_fed.cli import EXIT_OK, UsageError, _console, _parse_settings
    from iro_fed.problem_io import write_json_atomic
    from iro_fed.sim import simulate
    from iro_fed.sim.engine import SimConfigError
    from iro_fed.sim.scenarios import SCENARIOS
    from iro_fed.sim.signals import SignalFormatError

    if args.scenario not in SCENARIOS:
        raise UsageError(f"--scenario: unknown scenario {args.scenario!r} (known: {', '.join(SCENARIOS)})")
    if args.solver not in solvers.registered():
        raise UsageError(f"--solver: unknown solver {args.solver!r} (registered: {', '.join(solvers.registered())})")
    if args.hours is not None and args.hours <= 0:
        raise UsageError(f"--hours: must be > 0, got {args.hours:g}")
    if args.seed < 0:
        raise UsageError(f"--seed: must be >= 0, got {args.seed}")
    settings = _pairs(args.set, "--set")
    if args.plain:
        from iro_fed.sim import PLAIN_KUBERNETES

        settings = {**PLAIN_KUBERNETES, **settings}
    solver_settings = _parse_settings(args.solver_set or [], args.solver) if args.solver_set else {}
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=_console(stderr=True), transient=True)
    with progress:
        task = progress.add_task(f"{args.scenario} / {args.solver}", total=None)

        def tick(done: int, total: int) -> None:
            if done % 30 == 0 or done == total:
                progress.update(task, completed=done, total=total)

        try:
            result = simulate(args.scenario, args.solver, seed=args.seed, hours=args.hours, settings=settings,
                              solver_settings=solver_settings, progress=tick)
        except (SimConfigError, SignalFormatError) as exc:
            raise UsageError(str(exc)) from exc
    console = _console()
    console.print(totals_table(result.totals, f"{args.scenario} with {args.solver}, seed {args.seed}, "
                                              f"{result.totals['hours']:g} h"))
    if args.out:
        write_json_atomic(args.out, result.report())
        console.print(f"report written to {args.out}")
    if args.plot:
        timeline_plot(result.series, args.plot, title=f"{args.scenario} / {args.solver} / seed {args.seed}")
        console.print(f"plot written to {args.plot}")
    return EXIT_OK


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{digits}f}"


def totals_table(totals: dict[str, Any], title: str) -> Any:
    """A rich table of a run's totals (the report's fixed keys and a few more)."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("score (mean R)", _fmt(totals["score"], 4)),
        ("pending % of ready pods", _fmt(totals["pending_pct"])),
        ("pending % at peak", _fmt(totals["pending_at_peak_pct"])),
        ("mean wait of pending pods, min", _fmt(totals["mean_pending_min"])),
        ("utilization % of powered nodes", _fmt(totals["utilization_pct"])),
        ("request success %", _fmt(totals["success_rate_pct"], 4)),
        ("P99 latency ms", _fmt(totals["p99_latency_ms"], 0)),
        ("cost", _fmt(totals["cost"])),
        ("carbon kg CO2", _fmt(totals["carbon_kg"])),
        ("energy kWh (IT)", _fmt(totals["energy_kwh"])),
        ("batch completion min (mean)", _fmt(totals["batch_completion_min"], 1)),
        ("batch deadline misses", _fmt(totals["deadline_misses"])),
        ("batch jobs deferred for carbon", _fmt(totals["deferred_pods"])),
        ("pods burst to the cloud", _fmt(totals["burst_pods"])),
        ("decisions / solver calls", f"{totals['decisions']:,} / {totals['solver_calls']:,}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def timeline_plot(series: dict[str, list], path: str, title: str) -> None:
    """Traffic and success, pods and nodes, carbon intensity and emissions over time."""
    from iro_fed.plots import _pyplot

    plt = _pyplot()
    import numpy as np

    t = np.array(series["t_min"]) / 60.0

    def arr(name: str) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in series[name]], dtype=float)

    fig, axes = plt.subplots(3, 1, figsize=(9, 8), dpi=110, sharex=True)
    ax = axes[0]
    ax.plot(t, arr("requests_per_s"), color="tab:blue", lw=1, label="requests/s")
    ax.set_ylabel("requests/s")
    ax2 = ax.twinx()
    ax2.plot(t, arr("success_rate_pct"), color="tab:green", lw=1, label="success %")
    ax2.set_ylabel("success %")
    ax.set_title(title)
    ax = axes[1]
    ax.plot(t, arr("running"), lw=1, label="running pods")
    ax.plot(t, arr("pending"), lw=1, label="pending pods", color="tab:red")
    ax.plot(t, arr("powered_nodes"), lw=1, label="powered nodes", color="tab:gray")
    ax.set_ylabel("count")
    ax.legend(loc="upper left", fontsize=8)
    ax = axes[2]
    for key in series:
        if key.startswith("carbon_intensity."):
            ax.plot(t, arr(key), lw=1, label=key.split(".", 1)[1])
    ax.set_ylabel("gCO2/kWh")
    ax.set_xlabel("hours")
    ax.legend(loc="upper left", fontsize=8)
    ax2 = ax.twinx()
    ax2.plot(t, arr("carbon_g_per_hour") / 1000.0, color="black", lw=1, ls="--", label="emissions kg/h")
    ax2.set_ylabel("kg CO2 / h")
    fig.tight_layout()
    tmp = f"{path}.tmp.png"
    fig.savefig(tmp)
    plt.close(fig)
    import os

    os.replace(tmp, path)
