"""Online replay of an openb trace with the FGD paper's metric (shared/spec/fgd-replay.md).

Pods arrive in the seeded sequence of :func:`iro_fed.traces.openb.arrival_sequence`; each is
tried once through the solver contract (``solver.decide`` against an incremental
:class:`~iro_fed.model.ClusterState`) and dropped when nothing fits. After every arrival the
replay records the arrived GPU share a (rounded percent of cluster GPU capacity) and the
allocated GPU share (percent, 2 decimals); ``alloc_gpu_pct[x]`` is the mean allocation over the
events with a == x (or x-1 <= a <= x+1 when none), for x = 0..130, rounded to 2 decimals as the
simulator's analysis does. It also records the FGD fragmentation of the cluster (percent of GPU
capacity that is free but fragmented for the typical tasks) and CPU / memory allocation on the
same axis. With a batch window a queued pod's point is recorded when its window is placed, the
window's decisions applied in arrival order: the curve measures placement, not the pod's wait
in the queue. An online solver's curve is unchanged by a window: it decides the queued pods one
by one, in arrival order, against the live cluster, one run (one seed) over the whole replay.
The typical tasks (for the metric and for the FGD policies) are those of the original pod list,
before the arrival sequence's copies and removals, as in the simulator (``SetTypicalPods`` on
the workload before ``TunePodsByNodeTotalResource``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iro_fed.fragmentation import TypicalTasks, fragmentation, typical_tasks
from iro_fed.model import ClusterState, Problem
from iro_fed.traces.openb import MAX_ARRIVALS, OpenbNode, OpenbPod, arrival_sequence, build_problem, gpu_capacity

MAX_ARRIVED_PCT = 130
#: Decimals of each curve point: the simulator's analysis rounds the mean to 2.
CURVE_DECIMALS = 2


@dataclass
class ReplayResult:
    """One replay (one policy, one seed)."""

    policy: str
    seed: int
    arrived_pods: int
    failed_pods: int
    alloc_gpu_pct: dict[str, float | None]
    frag_gpu_pct: dict[str, float | None]
    alloc_cpu_pct: dict[str, float | None]
    alloc_mem_pct: dict[str, float | None]
    failed_gpu_milli: int
    timing: dict[str, float] = field(default_factory=dict)
    batch_window: int = 1
    #: The policy's settings as it ran (every one, defaults included, but the seed, which is above):
    #: a result file says which ``--set`` made it, and a later default change shows.
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def unallocated_gpu_pct_at_100(self) -> float | None:
        value = self.alloc_gpu_pct.get("100")
        return None if value is None else round(100.0 - value, 4)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "arrived_pods": self.arrived_pods,
            "failed_pods": self.failed_pods,
            "failed_gpu_milli": self.failed_gpu_milli,
            "batch_window": self.batch_window,
            "settings": self.settings,
            "unallocated_gpu_pct_at_100": self.unallocated_gpu_pct_at_100,
            "alloc_gpu_pct": self.alloc_gpu_pct,
            "frag_gpu_pct": self.frag_gpu_pct,
            "alloc_cpu_pct": self.alloc_cpu_pct,
            "alloc_mem_pct": self.alloc_mem_pct,
            "timing": {k: round(v, 4) for k, v in self.timing.items()},
        }


def round_point(mean: float) -> float:
    """A curve point as the simulator's analysis rounds it: ``round(dfv.alloc_ratio.mean(), 2)``
    rounds a numpy float64, which is numpy's rounding (scale by 100, round half to even, scale
    back), not Python's exact decimal one: a mean of 4.095 (4.09499... in binary) gives 4.1 there,
    4.09 with Python's ``round`` on a float."""
    return float(np.round(np.float64(mean), CURVE_DECIMALS))


