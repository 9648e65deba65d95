"""Decision features: the top-K candidate nodes of one pod and what a learned policy sees of them.

One module for every consumer (the DQN solver at decision time, the simulator's gymnasium env
during training, the edge agent), so a policy reads at run time exactly the features it was
trained on. Numpy only; every value is a ratio or a bounded score so that a policy trained on
one cluster transfers to another.

Candidate pre-selection: the feasibility module's filter, then the shared objective's
vectorized marginal gain (``objective.marginal``), ties to the tighter fit; K nodes out of N at
the cost of a few vector operations, so a policy trained on 100 nodes runs on 20,000.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from iro_fed.feasibility import feasible_nodes
from iro_fed.model import GPU_MILLI, ClusterState, Problem
from iro_fed.objective import marginal

#: Per-candidate features, in column order.
CANDIDATE_FEATURES: tuple[str, ...] = (
    "valid",  # 1 for a real candidate, 0 for padding
    "cpu_free_after",  # CPU left on the node after placement / capacity
    "memory_free_after",  # memory left / capacity
    "gpu_free_after",  # free milli-GPU left / the node's GPU milli (0 without GPUs)
    "gpu_full_cards_after",  # whole free cards left / cards
    "gpu_frag_after",  # milli-GPU stranded on partly used cards after placement / the node's GPU milli
    "node_util_after",  # mean used share of the node's utilization resources after placement
    "node_on",  # 1 if the node already runs pods (no power-on cost)
    "power_delta",  # extra watts of the placement (power-on + dynamic) / the largest peak power
    "latency",  # network latency user region -> domain / the pod's limit (or 100 ms), capped at 2 (2 without data)
    "latency_slack",  # 1 - latency / limit (1 without a limit), floored at -1 (-1 without data)
    "price",  # hourly price of the pod's requests in the node's domain / the highest among candidates
    "carbon",  # carbon intensity of the node's domain, gCO2/kWh / 1000
    "delta_r",  # marginal change of R / the largest |change| among candidates
    "delta_r_rank",  # 0 for the best marginal change, 1 for the worst
    "kind_edge",
    "kind_zone",
    "kind_cloud",
    "gpu_unfed_after",  # free milli-GPU the node's free CPU/memory can no longer feed, after placement / its GPU milli
    "gpu_unfed_delta",  # change of gpu_unfed by this placement (> 0: it strands GPU capacity)
)

#: Pod and cluster features, in order. The last ones come from the caller's context (simulator
#: clock, forecasts) and default to neutral values.
CONTEXT_FEATURES: tuple[str, ...] = (
    "cpu_demand",  # pod CPU / mean CPU capacity of the nodes
    "memory_demand",
    "gpu_demand",  # pod milli-GPU / 1000 / 8
    "gpu_whole",  # 1 for a whole-GPU pod
    "class_online",
    "class_batch",
    "class_burst",
    "deferrable",  # batch with a deadline: the defer action is allowed
    "cluster_util",  # used / capacity of the powered-on nodes (mean over resources)
    "feasible_share",  # feasible nodes / all nodes
    "candidate_share",  # real candidates / K
    "hour_sin",  # time of day (context)
    "hour_cos",
    "carbon_now",  # mean carbon intensity of the problem's domains (all, unweighted), gCO2/kWh / 1000
    "carbon_forecast_ratio",  # lowest forecast within the pod's slack / now (context; 1 = no gain)
    "slack",  # deadline slack / 24 h, capped at 1 (context)
    "pressure_cpu",  # CPU requested by the problem's unplaced pods (this one included) / free CPU, capped at 4
    "pressure_gpu",  # milli-GPU requested by the unplaced pods / free milli-GPU (0 without GPU pods), capped at 4
)

KINDS = ("edge", "zone", "cloud")
_C = {name: i for i, name in enumerate(CANDIDATE_FEATURES)}
_X = {name: i for i, name in enumerate(CONTEXT_FEATURES)}


def feature_layout() -> dict[str, list[str]]:
    """The feature names a checkpoint records (``metadata["feature_names"]``) and a load compares
    with its own: ``{"candidates": [...], "context": [...]}``, in column order.

    The one definition every writer and reader uses. Lists, not tuples, because that is what a
    checkpoint's JSON/pickled metadata gives back (``[..] != (..)``); a fresh dict per call,
    because callers put it into metadata they go on to change."""
    return {"candidates": list(CANDIDATE_FEATURES), "context": list(CONTEXT_FEATURES)}


@dataclass(frozen=True)
class _Constants:
    """What the features need of a problem that no decision changes (computed once per problem)."""

    peak_w: float  # the largest peak power
    kind: np.ndarray  # [D] index into KINDS per domain
    mean_capacity: np.ndarray  # [R]
    mean_carbon: float


_constants: weakref.WeakKeyDictionary[Problem, _Constants] = weakref.WeakKeyDictionary()


def _problem_constants(p: Problem) -> _Constants:
    c = _constants.get(p)
    if c is None:
        c = _Constants(
            peak_w=float(p.power_peak_w.max()) if p.num_nodes else 1.0,
            kind=np.array([KINDS.index(d.kind) if d.kind in KINDS else 1 for d in p.domains], dtype=np.int64),
            mean_capacity=p.capacity.mean(axis=0) if p.num_nodes else np.ones(len(p.resources)),
            mean_carbon=float(np.mean(p.domain_carbon)) if len(p.domains) else 0.0,
        )
        _constants[p] = c
    return c


def order_candidates(
    state: ClusterState, w: int, nodes: np.ndarray, k: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(nodes, gains)`` sorted best marginal gain of R first; ties to the tighter fit, then index.

    With ``k``, only the best ``k`` (a partition first, so 20,000 nodes cost no full sort).
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    if nodes.size == 0:
        return nodes, np.zeros(0)
    gains = marginal(state.problem, state, w, nodes)
    key = -np.round(gains, 12)
    if k is not None and nodes.size > k:
        kth = np.partition(key, k - 1)[k - 1]
        keep = np.flatnonzero(key <= kth)  # every node tied with the k-th stays in the race
        nodes, gains, key = nodes[keep], gains[keep], key[keep]
    order = np.lexsort((nodes, state.free_share[nodes], key))[:k]
    return nodes[order], gains[order]


def preselect(state: ClusterState, w: int, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(nodes, gains, num_feasible)``: up to ``k`` feasible nodes, best marginal gain of R first."""
    feasible = np.flatnonzero(feasible_nodes(state, w))
    nodes, gains = order_candidates(state, w, feasible, k)
    return nodes, gains, int(feasible.size)


