#!/usr/bin/env python
"""Online decision throughput: decisions per second and latency per decision of the online solvers.

A decision is one full ``solver.decide(state, w)`` call (filter + score + select) for one pod
against a cluster of N synthetic nodes; pods arrive as a stream and each placed pod is put on the
cluster (``state.place``) before the next decision, as the scheduler extender, the replay and the
simulator do. Building the problem is not timed.

Data (``shared/data/alibaba-openb-2023``, the trace of "Beware of Fragmentation", ATC'23):

* node shapes (cpu_milli, memory_mib, gpu count, GPU model) are sampled with replacement from
  ``openb_node_list_gpu_node.csv`` and spread over three availability zones, an edge site
  (``NoSchedule`` taint) and a public-cloud domain (``PreferNoSchedule`` taint); each node starts
  0-60 % allocated on cpu / memory, with some GPU cards partly or fully used;
* pod shapes (cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos) are sampled from
  ``openb_pod_list_default.csv``; latency-sensitive pods get a user region and some a latency
  bound, a few tolerate the edge taint.

Targets (one process): >= 5,000 decisions/s with p99 <= 2 ms at 5,000 nodes, >= 1,000 decisions/s
at 20,000 nodes.

    .venv/bin/python benchmarks/decision_throughput.py                 # full run (make bench)
    .venv/bin/python benchmarks/decision_throughput.py --quick         # smoke run
    .venv/bin/python benchmarks/decision_throughput.py --profile greedy-objective@20000
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import gc
import os
import platform
import pstats
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

import iro_fed
import solvers
from iro_fed.cli import UsageError, check_int, check_names, check_output_file, check_seed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import write_json  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
OPENB = "alibaba-openb-2023"
NODE_CSV = "openb_node_list_gpu_node.csv"
POD_CSV = "openb_pod_list_default.csv"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "decision_throughput.json"

DEFAULT_NODES = (1000, 5000, 20000)
#: Largest cluster a run may build (in memory): a typo fails at once, not after allocating.
MAX_NODES = 1_000_000
DEFAULT_SOLVERS = ("kube-default", "best-fit", "greedy-objective")
DEFAULT_PODS = 2000
DEFAULT_WARMUP = 50
QUICK_NODES = (200,)
QUICK_PODS = 50
QUICK_WARMUP = 5

GPU_MILLI = 1000
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"

#: Targets per cluster size: minimum decisions/s and maximum p99 (ms, None = no bound).
TARGETS: dict[int, dict[str, float | None]] = {
    5000: {"min_decisions_per_s": 5000.0, "max_p99_ms": 2.0},
    20000: {"min_decisions_per_s": 1000.0, "max_p99_ms": None},
}
GROWTH_FROM, GROWTH_TO = 5000, 20000

# name, kind, share of nodes, zone label, region label, carbon gCO2/kWh, prices per hour, PUE
DOMAINS: tuple[dict[str, Any], ...] = (
    {"name": "az-1", "kind": "zone", "share": 0.27, "region": "dc-eu", "carbon_zone": "DE", "carbon_intensity": 313.0,
     "price_per_hour": {"cpu": 0.031, "memory": 0.004, "gpu": 2.5}, "pue": 1.2},
    {"name": "az-2", "kind": "zone", "share": 0.27, "region": "dc-eu", "carbon_zone": "DE", "carbon_intensity": 313.0,
     "price_per_hour": {"cpu": 0.031, "memory": 0.004, "gpu": 2.5}, "pue": 1.2},
    {"name": "az-3", "kind": "zone", "share": 0.26, "region": "dc-eu", "carbon_zone": "FR", "carbon_intensity": 56.0,
     "price_per_hour": {"cpu": 0.033, "memory": 0.0045, "gpu": 2.6}, "pue": 1.25},
    {"name": "edge-1", "kind": "edge", "share": 0.05, "region": "edge", "carbon_zone": "DE", "carbon_intensity": 313.0,
     "price_per_hour": {"cpu": 0.05, "memory": 0.006, "gpu": 3.0}, "pue": 1.5},
    {"name": "cloud-1", "kind": "cloud", "share": 0.15, "region": "cloud-us", "carbon_zone": "NO", "carbon_intensity": 30.0,
     "price_per_hour": {"cpu": 0.045, "memory": 0.005, "gpu": 3.2}, "pue": 1.1},
)
LATENCY_MS = {
    "users-eu": {"az-1": 8.0, "az-2": 10.0, "az-3": 12.0, "edge-1": 3.0, "cloud-1": 35.0},
    "users-us": {"az-1": 95.0, "az-2": 97.0, "az-3": 99.0, "edge-1": 110.0, "cloud-1": 22.0},
}
EDGE_TAINT = {"key": "site", "value": "edge", "effect": "NoSchedule"}
CLOUD_TAINT = {"key": "burst", "value": "true", "effect": "PreferNoSchedule"}
EDGE_TOLERATION = {"key": "site", "operator": "Equal", "value": "edge", "effect": "NoSchedule"}
MAX_ALLOCATED = 0.6  # nodes start with U(0, MAX_ALLOCATED) of cpu / memory allocated
TIGHT_LATENCY_MS = 25.0  # eu users: zones + edge; us users: the cloud domain only
SHARE_LATENCY_BOUND = 0.2  # share of online pods with a latency bound
SHARE_TOLERATE_EDGE = 0.1  # share of pods tolerating the edge taint


# --- data ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shapes:
    """Columns of a CSV of the openb trace, as numpy arrays."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))