def curve(arrived_pct: np.ndarray, values: np.ndarray) -> dict[str, float | None]:
    """Mean of ``values`` per rounded arrival percent x = 0..130 (the spec's neighbour rule),
    rounded to :data:`CURVE_DECIMALS` as the simulator's analysis does (:func:`round_point`)."""
    out: dict[str, float | None] = {}
    for x in range(MAX_ARRIVED_PCT + 1):
        hit = arrived_pct == x
        if not hit.any():
            hit = (arrived_pct >= x - 1) & (arrived_pct <= x + 1)
        out[str(x)] = round_point(values[hit].mean()) if hit.any() else None
    return out


def batch_window_error(value: Any) -> str | None:
    """Why ``value`` is no batch window (None: it is one): an int 1..:data:`MAX_ARRIVALS`. The one
    rule of :func:`replay_problem` and ``iro replay --batch-window``, each naming its own argument.
    A window past the arrivals is one offline solve anyway; a huge one built one giant problem, and
    a float (2.5) never filled, so every pod waited for the last one."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return f"expected an integer, got {type(value).__name__} {value!r}"[:200]
    if value < 1:
        return f"must be >= 1, got {value}"
    if value > MAX_ARRIVALS:
        return f"must be at most {MAX_ARRIVALS:,} (the most arrivals a replay has), got {value}"
    return None


def replay_problem(
    problem: Problem,
    solver: Any,
    seed: int,
    capacity_milli: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    batch_window: int = 1,
    tasks: TypicalTasks | None = None,
) -> ReplayResult:
    """Replay ``problem.workloads`` in order; ``capacity_milli`` defaults to the cluster's GPU
    capacity. With ``batch_window`` 1 each pod goes through ``solver.decide`` (an online solver)
    as it arrives; with N > 1 arriving pods are queued and every N of them (and the rest at the
    end) are placed jointly by ``solver.solve`` on the current cluster (an online solver decides
    them one by one against the live cluster instead, so its curve is the online one); pods it
    leaves unplaced are dropped, as in the online replay; each queued pod's curve point is taken
    once its window is placed (arrived: the pods up to it; allocated: the cluster with the window
    placed up to it). ``tasks`` are the typical tasks of the fragmentation metric (default: those
    of ``problem.workloads``); a solver with ``use_typical_tasks`` (the FGD policies, and cpsat and
    the composites, which hand them to the solvers inside) is given the same ones."""
    p = problem
    capacity = float(capacity_milli if capacity_milli is not None else int(p.gpu_count.sum()) * 1000)
    if capacity <= 0:
        raise ValueError("the cluster has no GPUs: the GPU allocation metric is undefined")
    error = batch_window_error(batch_window)
    if error is not None:
        raise ValueError(f"batch_window: {error}")
    batch_window = int(batch_window)  # (a numpy int: a plain one in the result's JSON)
    n = p.num_workloads
    cpu_total = float(p.capacity[:, p.cpu_index].sum())
    mem_col = p.resource_index.get("memory")
    mem_total = float(p.capacity[:, mem_col].sum()) if mem_col is not None else 0.0
    if tasks is None:
        tasks = typical_tasks(p)
    elif tasks.access.shape[1] != p.num_nodes:
        raise ValueError(f"tasks: computed for {tasks.access.shape[1]} nodes, the problem has {p.num_nodes}")
    if hasattr(solver, "use_typical_tasks"):
        solver.use_typical_tasks(tasks)
    state = ClusterState(p)
    # An online solver decides each pod against the live cluster, window or not: its window
    # problem knew nothing of the pods already placed (fgd-clustering's kind counts started at
    # zero) and each solve() reseeded it (random: 13.75 -> 9.44 % unallocated with a window of 2).
    online = batch_window == 1 or _is_online(solver)
    if online:
        solver.reset(p)
    frag_nodes = fragmentation(tasks, np.arange(p.num_nodes), state.free[:, p.cpu_index], state.gpu_free)
    totals = {"used": 0, "cpu": 0.0, "mem": 0.0, "frag": float(frag_nodes.sum()), "failed": 0, "failed_milli": 0}

    def gpu_of(w: int) -> int:
        return int(p.wl_gpu_total[w]) if p.wl_gpu_count[w] > 0 else 0

    def settle(w: int, node: int, cards: tuple[int, ...] | None) -> None:
        if node < 0:
            totals["failed"] += 1
            totals["failed_milli"] += gpu_of(w)
            return
        state.place(w, node, cards)
        totals["used"] += gpu_of(w)
        totals["cpu"] += p.demand[w, p.cpu_index]
        if mem_col is not None:
            totals["mem"] += p.demand[w, mem_col]
        new = fragmentation(tasks, np.array([node]), state.free[[node], p.cpu_index], state.gpu_free[[node]])[0]
        totals["frag"] += new - frag_nodes[node]
        frag_nodes[node] = new

    n_gpu = np.array([gpu_of(w) for w in range(n)], dtype=np.int64)
    arrived_cum = np.cumsum(n_gpu)  # GPU milli arrived through each pod (exact integers)
    arrived_pct = np.empty(n, dtype=np.int64)
    alloc, frag, cpu_pct, mem_pct = (np.empty(n) for _ in range(4))

    def record(w: int) -> None:
        """Pod w's curve point: everything that arrived up to w, the cluster as placed up to w."""
        arrived_pct[w] = round(100.0 * int(arrived_cum[w]) / capacity)
        alloc[w] = round(100.0 * totals["used"] / capacity, 2)
        frag[w] = 100.0 * totals["frag"] / capacity
        cpu_pct[w] = 100.0 * totals["cpu"] / cpu_total if cpu_total else 0.0
        mem_pct[w] = 100.0 * totals["mem"] / mem_total if mem_total else 0.0

    def flush(queue: list[int]) -> None:
        window = p.with_workloads(queue).with_cluster(state.allocated, state.gpu_free)
        placement = solver.solve(window)
        # Each queued pod's point is taken once the window is placed, its decisions applied in
        # arrival order: the curve measures placement quality, not the time a pod waits in the
        # queue (a point at arrival charged a batch solver 0 % allocation for queued pods).
        for i, w in enumerate(queue):
            settle(w, int(placement.assignment[i]), placement.gpu_cards.get(i))
            record(w)
        queue.clear()

    queue: list[int] = []
    start = time.perf_counter()
    decide_s = 0.0
    for w in range(n):
        t0 = time.perf_counter()
        if online:  # an online solver ignores the window: each pod in arrival order, against the live cluster
            decision = solver.decide(state, w)
            decide_s += time.perf_counter() - t0
            settle(w, decision.node, decision.cards)
            record(w)
        else:
            queue.append(w)
            if len(queue) == batch_window or w == n - 1:
                flush(queue)
            decide_s += time.perf_counter() - t0
        if on_progress is not None:
            on_progress(w + 1)
    total_s = time.perf_counter() - start
    return ReplayResult(
        policy=getattr(solver, "name", type(solver).__name__),
        seed=seed,
        arrived_pods=n,
        failed_pods=int(totals["failed"]),
        alloc_gpu_pct=curve(arrived_pct, alloc),
        frag_gpu_pct=curve(arrived_pct, frag),
        alloc_cpu_pct=curve(arrived_pct, cpu_pct),
        alloc_mem_pct=curve(arrived_pct, mem_pct),
        failed_gpu_milli=int(totals["failed_milli"]),
        timing={"replay_s": total_s, "decide_s": decide_s, "decisions_per_s": n / decide_s if decide_s > 0 else 0.0},
        batch_window=batch_window,
        settings=run_settings(solver),
    )


