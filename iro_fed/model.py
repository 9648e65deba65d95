"""Problem model: domains, nodes, workloads, latency and weights, as struct-of-arrays.

Names and metadata live in small frozen dataclasses; every number a filter or a score needs
lives in a numpy array indexed by node (N), workload (W), resource (R), GPU card (G),
domain (D) or user region (U), so that feasibility and the objective are vector expressions
over all nodes at once.

Units: CPU in millicores, memory in MiB, GPU in milli-GPU (one card = 1000). Other names in
``resources`` are plain additive resources in their own unit.

GPU cards: ``gpu_free[n, g]`` is the free milli of card g on node n; cards a node does not
have are -1, so they never fit a request and never count as fully free.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

GPU_MILLI = 1000
DOMAIN_KINDS = ("edge", "zone", "cloud")
WORKLOAD_CLASSES = ("online", "batch", "burst")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: Toleration operators the loaders accept (an empty operator reads as Equal; Lt / Gt are Kubernetes' alpha ones).
TOLERATION_OPERATORS = ("Equal", "Exists", "Lt", "Gt")
#: Default power model when a node gives none: watts per CPU core / GPU card at peak, and
#: idle as a share of peak (typical of current x86 servers; SPECpower ranges 30-50 %).
DEFAULT_PEAK_W_PER_CORE = 5.0
DEFAULT_PEAK_W_PER_GPU = 300.0
DEFAULT_IDLE_SHARE = 0.4
#: Latency scale of the objective's latency term ref / (ref + ms), see iro_fed.objective.
DEFAULT_LATENCY_REF_MS = 10.0
#: The columns of ``Problem.nonzero_demand`` / ``initial_nonzero`` (cpu in millicores, memory in MiB).
NONZERO_RESOURCES = ("cpu", "memory")
#: What kube-scheduler's scoring counts for a *missing* cpu / memory request, in those units
#: (``schedutil.DefaultMilliCPURequest`` 100m, ``DefaultMemoryRequest`` 200 MiB): the one copy,
#: read by the Kubernetes snapshot (per container) and by ``kube-default`` (per pod, for a
#: problem without ``nonzero_demand``).
NONZERO_DEFAULTS = {"cpu": 100.0, "memory": 200.0}


@dataclass(frozen=True)
class Domain:
    """A placement domain: an edge site, a cloud availability zone or a public cloud region."""

    name: str
    kind: str = "zone"
    carbon_zone: str = ""
    carbon_intensity: float = 0.0  # gCO2 per kWh, the current value
    price_per_hour: Mapping[str, float] = field(default_factory=dict)
    pue: float = 1.0


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    """Kubernetes toleration semantics (k8s.io/api/core/v1 ToleratesTaint)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator not in ("Equal", ""):  # as v1.Toleration.ToleratesTaint: another operator tolerates nothing
            return False
        # An empty key with Equal matches nothing (the API server rejects it anyway).
        return bool(self.key) and self.value == taint.value


@dataclass(frozen=True)
class PreferredTerm:
    """A preferred node-affinity term: ``weight`` when every label in ``match_labels`` matches."""

    weight: int
    match_labels: Mapping[str, str]


@dataclass(frozen=True)
class Node:
    name: str
    domain: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    gpu_model: str = ""


@dataclass(frozen=True)
class Workload:
    name: str
    klass: str = "online"
    user_region: str = ""
    max_latency_ms: float | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    allowed_domains: tuple[str, ...] = ()
    priority: int = 0
    gpu_models: tuple[str, ...] = ()
    deadline_s: float | None = None
    preferred: tuple[PreferredTerm, ...] = ()

    @cached_property
    def _field_error(self) -> str:
        """What the loaders would refuse in this workload's own fields ("" if nothing), for a
        :class:`Problem` built directly; once per object (frozen), as a problem is built per
        simulator step from the same workloads."""
        return _workload_error(self)

    @cached_property
    def constraint_key(self) -> tuple:
        """Everything that decides static feasibility besides resources (for caching masks)."""
        return (
            tuple(sorted(self.node_selector.items())),
            self.tolerations,
            self.allowed_domains,
            self.user_region,
            self.max_latency_ms,
            self.gpu_models,
        )


@dataclass(frozen=True)
class Weights:
    utilization: float = 1.0
    latency: float = 1.0
    cost: float = 1.0
    carbon: float = 1.0
    unplaced: float = 10.0