def _gpu_after(state: ClusterState, w: int, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Free milli, whole free cards and stranded milli per node after placing ``w`` (best-fit card)."""
    p = state.problem
    if p.gpu_free.shape[1] == 0 or nodes.size == 0:
        z = np.zeros(nodes.size)
        return z, z, z
    g = state.gpu_free[nodes].astype(np.int64)  # -1 marks a missing card
    count, milli = int(p.wl_gpu_count[w]), int(p.wl_gpu_milli[w])
    if count == 1 and 0 < milli < GPU_MILLI:
        fits = g >= milli
        cost = np.where(fits, g, GPU_MILLI * 10)
        card = cost.argmin(axis=1)
        rows = np.arange(nodes.size)
        ok = fits[rows, card]
        g = g.copy()
        g[rows[ok], card[ok]] -= milli
    elif count >= 1:
        g = g.copy()
        for r in range(nodes.size):  # k whole cards: the first k free ones
            full = np.flatnonzero(g[r] == GPU_MILLI)[:count]
            g[r, full] = 0
    free = np.where(g > 0, g, 0)
    full_cards = (g == GPU_MILLI).sum(axis=1)
    stranded = np.where((g > 0) & (g < GPU_MILLI), g, 0).sum(axis=1)
    return free.sum(axis=1).astype(np.float64), full_cards.astype(np.float64), stranded.astype(np.float64)


def _gpu_unfed(free_gpu: np.ndarray, gpu_milli: np.ndarray, cpu_share: np.ndarray, mem_share: np.ndarray) -> np.ndarray:
    """Share of a node's GPU milli that is free but that its free CPU and memory, at the node's own
    GPU-to-CPU/memory ratio, can no longer feed (0 for nodes without GPUs): what a CPU-heavy pod on
    a GPU node strands for later GPU pods (the imbalance FGD-style schedulers avoid)."""
    has = gpu_milli > 0
    feed = np.clip(np.minimum(cpu_share, mem_share), 0.0, 1.0) * gpu_milli
    unfed = np.maximum(free_gpu - feed, 0.0)
    return np.where(has, unfed / np.where(has, gpu_milli, 1.0), 0.0)


def candidate_features(state: ClusterState, w: int, nodes: np.ndarray, gains: np.ndarray, k: int) -> np.ndarray:
    """``[k, len(CANDIDATE_FEATURES)]`` float32; rows past ``len(nodes)`` are zero padding."""
    p = state.problem
    out = np.zeros((k, len(CANDIDATE_FEATURES)), dtype=np.float32)
    m = nodes.size
    if m == 0:
        return out
    col = _C
    d = p.demand[w]
    cap = p.capacity[nodes]
    free_after = state.free[nodes] - d
    with np.errstate(divide="ignore", invalid="ignore"):
        share_after = np.where(cap > 0, free_after / np.where(cap > 0, cap, 1.0), 0.0)
    out[:m, col["valid"]] = 1.0
    out[:m, col["cpu_free_after"]] = share_after[:, p.cpu_index]
    if "memory" in p.resource_index:
        out[:m, col["memory_free_after"]] = share_after[:, p.resource_index["memory"]]
    gpu_milli = p.gpu_count[nodes].astype(np.float64) * GPU_MILLI
    g_free, g_full, g_stranded = _gpu_after(state, w, nodes)
    has_gpu = gpu_milli > 0
    safe = np.where(has_gpu, gpu_milli, 1.0)
    out[:m, col["gpu_free_after"]] = np.where(has_gpu, g_free / safe, 0.0)
    out[:m, col["gpu_full_cards_after"]] = np.where(has_gpu, g_full * GPU_MILLI / safe, 0.0)
    out[:m, col["gpu_frag_after"]] = np.where(has_gpu, g_stranded / safe, 0.0)
    ucap = p.util_capacity[nodes]
    valid = ucap > 0
    used_after = ucap - state.util_free[nodes] + p.util_demand[w]
    util = np.where(valid, used_after / np.where(valid, ucap, 1.0), 0.0).sum(axis=1) / np.maximum(valid.sum(axis=1), 1)
    out[:m, col["node_util_after"]] = np.clip(util, 0.0, 1.0)
    on = state.on[nodes]
    out[:m, col["node_on"]] = on
    cpu_cap = p.capacity[nodes, p.cpu_index]
    share = np.where(cpu_cap > 0, d[p.cpu_index] / np.where(cpu_cap > 0, cpu_cap, 1), 0)
    if p.has_gpus:  # the objective's power model: the GPUs' share of the dynamic range follows their use
        g, cards = p.power_gpu_share[nodes], p.gpu_count[nodes] * float(GPU_MILLI)
        share = (1.0 - g) * share + g * np.where(cards > 0, p.wl_gpu_total[w] / np.where(cards > 0, cards, 1.0), 0.0)
    dynamic = (p.power_peak_w[nodes] - p.power_idle_w[nodes]) * share
    watts = dynamic + np.where(on, 0.0, p.power_idle_w[nodes])
    const = _problem_constants(p)
    peak = const.peak_w
    out[:m, col["power_delta"]] = watts / max(peak, 1.0)
    dom = p.node_domain[nodes]
    region = int(p.wl_region[w])
    limit = p.workloads[w].max_latency_ms
    if region >= 0:
        raw = p.latency_ms[region, dom]
        # No latency data scores like the worst latency, as in the objective (score 0), not like 0 ms.
        unknown = np.isnan(raw)
        lat = np.where(unknown, 0.0, raw)
        ref = limit if limit else 100.0
        out[:m, col["latency"]] = np.where(unknown, 2.0, np.minimum(lat / ref, 2.0))
        out[:m, col["latency_slack"]] = np.where(unknown, -1.0, np.maximum(1.0 - lat / limit, -1.0)) if limit else 1.0
    else:
        out[:m, col["latency_slack"]] = 1.0
    price = (p.domain_unit_price[dom] * p.util_demand[w]).sum(axis=1)
    out[:m, col["price"]] = price / price.max() if price.max() > 0 else 0.0
    out[:m, col["carbon"]] = p.domain_carbon[dom] / 1000.0
    scale = np.abs(gains).max()
    out[:m, col["delta_r"]] = gains / scale if scale > 0 else 0.0
    out[:m, col["delta_r_rank"]] = np.arange(m) / max(m - 1, 1)  # preselect sorts best first
    out[np.arange(m), col["kind_edge"] + const.kind[dom]] = 1.0
    mem = p.resource_index.get("memory")
    with np.errstate(divide="ignore", invalid="ignore"):
        share_before = np.where(cap > 0, state.free[nodes] / np.where(cap > 0, cap, 1.0), 0.0)
    mem_after = share_after[:, mem] if mem is not None else np.ones(m)
    mem_before = share_before[:, mem] if mem is not None else np.ones(m)
    unfed_after = _gpu_unfed(g_free, gpu_milli, share_after[:, p.cpu_index], mem_after)
    gpu_left = state.gpu_left[nodes].astype(np.float64) if p.gpu_free.shape[1] else np.zeros(m)
    unfed_before = _gpu_unfed(gpu_left, gpu_milli, share_before[:, p.cpu_index], mem_before)
    out[:m, col["gpu_unfed_after"]] = unfed_after
    out[:m, col["gpu_unfed_delta"]] = unfed_after - unfed_before
    return out


def context_features(
    state: ClusterState, w: int, num_feasible: int, num_candidates: int, k: int,
    context: Mapping[str, float] | None = None,
) -> np.ndarray:
    """``[len(CONTEXT_FEATURES)]`` float32 for the pod and the cluster, plus caller context."""
    p = state.problem
    wl = p.workloads[w]
    ctx = dict(context or {})
    out = np.zeros(len(CONTEXT_FEATURES), dtype=np.float32)
    col = _X
    const = _problem_constants(p)
    mean_cap = const.mean_capacity
    d = p.demand[w]
    out[col["cpu_demand"]] = d[p.cpu_index] / mean_cap[p.cpu_index] if mean_cap[p.cpu_index] > 0 else 0.0
    if "memory" in p.resource_index:
        r = p.resource_index["memory"]
        out[col["memory_demand"]] = d[r] / mean_cap[r] if mean_cap[r] > 0 else 0.0
    out[col["gpu_demand"]] = p.wl_gpu_total[w] / GPU_MILLI / 8.0
    out[col["gpu_whole"]] = float(p.wl_gpu_count[w] > 1 or p.wl_gpu_milli[w] >= GPU_MILLI)
    out[col["class_online"]] = float(wl.klass == "online")
    out[col["class_batch"]] = float(wl.klass == "batch")
    out[col["class_burst"]] = float(wl.klass == "burst")
    out[col["deferrable"]] = float(ctx.get("deferrable", wl.klass == "batch" and wl.deadline_s is not None))
    cap_on = state.util_cap_on
    valid = cap_on > 0
    out[col["cluster_util"]] = float(np.mean(np.where(valid, state.util_used_total / np.where(valid, cap_on, 1), 0))) if valid.any() else 0.0
    out[col["feasible_share"]] = num_feasible / p.num_nodes if p.num_nodes else 0.0
    out[col["candidate_share"]] = num_candidates / k
    hour = ctx.get("hour")
    if hour is not None:
        out[col["hour_sin"]] = np.sin(2 * np.pi * float(hour) / 24.0)
        out[col["hour_cos"]] = np.cos(2 * np.pi * float(hour) / 24.0)
    out[col["carbon_now"]] = float(ctx.get("carbon_now", const.mean_carbon)) / 1000.0
    out[col["carbon_forecast_ratio"]] = float(ctx.get("carbon_forecast_ratio", 1.0))
    out[col["slack"]] = min(float(ctx.get("slack_s", 0.0)) / 86400.0, 1.0)
    waiting = state.assignment < 0
    waiting[w] = True
    cpu_want = float(p.demand[waiting, p.cpu_index].sum())
    cpu_free = float(np.maximum(state.free[:, p.cpu_index], 0.0).sum())
    out[col["pressure_cpu"]] = min(cpu_want / cpu_free, 4.0) if cpu_free > 0 else (4.0 if cpu_want > 0 else 0.0)
    gpu_want = float(p.wl_gpu_total[waiting].sum())
    gpu_free = float(state.gpu_left.sum()) if p.gpu_free.shape[1] else 0.0
    out[col["pressure_gpu"]] = min(gpu_want / gpu_free, 4.0) if gpu_free > 0 else (4.0 if gpu_want > 0 else 0.0)
    return out


def observation(
    state: ClusterState, w: int, k: int, defer_action: bool = True, context: Mapping[str, float] | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The policy's input for one decision and the node index behind each candidate slot.

    ``obs = {"candidates": [k, F], "context": [C], "mask": [k (+1)]}``; ``nodes[k]`` holds -1
    for padding. The defer slot (last) is valid only for deferrable pods.
    """
    nodes, gains, num_feasible = preselect(state, w, k)
    cand = candidate_features(state, w, nodes, gains, k)
    ctx = context_features(state, w, num_feasible, nodes.size, k, context)
    mask = np.zeros(k + (1 if defer_action else 0), dtype=np.int8)
    mask[: nodes.size] = 1
    if defer_action and ctx[_X["deferrable"]] > 0:
        mask[k] = 1
    slots = np.full(k, -1, dtype=np.int64)
    slots[: nodes.size] = nodes
    return {"candidates": cand, "context": ctx, "mask": mask}, slots