def read_csv(path: Path, int_columns: Sequence[str], str_columns: Sequence[str]) -> Shapes:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"{path}: no rows")
    missing = [c for c in (*int_columns, *str_columns) if c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (header: {', '.join(rows[0])})")
    cols: dict[str, np.ndarray] = {c: np.array([int(float(r[c] or 0)) for r in rows], dtype=np.int64) for c in int_columns}
    cols.update({c: np.array([r[c] or "" for r in rows], dtype=object) for c in str_columns})
    return Shapes(cols)


def load_shapes(data: Path) -> tuple[Shapes, Shapes]:
    folder = data / OPENB
    nodes = read_csv(folder / NODE_CSV, ("cpu_milli", "memory_mib", "gpu"), ("model",))
    pods = read_csv(folder / POD_CSV, ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"), ("gpu_spec", "qos"))
    return nodes, pods


# --- synthetic problem -----------------------------------------------------------------------


def make_nodes(shapes: Shapes, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` nodes with shapes sampled from the node list, partly allocated, over the domains."""
    rng = np.random.default_rng([seed, 1, n])
    rows = rng.integers(0, len(shapes), size=n)
    shares = np.array([d["share"] for d in DOMAINS])
    domain_of = rng.choice(len(DOMAINS), size=n, p=shares / shares.sum())
    used = rng.uniform(0.0, MAX_ALLOCATED, size=(n, 2))
    c = shapes.columns
    out = []
    for i in range(n):
        r = int(rows[i])
        dom = DOMAINS[int(domain_of[i])]
        cpu, mem, gpus = int(c["cpu_milli"][r]), int(c["memory_mib"][r]), int(c["gpu"][r])
        node: dict[str, Any] = {
            "name": f"node-{i:05d}",
            "domain": dom["name"],
            "capacity": {"cpu": cpu, "memory": mem},
            "allocated": {"cpu": int(cpu * used[i, 0]) // 100 * 100, "memory": int(mem * used[i, 1]) // 256 * 256},
            "labels": {ZONE_LABEL: dom["name"], REGION_LABEL: dom["region"]},
        }
        if gpus > 0:
            # Each card is in use with the node's cpu share as probability: half of those whole
            # (0 milli free), half shared (100..900 milli taken).
            busy = rng.random(gpus) < used[i, 0]
            whole = rng.random(gpus) < 0.5
            taken = rng.integers(2, 19, size=gpus) * 50
            free = np.where(busy, np.where(whole, 0, GPU_MILLI - taken), GPU_MILLI)
            node.update(gpus=gpus, gpu_model=str(c["model"][r]), gpu_free_milli=[int(v) for v in free])
        if dom["kind"] == "edge":
            node["taints"] = [dict(EDGE_TAINT)]
        elif dom["kind"] == "cloud":
            node["taints"] = [dict(CLOUD_TAINT)]
        out.append(node)
    return out


def pod_gpu(num_gpu: int, gpu_milli: int, spec: str) -> dict[str, Any] | None:
    """The ``gpu`` request of an openb pod: none, a share of one card, or k whole cards."""
    if num_gpu <= 0:
        return None
    models = [m for m in spec.split("|") if m] if spec else []
    if num_gpu == 1:
        milli = min(gpu_milli, GPU_MILLI) if gpu_milli > 0 else GPU_MILLI
        gpu: dict[str, Any] = {"count": 1, "milli": milli}
    else:
        gpu = {"count": num_gpu, "milli": GPU_MILLI}
    if models:
        gpu["models"] = models
    return gpu


def make_pods(shapes: Shapes, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` pods sampled from the pod list (the same list for every cluster size)."""
    rng = np.random.default_rng([seed, 2])
    rows = rng.integers(0, len(shapes), size=count)
    c = shapes.columns
    out = []
    for i in range(count):
        r = int(rows[i])
        pod: dict[str, Any] = {
            "name": f"bench/pod-{i:06d}",
            "requests": {"cpu": int(c["cpu_milli"][r]), "memory": int(c["memory_mib"][r])},
        }
        gpu = pod_gpu(int(c["num_gpu"][r]), int(c["gpu_milli"][r]), str(c["gpu_spec"][r]))
        if gpu is not None:
            pod["gpu"] = gpu
        if str(c["qos"][r]) == "BE":
            pod.update({"class": "batch", "priority": 0})
        else:  # LS, Burstable, Guaranteed: a latency-bound service
            region = "users-eu" if rng.random() < 0.7 else "users-us"
            pod.update({"class": "online", "priority": 100, "user_region": region})
            if rng.random() < SHARE_LATENCY_BOUND:
                pod["max_latency_ms"] = TIGHT_LATENCY_MS
        if rng.random() < SHARE_TOLERATE_EDGE:
            pod["tolerations"] = [dict(EDGE_TOLERATION)]
        out.append(pod)
    return out


def make_document(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, Any]:
    domains = [{k: v for k, v in d.items() if k not in ("share", "region")} for d in DOMAINS]
    return {
        "resources": ["cpu", "memory"],
        "domains": domains,
        "latency_ms": LATENCY_MS,
        "nodes": nodes,
        "workloads": pods,
    }


def constraint_shape(pod: dict[str, Any]) -> tuple:
    """What decides a pod's static filters besides resources (one priming decision per shape)."""
    gpu = pod.get("gpu") or {}
    return (
        pod.get("user_region", ""),
        pod.get("max_latency_ms"),
        bool(pod.get("tolerations")),
        tuple(gpu.get("models", ())),
        gpu.get("count", 0),
        gpu.get("count", 0) == 1 and gpu.get("milli", GPU_MILLI) < GPU_MILLI,
    )


# --- measurement -----------------------------------------------------------------------------


@dataclass
class Result:
    solver: str
    nodes: int
    decisions: int
    total_s: float
    decisions_per_s: float
    mean_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    placed: int
    failed: int
    cpu_allocated_pct_end: float
    gpu_used_pct_end: float
    example_failure: str | None = None
    verdict: str = "n/a"
    shortfalls: list[str] = field(default_factory=list)


@dataclass
class Built:
    nodes: int
    problem: iro_fed.Problem
    build_s: float
    prime_s: float
    shapes: int


def build(node_shapes: Shapes, pod_docs: list[dict[str, Any]], n: int, seed: int, prime: bool) -> Built:
    """The problem with ``n`` nodes; with ``prime``, one untimed decision per pod constraint
    shape so that per-problem caches are warm for every measured solver alike."""
    t0 = time.perf_counter()
    problem = iro_fed.problem_from_dict(make_document(make_nodes(node_shapes, n, seed), pod_docs))
    build_s = time.perf_counter() - t0
    reps: dict[tuple, int] = {}
    for w, pod in enumerate(pod_docs):
        reps.setdefault(constraint_shape(pod), w)
    t0 = time.perf_counter()
    if prime:
        scratch = solvers.make("first-fit", seed=0)
        scratch.reset(problem)
        state = iro_fed.ClusterState(problem)
        for w in reps.values():
            scratch.decide(state, w)
    return Built(n, problem, build_s, time.perf_counter() - t0, len(reps))


def measure(
    built: Built, solver_name: str, warmup: int, pods: int, seed: int, profiler: cProfile.Profile | None = None
) -> Result:
    """Warm up on the first ``warmup`` pods, then time ``pods`` decisions one by one."""
    problem = built.problem
    solver = solvers.make(solver_name, seed=seed)
    solver.reset(problem)
    state = iro_fed.ClusterState(problem)
    for w in range(warmup):
        d = solver.decide(state, w)
        if d.node >= 0:
            state.place(w, d.node, d.cards)
    times = np.empty(pods, dtype=np.int64)
    placed = failed = 0
    example: str | None = None
    clock = time.perf_counter_ns
    gc.collect()
    for i in range(pods):
        w = warmup + i
        if profiler is not None:
            profiler.enable()
        t0 = clock()
        d = solver.decide(state, w)
        t1 = clock()
        if profiler is not None:
            profiler.disable()
        times[i] = t1 - t0
        if d.node >= 0:
            state.place(w, d.node, d.cards)
            placed += 1
        else:
            failed += 1
            if example is None:
                example = d.reason
    ms = times / 1e6
    total_s = float(times.sum()) / 1e9
    cpu = problem.resource_index["cpu"]
    gpu_cap = float(problem.gpu_count.sum()) * GPU_MILLI
    gpu_free = float(np.clip(state.gpu_free, 0, None).sum())
    return Result(
        solver=solver_name,
        nodes=problem.num_nodes,
        decisions=pods,
        total_s=total_s,
        decisions_per_s=pods / total_s if total_s > 0 else float("inf"),
        mean_ms=float(ms.mean()),
        p50_ms=float(np.percentile(ms, 50)),
        p99_ms=float(np.percentile(ms, 99)),
        max_ms=float(ms.max()),
        placed=placed,
        failed=failed,
        cpu_allocated_pct_end=100.0 * float(state.allocated[:, cpu].sum() / problem.capacity[:, cpu].sum()),
        gpu_used_pct_end=100.0 * (1.0 - gpu_free / gpu_cap) if gpu_cap else 0.0,
        example_failure=example,
    )


def judge(result: Result) -> None:
    """PASS / SHORT against the target for the result's cluster size (n/a for other sizes)."""
    target = TARGETS.get(result.nodes)
    if target is None:
        return
    short = []
    rate = target["min_decisions_per_s"]
    if rate is not None and result.decisions_per_s < rate:
        short.append(f"{result.decisions_per_s:,.0f}/s < {rate:,.0f}/s")
    p99 = target["max_p99_ms"]
    if p99 is not None and result.p99_ms > p99:
        short.append(f"p99 {result.p99_ms:.2f} ms > {p99:g} ms")
    result.shortfalls = short
    result.verdict = "SHORT" if short else "PASS"


def growth(results: list[Result]) -> dict[str, dict[str, float]]:
    """Per solver, time per decision at the larger size over the smaller one (5k -> 20k when
    both ran, else the two largest sizes)."""
    sizes = sorted({r.nodes for r in results})
    if GROWTH_FROM in sizes and GROWTH_TO in sizes:
        lo, hi = GROWTH_FROM, GROWTH_TO
    elif len(sizes) >= 2:
        lo, hi = sizes[-2], sizes[-1]
    else:
        return {}
    by = {(r.solver, r.nodes): r for r in results}
    out = {}
    for solver in dict.fromkeys(r.solver for r in results):
        a, b = by.get((solver, lo)), by.get((solver, hi))
        if a and b:
            out[solver] = {
                "from_nodes": lo,
                "to_nodes": hi,
                "node_ratio": hi / lo,
                "mean_ms_from": a.mean_ms,
                "mean_ms_to": b.mean_ms,
                "ratio": b.mean_ms / a.mean_ms,
                "p99_ratio": b.p99_ms / a.p99_ms,
            }
    return out


# --- machine ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "numpy": np.__version__,
        "iro_fed": iro_fed.__version__,
        "platform": platform.platform(),
    }


# --- profile ---------------------------------------------------------------------------------


def _short_path(path: str) -> str:
    for root in ("site-packages" + os.sep, str(REPO) + os.sep):
        if root in path:
            return path.split(root, 1)[1]
    return path


def profile_rows(profiler: cProfile.Profile, decisions: int, top: int = 15) -> list[dict[str, Any]]:
    stats = pstats.Stats(profiler)
    rows = []
    for (path, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = name if path == "~" else f"{_short_path(path)}:{line}({name})"
        rows.append({
            "function": where,
            "ncalls": int(ncalls),
            "tottime_s": float(tottime),
            "cumtime_s": float(cumtime),
            "cum_us_per_decision": 1e6 * float(cumtime) / max(decisions, 1),
        })
    rows.sort(key=lambda r: r["cumtime_s"], reverse=True)
    return rows[:top]


def pick_profile_target(spec: str, results: list[Result], default_solver: str, default_nodes: int) -> tuple[str, int]:
    """``SOLVER@NODES``, or ``auto``: the configuration furthest short of its target, else the
    slowest one at the largest size."""
    if spec != "auto":
        solver, _, nodes = spec.partition("@")
        return solver or default_solver, int(nodes) if nodes else default_nodes
    short = [r for r in results if r.verdict == "SHORT"]
    if short:
        worst = max(short, key=lambda r: TARGETS[r.nodes]["min_decisions_per_s"] / r.decisions_per_s * r.p99_ms)
        return worst.solver, worst.nodes
    if results:
        largest = max(r.nodes for r in results)
        slowest = max((r for r in results if r.nodes == largest), key=lambda r: r.mean_ms)
        return slowest.solver, slowest.nodes
    return default_solver, default_nodes


# --- output ----------------------------------------------------------------------------------


def machine_line(m: dict[str, Any]) -> str:
    return (
        f"machine: {m['cpu_model']}, {m['logical_cores']} logical cores ({m['usable_cores']} usable), "
        f"Python {m['python']} ({m['python_implementation']}), numpy {m['numpy']}, iro_fed {m['iro_fed']}"
    )


def results_table(results: list[Result], builds: dict[int, Built]) -> Table:
    t = Table(title="Online decisions: one pod at a time (decide = filter + score + select)")
    for col in ("solver", "nodes", "decisions/s", "mean ms", "p50 ms", "p99 ms", "max ms", "placed", "failed", "target"):
        t.add_column(col, justify="left" if col in ("solver", "target") else "right")
    for r in results:
        verdict = {"PASS": "[green]PASS[/green]", "SHORT": "[red]SHORT[/red]"}.get(r.verdict, "[dim]n/a[/dim]")
        if r.shortfalls:
            verdict += f" ({'; '.join(r.shortfalls)})"
        t.add_row(
            r.solver, f"{r.nodes:,}", f"{r.decisions_per_s:,.0f}", f"{r.mean_ms:.3f}", f"{r.p50_ms:.3f}",
            f"{r.p99_ms:.3f}", f"{r.max_ms:.3f}", str(r.placed), str(r.failed), verdict,
        )
    return t


def growth_table(g: dict[str, dict[str, float]]) -> Table:
    first = next(iter(g.values()))
    lo, hi = int(first["from_nodes"]), int(first["to_nodes"])
    t = Table(title=f"Cost growth {lo:,} -> {hi:,} nodes (x{hi / lo:g} nodes; time per decision ratio)")
    for col in ("solver", f"mean ms @{lo:,}", f"mean ms @{hi:,}", "ratio", "p99 ratio"):
        t.add_column(col, justify="left" if col == "solver" else "right")
    for solver, v in g.items():
        t.add_row(solver, f"{v['mean_ms_from']:.3f}", f"{v['mean_ms_to']:.3f}", f"{v['ratio']:.2f}", f"{v['p99_ratio']:.2f}")
    return t


def profile_table(rows: list[dict[str, Any]], solver: str, nodes: int, decisions: int) -> Table:
    t = Table(title=f"cProfile: {solver} at {nodes:,} nodes, {decisions} decisions, top {len(rows)} by cumulative time")
    for col in ("cumtime s", "us/decision", "tottime s", "ncalls", "function"):
        t.add_column(col, justify="left" if col == "function" else "right")
    for r in rows:
        t.add_row(
            f"{r['cumtime_s']:.3f}", f"{r['cum_us_per_decision']:.1f}", f"{r['tottime_s']:.3f}", str(r["ncalls"]),
            r["function"],
        )
    return t


# --- command line ----------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or any(not 0 < v <= MAX_NODES for v in values):
        raise argparse.ArgumentTypeError(f"expected integers from 1 to {MAX_NODES:,}, got {text!r}")
    return values


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="decision_throughput",
        description="Online decisions per second and latency per decision of online solvers on synthetic "
        "clusters with node and pod shapes from the Alibaba openb 2023 trace.",
    )
    ap.add_argument("--nodes", type=int_list, default=None, help="cluster sizes, comma-separated (default 1000,5000,20000)")
    ap.add_argument("--pods", type=int, default=None, help=f"decisions measured per configuration (default {DEFAULT_PODS})")
    ap.add_argument("--warmup", type=int, default=None, help=f"untimed decisions before measuring (default {DEFAULT_WARMUP})")
    ap.add_argument("--solvers", default=None, help=f"solver names, comma-separated (default {','.join(DEFAULT_SOLVERS)})")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic cluster and pod stream (default 0)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"shared data folder (default {DEFAULT_DATA})")
    # a str, not type=Path: Path() drops a trailing '/', so --out newres/ wrote a file 'newres'
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT.relative_to(REPO)})")
    ap.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_NODES[0]} nodes, {QUICK_PODS} pods unless given")
    ap.add_argument("--no-prime", action="store_true", help="skip the untimed decision per pod constraint shape (cold caches)")
    ap.add_argument(
        "--profile", nargs="?", const="auto", default=None, metavar="SOLVER@NODES",
        help="after the run, cProfile one configuration and print the top 15 functions by cumulative time "
        "(default: the configuration furthest short of its target, else the slowest at the largest size)",
    )
    return ap


