"""GPU fragmentation as the FGD paper defines it (Weng et al., USENIX ATC'23), vectorized.

A node's GPU fragmentation for a task t is the free GPU milli that t cannot use there: all of
the node's free milli if t cannot run on the node at all (a CPU-only task, a GPU model it does
not accept, too little CPU, too few cards with enough milli), otherwise the free milli of the
cards that individually cannot host t. The node's fragmentation is the popularity-weighted
sum over the workload's *typical tasks*: pods grouped by (cpu, per-card GPU milli, GPU count,
GPU models), the most frequent groups covering 95 % of pods, popularity renormalized over them
(shared/spec/fgd-replay.md; the simulator's ``utils.NodeGpuShareFragAmountScore``).

Written as ``frag = sum_t n_t * (satisfied_t ? stranded_t : free) / sum_t n_t`` (n_t the group's
pods, all integers until the one division) so that one pass over the distinct per-card
thresholds and one vector expression per task score many candidate (node, card) variants at
once, and equal fragmentation compares equal. With ``memory_aware`` a task is also
unsatisfied when the node lacks its memory (our extension; the paper ignores memory).
F depends on a node's cards only through integer counts per threshold, so
:func:`fragmentation_after_share` scores a share on every card of many-card nodes from those
counts, once per distinct free amount, with the same F as the whole changed rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from iro_fed.model import GPU_MILLI, Problem

DEFAULT_COVERAGE = 0.95


@dataclass(frozen=True)
class TypicalTasks:
    """The typical tasks of a workload, as arrays over tasks T (and nodes N for access)."""

    cpu: np.ndarray  # [T] millicores
    memory: np.ndarray  # [T] MiB (mean over the group's pods)
    milli: np.ndarray  # [T] milli per card (0 for CPU-only tasks)
    count: np.ndarray  # [T] cards
    access: np.ndarray  # [T, N] the node's GPU model is allowed
    #: [T] pods per group. The "fgd" model sums these integers and divides once, so placements
    #: that leave F unchanged give exactly dF = 0.
    mass: np.ndarray

    @cached_property
    def popularity(self) -> np.ndarray:
        """[T] each group's share of the kept pods (sums to 1)."""
        return self.mass / self.mass.sum() if self.mass.sum() > 0 else np.zeros(len(self.mass))


def typical_tasks(problem: Problem, coverage: float = DEFAULT_COVERAGE) -> TypicalTasks:
    """Group the problem's workloads and keep the most frequent groups until they cover
    ``coverage`` of the pods; popularity is each kept group's share of them.

    As in the simulator (``GetTypicalPods`` with ``isInvolvedCpuPods`` true, threshold 95, step
    1), CPU-only pods form groups too: such a task uses no GPU, so all of a node's free GPU milli
    is fragmented for it. The replay passes the original pod list, not the tuned arrival
    sequence. Groups with equal counts are ordered as the simulator's ``TargetPodList`` sorts
    them (``sort.Reverse`` of count, then ``PodResource.Less``): larger CPU, then per-card milli,
    card count and GPU model string first, which decides what a 95 % cut keeps (gpuspec10)."""
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage must be in (0, 1], got {coverage!r}")
    p = problem
    cpu_col = p.cpu_index
    mem_col = p.resource_index.get("memory")
    counts: Counter[tuple] = Counter()
    mem_sum: dict[tuple, float] = {}
    for w in range(p.num_workloads):
        k = int(p.wl_gpu_count[w])
        milli = int(p.wl_gpu_milli[w]) if k > 0 else 0
        key = (float(p.demand[w, cpu_col]), milli, k if milli else 0, p.workloads[w].gpu_models if milli else ())
        counts[key] += 1
        mem_sum[key] = mem_sum.get(key, 0.0) + (float(p.demand[w, mem_col]) if mem_col is not None else 0.0)
    total = sum(counts.values())
    # Most frequent first; equal counts by the simulator's key, descending (models as "A|B").
    ordered = sorted(
        counts.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][1], kv[0][2], "|".join(kv[0][3])), reverse=True
    )
    kept: list[tuple[tuple, int]] = []
    covered = 0
    for key, n in ordered:
        if covered >= coverage * total:
            break
        kept.append((key, n))
        covered += n
    model_index = {m: i for i, m in enumerate(p.gpu_models)}
    access = np.ones((len(kept), p.num_nodes), dtype=bool)
    for t, ((_, milli, _, models), _) in enumerate(kept):
        if milli and models:
            allowed = [model_index[m] for m in models if m in model_index]
            access[t] = np.isin(p.node_gpu_model, np.array(allowed, dtype=np.int32))
    return TypicalTasks(
        cpu=np.array([k[0] for k, _ in kept], dtype=np.float64),
        memory=np.array([mem_sum[k] / n for k, n in kept], dtype=np.float64),
        milli=np.array([k[1] for k, _ in kept], dtype=np.int64),
        count=np.array([k[2] for k, _ in kept], dtype=np.int64),
        access=access,
        mass=np.array([n for _, n in kept], dtype=np.int64),
    )