def run_settings(solver: Any) -> dict[str, Any]:
    """``solver``'s settings but its seed (the result's own field); {} for an object that is not a
    registered solver (``get_params`` is the registry's)."""
    get_params = getattr(solver, "get_params", None)
    return {k: v for k, v in get_params().items() if k != "seed"} if callable(get_params) else {}


def _is_online(solver: Any) -> bool:
    import solvers  # the registry package, not a core module's import-time dependency

    return isinstance(solver, solvers.OnlineSolver)


def replay_trace(
    nodes: list[OpenbNode],
    pods: list[OpenbPod],
    policy: str,
    seed: int,
    policy_params: dict[str, Any] | None = None,
    on_progress: Callable[[int], None] | None = None,
    batch_window: int = 1,
) -> ReplayResult:
    """Build the seed's arrival sequence and replay it with the registered solver ``policy``
    (online, or any solver with ``batch_window`` > 1); the fragmentation metric and the FGD
    policies use the typical tasks of ``pods`` (the original list)."""
    import solvers

    error = batch_window_error(batch_window)
    if error is not None:  # before the arrival sequence is built
        raise ValueError(f"batch_window: {error}")
    capacity = gpu_capacity(nodes)
    if capacity <= 0:  # before the arrival sequence, which would tune the workload to 0 GPUs
        raise ValueError("nodes: the node list has no GPUs: the GPU allocation metric is undefined")
    sequence = arrival_sequence(pods, seed, capacity)
    # The simulator takes the typical tasks from the original pod list, not the tuned sequence.
    tasks = typical_tasks(build_problem(nodes, sorted(pods, key=lambda pod: pod.name)))
    solver = solvers.make(policy, **{"seed": seed, **(policy_params or {})})
    if batch_window == 1 and not isinstance(solver, solvers.OnlineSolver):
        raise solvers.InvalidSettingError(
            f"policy {policy!r} is not an online solver: replay places pods one at a time (or use a batch window)"
        )
    return replay_problem(build_problem(nodes, sequence), solver, seed, capacity, on_progress, batch_window, tasks)


