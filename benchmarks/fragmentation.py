"""Fragmentation benchmark: every policy on the openb pod lists, median unallocated GPU % at
100 % arrival over seeds, beside the FGD paper's published medians (shared/spec/fgd-replay.md).

    .venv/bin/python benchmarks/fragmentation.py                 # all policies, 5 lists, seeds 42-51
    .venv/bin/python benchmarks/fragmentation.py --seeds 42-44 --pod-lists default --policies fgd,iro-frag

Replays run in parallel worker processes (``--workers``, default: all cores). Prints a table
(ours vs paper, the gap, and our policy against FGD) with a last row that no policy can beat: the
least free GPU with which the share pods that arrived by 100 % fit onto cards
(``iro_fed.traces.bound``, an offline bin-packing optimum), writes JSON (``--out``) and a plot of the
median unallocated GPU % per list and policy (``--plot``). ``--floor`` adds the floor for every
policy, also one that leaves pods out on purpose, as a batch solver may (about 1-2 minutes per list
and seed).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_common import UsageError, check_int, check_names, check_output_file, usage_errors, write_json  # noqa: E402

from iro_fed.cli import check_distinct_outputs  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "alibaba-openb-2023"
POD_LISTS = ("default", "gpushare40", "multigpu50", "gpuspec10", "cpu250")
POLICIES = ("fgd-random", "fgd-dotprod", "fgd-clustering", "fgd-packing", "fgd-bestfit", "fgd", "iro-frag")
# Median unallocated GPU % at 100 % arrival over 10 seeds, from the paper (shared/spec/fgd-replay.md).
PAPER = {
    "default": {"fgd-random": 13.75, "fgd-dotprod": 9.45, "fgd-clustering": 8.42, "fgd-packing": 8.20, "fgd-bestfit": 7.09, "fgd": 4.77},
    "gpushare40": {"fgd-random": 15.04, "fgd-dotprod": 10.67, "fgd-clustering": 10.18, "fgd-packing": 10.20, "fgd-bestfit": 8.53, "fgd": 6.05},
    "multigpu50": {"fgd-random": 18.61, "fgd-dotprod": 5.25, "fgd-clustering": 4.36, "fgd-packing": 3.93, "fgd-bestfit": 4.43, "fgd": 2.91},
    "gpuspec10": {"fgd-random": 13.69, "fgd-dotprod": 9.75, "fgd-clustering": 8.06, "fgd-packing": 7.77, "fgd-bestfit": 6.89, "fgd": 5.30},
    "cpu250": {"fgd-random": 20.06, "fgd-dotprod": 16.22, "fgd-clustering": 12.48, "fgd-packing": 11.92, "fgd-bestfit": 8.71, "fgd": 6.80},
}
FIDELITY_POLICIES = ("fgd-bestfit", "fgd-dotprod", "fgd")
FIDELITY_TOLERANCE = 0.7


def _run(job: tuple[str, str, str, int]) -> dict[str, Any]:
    from iro_fed.replay import replay_trace
    from iro_fed.traces.openb import load_nodes, load_pods

    data, pod_list, policy, seed = job
    nodes = load_nodes(Path(data) / "openb_node_list_gpu_node.csv")
    pods = load_pods(Path(data) / f"openb_pod_list_{pod_list}.csv")
    result = replay_trace(nodes, pods, policy, seed)
    return {
        "pod_list": pod_list,
        "policy": policy,
        "seed": seed,
        "unallocated_gpu_pct_at_100": result.unallocated_gpu_pct_at_100,
        "frag_gpu_pct_at_100": result.frag_gpu_pct.get("100"),
        "failed_pods": result.failed_pods,
        "arrived_pods": result.arrived_pods,
        "replay_s": result.timing["replay_s"],
        "alloc_gpu_pct": result.alloc_gpu_pct,
    }


def _arrivals(data: str, pod_list: str, seed: int) -> tuple[list[Any], int]:
    """The replay's arrival sequence for one list and seed, and the cluster's GPU capacity."""
    from iro_fed.traces.openb import arrival_sequence, gpu_capacity, load_nodes, load_pods

    capacity = gpu_capacity(load_nodes(Path(data) / "openb_node_list_gpu_node.csv"))
    return arrival_sequence(load_pods(Path(data) / f"openb_pod_list_{pod_list}.csv"), seed, capacity), capacity


def _bound(job: tuple[str, str, int]) -> dict[str, Any]:
    """The offline share-packing lower bound (iro_fed/traces/bound.py) for one list and seed."""
    from iro_fed.traces.bound import share_packing_bound

    data, pod_list, seed = job
    bound = share_packing_bound(*_arrivals(data, pod_list, seed))
    return {"pod_list": pod_list, "seed": seed, "bound_pct": round(bound.unallocated_gpu_pct, 4), "optimal": bound.optimal}


def _floor(job: tuple[str, str, int]) -> dict[str, Any]:
    """The floor for every policy, also one that leaves pods out (iro_fed/traces/bound.py)."""
    from iro_fed.traces.bound import any_policy_bound

    data, pod_list, seed = job
    floor = any_policy_bound(*_arrivals(data, pod_list, seed))
    return {"pod_list": pod_list, "seed": seed, "floor_pct": round(floor.metric_pct, 4), "optimal": floor.optimal}


def _medians(rows: list[dict[str, Any]], key: str, pod_lists: list[str]) -> dict[str, float]:
    """Per pod list, the median of ``key`` over its rows (seeds); empty without rows."""
    if not rows:
        return {}
    return {pl: round(float(np.median([r[key] for r in rows if r["pod_list"] == pl])), 3) for pl in pod_lists}


def check_values(args: argparse.Namespace) -> None:
    """The lists and files read and checked in place, before any worker starts (a UsageError names
    the flag): an unknown policy or pod list raised in a worker, after the pool had started."""
    import solvers
    from iro_fed.cli import parse_seeds

    args.seeds = parse_seeds(args.seeds)
    known_lists = sorted(p.name.removeprefix("openb_pod_list_").removesuffix(".csv")
                         for p in args.data.glob("openb_pod_list_*.csv"))
    args.pod_lists = check_names("--pod-lists", args.pod_lists, known_lists, "pod list")
    online = [n for n, cls in solvers.registered().items() if issubclass(cls, solvers.OnlineSolver)]
    args.policies = check_names("--policies", args.policies, online, "online solver")
    check_int("--workers", args.workers, 1, 1024)
    cpsat = solvers.registered()["cpsat"].properties  # the bound rows solve with OR-Tools, as cpsat does
    if (args.floor or not args.no_bound) and not cpsat.installed():
        # the bound rows run after every replay: fail before them, not after
        if args.floor:
            raise UsageError(f"--floor: the floor row needs OR-Tools (pip install 'iro-fed[{cpsat.extra}]')")
        raise UsageError(f"the bound row (on by default) needs OR-Tools (pip install 'iro-fed[{cpsat.extra}]'); "
                         "give --no-bound to skip it")
    args.out = check_output_file("--out", args.out)
    if args.plot is not None:  # --plot "" is refused by the check, not taken as "no plot"
        args.plot = check_output_file("--plot", args.plot)
        check_distinct_outputs(("--out", str(args.out)), ("--plot", str(args.plot)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with the openb CSVs")
    parser.add_argument("--pod-lists", default=",".join(POD_LISTS), help="comma list of pod lists")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma list of online solvers")
    parser.add_argument("--seeds", default="42-51", help="seeds, e.g. 42-51 or 42,43")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-bound", action="store_true", help="skip the offline share-packing bound (needs OR-Tools)")
    parser.add_argument("--floor", action="store_true",
                        help="add the floor for every policy, also one that leaves pods out (slow: 1-2 min per list and seed)")
    # str, not type=Path: Path() drops a trailing '/', so --out newres/ wrote a file 'newres'
    parser.add_argument("--out", default=ROOT / "benchmarks" / "results" / "fragmentation.json")
    parser.add_argument("--plot", default=ROOT / "benchmarks" / "results" / "fragmentation.png")
    args = parser.parse_args(argv)
    console = Console(width=160)
    if not (args.data / "openb_node_list_gpu_node.csv").exists():
        console.print(f"[red]openb data not found under {args.data}[/red] (use --data)")
        return 2
    usage_errors(parser, lambda: check_values(args))
    pod_lists, policies, seeds = args.pod_lists, args.policies, args.seeds
    jobs = [(str(args.data), pl, pol, s) for pl in pod_lists for pol in policies for s in seeds]
    console.print(
        f"{len(jobs)} replays ({len(pod_lists)} pod lists x {len(policies)} policies x {len(seeds)} seeds) on "
        f"{args.workers} worker(s); {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    start = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        for i, run in enumerate(pool.map(_run, jobs), 1):
            runs.append(run)
            if i % max(1, len(jobs) // 20) == 0 or i == len(jobs):
                console.print(f"  {i}/{len(jobs)} replays done ({time.perf_counter() - start:.0f} s)", highlight=False)
        bounds = [] if args.no_bound else list(pool.map(_bound, [(str(args.data), pl, s) for pl in pod_lists for s in seeds]))
        floors = list(pool.map(_floor, [(str(args.data), pl, s) for pl in pod_lists for s in seeds])) if args.floor else []
    bound_medians = _medians(bounds, "bound_pct", pod_lists)
    floor_medians = _medians(floors, "floor_pct", pod_lists)
    medians: dict[str, dict[str, float]] = {}
    times: dict[str, float] = {}
    for pl in pod_lists:
        for pol in policies:
            values = [r["unallocated_gpu_pct_at_100"] for r in runs if r["pod_list"] == pl and r["policy"] == pol]
            if None in values:
                # A small cluster can have no arrival event within 99-101 %: no median to compare.
                raise SystemExit(f"fragmentation: {pol} on {pl} has no value at 100 % arrival for some seed "
                                 "(too few GPUs for the metric's neighbour rule); use a larger node list")
            medians.setdefault(pl, {})[pol] = round(float(np.median(values)), 3)
            if pl == "default":
                times[pol] = round(float(np.median([r["replay_s"] for r in runs if r["pod_list"] == pl and r["policy"] == pol])), 2)

    table = Table(title=f"Median unallocated GPU % at 100 % arrival, seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}): ours / paper (gap)")
    table.add_column("policy")
    for pl in pod_lists:
        table.add_column(pl, justify="right")
    table.add_column("s / replay (default)", justify="right")
    fidelity: dict[str, dict[str, float]] = {}
    for pol in policies:
        cells = []
        for pl in pod_lists:
            ours = medians[pl][pol]
            paper = PAPER.get(pl, {}).get(pol)
            if paper is None:
                cells.append(f"{ours:.2f}")
                continue
            gap = ours - paper
            fidelity.setdefault(pol, {})[pl] = round(gap, 3)
            flag = "" if pol not in FIDELITY_POLICIES or abs(gap) <= FIDELITY_TOLERANCE else " [red]!![/red]"
            cells.append(f"{ours:.2f} / {paper:.2f} ({gap:+.2f}){flag}")
        table.add_row(pol, *cells, f"{times.get(pol, float('nan')):.1f}")
    if bound_medians:
        table.add_row("[dim]bound: optimal share packing[/dim]", *(f"[dim]{bound_medians[pl]:.2f}[/dim]" for pl in pod_lists), "")
    if floor_medians:
        table.add_row("[dim]floor: any policy, pods left out[/dim]", *(f"[dim]{floor_medians[pl]:.2f}[/dim]" for pl in pod_lists), "")
    console.print(table)
    verdicts = []
    for pol in FIDELITY_POLICIES:
        if pol in fidelity:
            worst = max(abs(v) for v in fidelity[pol].values())
            verdicts.append(f"fidelity {pol}: worst gap {worst:.2f} points ({'PASS' if worst <= FIDELITY_TOLERANCE else 'MISS'} <= {FIDELITY_TOLERANCE})")
    if "iro-frag" in policies and "fgd" in policies:
        better = [pl for pl in pod_lists if medians[pl]["iro-frag"] < medians[pl]["fgd"]]
        verdicts.append(
            f"iro-frag below fgd on {len(better)}/{len(pod_lists)} lists: "
            + ", ".join(f"{pl} {medians[pl]['iro-frag']:.2f} vs {medians[pl]['fgd']:.2f}" for pl in pod_lists)
        )
        if "default" in medians:
            bound_note = (f"; no policy that places every share below {bound_medians['default']:.2f}, the share-packing bound"
                          if bound_medians else "")
            if floor_medians:
                bound_note += f"; no policy at all below {floor_medians['default']:.2f}"
            verdicts.append(f"iro-frag on default: {medians['default']['iro-frag']:.2f} (target <= 4.0{bound_note})")
    for v in verdicts:
        console.print(v)

    doc = {
        "seeds": seeds,
        "pod_lists": pod_lists,
        "policies": policies,
        "median_unallocated_gpu_pct_at_100": medians,
        "paper": {pl: PAPER.get(pl, {}) for pl in pod_lists},
        "gap_to_paper": fidelity,
        "share_packing_bound": {"median_pct": bound_medians, "runs": bounds},
        "any_policy_floor": {"median_pct": floor_medians, "runs": floors},
        "median_replay_s_default": times,
        "verdicts": verdicts,
        "machine": {"processor": platform.processor() or platform.machine(), "cores": os.cpu_count(), "python": platform.python_version()},
        "runs": [{k: v for k, v in r.items() if k != "alloc_gpu_pct"} for r in runs],
    }
    write_json(args.out, doc)
    console.print(f"wrote {args.out}")
    if args.plot:
        _plot(medians, pod_lists, policies, args.plot)
        console.print(f"wrote {args.plot}")
    return 0


def _plot(medians: dict[str, dict[str, float]], pod_lists: list[str], policies: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=120)
    width = 0.8 / max(len(policies), 1)
    x = np.arange(len(pod_lists))
    for i, pol in enumerate(policies):
        ax.bar(x + i * width, [medians[pl][pol] for pl in pod_lists], width, label=pol)
    ax.set_xticks(x + width * (len(policies) - 1) / 2, pod_lists)
    ax.set_ylabel("median unallocated GPU % at 100 % arrival")
    ax.set_title("Fragmentation on the openb pod lists (lower is better)")
    ax.grid(axis="y", alpha=0.3)
    top = max(max(medians[pl].values()) for pl in pod_lists)
    ax.set_ylim(0, top * 1.3)  # headroom for the legend
    ax.legend(fontsize=8, ncols=4, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