def fragmentation(
    tasks: TypicalTasks,
    nodes: np.ndarray,
    cpu_left: np.ndarray,
    cards: np.ndarray,
    memory_left: np.ndarray | None = None,
    model: str = "fgd",
    copies_weight: float = 0.5,
) -> np.ndarray:
    """Fragmented GPU milli of each row: node ``nodes[r]`` with ``cpu_left[r]`` millicores and
    ``cards[r, g]`` free milli per card (-1 for cards it does not have).

    ``model`` "fgd" is the paper's definition. "copies" counts as usable for task t only the GPU
    milli that repeated copies of t could take, limited by cards (``floor(left / milli)`` shares
    per card, or ``floor(full cards / k)`` for k-GPU tasks), CPU and (given ``memory_left``)
    memory: GPUs a node can no longer feed with CPU or memory count as fragmented. "blend" is
    ``(1 - copies_weight) * fgd + copies_weight * copies`` (the mean by default).
    """
    _check_model(model, copies_weight)
    counts = _card_counts(tasks, np.asarray(cards), copies=model != "fgd")
    return _from_counts(tasks, nodes, cpu_left, memory_left, counts, model, copies_weight)


def fragmentation_after_share(
    tasks: TypicalTasks,
    nodes: np.ndarray,
    cpu_left: np.ndarray,
    cards: np.ndarray,
    milli: int,
    memory_left: np.ndarray | None = None,
    model: str = "fgd",
    copies_weight: float = 0.5,
) -> np.ndarray:
    """[R, G]: the :func:`fragmentation` of row r after a share of ``milli`` takes card g (its
    free milli less ``milli``; ``cpu_left`` and ``memory_left`` are already those after the
    share), inf where card g has less than ``milli`` free.

    F depends on a row's cards only through the counts in :func:`_card_counts`, so cards of a row
    with equal free milli give the same F: each distinct (row, free milli) is evaluated once, its
    counts those of the row changed by the one card. The cost grows with the candidate rows'
    cards plus their distinct free values times the typical tasks, not with cards squared, and
    each F equals (bit for bit) the one computed from the whole changed row."""
    _check_model(model, copies_weight)
    if isinstance(milli, bool) or not isinstance(milli, (int, np.integer)) or milli < 0:
        raise ValueError(f"milli must be an integer >= 0, got {milli!r}")
    cards = np.asarray(cards)
    out = np.full(cards.shape, np.inf)
    fit_r, fit_g = np.nonzero(cards >= milli)
    if fit_r.size == 0:
        return out
    values = cards[fit_r, fit_g].astype(np.int64)
    low = int(values.min())
    span = int(values.max()) - low + 1
    variant, inverse = np.unique(fit_r.astype(np.int64) * span + (values - low), return_inverse=True)
    row = variant // span
    before = variant % span + low
    after = before - int(milli)
    base = _card_counts(tasks, cards, copies=model != "fgd")
    th = base.thresholds[:, None]
    fit_before, fit_after = before >= th, after >= th  # [thresholds, variants]
    # Free milli (>= 0 here) of the changed card counts as stranded while it is below a threshold.
    stranded = base.stranded[:, row] - np.where(fit_before, 0, before) + np.where(fit_after, 0, after)
    counts = _CardCounts(
        thresholds=base.thresholds,
        total=base.total[row] - int(milli),
        n_fit=base.n_fit[:, row] - fit_before + fit_after,
        stranded=stranded,
    )
    if base.full is not None and base.slots is not None:
        full = base.full[row] - (before >= GPU_MILLI) + (after >= GPU_MILLI)
        slots = base.slots[:, row] - before // th + after // th
        counts.full = full
        counts.slots = np.where(th >= GPU_MILLI, full, slots)
    mem = None if memory_left is None else np.asarray(memory_left)[row]
    frag = _from_counts(tasks, np.asarray(nodes)[row], np.asarray(cpu_left)[row], mem, counts, model, copies_weight)
    out[fit_r, fit_g] = frag[inverse]
    return out


def _check_model(model: str, copies_weight: float) -> None:
    if model == "blend" and not 0.0 <= copies_weight <= 1.0:
        raise ValueError(f"copies_weight must be in [0, 1], got {copies_weight!r}")
    if model not in ("fgd", "copies", "blend"):
        raise ValueError(f"model must be 'fgd', 'copies' or 'blend', got {model!r}")


