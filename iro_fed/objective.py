"""The multi-objective score: the one place every placement is scored.

``R = w1*U + w2*L - w3*C - w4*K - w5*P`` with the problem's weights and these terms:

* **U, utilization** (physical: %): over the powered-on nodes, for each resource r of
  ``problem.util_resources`` (cpu, memory, other additive resources but the problem's
  ``feasibility_only`` ones and, when the cluster has GPUs, gpu milli) the share
  ``sum used_r / sum capacity_r``, averaged over the resources whose powered-on capacity is
  non-zero. A node is powered on when anything runs on it (its
  ``allocated`` is non-zero or a workload is placed on it); an empty node can be scaled down and
  counts as off. U is in [0, 1].
* **L, latency** (physical: mean ms): for every placed workload with a ``user_region``,
  ``s = ref / (ref + latency_ms[region, domain])``, the seed's ``1/Latency`` smoothed so that a
  zero latency stays finite (``ref`` = ``latency_ref_ms``, default 10 ms). L is the sum of s over
  placed workloads divided by the number of workloads with a user region (unplaced ones add 0),
  in [0, 1]. Unknown latencies (missing in ``latency_ms``) add 0; the physical mean is over the
  known ones only, and ``latency_unknown`` counts the placed workloads it leaves out.
* **C, cost** (physical: currency per hour): every powered-on node costs its capacity times its
  domain's ``price_per_hour`` (per core, per GiB of memory, per GPU card, per unit of any other
  resource). Normalized by the cost of all nodes on. In [0, 1].
* **K, carbon** (physical: gCO2 per hour): a powered-on node draws
  ``P = idle_w + (peak_w - idle_w) * ((1 - g) * cpu_utilization + g * gpu_utilization)``
  (:func:`dynamic_utilization`; requests over capacity: CPU millicores, GPU milli over cards x
  1000), ``g`` the node's ``power_gpu_share`` (the GPUs' share of its dynamic range; by default
  their share of the default power model's peak, 0 without GPUs, so a CPU-only node follows its
  CPU alone), times its domain's PUE, times the domain's carbon intensity (gCO2/kWh) / 1000.
  Normalized by the carbon of all nodes at peak. In [0, 1]. P is linear in the pods' cpu and GPU
  requests, so solvers can take its per-pod coefficients (:class:`Coefficients`).
* **P, unplaced** (physical: pods): workloads not placed, divided by the number of workloads.

The breakdown reports each term in physical units and as the normalized value that enters R.
:func:`marginal` gives the change of R for putting one workload on each candidate node, as a
vector over nodes, for online solvers; it agrees with :func:`evaluate` by construction (tested).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from iro_fed.model import GPU_MILLI, ClusterState, Problem, check_index

if TYPE_CHECKING:
    from iro_fed.placement import Placement

TERMS = ("utilization", "latency", "cost", "carbon", "unplaced")


@dataclass
class Breakdown:
    """R and its terms, physical and normalized."""

    score: float
    utilization_pct: float
    mean_latency_ms: float | None
    # Placed pods with a user region whose latency to their node's domain is unknown: they add 0
    # to L and are left out of mean_latency_ms, which without this count reads as covering all.
    latency_unknown: int
    cost_per_hour: float
    carbon_g_per_hour: float
    power_w: float
    unplaced: int
    placed: int
    powered_on_nodes: int
    terms: dict[str, float] = field(default_factory=dict)
    weighted: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        # ``+ 0.0`` turns the -0.0 of a zero penalty (-w * 0) into 0.0 in the placement file.
        return {
            "score": round(self.score, 9) + 0.0,
            "utilization_pct": round(self.utilization_pct, 6),
            "mean_latency_ms": None if self.mean_latency_ms is None else round(self.mean_latency_ms, 6),
            "latency_unknown": self.latency_unknown,
            "cost_per_hour": round(self.cost_per_hour, 6),
            "carbon_g_per_hour": round(self.carbon_g_per_hour, 6),
            "power_w": round(self.power_w, 6),
            "unplaced": self.unplaced,
            "placed": self.placed,
            "powered_on_nodes": self.powered_on_nodes,
            "terms": {k: round(v, 9) for k, v in self.terms.items()},
            "weighted": {k: round(v, 9) + 0.0 for k, v in self.weighted.items()},
        }


@dataclass(frozen=True)
class Coefficients:
    """Placement-independent numbers of a problem that the terms are made of."""

    node_cost: np.ndarray  # [N] per hour when on
    max_cost: float
    carbon_idle: np.ndarray  # [N] gCO2/h when on and idle
    carbon_dynamic: np.ndarray  # [N] gCO2/h at full CPU and GPUs on top of idle
    max_carbon: float
    latency_score: np.ndarray  # [U, D] ref / (ref + ms), 0 where unknown
    n_with_region: int
    cpu_capacity: np.ndarray  # [N]
    # For marginal(), with the problem's weights folded in:
    capacity_shape: np.ndarray  # [N] index of the node's row in shape_capacity
    shape_capacity: np.ndarray  # [S, R'] distinct util capacity rows
    off_gain_base: np.ndarray  # [N] -(w3 * cost + w4 * idle carbon), normalized, of powering on
    latency_weighted: np.ndarray  # [U, N] w2 * latency score of the node's domain / n_with_region
    carbon_per_milli_weighted: np.ndarray  # [N] w4 * the CPU's dynamic carbon per requested millicore, normalized
    carbon_per_gpu_milli_weighted: np.ndarray  # [N] w4 * the GPUs' per requested GPU milli (0 without GPUs)
    # For evaluate():
    cpu_divisor: np.ndarray  # [N] cpu_capacity, 1 where it is 0 (CPU utilization's denominator)
    # cpu's column in util_resources (initial_used's layout): cpu_index is one of resources, another
    # column when a feasibility_only resource comes before cpu
    cpu_util_column: int
    gpu_divisor: np.ndarray  # [N] cards x 1000, 1 where the node has none (GPU utilization's denominator)
    initial_used: np.ndarray  # [N, R'] util usage before any workload is placed (read-only)


_coef_cache: weakref.WeakKeyDictionary[Problem, Coefficients] = weakref.WeakKeyDictionary()


def coefficients(problem: Problem) -> Coefficients:
    cached = _coef_cache.get(problem)
    if cached is not None:
        return cached
    p = problem
    node_cost = (p.util_capacity * p.node_unit_price).sum(axis=1) if p.num_nodes else np.zeros(0)
    factor = p.domain_pue[p.node_domain] * p.domain_carbon[p.node_domain] / 1000.0
    carbon_idle = p.power_idle_w * factor
    carbon_dynamic = (p.power_peak_w - p.power_idle_w) * factor
    ref = p.latency_ref_ms
    with np.errstate(invalid="ignore"):
        lat_score = np.where(np.isnan(p.latency_ms), 0.0, ref / (ref + np.nan_to_num(p.latency_ms, nan=0.0)))
    w = p.weights
    max_cost = float(node_cost.sum())
    max_carbon = float((carbon_idle + carbon_dynamic).sum())
    n_with_region = int((p.wl_region >= 0).sum())
    cpu_cap = p.capacity[:, p.cpu_index].copy()
    cpu_divisor = np.where(cpu_cap > 0, cpu_cap, 1.0)
    gpu_divisor = np.where(p.gpu_count > 0, p.gpu_count.astype(np.float64) * GPU_MILLI, 1.0)
    if p.has_gpus:
        # The dynamic range split between CPU and GPUs (a node without GPUs: g = 0, all CPU).
        g = p.power_gpu_share
        per_milli = (1.0 - g) * carbon_dynamic / cpu_divisor
        per_gpu_milli = g * carbon_dynamic / gpu_divisor
    else:
        per_milli, per_gpu_milli = carbon_dynamic / cpu_divisor, np.zeros_like(carbon_dynamic)
    shapes, shape_index = np.unique(p.util_capacity, axis=0, return_inverse=True)
    coef = Coefficients(
        node_cost=node_cost,
        max_cost=max_cost,
        carbon_idle=carbon_idle,
        carbon_dynamic=carbon_dynamic,
        max_carbon=max_carbon,
        latency_score=lat_score,
        n_with_region=n_with_region,
        cpu_capacity=cpu_cap,
        capacity_shape=shape_index.reshape(-1).astype(np.int64),  # numpy 2.0.0 gave it shape (N, 1)
        shape_capacity=shapes,
        off_gain_base=-(w.cost * _ratio_array(node_cost, max_cost) + w.carbon * _ratio_array(carbon_idle, max_carbon)),
        latency_weighted=(w.latency * _ratio(1.0, n_with_region)) * lat_score[:, p.node_domain],
        carbon_per_milli_weighted=w.carbon * _ratio_array(per_milli, max_carbon),
        carbon_per_gpu_milli_weighted=w.carbon * _ratio_array(per_gpu_milli, max_carbon),
        cpu_divisor=cpu_divisor,
        gpu_divisor=gpu_divisor,
        cpu_util_column=p.util_resources.index("cpu"),
        initial_used=_initial_used_of(p),
    )
    _coef_cache[problem] = coef
    return coef


def _initial_used_of(p: Problem) -> np.ndarray:
    """``used[N, R']`` matching ``util_capacity`` before any workload is placed: the allocated
    util columns and, when the cluster has GPUs, the milli in use on the node's cards."""
    used = p.util_capacity * 0.0
    if p.num_nodes:
        used[:, : len(p.util_resources) - (1 if p.has_gpus else 0)] = p.util_columns(p.allocated)
        if p.has_gpus:
            initial_gpu = np.where(p.gpu_free >= 0, GPU_MILLI - np.maximum(p.gpu_free, 0), 0).sum(axis=1)
            used[:, -1] = initial_gpu
    used.setflags(write=False)
    return used


def dynamic_utilization(problem: Problem, cpu_used: np.ndarray, gpu_used: np.ndarray) -> np.ndarray:
    """Per node, the share of its dynamic power range (``peak - idle``) it draws:
    ``(1 - g) * cpu_util + g * gpu_util`` with ``g = problem.power_gpu_share``, each utilization
    its requests over capacity (``cpu_used`` millicores, ``gpu_used`` milli on the node's cards),
    at most 1. Without GPUs in the problem it is ``cpu_util`` itself (bit for bit as before the
    GPU term). The one rule for the objective and the simulator's power series."""
    coef = coefficients(problem)
    cpu_util = np.minimum(cpu_used / coef.cpu_divisor, 1.0)
    if not problem.has_gpus:
        return cpu_util
    g = problem.power_gpu_share
    return (1.0 - g) * cpu_util + g * np.minimum(gpu_used / coef.gpu_divisor, 1.0)


def _ratio(x: float, total: float) -> float:
    return x / total if total > 0 else 0.0


def _ratio_array(x: np.ndarray, total: float) -> np.ndarray:
    return x / total if total > 0 else np.zeros_like(x)


#: Below this many terms numpy's float sum adds them one by one in order (its pairwise summation
#: starts at 8), so a Python loop over the same values gives the same bits (tested against numpy).
_SEQUENTIAL_SUM_MAX = 7


def _utilization(used_on: np.ndarray, cap_on: np.ndarray) -> float:
    if cap_on.size <= _SEQUENTIAL_SUM_MAX:
        # A few resources (every marginal() asks twice): scalar arithmetic, the same
        # divisions and the same left-to-right sum as the vector expression below.
        total, k = 0.0, 0
        for u, c in zip(used_on.tolist(), cap_on.tolist(), strict=True):
            if c > 0:
                total = u / c if k == 0 else total + u / c
                k += 1
        return total / k if k else 0.0
    valid = cap_on > 0
    if not valid.any():
        return 0.0
    shares = used_on[valid] / cap_on[valid]
    return float(shares.sum() / shares.size)  # what ndarray.mean computes, without its overhead on a hot path


def _assignment_of(placement: Any) -> np.ndarray:
    """The assignment vector of a placement (or state), an array or a list / tuple of indices."""
    if isinstance(placement, np.ndarray):
        return placement
    assignment = getattr(placement, "assignment", None)
    if assignment is not None:
        return np.asarray(assignment)
    if isinstance(placement, Sequence) and not isinstance(placement, (str, bytes)):
        return np.asarray(placement)  # (a list was an AttributeError: no .assignment)
    raise TypeError(f"placement: expected a Placement or an assignment vector (one node index per workload), "
                    f"got {type(placement).__name__}")


def evaluate(problem: Problem, placement: Placement | np.ndarray | Sequence[int]) -> Breakdown:
    """Score a placement (or a bare assignment vector: an array, list or tuple) against its problem.

    The assignment has one entry per workload: a node index, or -1 for unplaced; any other
    shape or value raises ValueError naming the entry, anything else TypeError."""
    raw = _assignment_of(placement)
    p = problem
    # A short vector would score the missing pods as unplaced, a long one crash deep inside.
    if raw.shape != (p.num_workloads,):
        raise ValueError(f"assignment has shape {raw.shape}, expected ({p.num_workloads},): one node index per workload")
    if raw.dtype.kind not in "iu":
        # A cast truncates: -0.5 scored as placed on node 0, 1.7 on node 1, a bool mask on nodes 0 and 1.
        ok = np.isin(raw, np.arange(-1, p.num_nodes)) if raw.dtype.kind != "b" else np.zeros(raw.shape, dtype=bool)
        if not ok.all():
            w = int(np.flatnonzero(~ok)[0])
            value = raw[w].item() if isinstance(raw[w], np.generic) else raw[w]
            raise ValueError(
                f"assignment[{w}] ({p.workloads[w].name}): {value!r} is not a node index (-1 for unplaced, "
                f"or 0..{p.num_nodes - 1})"
            )
    assignment = np.asarray(raw, dtype=np.int64)
    if assignment.size and (assignment.min() < -1 or assignment.max() >= p.num_nodes):
        w = int(np.flatnonzero((assignment < -1) | (assignment >= p.num_nodes))[0])
        raise ValueError(
            f"assignment[{w}] ({p.workloads[w].name}): node index {int(assignment[w])} is not -1 (unplaced) "
            f"or 0..{p.num_nodes - 1}"
        )
    coef = coefficients(p)
    wts = p.weights
    placed = np.flatnonzero(assignment >= 0)
    nodes_of = assignment[placed]

    used = coef.initial_used.copy()
    if p.num_nodes:
        np.add.at(used, nodes_of, p.util_demand[placed])
    pods = np.bincount(nodes_of, minlength=p.num_nodes) if p.num_nodes else np.zeros(0, dtype=np.int64)
    on = (used > 0).any(axis=1) | (pods > 0)

    util = _utilization(used[on].sum(axis=0), p.util_capacity[on].sum(axis=0))

    lat_sum, lat_ms, lat_known = 0.0, 0.0, 0
    with_region = placed[p.wl_region[placed] >= 0]
    if with_region.size:
        regions = p.wl_region[with_region]
        doms = p.node_domain[assignment[with_region]]
        lat_sum = float(coef.latency_score[regions, doms].sum())
        ms = p.latency_ms[regions, doms]
        known = ~np.isnan(ms)
        lat_known = int(known.sum())
        lat_ms = float(ms[known].sum())
    latency_term = _ratio(lat_sum, coef.n_with_region)

    cost = float(coef.node_cost[on].sum())
    cpu_used = used[:, coef.cpu_util_column]
    # gpu milli is used's last column when there are GPUs
    dyn = dynamic_utilization(p, cpu_used, used[:, -1] if p.has_gpus else cpu_used)
    carbon = float((coef.carbon_idle[on] + coef.carbon_dynamic[on] * dyn[on]).sum())
    power = float((p.power_idle_w[on] + (p.power_peak_w[on] - p.power_idle_w[on]) * dyn[on]).sum())

    unplaced = int(p.num_workloads - placed.size)
    terms = {
        "utilization": util,
        "latency": latency_term,
        "cost": _ratio(cost, coef.max_cost),
        "carbon": _ratio(carbon, coef.max_carbon),
        "unplaced": _ratio(unplaced, p.num_workloads),
    }
    weighted = {
        "utilization": wts.utilization * terms["utilization"],
        "latency": wts.latency * terms["latency"],
        "cost": -wts.cost * terms["cost"],
        "carbon": -wts.carbon * terms["carbon"],
        "unplaced": -wts.unplaced * terms["unplaced"],
    }
    return Breakdown(
        score=float(sum(weighted.values())),
        utilization_pct=100.0 * util,
        mean_latency_ms=(lat_ms / lat_known) if lat_known else None,
        latency_unknown=int(with_region.size - lat_known),
        cost_per_hour=cost,
        carbon_g_per_hour=carbon,
        power_w=power,
        unplaced=unplaced,
        placed=int(placed.size),
        powered_on_nodes=int(on.sum()),
        terms=terms,
        weighted=weighted,
    )


def marginal(problem: Problem, state: ClusterState, w: int, nodes: np.ndarray | None = None) -> np.ndarray:
    """Change of R for placing workload ``w`` on each of ``nodes`` (default: all) in ``state``,
    compared with leaving it unplaced.

    Assumes the pod fits where it is asked about (feasibility is the caller's business): the
    utilization steps of the power model are then exactly ``cpu / capacity`` and ``gpu milli /
    (cards x 1000)``. A handful of vector operations over the nodes: the utilization after
    powering a node on is computed once per distinct node capacity shape, the weighted per-node
    terms are precomputed.
    ``w`` is a workload index (TypeError / IndexError naming ``w`` otherwise, as
    :meth:`ClusterState.place`): -1 scored the last workload, a bad one failed deep in numpy.
    """
    p = problem
    if type(w) is not int or not 0 <= w < p.num_workloads:  # plain int comparisons on the hot path
        w = check_index("w", w, "workload", p.num_workloads)
    coef = coefficients(p)
    wts = p.weights

    def take(a: np.ndarray) -> np.ndarray:
        return a if nodes is None else a[nodes]

    size = p.num_nodes if nodes is None else len(nodes)
    base = wts.unplaced * _ratio(1.0, p.num_workloads)
    if size == 0:
        return np.zeros(0)

    # Utilization: one value for the nodes already on, one per capacity shape for the others.
    d = p.util_demand[w]
    used_after = state.util_used_total + d
    u_before = _utilization(state.util_used_total, state.util_cap_on)
    u_on = _utilization(used_after, state.util_cap_on)
    on_gain = wts.utilization * (u_on - u_before)
    on = take(state.on)
    if on.all():  # (a local search's usual case) no node to power on: its terms would all be replaced
        delta = np.full(size, on_gain + base)  # (a float64 sum, as ``delta += base`` below)
    else:
        cap_after = state.util_cap_on + coef.shape_capacity
        valid = cap_after > 0
        ratios = np.where(valid, used_after / np.where(valid, cap_after, 1.0), 0.0)
        u_off_shape = ratios.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)
        off_gain = wts.utilization * (u_off_shape - u_before)

        delta = take(coef.off_gain_base)  # -(cost + idle carbon) of powering on, weighted
        delta = delta + off_gain[take(coef.capacity_shape)]
        delta = np.where(on, on_gain, delta)
        delta += base
    region = int(p.wl_region[w])
    if region >= 0 and coef.n_with_region:
        delta += take(coef.latency_weighted[region])
    cpu = p.demand[w, p.cpu_index]
    if cpu:
        delta -= cpu * take(coef.carbon_per_milli_weighted)
    if p.has_gpus:
        gpu = p.wl_gpu_total[w]
        if gpu:
            delta -= gpu * take(coef.carbon_per_gpu_milli_weighted)
    return delta


def pair_values(problem: Problem, pods: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The part of :func:`marginal` that depends on the node alone, for each (pod, node) pair of
    ``pods`` and ``nodes`` (integer arrays, broadcast against each other): the pod's weighted
    latency score to the node's domain less its weighted dynamic carbon there. The rest of the
    marginal (utilization, power-on, the unplaced penalty avoided) depends on the cluster's state
    or on no node, so this is what tells two nodes apart for a pod wherever both are on."""
    p = problem
    coef = coefficients(p)
    pods, nodes = np.broadcast_arrays(np.asarray(pods, dtype=np.int64), np.asarray(nodes, dtype=np.int64))
    value = np.zeros(pods.shape)
    region = p.wl_region[pods]
    has_region = region >= 0
    if coef.n_with_region and has_region.any():
        value[has_region] = coef.latency_weighted[region[has_region], nodes[has_region]]
    value -= p.demand[pods, p.cpu_index] * coef.carbon_per_milli_weighted[nodes]
    if p.has_gpus:
        value -= p.wl_gpu_total[pods] * coef.carbon_per_gpu_milli_weighted[nodes]
    return value