class Problem:
    """One placement problem. Build it with :func:`iro_fed.problem_io.problem_from_dict`.

    The arrays are read-only views; solvers never mutate a problem, they work on a
    :class:`ClusterState` copy of its mutable part.

    Built directly (or by :meth:`replace`), it refuses what the loaders refuse, with a ValueError
    naming the field and its node / workload / domain: amounts (capacity, allocated, demand,
    power) that are negative or not finite, GPU counts below 0 and card values outside 0..1000
    (-1 past a node's cards), latency below 0 or infinite (NaN: unknown), negative carbon,
    prices and weights, PUE below 1, latency limits and deadlines <= 0, unknown classes, domains
    and user regions. It allows what a snapshot may hold and a file may not: a capacity of 0 (a
    node without a resource) and usage past capacity (an overcommitted node).

    Optional, for kube-scheduler's scoring (``kube-default``), from the Kubernetes snapshot:
    ``nonzero_demand[W, 2]`` is each workload's non-zero request and ``initial_nonzero[N, 2]``
    each node's ``NonZeroRequested`` (the sum over the pods already bound there), columns
    :data:`NONZERO_RESOURCES` (cpu millicores, memory MiB; 0 where the problem lacks the
    resource). A non-zero request is the request with kube's default (:data:`NONZERO_DEFAULTS`)
    put in for each container that sets none of that resource, which one number per pod cannot tell
    apart from an explicit 0. ``None`` (problem files, traces): callers fall back to
    ``demand`` / ``allocated``. :meth:`replace` drops ``nonzero_demand`` when ``demand`` or
    ``workloads`` change without it, and ``initial_nonzero`` when ``allocated`` does, so the
    data never describes other pods than the problem's.

    ``pod_scoring`` (optional, :class:`PodScoring`): what kube-scheduler's PodTopologySpread and
    InterPodAffinity score, from the Kubernetes snapshot, or from the simulator (the system default
    spreading of its pods' controllers) for a solver that reads it; ``None`` everywhere else (those
    plugins then score every node alike). :meth:`replace` drops it when ``nodes`` or ``workloads`` change
    without it.

    ``feasibility_only``: names in ``resources`` that bound where a workload fits and nothing
    else: they are left out of ``util_resources`` (utilization, cost, power-on), so adding one
    never changes a placement's score (the Kubernetes scheduler checks every resource a batch
    requests, but scores over the configured ones). ``cpu`` cannot be one (the power model).

    ``power_gpu_share[N]`` (optional): the GPUs' share g in [0, 1] of a node's dynamic power
    range ``power_peak_w - power_idle_w``; the node draws ``idle + (peak - idle) * ((1 - g) *
    cpu_util + g * gpu_util)`` (:mod:`iro_fed.objective`). None, or NaN for a node: the default
    model's share, :func:`default_gpu_share` (0 without GPUs). A node without GPUs must have 0.
    ``power_gpu_share_given`` keeps the argument as given (for :meth:`replace`), ``power_gpu_share``
    the resolved values.
    """

    def __init__(
        self,
        *,
        resources: Sequence[str],
        domains: Sequence[Domain],
        nodes: Sequence[Node],
        workloads: Sequence[Workload],
        regions: Sequence[str],
        latency_ms: np.ndarray,
        capacity: np.ndarray,
        allocated: np.ndarray,
        demand: np.ndarray,
        gpu_free: np.ndarray,
        gpu_count: np.ndarray,
        wl_gpu_count: np.ndarray,
        wl_gpu_milli: np.ndarray,
        power_idle_w: np.ndarray,
        power_peak_w: np.ndarray,
        weights: Weights = Weights(),
        latency_ref_ms: float = DEFAULT_LATENCY_REF_MS,
        nonzero_demand: np.ndarray | None = None,
        initial_nonzero: np.ndarray | None = None,
        feasibility_only: Sequence[str] = (),
        pod_scoring: PodScoring | None = None,
        power_gpu_share: np.ndarray | None = None,
    ) -> None:
        self.resources = tuple(resources)
        _check_resources(self.resources)
        self.feasibility_only = tuple(feasibility_only)
        self._util_cols = _util_columns(self.resources, self.feasibility_only)
        self.domains = tuple(domains)
        self.nodes = tuple(nodes)
        self.workloads = tuple(workloads)
        self.regions = tuple(regions)
        self.weights = weights
        self.latency_ref_ms = float(latency_ref_ms)
        self.resource_index = {r: i for i, r in enumerate(self.resources)}
        self.domain_index = {d.name: i for i, d in enumerate(self.domains)}
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.region_index = {r: i for i, r in enumerate(self.regions)}

        _check_names(self.domains, self.nodes, self.workloads, self.regions, self.region_index, self.domain_index,
                     self.node_index)
        self.latency_ms = _frozen(latency_ms, np.float64, (len(self.regions), len(self.domains)), "latency_ms")
        self.capacity = _frozen(capacity, np.float64, (len(self.nodes), len(self.resources)), "capacity")
        self.allocated = _frozen(allocated, np.float64, self.capacity.shape, "allocated")
        self.demand = _frozen(demand, np.float64, (len(self.workloads), len(self.resources)), "demand")
        self.gpu_count = _frozen(gpu_count, np.int32, (len(self.nodes),), "gpu_count")
        self.gpu_free = _frozen(gpu_free, np.int32, (len(self.nodes), self.gpu_free_width(self.gpu_count)), "gpu_free")
        self.wl_gpu_count = _frozen(wl_gpu_count, np.int32, (len(self.workloads),), "wl_gpu_count")
        self.wl_gpu_milli = _frozen(wl_gpu_milli, np.int32, (len(self.workloads),), "wl_gpu_milli")
        _check_gpu_counts(self.nodes, self.workloads, self.gpu_count, self.gpu_free, self.wl_gpu_count)
        _check_gpu_shape(self.workloads, self.wl_gpu_count, self.wl_gpu_milli)
        self.power_idle_w = _frozen(power_idle_w, np.float64, (len(self.nodes),), "power_idle_w")
        self.power_peak_w = _frozen(power_peak_w, np.float64, (len(self.nodes),), "power_peak_w")
        # As given (NaN or None: the default), kept for replace(): a new capacity or card count
        # then gets its own default share.
        self.power_gpu_share_given = None if power_gpu_share is None else _frozen(
            power_gpu_share, np.float64, (len(self.nodes),), "power_gpu_share")
        self._check_numbers()
        self.power_gpu_share = self._resolve_gpu_share()
        self.nonzero_demand = _optional_nonzero(nonzero_demand, len(self.workloads), "nonzero_demand")
        self.initial_nonzero = _optional_nonzero(initial_nonzero, len(self.nodes), "initial_nonzero")
        self.pod_scoring = _checked_pod_scoring(pod_scoring, len(self.nodes), len(self.workloads))

        # Built here, of their dtype and shape, owning their data: read-only as they are (_frozen
        # would check them and copy them again).
        self.node_domain = _readonly(np.array([self.domain_index[n.domain] for n in self.nodes], dtype=np.int32))
        self.gpu_models = tuple(sorted({n.gpu_model for n in self.nodes if n.gpu_model}))
        model_index = {m: i for i, m in enumerate(self.gpu_models)}
        self.node_gpu_model = _readonly(np.array([model_index.get(n.gpu_model, -1) for n in self.nodes], dtype=np.int32))
        self.wl_region = _readonly(
            np.array([self.region_index.get(w.user_region, -1) for w in self.workloads], dtype=np.int32))
        # GPU milli a workload takes in total: a share of one card, or k whole cards.
        total = np.where(self.wl_gpu_count > 1, self.wl_gpu_count * GPU_MILLI, self.wl_gpu_milli)
        self.wl_gpu_total = _readonly(np.where(self.wl_gpu_count > 0, total, 0).astype(np.int64, copy=False))

        self.domain_carbon = _readonly(np.array([d.carbon_intensity for d in self.domains], dtype=np.float64))
        self.domain_pue = _readonly(np.array([d.pue for d in self.domains], dtype=np.float64))
        # Price per unit-hour of each utilization resource (cpu per core, memory per GiB,
        # gpu per card, others per unit), converted to per internal unit.
        unit_scale = [_price_unit_scale(r) for r in self.util_resources]
        self.domain_unit_price = _frozen(  # (a copy: the reshape is a view of a writable array)
            np.array(
                [[d.price_per_hour.get(r, 0.0) / s for r, s in zip(self.util_resources, unit_scale, strict=True)] for d in self.domains],
                dtype=np.float64,
            ).reshape(len(self.domains), len(self.util_resources)),
            np.float64,
            (len(self.domains), len(self.util_resources)),
        )
        self._label_codes: dict[str, tuple[np.ndarray, dict[str, int]]] = {}
        self._fit_requests: dict[int, tuple[tuple[int, float], ...]] = {}

    def _check_numbers(self) -> None:
        """The loaders' number rules (``problem_io``) for a problem built directly: a ValueError
        naming the field and its node / workload / domain. Amounts are finite and >= 0 (a
        capacity may be 0 where a node has none of a resource, and usage past capacity is a
        snapshot's overcommitted node); latency may be NaN (unknown), not negative or inf."""
        from iro_fed.feasibility import FIT_REL  # (feasibility imports this module)

        nodes = self.nodes
        _check_amounts("capacity", self.capacity, "node", nodes, self.resources)
        # A running state's usage (the simulator's snapshots, replay windows) is sums and
        # differences of requests: where a resource's pods left but others stay on the node, it
        # is 0 give or take rounding (1.4 + 2.8 - 1.4 - 2.8 = -4.4e-16), within the filters' tolerance.
        _check_amounts("allocated", self.allocated, "node", nodes, self.resources, -FIT_REL * np.abs(self.capacity))
        _check_amounts("demand", self.demand, "workload", self.workloads, self.resources)
        _check_amounts("power_idle_w", self.power_idle_w, "node", nodes)
        _check_amounts("power_peak_w", self.power_peak_w, "node", nodes)
        over = np.flatnonzero(self.power_idle_w > self.power_peak_w)
        if over.size:
            n = int(over[0])
            raise ValueError(f"power_idle_w[{n}] (node {nodes[n].name!r}): must be at most power_peak_w "
                             f"({float(self.power_peak_w[n])!r}), got {float(self.power_idle_w[n])!r}")
        share = self.power_gpu_share_given
        if share is not None:
            bad = np.flatnonzero(~np.isnan(share) & ~((share >= 0) & (share <= 1)))
            if bad.size:
                n = int(bad[0])
                raise ValueError(f"power_gpu_share[{n}] (node {nodes[n].name!r}): must be in [0, 1] (NaN: the "
                                 f"default), got {float(share[n])!r}")
            bad = np.flatnonzero((self.gpu_count == 0) & (share > 0))
            if bad.size:
                n = int(bad[0])
                raise ValueError(f"power_gpu_share[{n}] (node {nodes[n].name!r}): must be 0 on a node without GPUs, "
                                 f"got {float(share[n])!r}")
        bad = np.argwhere(np.isinf(self.latency_ms) | (self.latency_ms < 0))
        if bad.size:
            u, d = (int(x) for x in bad[0])
            raise ValueError(f"latency_ms[{u}, {d}] (user region {self.regions[u]!r}, domain {self.domains[d].name!r}): "
                             f"must be >= 0 and finite (NaN: unknown), got {float(self.latency_ms[u, d])!r}")
        for d in self.domains:
            _check_domain(d)
        for w in self.workloads:
            if w._field_error:
                raise ValueError(w._field_error)
        for k, v in vars(self.weights).items():
            if not _finite_at_least(v, 0.0):
                raise ValueError(f"weights.{k}: must be finite and >= 0, got {v!r}")
        if not (math.isfinite(self.latency_ref_ms) and self.latency_ref_ms > 0):
            raise ValueError(f"latency_ref_ms: must be finite and > 0, got {self.latency_ref_ms!r}")

    def _resolve_gpu_share(self) -> np.ndarray:
        """``power_gpu_share`` per node: the given share, else :func:`default_gpu_share`."""
        cpu = self.capacity[:, self.resource_index["cpu"]] if "cpu" in self.resource_index else np.zeros(len(self.nodes))
        share = default_gpu_share(cpu, self.gpu_count)
        if self.power_gpu_share_given is not None:
            given = self.power_gpu_share_given
            share = np.where(np.isnan(given), share, given)
        return _readonly(share.astype(np.float64))

    # --- derived views -------------------------------------------------------------------

    @staticmethod
    def gpu_free_width(gpu_count: np.ndarray) -> int:
        return int(np.max(gpu_count)) if len(gpu_count) else 0

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_workloads(self) -> int:
        return len(self.workloads)

    @cached_property
    def has_gpus(self) -> bool:
        return bool(self.gpu_count.sum() > 0)

    @cached_property
    def util_resources(self) -> tuple[str, ...]:
        """Resources that utilization, cost and the power model are computed over."""
        return tuple(r for r in self.resources if r not in self.feasibility_only) + (("gpu",) if self.has_gpus else ())

    def util_columns(self, a: np.ndarray) -> np.ndarray:
        """The columns of a ``[..., R]`` array (capacity, allocated, demand or a row of one) that
        count in utilization: all of them unless some resources are ``feasibility_only``."""
        return a if self._util_cols is None else a[..., self._util_cols]

    @cached_property
    def util_capacity(self) -> np.ndarray:
        """capacity[N, R'] with the GPU column (cards x 1000) appended when the cluster has GPUs."""
        cap = self.util_columns(self.capacity)
        if not self.has_gpus:
            return _readonly(cap)
        return _readonly(np.column_stack([cap, self.gpu_count.astype(np.float64) * GPU_MILLI]))

    @cached_property
    def util_inv_capacity(self) -> np.ndarray:
        """1 / util_capacity, 0 where a node has none of a resource (for capacity shares)."""
        cap = self.util_capacity
        return _readonly(np.where(cap > 0, 1.0 / np.where(cap > 0, cap, 1.0), 0.0))

    @cached_property
    def util_valid_count(self) -> np.ndarray:
        """Per node, how many util resources it has (at least 1, to divide by)."""
        return _readonly(np.maximum((self.util_capacity > 0).sum(axis=1), 1).astype(np.float64))

    @cached_property
    def util_demand(self) -> np.ndarray:
        demand = self.util_columns(self.demand)
        if not self.has_gpus:
            return _readonly(demand)
        return _readonly(np.column_stack([demand, self.wl_gpu_total.astype(np.float64)]))

    @cached_property
    def node_unit_price(self) -> np.ndarray:
        """price[N, R'] per internal unit-hour, from each node's domain."""
        return _readonly(self.domain_unit_price[self.node_domain])

    @cached_property
    def initial_on(self) -> np.ndarray:
        """``on[n]``: node n is powered on before any workload is placed (it has allocated
        resources or a partly used GPU card); placing a pod on a node powers it on."""
        on = (self.util_columns(self.allocated) > 0).any(axis=1) if self.num_nodes else np.zeros(0, dtype=bool)
        if self.has_gpus:
            on = on | ((self.gpu_free >= 0) & (self.gpu_free < GPU_MILLI)).any(axis=1)
        return _readonly(np.asarray(on, dtype=bool))

    @cached_property
    def cpu_index(self) -> int:
        return self.resource_index["cpu"]

    @cached_property
    def gpu_shape(self) -> list[tuple[int, int]]:
        """Per workload ``(wl_gpu_count, wl_gpu_milli)`` as Python ints: read on every place,
        remove and fit test, where indexing the numpy arrays costs more than the work."""
        return list(zip(self.wl_gpu_count.tolist(), self.wl_gpu_milli.tolist(), strict=True))

    def fit_requests(self, w: int) -> tuple[tuple[int, float], ...]:
        """``(resource index, amount)`` of each resource workload ``w`` requests (amount > 0),
        the comparisons of the fit filters; cached per workload (on first use: a problem is built
        per simulator step, often for a few decisions)."""
        got = self._fit_requests.get(w)
        if got is None:
            got = tuple((r, v) for r, v in enumerate(self.demand[w].tolist()) if v > 0)
            self._fit_requests[int(w)] = got
        return got

    def label_codes(self, key: str) -> tuple[np.ndarray, dict[str, int]]:
        """Per-node integer code of label ``key`` (-1 where absent) and the value -> code map."""
        cached = self._label_codes.get(key)
        if cached is None:
            values: dict[str, int] = {}
            codes = np.full(self.num_nodes, -1, dtype=np.int32)
            for i, node in enumerate(self.nodes):
                v = node.labels.get(key)
                if v is not None:
                    codes[i] = values.setdefault(v, len(values))
            cached = (_readonly(codes), values)
            self._label_codes[key] = cached
        return cached

    @cached_property
    def taint_table(self) -> tuple[tuple[Taint, ...], np.ndarray]:
        """The distinct taints and a bool matrix node x taint."""
        taints = tuple(sorted({t for n in self.nodes for t in n.taints}, key=lambda t: (t.key, t.value, t.effect)))
        index = {t: i for i, t in enumerate(taints)}
        table = np.zeros((self.num_nodes, len(taints)), dtype=bool)
        for i, node in enumerate(self.nodes):
            for t in node.taints:
                table[i, index[t]] = True
        return taints, _readonly(table)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # pickle and deepcopy rebuild the arrays writeable: make them the read-only views again.
        self.__dict__.update(state)
        for value in state.values():
            if isinstance(value, np.ndarray):
                value.setflags(write=False)

    def replace(self, **changes: Any) -> Problem:
        """A copy with some constructor arguments replaced."""
        args: dict[str, Any] = {
            "resources": self.resources,
            "domains": self.domains,
            "nodes": self.nodes,
            "workloads": self.workloads,
            "regions": self.regions,
            "latency_ms": self.latency_ms,
            "capacity": self.capacity,
            "allocated": self.allocated,
            "demand": self.demand,
            "gpu_free": self.gpu_free,
            "gpu_count": self.gpu_count,
            "wl_gpu_count": self.wl_gpu_count,
            "wl_gpu_milli": self.wl_gpu_milli,
            "power_idle_w": self.power_idle_w,
            "power_peak_w": self.power_peak_w,
            "weights": self.weights,
            "latency_ref_ms": self.latency_ref_ms,
            "nonzero_demand": self.nonzero_demand,
            "initial_nonzero": self.initial_nonzero,
            "feasibility_only": self.feasibility_only,
            "pod_scoring": self.pod_scoring,
            "power_gpu_share": self.power_gpu_share_given,
        }
        unknown = set(changes) - set(args)
        if unknown:
            raise TypeError(f"Problem.replace: unknown field(s) {', '.join(sorted(unknown))}")
        # Non-zero requests describe the pods behind demand / allocated: other pods or another
        # usage without new ones means none (the scorer falls back to demand / allocated).
        if ("demand" in changes or "workloads" in changes) and "nonzero_demand" not in changes:
            changes = {**changes, "nonzero_demand": None}
        if "allocated" in changes and "initial_nonzero" not in changes:
            changes = {**changes, "initial_nonzero": None}
        # Pod scoring is about these nodes and pods (its arrays are per node and per workload).
        if ("nodes" in changes or "workloads" in changes) and "pod_scoring" not in changes:
            changes = {**changes, "pod_scoring": None}
        args.update(changes)
        return Problem(**args)

    def with_workloads(self, indices: Sequence[int] | np.ndarray) -> Problem:
        """A problem with the same cluster and a subset (or reordering) of the workloads: ``indices``
        are workload indices, a TypeError or IndexError naming ``indices`` otherwise (numpy took
        -1 as the last workload and 1.5 as workload 1)."""
        idx = np.asarray(indices)
        if idx.size == 0:
            idx = idx.astype(np.int64).reshape(0)
        elif idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise TypeError(f"indices: expected a list of workload indices, got an array of {idx.dtype} "
                            f"with shape {idx.shape}")
        else:
            low, high = int(idx.min()), int(idx.max())
            if low < 0 or high >= self.num_workloads:
                raise IndexError(_out_of_range("indices", low if low < 0 else high, "workload", self.num_workloads))
        return self.replace(
            workloads=[self.workloads[i] for i in idx],
            demand=self.demand[idx],
            wl_gpu_count=self.wl_gpu_count[idx],
            wl_gpu_milli=self.wl_gpu_milli[idx],
            nonzero_demand=None if self.nonzero_demand is None else self.nonzero_demand[idx],
            pod_scoring=None if self.pod_scoring is None else self.pod_scoring.with_workloads(idx),
        )

    def with_cluster(self, allocated: np.ndarray, gpu_free: np.ndarray) -> Problem:
        """The same problem on a cluster whose usage is ``allocated`` / ``gpu_free``."""
        return self.replace(allocated=allocated, gpu_free=gpu_free)

    def __repr__(self) -> str:
        return (
            f"Problem({self.num_nodes} nodes in {len(self.domains)} domains, "
            f"{self.num_workloads} workloads, resources={list(self.resources)})"
        )