@dataclass
class _CardCounts:
    """What F needs of each row's cards (integers, so any way of computing them gives equal F)."""

    thresholds: np.ndarray  # [H] the GPU tasks' distinct per-card milli, ascending
    total: np.ndarray  # [R] free milli
    n_fit: np.ndarray  # [H, R] cards with >= thresholds[h] milli free
    stranded: np.ndarray  # [H, R] free milli of the cards below thresholds[h]
    full: np.ndarray | None = None  # [R] fully free cards (copies model)
    slots: np.ndarray | None = None  # [H, R] shares of thresholds[h] the cards hold (full for whole cards)


def _card_counts(tasks: TypicalTasks, cards: np.ndarray, copies: bool) -> _CardCounts:
    thresholds = np.unique(tasks.milli[tasks.milli > 0]).astype(np.int64)
    free = np.maximum(cards, 0).astype(np.int64)
    rows = cards.shape[0]
    counts = _CardCounts(thresholds, free.sum(axis=1), np.empty((thresholds.size, rows), dtype=np.int64),
                         np.empty((thresholds.size, rows), dtype=np.int64))
    if copies:
        counts.full = (cards >= GPU_MILLI).sum(axis=1).astype(np.int64)
        counts.slots = np.empty((thresholds.size, rows), dtype=np.int64)
    for h, threshold in enumerate(thresholds):
        fits = cards >= threshold
        counts.n_fit[h] = fits.sum(axis=1)
        counts.stranded[h] = np.where(fits, 0, free).sum(axis=1)
        if counts.slots is not None:
            counts.slots[h] = counts.full if threshold >= GPU_MILLI else (free // threshold).sum(axis=1)
    return counts


def _from_counts(
    tasks: TypicalTasks,
    nodes: np.ndarray,
    cpu_left: np.ndarray,
    memory_left: np.ndarray | None,
    counts: _CardCounts,
    model: str,
    copies_weight: float,
) -> np.ndarray:
    if model == "blend":
        fgd = _fragmentation_fgd(tasks, nodes, cpu_left, memory_left, counts)
        copies = _fragmentation_copies(tasks, nodes, cpu_left, memory_left, counts)
        return (1.0 - copies_weight) * fgd + copies_weight * copies
    if model == "copies":
        return _fragmentation_copies(tasks, nodes, cpu_left, memory_left, counts)
    return _fragmentation_fgd(tasks, nodes, cpu_left, memory_left, counts)


def _fragmentation_fgd(
    tasks: TypicalTasks, nodes: np.ndarray, cpu_left: np.ndarray, memory_left: np.ndarray | None, counts: _CardCounts
) -> np.ndarray:
    # Per task the fragmented milli is an integer (all free milli, or that of the cards too small
    # for it). Weighted by the groups' pod counts the sum stays an integer: one division at the end
    # keeps F exact, so a placement that leaves F unchanged scores sigmoid(0) (50) as upstream,
    # not 49 from rounding noise of the popularity-weighted float sum.
    mass = tasks.mass
    total = counts.total
    frag = total * (mass[tasks.milli <= 0].sum())
    gpu_tasks = np.flatnonzero(tasks.milli > 0)
    for h, threshold in enumerate(counts.thresholds):
        n_fit, stranded = counts.n_fit[h], counts.stranded[h]
        for t in gpu_tasks[tasks.milli[gpu_tasks] == threshold]:
            sat = tasks.access[t, nodes] & (cpu_left >= tasks.cpu[t]) & (n_fit >= tasks.count[t])
            if memory_left is not None:
                sat &= memory_left >= tasks.memory[t]
            frag = frag + mass[t] * np.where(sat, stranded, total)
    pods = int(mass.sum())
    return frag / pods if pods else frag.astype(np.float64)  # no typical tasks: all zero


def _fragmentation_copies(
    tasks: TypicalTasks, nodes: np.ndarray, cpu_left: np.ndarray, memory_left: np.ndarray | None, counts: _CardCounts
) -> np.ndarray:
    assert counts.slots is not None
    frag = counts.total.astype(np.float64) * tasks.popularity.sum()
    gpu_tasks = np.flatnonzero(tasks.milli > 0)
    for h, threshold in enumerate(counts.thresholds):
        slots = counts.slots[h]
        for t in gpu_tasks[tasks.milli[gpu_tasks] == threshold]:
            k = max(int(tasks.count[t]), 1)
            copies = (slots // k).astype(np.float64)
            if tasks.cpu[t] > 0:
                copies = np.minimum(copies, np.floor(np.maximum(cpu_left, 0) / tasks.cpu[t]))
            if memory_left is not None and tasks.memory[t] > 0:
                copies = np.minimum(copies, np.floor(np.maximum(memory_left, 0) / tasks.memory[t]))
            frag -= tasks.popularity[t] * np.where(tasks.access[t, nodes], copies * threshold * k, 0.0)
    return frag