def online_solvers() -> list[str]:
    return [n for n, cls in solvers.registered().items() if issubclass(cls, solvers.OnlineSolver)]


def check_profile(spec: str | None) -> None:
    """``--profile``: ``auto`` or ``[SOLVER][@NODES]`` with an online solver and NODES >= 1 (an
    offline solver failed with AttributeError, a bad NODES with ValueError, both after the run)."""
    if spec is None or spec == "auto":
        return
    solver, _, nodes = spec.partition("@")
    if solver and solver not in online_solvers():
        raise UsageError(f"--profile: {solver!r} is not a registered online solver (online: {', '.join(online_solvers())})")
    if nodes:
        try:
            count = int(nodes)
        except ValueError:
            raise UsageError(f"--profile: expected SOLVER@NODES with an integer NODES, got {spec!r}") from None
        check_int("--profile", count, 1, MAX_NODES)


def check_values(args: argparse.Namespace) -> None:
    """Every value checked and read in place before any work (UsageError naming the flag);
    --quick's values only where the flag was not given."""
    args.nodes = args.nodes or list(QUICK_NODES if args.quick else DEFAULT_NODES)
    args.pods = args.pods if args.pods is not None else (QUICK_PODS if args.quick else DEFAULT_PODS)
    args.warmup = args.warmup if args.warmup is not None else (QUICK_WARMUP if args.quick else DEFAULT_WARMUP)
    check_int("--pods", args.pods, 1, 10_000_000)
    check_int("--warmup", args.warmup, 0, 10_000_000)
    args.solvers = check_names("--solvers", args.solvers or ",".join(DEFAULT_SOLVERS), list(solvers.registered()))
    offline = [s for s in args.solvers if s not in online_solvers()]
    if offline:
        raise UsageError(f"--solvers: not online solvers (no per-pod decide): {', '.join(offline)}")
    check_seed("--seed", args.seed)
    check_profile(args.profile)
    args.out = check_output_file("--out", args.out)  # a bad --out fails now, not after the run


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    try:
        check_values(args)
    except UsageError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    nodes, pods, warmup, names = args.nodes, args.pods, args.warmup, args.solvers
    try:
        node_shapes, pod_shapes = load_shapes(args.data)
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/red] cannot read the openb trace under {args.data}: {exc}")
        return 2

    info = machine()
    console.print(machine_line(info))
    console.print(
        f"data: {args.data / OPENB} ({len(node_shapes)} node shapes, {len(pod_shapes)} pod shapes); "
        f"{pods} decisions after {warmup} warm-up per configuration, seed {args.seed}"
    )
    pod_docs = make_pods(pod_shapes, warmup + pods, args.seed)

    results: list[Result] = []
    builds: dict[int, Built] = {}
    for n in nodes:
        built = build(node_shapes, pod_docs, n, args.seed, prime=not args.no_prime)
        builds[n] = built
        console.print(
            f"[dim]{n:,} nodes: problem built in {built.build_s:.2f} s (not timed), "
            f"{built.shapes} pod constraint shapes primed in {built.prime_s:.2f} s[/dim]"
        )
        for name in names:
            r = measure(built, name, warmup, pods, 0)
            judge(r)
            results.append(r)
            console.print(
                f"[dim]  {name:<18} {r.decisions_per_s:>9,.0f}/s  p99 {r.p99_ms:.3f} ms  "
                f"placed {r.placed} failed {r.failed}[/dim]"
            )
        built.problem = None  # type: ignore[assignment]  # free the large problem before the next size
        gc.collect()

    console.print()
    console.print(results_table(results, builds))
    g = growth(results)
    if g:
        console.print(growth_table(g))
    for r in results:
        if r.failed and r.example_failure:
            console.print(f"[yellow]{r.solver} at {r.nodes:,} nodes: {r.failed} pod(s) did not fit, e.g. {r.example_failure[:200]}[/yellow]")
    short = [r for r in results if r.verdict == "SHORT"]
    judged = [r for r in results if r.verdict != "n/a"]
    if short:
        console.print(
            f"[red]{len(short)} of {len(judged)} target checks SHORT[/red]: "
            + ", ".join(f"{r.solver}@{r.nodes:,}" for r in short)
            + ("" if args.profile else ". Run with --profile [SOLVER@NODES] to see where the time goes.")
        )
    elif judged:
        console.print(f"[green]all {len(judged)} target checks PASS[/green]")
    else:
        console.print("[dim]targets apply at 5,000 and 20,000 nodes: not judged at these sizes[/dim]")

    profile: dict[str, Any] | None = None
    if args.profile:
        solver_name, n = pick_profile_target(args.profile, results, names[0], nodes[-1])
        if solver_name not in solvers.registered():
            console.print(f"[red]error:[/red] --profile: unknown solver {solver_name!r}")
            return 2
        built = build(node_shapes, pod_docs, n, args.seed, prime=not args.no_prime)
        profiler = cProfile.Profile()
        r = measure(built, solver_name, warmup, pods, 0, profiler=profiler)
        rows = profile_rows(profiler, pods)
        console.print(profile_table(rows, solver_name, n, pods))
        console.print(f"[dim](under the profiler: {r.decisions_per_s:,.0f}/s, mean {r.mean_ms:.3f} ms; profiling adds overhead)[/dim]")
        profile = {"solver": solver_name, "nodes": n, "decisions": pods, "decisions_per_s_profiled": r.decisions_per_s, "top": rows}

    doc = {
        "benchmark": "decision_throughput",
        "schema": 1,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": [Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])],
        "machine": info,
        "settings": {
            "nodes": nodes,
            "pods": pods,
            "warmup": warmup,
            "solvers": names,
            "seed": args.seed,
            "quick": args.quick,
            "primed": not args.no_prime,
            "data": str(args.data),
            "node_list": f"{OPENB}/{NODE_CSV}",
            "pod_list": f"{OPENB}/{POD_CSV}",
            "domains": [d["name"] for d in DOMAINS],
            "max_allocated_share": MAX_ALLOCATED,
        },
        "targets": {str(k): v for k, v in TARGETS.items()},
        "builds": {str(n): {"build_s": b.build_s, "prime_s": b.prime_s, "constraint_shapes": b.shapes} for n, b in builds.items()},
        "results": [asdict(r) for r in results],
        "growth": g,
        "summary": {"judged": len(judged), "short": len(short), "pass": len(judged) - len(short)},
        "profile": profile,
    }
    write_json(args.out, doc)
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