def check_index(name: str, value: Any, kind: str, count: int) -> int:
    """``value`` as a ``kind`` ("workload" / "node") index below ``count`` (numpy ints too, bools
    not): a TypeError or IndexError naming ``name`` and the valid range otherwise. For the calls
    that take an index (a negative one silently meant the last pods or nodes, as in Python)."""
    if isinstance(value, (bool, np.bool_)):
        index = None
    else:
        try:
            index = operator.index(value)
        except TypeError:
            index = None
    if index is None:
        raise TypeError(f"{name}: expected a {kind} index, got {type(value).__name__} {value!r}"[:200])
    if not 0 <= index < count:
        raise IndexError(_out_of_range(name, index, kind, count))
    return index


def _out_of_range(name: str, index: int, kind: str, count: int) -> str:
    return f"{name}: {kind} index {index} is out of range 0..{count - 1} (the problem has {count} {kind}(s))"


class ClusterState:
    """The mutable part of a problem while pods are being placed: usage per node and card.

    Aggregates that filters and the objective read on every decision (free resources, free
    milli per card, number of fully free cards, largest free card, power-on) are kept up to
    date row by row, so an online decision costs O(N) vector work and no O(N x G) rescans.
    """

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.allocated = problem.allocated.copy()
        self.free = problem.capacity - problem.allocated
        self.gpu_free = problem.gpu_free.copy()
        self.assignment = np.full(problem.num_workloads, -1, dtype=np.int64)
        self.gpu_cards: dict[int, tuple[int, ...]] = {}
        # Every change of a node as (workload, node, sign): place (w, n, +1), remove (w, n, -1)
        # and a new base usage from set_node_usage (-1, n, 0). Policies that keep per-node caches
        # read the entries after their last cursor to refresh only the nodes that changed.
        self.journal: list[tuple[int, int, int]] = []
        # Each node's usage besides this state's workloads, its power-on without them and its
        # NonZeroRequested: the problem's (read-only, shared: a state is built per solve) until
        # set_node_usage gives a node another one and the state takes its own copies.
        self.base_allocated = problem.allocated
        self.initial_on = problem.initial_on
        self.initial_nonzero = problem.initial_nonzero
        self._recompute_gpu_aggregates()
        used_gpu = (self.gpu_free >= 0) * (GPU_MILLI - np.maximum(self.gpu_free, 0))
        self.gpu_used = used_gpu.sum(axis=1).astype(np.float64) if self.gpu_free.size else np.zeros(problem.num_nodes)
        self.pods_on_node = np.zeros(problem.num_nodes, dtype=np.int64)
        # Aggregates the objective's marginal reads on every decision, kept incrementally.
        self.on = self._node_is_on(np.arange(problem.num_nodes))
        used = self.util_used()
        self.util_used_total = used.sum(axis=0).astype(np.float64)
        self.util_cap_on = problem.util_capacity[self.on].sum(axis=0).astype(np.float64)
        # Free util resources per node and their capacity-normalized sum (packing scores).
        self.util_free = problem.util_capacity - used
        self.free_share = (self.util_free * problem.util_inv_capacity).sum(axis=1)

    def _node_is_on(self, rows: np.ndarray | int) -> np.ndarray:
        # From the pod count, not from ``allocated > 0``: removing float requests can leave a
        # residue (0.1 + 0.2 - 0.1 - 0.2 = 2.8e-17) that would keep an empty node on.
        return self.initial_on[rows] | (self.pods_on_node[rows] > 0)

    def _recompute_gpu_aggregates(self) -> None:
        g = self.gpu_free
        if g.shape[1] == 0:
            n = self.problem.num_nodes
            self.gpu_full = np.zeros(n, dtype=np.int32)
            self.gpu_max_free = np.full(n, -1, dtype=np.int32)
            self.gpu_left = np.zeros(n, dtype=np.int64)
            return
        self.gpu_full = (g == GPU_MILLI).sum(axis=1).astype(np.int32)
        self.gpu_max_free = g.max(axis=1).astype(np.int32)
        self.gpu_left = np.where(g > 0, g, 0).sum(axis=1).astype(np.int64)

    def _refresh_gpu_row(self, n: int) -> None:
        # A handful of int32 cards per row: Python's list operations beat four numpy reductions
        # here (every place and remove of a GPU pod; 4-7 % of a qubo solve), integer-exact alike.
        row = self.gpu_free[n].tolist()
        self.gpu_full[n] = row.count(GPU_MILLI)
        self.gpu_max_free[n] = max(row)
        absent = row.count(-1)
        if min(row) >= -1:  # the usual row (cards 0..1000 free, -1 past them): C-level sums, no generators
            left = sum(row) + absent
            self.gpu_left[n] = left
            self.gpu_used[n] = float(GPU_MILLI * (len(row) - absent) - left)
        else:  # a card driven below 0 by explicit cards that did not fit: as before, it counts nowhere
            self.gpu_left[n] = sum(v for v in row if v > 0)
            self.gpu_used[n] = float(sum(GPU_MILLI - v for v in row if v >= 0))

    def set_node_usage(self, n: int, allocated: np.ndarray, gpu_free: np.ndarray, nonzero: np.ndarray | None = None) -> None:
        """Give node ``n`` another base usage (what it holds besides this state's workloads):
        ``allocated`` per resource and ``gpu_free`` milli free on its first cards (the node's
        cards, or the whole padded row of ``gpu_free`` with -1 past them), every aggregate kept as a
        fresh state of a problem with that usage would have it. For a what-if (the extender's
        preemption check: a node without its victims); ``n`` must hold none of this state's
        workloads. The new usage is the node's base from then on: removing the last workload
        placed there later returns the node to it, and the change is journalled so that
        policies' per-node caches see it.

        ``nonzero`` is the node's new NonZeroRequested (columns :data:`NONZERO_RESOURCES`);
        left out, it is the problem's when the usage is the problem's (putting a what-if back),
        else the usage itself: stale non-zero requests would count pods the node no longer holds.
        A problem without ``initial_nonzero`` (problem files, the extender's NodeList mode) takes
        every node's usage as its NonZeroRequested, so ``nonzero`` is refused there (ValueError):
        one node with its own would score by another rule than the rest (kube-default fixes its
        rule per problem), and dropping it would hide that the caller's numbers are not used.
        """
        p = self.problem
        if not 0 <= n < p.num_nodes:
            raise ValueError(f"set_node_usage: node index {n} is out of range 0..{p.num_nodes - 1}")
        if self.pods_on_node[n]:
            raise ValueError(f"node {p.nodes[n].name!r} holds {int(self.pods_on_node[n])} placed workload(s)")
        # Every argument is checked before anything changes: no half-set node.
        allocated = _usage_vector(allocated, (len(p.resources),), "allocated")
        cards = np.asarray(gpu_free)
        if cards.ndim != 1 or cards.size > self.gpu_free.shape[1]:
            raise ValueError(f"set_node_usage: gpu_free must list at most {self.gpu_free.shape[1]} card(s), got shape {cards.shape}")
        if cards.size and (not np.issubdtype(cards.dtype, np.number) or not np.all(np.isin(cards, np.arange(-1, GPU_MILLI + 1)))):
            raise ValueError(f"set_node_usage: gpu_free must be whole milli -1..{GPU_MILLI} per card, got {cards.tolist()}")
        # -1 marks a card the node does not have: 1000 past its count made a phantom free card that
        # decide() chose and place() then refused, and -1 on a card it has would hide that card.
        count = int(p.gpu_count[n])
        if (cards[:count] < 0).any() or (cards[count:] != -1).any():
            raise ValueError(f"set_node_usage: gpu_free of node {p.nodes[n].name!r} must give 0..{GPU_MILLI} for each of "
                             f"its {count} card(s) and -1 past them, got {cards.tolist()}")
        if nonzero is not None:
            if self.initial_nonzero is None:
                raise ValueError("set_node_usage: nonzero is given but the problem has no initial_nonzero (its nodes' "
                                 "usage is their NonZeroRequested): leave nonzero out, or build the problem with one")
            nonzero = _usage_vector(nonzero, (len(NONZERO_RESOURCES),), "nonzero")
        elif self.initial_nonzero is not None:
            same = np.array_equal(allocated, p.allocated[n]) and np.array_equal(cards, p.gpu_free[n, : cards.size])
            nonzero = p.initial_nonzero[n] if same else np.array(
                [allocated[p.resource_index[r]] if r in p.resource_index else 0.0 for r in NONZERO_RESOURCES])
        if self.base_allocated is p.allocated:  # the first what-if: from now on this state's own
            self.base_allocated, self.initial_on, self.initial_nonzero = self._base_copies()
        self.base_allocated[n] = allocated
        self.allocated[n] = allocated
        self.free[n] = p.capacity[n] - self.allocated[n]
        if nonzero is not None:  # (given or derived only where the state has initial_nonzero)
            self.initial_nonzero[n] = nonzero
        on = bool((p.util_columns(self.allocated[n]) > 0).any())
        if self.gpu_free.shape[1]:
            self.gpu_free[n, : cards.size] = cards
            self._refresh_gpu_row(n)
            row = self.gpu_free[n]
            on = on or bool(((row >= 0) & (row < GPU_MILLI)).any())
        self.initial_on[n] = on
        row = p.util_columns(self.allocated[n])
        used = np.append(row, self.gpu_used[n]) if p.has_gpus else row
        self.util_used_total += used - (p.util_capacity[n] - self.util_free[n])
        self.util_free[n] = p.util_capacity[n] - used
        self.free_share[n] = (self.util_free[n] * p.util_inv_capacity[n]).sum()
        if on != bool(self.on[n]):
            self.on[n] = on
            self.util_cap_on += p.util_capacity[n] if on else -p.util_capacity[n]
        self.journal.append((-1, n, 0))

    def _base_copies(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Writable copies of ``base_allocated``, ``initial_on`` and ``initial_nonzero``."""
        nz = self.initial_nonzero
        return self.base_allocated.copy(), self.initial_on.copy(), None if nz is None else nz.copy()

    def util_used(self) -> np.ndarray:
        """used[N, R'] matching ``problem.util_capacity``."""
        used = self.problem.util_columns(self.allocated)
        if not self.problem.has_gpus:
            return used
        return np.column_stack([used, self.gpu_used])

    def default_cards(self, w: int, n: int) -> tuple[int, ...]:
        """The card choice of the paper's simulator: a share pod takes the fitting card with
        the least milli left, a k-GPU pod the lowest-index fully free cards."""
        p = self.problem
        k, milli = p.gpu_shape[w]
        if k <= 0:
            return ()
        row = self.gpu_free[n].tolist()  # a few cards: list scans beat flatnonzero / argmin
        if k == 1 and milli < GPU_MILLI:
            best = -1
            for c, v in enumerate(row):
                if v >= milli and (best < 0 or v < row[best]):  # the first card of the least fitting milli
                    best = c
            if best < 0:
                raise ValueError(f"workload {p.workloads[w].name!r}: no card on node {p.nodes[n].name!r} has {milli} milli free")
            return (best,)
        full = [c for c, v in enumerate(row) if v == GPU_MILLI]
        if len(full) < k:
            raise ValueError(f"workload {p.workloads[w].name!r}: node {p.nodes[n].name!r} has {len(full)} free cards, needs {k}")
        return tuple(full[:k])

    def place(self, w: int, n: int, cards: Sequence[int] | None = None) -> tuple[int, ...]:
        """Put workload w on node n (on ``cards``, or the default card choice)."""
        # Plain int comparisons on the hot path; anything else (numpy ints, bad values) is
        # checked: n=-1 (an unplaceable Decision's node) corrupted the last node, w=-1 took the last pod.
        if type(w) is not int or type(n) is not int or not (0 <= w < len(self.assignment) and 0 <= n < len(self.pods_on_node)):
            w, n = self._index("w", w, "workload"), self._index("n", n, "node")
        if self.assignment[w] >= 0:
            raise ValueError(f"workload {self.problem.workloads[w].name!r} is already placed")
        p = self.problem
        if cards is None:
            cards = self.default_cards(w, n)  # distinct cards of node n, as Python ints
        else:
            cards = tuple(int(c) for c in cards)
            if cards and not p.gpu_shape[w][0]:  # (cards recorded for a pod without GPUs: a file placement_from_dict refuses)
                raise ValueError(f"workload {p.workloads[w].name!r}: cards {list(cards)} given, but it asks for no GPU")
            if cards and (len(set(cards)) != len(cards) or not all(0 <= c < p.gpu_count[n] for c in cards)):
                # -1 took the node's last card (a Python index), 99 an IndexError deep in the update.
                raise ValueError(f"workload {p.workloads[w].name!r}: cards {list(cards)} are not distinct card "
                                 f"indices of node {p.nodes[n].name!r} (0..{int(p.gpu_count[n]) - 1})")
        # Row updates through views (``row = a[n]; row += d``): what ``a[n] += d`` computes,
        # without its write-back of the row onto itself.
        d = p.demand[w]
        row = self.allocated[n]
        row += d
        row = self.free[n]
        row -= d
        if cards:
            k, milli = p.gpu_shape[w]
            take = GPU_MILLI if k > 1 else milli
            gpu_free = self.gpu_free
            for c in cards:
                gpu_free[n, c] -= take
            self._refresh_gpu_row(n)
            self.gpu_cards[w] = cards
        self.assignment[w] = n
        self.pods_on_node[n] += 1
        self.journal.append((w, n, 1))
        ud = p.util_demand[w]
        self.util_used_total += ud
        row = self.util_free[n]
        row -= ud
        self.free_share[n] -= ud.dot(p.util_inv_capacity[n])  # (what ``@`` computes: the same BLAS dot, less overhead)
        if not self.on[n]:
            self.on[n] = True
            self.util_cap_on += p.util_capacity[n]
        return cards

    def remove(self, w: int) -> None:
        """Take workload w off its node (departures in the simulator)."""
        if type(w) is not int or not 0 <= w < len(self.assignment):  # (w=-1 took the last pod off)
            w = self._index("w", w, "workload")
        n = int(self.assignment[w])
        if n < 0:
            raise ValueError(f"workload {self.problem.workloads[w].name!r} is not placed")
        p = self.problem
        d = p.demand[w]
        row = self.allocated[n]  # (views, as in place)
        row -= d
        row = self.free[n]
        row += d
        cards = self.gpu_cards.pop(w, ())
        if cards:
            k, milli = p.gpu_shape[w]
            give = GPU_MILLI if k > 1 else milli
            gpu_free = self.gpu_free
            for c in cards:
                gpu_free[n, c] += give
            self._refresh_gpu_row(n)
        self.assignment[w] = -1
        self.pods_on_node[n] -= 1
        self.journal.append((w, n, -1))
        ud = p.util_demand[w]
        self.util_used_total -= ud
        row = self.util_free[n]
        row += ud
        self.free_share[n] += ud.dot(p.util_inv_capacity[n])
        if self.pods_on_node[n] == 0:
            # The node is back to its base usage: take it exactly, without the float
            # residue of the additions and subtractions (filters compare free amounts).
            base = self.base_allocated[n]
            self.allocated[n] = base
            self.free[n] = p.capacity[n] - base
            row = p.util_columns(base)
            used = np.append(row, self.gpu_used[n]) if p.has_gpus else row
            self.util_free[n] = p.util_capacity[n] - used
            self.free_share[n] = (self.util_free[n] * p.util_inv_capacity[n]).sum()
        if not self._node_is_on(n):
            self.on[n] = False
            self.util_cap_on -= p.util_capacity[n]

    def _index(self, name: str, value: Any, kind: str) -> int:
        """:func:`check_index` against this state's workloads or nodes."""
        return check_index(name, value, kind, len(self.assignment) if kind == "workload" else len(self.pods_on_node))

    @classmethod
    def with_assignment(
        cls, problem: Problem, assignment: np.ndarray, gpu_cards: Mapping[int, Sequence[int]] | None = None
    ) -> ClusterState:
        """The problem's cluster with each workload on its node of ``assignment`` (-1: unplaced)
        and on its ``gpu_cards`` (default: the usual card choice)."""
        state = cls(problem)
        cards = gpu_cards or {}
        for w in np.flatnonzero(np.asarray(assignment) >= 0):
            state.place(int(w), int(assignment[w]), cards.get(int(w)))
        return state

    def copy(self) -> ClusterState:
        other = object.__new__(ClusterState)
        other.problem = self.problem
        for name in (
            "allocated", "free", "gpu_free", "assignment", "gpu_full", "gpu_max_free", "gpu_left",
            "gpu_used", "pods_on_node", "on", "util_used_total", "util_cap_on", "util_free", "free_share",
        ):
            setattr(other, name, getattr(self, name).copy())
        shared = self.base_allocated is self.problem.allocated  # still the problem's (read-only): share them
        other.base_allocated, other.initial_on, other.initial_nonzero = (
            (self.base_allocated, self.initial_on, self.initial_nonzero) if shared else self._base_copies())
        other.gpu_cards = dict(self.gpu_cards)
        other.journal = list(self.journal)
        return other


def _price_unit_scale(resource: str) -> float:
    """How many internal units one priced unit is (prices are per core, GiB, card)."""
    return {"cpu": 1000.0, "memory": 1024.0, "gpu": float(GPU_MILLI)}.get(resource, 1.0)


def _usage_vector(value: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """``value`` as a float64 vector of ``shape`` with finite amounts >= 0, else a ValueError naming it."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"set_node_usage: {name} must be numbers, got {value!r}"[:200]) from None
    if arr.shape != shape:
        raise ValueError(f"set_node_usage: {name} must have shape {shape}, got {arr.shape}")
    if not (np.isfinite(arr) & (arr >= 0)).all():
        raise ValueError(f"set_node_usage: {name} must be finite and >= 0, got {arr.tolist()}")
    return arr


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _frozen(a: Any, dtype: Any, shape: tuple[int, ...], name: str = "array") -> np.ndarray:
    """A read-only copy of ``a`` as ``dtype`` of ``shape``; a ValueError naming ``name`` for other
    shapes, non-numbers and (for an integer ``dtype``) fractions, which a cast cut silently (2.5 -> 2)."""
    try:
        arr = np.array(a, dtype=dtype, copy=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"{name}: expected numbers of shape {shape}: {e}"[:300]) from None
    if arr.size == 0:
        arr = arr.reshape(shape)
    if arr.shape != shape:
        raise ValueError(f"{name}: array has shape {arr.shape}, expected {shape}")
    if arr.dtype.kind in "iu":
        src = np.asarray(a)
        if src.dtype.kind not in "iub":
            with np.errstate(invalid="ignore"):
                whole = np.asarray(src == arr, dtype=bool)
            if not whole.all():
                at = tuple(int(x) for x in np.argwhere(~whole)[0])
                raise ValueError(f"{name}[{', '.join(map(str, at))}]: must be a whole number, got {src[at].item()!r}")
    return _readonly(arr)


def _finite_at_least(value: Any, low: float) -> bool:
    """``value`` is a real number (not bool), finite and >= ``low``."""
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and math.isfinite(value) and value >= low


def _check_amounts(field: str, arr: np.ndarray, kind: str, rows: Sequence[Node] | Sequence[Workload],
                   cols: Sequence[str] = (), low: np.ndarray | float = 0.0) -> None:
    """Every entry of ``arr`` (per ``kind`` row: the nodes or workloads, per resource column) is
    finite and >= 0 (>= ``low``, a rounding allowance below 0)."""
    bad = np.argwhere(~np.isfinite(arr) | (arr < low))
    if not bad.size:
        return
    at = tuple(int(x) for x in bad[0])
    where = f"{kind} {rows[at[0]].name!r}" + (f", {cols[at[1]]}" if len(at) > 1 else "")
    raise ValueError(f"{field}[{', '.join(map(str, at))}] ({where}): must be finite and >= 0, got {float(arr[at])!r}")


def _check_names(domains: Sequence[Domain], nodes: Sequence[Node], workloads: Sequence[Workload],
                 region_names: Sequence[str], regions: Mapping[str, int], domain_index: Mapping[str, int],
                 node_index: Mapping[str, int]) -> None:
    """Names the problem's indices rely on: distinct domains, nodes, workloads and regions, each
    node's domain and taint effects, each workload's user region and allowed domains declared (an
    unknown region was -1 silently, an unknown node domain a KeyError). Set tests first: a problem
    is built per simulator step."""
    # The name -> index maps are built already: fewer entries than items is a repeated name.
    for kind, items, index in (("domain", domains, domain_index), ("node", nodes, node_index),
                               ("workload", workloads, None)):
        names = [x.name for x in items] if index is None or len(index) < len(items) else []
        if len(set(names)) < len(names):
            seen: dict[str, int] = {}
            for i, name in enumerate(names):
                if name in seen:
                    raise ValueError(f"{kind}s[{i}]: duplicate {kind} name {name!r} (also {kind}s[{seen[name]}])")
                seen[name] = i
    if len(regions) < len(region_names):
        i = next(i for i, r in enumerate(region_names) if r in region_names[:i])
        raise ValueError(f"regions[{i}]: duplicate user region {region_names[i]!r} "
                         f"(also regions[{region_names.index(region_names[i])}])")
    if not {t.effect for n in nodes for t in n.taints} <= set(TAINT_EFFECTS):
        i, n = next((i, n) for i, n in enumerate(nodes) if any(t.effect not in TAINT_EFFECTS for t in n.taints))
        j, t = next((j, t) for j, t in enumerate(n.taints) if t.effect not in TAINT_EFFECTS)
        raise ValueError(f"nodes[{i}].taints[{j}].effect (node {n.name!r}): must be one of {', '.join(TAINT_EFFECTS)}, "
                         f"got {t.effect!r}")
    known = {d.name for d in domains}
    if not {n.domain for n in nodes} <= known:
        i, n = next((i, n) for i, n in enumerate(nodes) if n.domain not in known)
        raise ValueError(f"nodes[{i}] (node {n.name!r}): unknown domain {n.domain!r} (domains: {', '.join(sorted(known))})")
    if not {w.user_region for w in workloads} <= {"", *regions}:
        i, w = next((i, w) for i, w in enumerate(workloads) if w.user_region and w.user_region not in regions)
        raise ValueError(f"workloads[{i}] (workload {w.name!r}): unknown user_region {w.user_region!r} "
                         f"(regions: {', '.join(regions) or 'none'})")
    if not {d for w in workloads for d in w.allowed_domains} <= known:
        i, w = next((i, w) for i, w in enumerate(workloads) if not set(w.allowed_domains) <= known)
        d = next(d for d in w.allowed_domains if d not in known)
        raise ValueError(f"workloads[{i}] (workload {w.name!r}): unknown allowed domain {d!r} "
                         f"(domains: {', '.join(sorted(known))})")


def _check_gpu_counts(nodes: Sequence[Node], workloads: Sequence[Workload], gpu_count: np.ndarray,
                      gpu_free: np.ndarray, wl_gpu_count: np.ndarray) -> None:
    """Card counts >= 0; each node's cards 0..1000 milli free and -1 past its count (what the
    loader builds; -1 on a card it has hid it, a value past its count made a phantom card)."""
    if (gpu_count < 0).any():
        n = int(np.flatnonzero(gpu_count < 0)[0])
        raise ValueError(f"gpu_count[{n}] (node {nodes[n].name!r}): must be >= 0, got {int(gpu_count[n])}")
    if (wl_gpu_count < 0).any():
        w = int(np.flatnonzero(wl_gpu_count < 0)[0])
        raise ValueError(f"wl_gpu_count[{w}] (workload {workloads[w].name!r}): must be >= 0, got {int(wl_gpu_count[w])}")
    has = np.arange(gpu_free.shape[1])[None, :] < gpu_count[:, None]
    bad = np.argwhere(np.where(has, (gpu_free < 0) | (gpu_free > GPU_MILLI), gpu_free != -1))
    if bad.size:
        n, c = (int(x) for x in bad[0])
        rule = f"a card of the node must have 0..{GPU_MILLI} milli free" if has[n, c] else "past the node's cards it must be -1"
        raise ValueError(f"gpu_free[{n}, {c}] (node {nodes[n].name!r}, gpu_count {int(gpu_count[n])}): {rule}, "
                         f"got {int(gpu_free[n, c])}")


def _check_domain(d: Domain) -> None:
    if d.kind not in DOMAIN_KINDS:
        raise ValueError(f"domain {d.name!r}: kind must be one of {', '.join(DOMAIN_KINDS)}, got {d.kind!r}")
    if not _finite_at_least(d.carbon_intensity, 0.0):
        raise ValueError(f"domain {d.name!r}: carbon_intensity must be finite and >= 0, got {d.carbon_intensity!r}")
    if not _finite_at_least(d.pue, 1.0):
        raise ValueError(f"domain {d.name!r}: pue must be finite and >= 1.0, got {d.pue!r}")
    for r, v in d.price_per_hour.items():
        if not _finite_at_least(v, 0.0):
            raise ValueError(f"domain {d.name!r}: price_per_hour.{r} must be finite and >= 0, got {v!r}")


def _check_resources(resources: tuple[str, ...]) -> None:
    """The loader's resource-name rules: distinct names, and no ``gpu`` (GPUs are counted from
    the card arrays: a ``gpu`` resource counted them twice in utilization and cost)."""
    for i, r in enumerate(resources):
        if r == "gpu":
            raise ValueError(f"resources[{i}]: 'gpu' is not an additive resource: use gpu_count / gpu_free and "
                             "wl_gpu_count / wl_gpu_milli")
        if r in resources[:i]:
            raise ValueError(f"resources[{i}]: duplicate resource {r!r}")


def _workload_error(w: Workload) -> str:
    for j, t in enumerate(w.tolerations):
        if t.operator and t.operator not in TOLERATION_OPERATORS:
            return (f"workload {w.name!r}: tolerations[{j}].operator must be Equal or Exists (or the alpha Lt, Gt), "
                    f"got {t.operator!r}")
        if t.effect and t.effect not in TAINT_EFFECTS:
            return f"workload {w.name!r}: tolerations[{j}].effect must be empty or one of {', '.join(TAINT_EFFECTS)}, got {t.effect!r}"
    if w.klass not in WORKLOAD_CLASSES:
        return f"workload {w.name!r}: klass must be one of {', '.join(WORKLOAD_CLASSES)}, got {w.klass!r}"
    if w.max_latency_ms is not None:
        if not (_finite_at_least(w.max_latency_ms, 0.0) and w.max_latency_ms > 0):
            return f"workload {w.name!r}: max_latency_ms must be finite and > 0, got {w.max_latency_ms!r}"
        if not w.user_region:
            return f"workload {w.name!r}: max_latency_ms needs user_region to know where the latency is measured from"
    if w.deadline_s is not None and not (_finite_at_least(w.deadline_s, 0.0) and w.deadline_s > 0):
        return f"workload {w.name!r}: deadline_s must be finite and > 0, got {w.deadline_s!r}"
    if isinstance(w.priority, bool) or not isinstance(w.priority, (int, np.integer)) or not -(2**31) <= w.priority < 2**31:
        return f"workload {w.name!r}: priority must be a 32-bit integer, got {w.priority!r}"
    return ""


def _check_gpu_shape(workloads: Sequence[Workload], count: np.ndarray, milli: np.ndarray) -> None:
    """The loaders' rule (``problem_io``) for a problem built directly: count 1 is a share of
    1..1000 milli of one card, count k > 1 takes whole cards (1000). Count 1 at milli 0 was a
    share to the filters and a whole card to cpsat/qubo, which then disagreed on where it fits."""
    bad = ((count == 1) & ((milli < 1) | (milli > GPU_MILLI))) | ((count > 1) & (milli != GPU_MILLI))
    bad |= (milli < 0) | (milli > GPU_MILLI)  # count 0 (no GPU): no share either, but not a negative one
    if bad.any():
        w = int(np.flatnonzero(bad)[0])
        k, m = int(count[w]), int(milli[w])
        rule = (f"a GPU share must be in 1..{GPU_MILLI} milli of one card" if k == 1
                else f"a pod asking for {k} GPUs takes whole cards: it must be {GPU_MILLI}" if k > 1
                else f"a pod without GPUs has 0..{GPU_MILLI}")
        raise ValueError(f"wl_gpu_milli[{w}] (workload {workloads[w].name!r}, wl_gpu_count {k}): {rule}, got {m}")
    # A pod without GPUs has no share and no GPU models: the loaders refuse both (a problem file
    # can say neither), so a problem built with them was written to a file that read back without.
    share = (count == 0) & (milli > 0)
    if share.any():
        w = int(np.flatnonzero(share)[0])
        raise ValueError(f"wl_gpu_milli[{w}] (workload {workloads[w].name!r}, wl_gpu_count 0): a pod without GPUs "
                         f"takes no GPU share (0; give wl_gpu_count 1 for a share), got {int(milli[w])}")
    w = next((i for i, wl in enumerate(workloads) if wl.gpu_models and not count[i]), None)
    if w is not None:
        raise ValueError(f"workloads[{w}].gpu_models (workload {workloads[w].name!r}, wl_gpu_count 0): a pod without "
                         f"GPUs names no GPU models, got {list(workloads[w].gpu_models)}")


def _optional_nonzero(a: Any, rows: int, name: str) -> np.ndarray | None:
    """A read-only float64 ``[rows, 2]`` array of non-zero requests (None stays None); the
    error names the field: the wrong shape, or a value that is not finite and >= 0."""
    if a is None:
        return None
    try:
        arr = np.array(a, dtype=np.float64, copy=True)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected numbers, shape ({rows}, {len(NONZERO_RESOURCES)})") from None
    shape = (rows, len(NONZERO_RESOURCES))
    if arr.size == 0 and rows == 0:
        arr = arr.reshape(shape)
    if arr.shape != shape:
        raise ValueError(f"{name}: array has shape {arr.shape}, expected {shape} ({', '.join(NONZERO_RESOURCES)})")
    bad = np.argwhere(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        i, j = (int(x) for x in bad[0])
        raise ValueError(f"{name}[{i}, {j}] ({NONZERO_RESOURCES[j]}): must be finite and >= 0, got {float(arr[i, j])!r}")
    return _readonly(arr)


def default_power(cpu_millicores: float, gpus: int) -> tuple[float, float]:
    """(idle W, peak W) for a node that gives no power model."""
    peak = DEFAULT_PEAK_W_PER_CORE * cpu_millicores / 1000.0 + DEFAULT_PEAK_W_PER_GPU * gpus
    return DEFAULT_IDLE_SHARE * peak, peak


def default_gpu_share(cpu_millicores: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """Per node, the GPUs' share of the dynamic power range (``power_gpu_share``) when a node
    gives none: their share of the default model's peak, ``300 W x cards / (5 W x cores + 300 W
    x cards)`` (both parts idle at the same 40 %, so the same share of peak - idle); 0 without
    GPUs, 1 for a node with GPUs and no CPU."""
    gpu_w = DEFAULT_PEAK_W_PER_GPU * np.asarray(gpus, dtype=np.float64)
    total = DEFAULT_PEAK_W_PER_CORE * np.asarray(cpu_millicores, dtype=np.float64) / 1000.0 + gpu_w
    return np.where(gpu_w > 0, gpu_w / np.where(total > 0, total, 1.0), 0.0)


def _util_columns(resources: tuple[str, ...], feasibility_only: tuple[str, ...]) -> np.ndarray | None:
    """The indices of the resources that count in utilization (None: all of them), refusing a
    ``feasibility_only`` name the problem lacks, a repeated one, and ``cpu``."""
    if not feasibility_only:
        return None
    for i, r in enumerate(feasibility_only):
        if r not in resources:
            raise ValueError(f"feasibility_only[{i}]: {r!r} is not one of the resources {list(resources)}")
        if r == "cpu":
            raise ValueError(f"feasibility_only[{i}]: 'cpu' counts in the objective (the power model uses CPU utilization)")
        if r in feasibility_only[:i]:
            raise ValueError(f"feasibility_only[{i}]: {r!r} is repeated")
    return np.array([i for i, r in enumerate(resources) if r not in feasibility_only], dtype=np.int64)


#: Kinds of :class:`SoftPodTerm`: a ScheduleAnyway spread constraint of the pod (nodes lacking a
#: key of the pod's constraints are not scored), a system default one (such nodes still are),
#: a preferred pod affinity and anti-affinity (weighted counts of the group's pods per domain).
SOFT_POD_TERM_KINDS = ("spread", "default_spread", "affinity", "anti_affinity")
#: Topology key whose counts are the node's own (kube's ``v1.LabelHostname`` special case).
HOSTNAME_KEY = "kubernetes.io/hostname"
#: kube-scheduler's system default spread constraints (``podtopologyspread`` defaults, ScheduleAnyway):
#: (topology key, maxSkew); for pods a Service, ReplicaSet, StatefulSet or ReplicationController selects.
SYSTEM_DEFAULT_SPREAD = ((HOSTNAME_KEY, 3), ("topology.kubernetes.io/zone", 5))
#: Controllers whose pods the system default constraints spread (``helper.DefaultSelector``; the
#: Kubernetes snapshot and the simulator see no Services or controller objects: a pod's controller
#: ownerReference stands in).
SPREAD_CONTROLLER_KINDS = ("ReplicaSet", "StatefulSet", "ReplicationController")


@dataclass(frozen=True)
class SoftPodTerm:
    """One scoring term of a pending pod (:class:`PodScoring`): ``kind`` (:data:`SOFT_POD_TERM_KINDS`),
    the pods it counts (``group``), per node where (``topology``), and its ``value``: maxSkew for
    the spread kinds (>= 1), the weight for the affinity kinds (1..100; an existing pod's required
    affinity toward this pod is an ``affinity`` term of weight 1, hardPodAffinityWeight)."""

    kind: str
    group: int
    topology: int
    value: int


@dataclass(frozen=True, eq=False)
class PodScoring:
    """kube-scheduler's PodTopologySpread / InterPodAffinity scoring inputs, generic:

    * ``topology_keys[T]`` and ``topology[T, N]``: per topology row a node label key and each
      node's domain id (>= 0; -1: the node is not counted: it lacks the key, or a spread
      constraint's node inclusion policy or its other keys leave it out);
    * ``group_names[G]``, ``group_counts[G, N]``: sets of pods (a selector's matches, the pods of
      a controller, the pods holding one affinity term) and how many of each are on each node now;
      ``members[G, W]``: the pending workloads that join the group when placed (the solver counts
      the pods it placed before, as kube-scheduler assumes each pod before the next);
    * ``terms[W]``: each workload's :class:`SoftPodTerm` tuple.
    """

    topology_keys: tuple[str, ...]
    topology: np.ndarray
    group_names: tuple[str, ...]
    group_counts: np.ndarray
    members: np.ndarray
    terms: tuple[tuple[SoftPodTerm, ...], ...]
    topology_names: tuple[str, ...] = ()

    def with_workloads(self, idx: np.ndarray) -> PodScoring:
        """The same groups and topologies for the workloads ``idx`` (in that order)."""
        return PodScoring(self.topology_keys, self.topology, self.group_names, self.group_counts, self.members[:, idx],
                          tuple(self.terms[int(i)] for i in idx), self.topology_names)


def _checked_pod_scoring(ps: PodScoring | None, nodes: int, workloads: int) -> PodScoring | None:
    """``ps`` with read-only arrays of the problem's sizes, or a ValueError naming the field."""
    if ps is None:
        return None
    if not isinstance(ps, PodScoring):
        raise ValueError(f"pod_scoring: expected a PodScoring, got {type(ps).__name__}")
    t, g = len(ps.topology_keys), len(ps.group_names)
    names = tuple(ps.topology_names) or tuple(f"t{i}" for i in range(t))
    if len(names) != t:
        raise ValueError(f"pod_scoring.topology_names: {len(names)} names for {t} topologies")
    topology = _frozen(ps.topology, np.int32, (t, nodes), "pod_scoring.topology")
    counts = _frozen(ps.group_counts, np.int32, (g, nodes), "pod_scoring.group_counts")
    members = _frozen(ps.members, np.bool_, (g, workloads), "pod_scoring.members")
    if topology.size and int(topology.min()) < -1:
        raise ValueError(f"pod_scoring.topology: domain ids are >= 0 (-1: not counted), got {int(topology.min())}")
    if counts.size and int(counts.min()) < 0:
        raise ValueError(f"pod_scoring.group_counts: must be >= 0, got {int(counts.min())}")
    if len(ps.terms) != workloads:
        raise ValueError(f"pod_scoring.terms: {len(ps.terms)} rows for {workloads} workloads")
    for w, row in enumerate(ps.terms):
        for k, term in enumerate(row):
            where = f"pod_scoring.terms[{w}][{k}]"
            if term.kind not in SOFT_POD_TERM_KINDS:
                raise ValueError(f"{where}.kind: must be one of {', '.join(SOFT_POD_TERM_KINDS)}, got {term.kind!r}")
            if not 0 <= term.group < g:
                raise ValueError(f"{where}.group: {term.group} is out of range ({g} groups)")
            if not 0 <= term.topology < t:
                raise ValueError(f"{where}.topology: {term.topology} is out of range ({t} topologies)")
            low, high = (1, 2**31 - 1) if term.kind.endswith("spread") else (1, 100)
            if not low <= term.value <= high:
                raise ValueError(f"{where}.value: must be {low}..{high}, got {term.value!r}")
    return PodScoring(tuple(ps.topology_keys), topology, tuple(ps.group_names), counts, members,
                      tuple(tuple(r) for r in ps.terms), names)