def median_unallocated(results: list[ReplayResult]) -> float | None:
    """The median over all seeds of the unallocated GPU % at 100 % arrival; None when any seed has
    no value there (on a small cluster one pod can move the arrived percent past 99..101): the
    median of the seeds that have one would be reported as that of all of them."""
    values = [v for r in results if (v := r.unallocated_gpu_pct_at_100) is not None]
    if not values or len(values) < len(results):
        return None
    return round(float(np.median(values)), 4)


def summary(results: list[ReplayResult], pods_csv: str | os.PathLike, nodes_csv: str | os.PathLike) -> dict[str, Any]:
    """The replay JSON document: one seed, or several with per-seed results and medians."""
    if len(results) == 1:
        doc = results[0].to_dict()
        doc.update(pods_csv=str(pods_csv), nodes_csv=str(nodes_csv))
        return doc
    first = results[0]
    return {
        "policy": first.policy,
        "seeds": [r.seed for r in results],
        "batch_window": first.batch_window,  # one per replay: every seed's run has the same
        "settings": first.settings,  # the same for every seed (the seed is not among them)
        "pods_csv": str(pods_csv),
        "nodes_csv": str(nodes_csv),
        "arrived_pods": [r.arrived_pods for r in results],
        "failed_pods": [r.failed_pods for r in results],
        "unallocated_gpu_pct_at_100": median_unallocated(results),
        "unallocated_gpu_pct_at_100_per_seed": [r.unallocated_gpu_pct_at_100 for r in results],
        "alloc_gpu_pct": _mean_curves([r.alloc_gpu_pct for r in results]),
        "frag_gpu_pct": _mean_curves([r.frag_gpu_pct for r in results]),
        "alloc_cpu_pct": _mean_curves([r.alloc_cpu_pct for r in results]),
        "alloc_mem_pct": _mean_curves([r.alloc_mem_pct for r in results]),
        "timing": {"replay_s": round(sum(r.timing.get("replay_s", 0.0) for r in results), 4)},
        "runs": [r.to_dict() for r in results],
    }


def _mean_curves(curves: list[dict[str, float | None]]) -> dict[str, float | None]:
    """The per-point mean over all seeds; None where a seed has no point (as the median above)."""
    out: dict[str, float | None] = {}
    for key in curves[0]:
        values = [v for c in curves if (v := c.get(key)) is not None]
        out[key] = round(float(np.mean(values)), 4) if len(values) == len(curves) else None
    return out
