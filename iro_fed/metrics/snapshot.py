"""Cluster snapshot from Prometheus: observed usage next to requests, and load-aware scoring.

:func:`build_snapshot` runs a handful of PromQL queries (:class:`SnapshotQueries`, defaults
read the recording rules of ``deploy/prometheus/iro-fed-rules.yaml``) and returns a
:class:`ClusterSnapshot`: per node the CPU and memory really used (and the capacity the node
reports), per service the request rate, the P99 latency and the error ratio.

:func:`load_aware_problem` is the load-aware scoring switch (in the spirit of the
scheduler-plugins Trimaran plugins, which score nodes by their measured load instead of the
sum of requests): it returns the same :class:`~iro_fed.model.Problem` whose ``allocated``
columns for CPU and memory come from the observed usage. Every solver then scores with usage
through the unchanged objective and feasibility code; nothing else needs to know.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from iro_fed.metrics.prometheus import PrometheusClient, PrometheusQueryError, Sample
from iro_fed.model import Problem

#: How a snapshot's usage enters the problem's ``allocated``: ``requests`` keeps what the
#: problem says (the sum of requests), ``usage`` replaces CPU and memory with the observed
#: usage, ``max`` takes the larger of both per node (never under-counts a node that is busier
#: than its requests, never frees room that requests have promised).
SCORING_MODES = ("requests", "usage", "max")

BYTES_PER_MIB = 1024.0 * 1024.0


@dataclass(frozen=True)
class SnapshotQueries:
    """The PromQL behind a snapshot; an empty string skips that query.

    Node queries must return one series per node with the node's name in ``node_label``;
    service queries one series per service with its name in ``service_label``. Units: CPU in
    cores, memory in bytes, latency in seconds, rates per second (Prometheus base units).
    """

    node_label: str = "node"
    cpu_used_cores: str = "node:iro_cpu_used_cores:avg1m"
    memory_used_bytes: str = "node:iro_memory_used_bytes:avg1m"
    cpu_capacity_cores: str = "max by (node) (iro_node_cpu_capacity_cores)"
    memory_capacity_bytes: str = "max by (node) (iro_node_memory_capacity_bytes)"
    service_label: str = "service"
    service_qps: str = "service:http_requests:rate1m"
    service_p99_seconds: str = "service:http_request_duration_seconds:p99_1m"
    service_error_ratio: str = "service:http_request_errors:ratio_rate1m"

    @classmethod
    def from_dict(cls, doc: dict[str, Any], path: str = "queries") -> SnapshotQueries:
        """Overrides from a config mapping; an unknown key or a non-string value is an error naming it."""
        known = {f.name for f in fields(cls)}
        for key, value in doc.items():
            if key not in known:
                raise ValueError(f"{path}.{key}: unknown query (known: {', '.join(sorted(known))})")
            if not isinstance(value, str):
                raise ValueError(f"{path}.{key}: expected a PromQL string, got {type(value).__name__}")
        return cls(**doc)


@dataclass
class NodeUsage:
    """Observed usage of one node (None where Prometheus had no series)."""

    cpu_millicores: float | None = None
    memory_mib: float | None = None
    cpu_capacity_millicores: float | None = None
    memory_capacity_mib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: _round(getattr(self, k)) for k in ("cpu_millicores", "memory_mib", "cpu_capacity_millicores", "memory_capacity_mib")}


@dataclass
class ServiceStats:
    """Observed request rate (1/s), P99 latency (ms) and error ratio (0..1) of one service."""

    qps: float | None = None
    p99_latency_ms: float | None = None
    error_rate: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: _round(getattr(self, k)) for k in ("qps", "p99_latency_ms", "error_rate")}


@dataclass
class ClusterSnapshot:
    """What Prometheus saw at ``taken_at`` (unix seconds)."""

    taken_at: float
    nodes: dict[str, NodeUsage] = field(default_factory=dict)
    services: dict[str, ServiceStats] = field(default_factory=dict)
    source: str = ""

    @property
    def has_usage(self) -> bool:
        return any(u.cpu_millicores is not None or u.memory_mib is not None for u in self.nodes.values())

    def to_dict(self, problem: Problem | None = None) -> dict[str, Any]:
        """JSON form; with ``problem``, every node of it also shows its requests next to its usage."""
        nodes: dict[str, Any] = {name: u.to_dict() for name, u in sorted(self.nodes.items())}
        if problem is not None:
            for i, node in enumerate(problem.nodes):
                entry = nodes.setdefault(node.name, NodeUsage().to_dict())
                entry["requests"] = {r: _round(float(problem.allocated[i, j])) for j, r in enumerate(problem.resources)}
                entry["capacity"] = {r: _round(float(problem.capacity[i, j])) for j, r in enumerate(problem.resources)}
        return {
            "taken_at": self.taken_at,
            "source": self.source,
            "nodes": nodes,
            "services": {name: s.to_dict() for name, s in sorted(self.services.items())},
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def _by_label(samples: list[Sample], label: str, what: str) -> dict[str, float]:
    """label value -> sample value; several series with one name keep the largest (finite) value."""
    out: dict[str, float] = {}
    for s in samples:
        name = s.labels.get(label)
        if name is None or not math.isfinite(s.value):
            continue
        out[name] = max(out.get(name, -math.inf), s.value)
    return out


def build_snapshot(client: PrometheusClient, queries: SnapshotQueries | None = None, at: float | None = None) -> ClusterSnapshot:
    """Query Prometheus and assemble a snapshot.

    Raises :class:`~iro_fed.metrics.prometheus.PrometheusUnavailable` when the server cannot
    be reached and :class:`~iro_fed.metrics.prometheus.PrometheusQueryError` (naming the query
    setting) when one of the queries is rejected.
    """
    q = queries or SnapshotQueries()
    snap = ClusterSnapshot(taken_at=at if at is not None else time.time(), source=client.base_url)

    def run(key: str, label: str, scale: float) -> dict[str, float]:
        promql = getattr(q, key)
        if not promql:
            return {}
        try:
            samples = client.query(promql, time=at)
        except PrometheusQueryError as exc:
            raise PrometheusQueryError(f"queries.{key}: {exc}") from exc
        return {k: v * scale for k, v in _by_label(samples, label, key).items()}

    node_columns = {
        "cpu_used_cores": ("cpu_millicores", 1000.0),
        "memory_used_bytes": ("memory_mib", 1.0 / BYTES_PER_MIB),
        "cpu_capacity_cores": ("cpu_capacity_millicores", 1000.0),
        "memory_capacity_bytes": ("memory_capacity_mib", 1.0 / BYTES_PER_MIB),
    }
    for key, (attr, scale) in node_columns.items():
        for node, value in run(key, q.node_label, scale).items():
            setattr(snap.nodes.setdefault(node, NodeUsage()), attr, value)
    service_columns = {
        "service_qps": ("qps", 1.0),
        "service_p99_seconds": ("p99_latency_ms", 1000.0),
        "service_error_ratio": ("error_rate", 1.0),
    }
    for key, (attr, scale) in service_columns.items():
        for service, value in run(key, q.service_label, scale).items():
            setattr(snap.services.setdefault(service, ServiceStats()), attr, value)
    return snap


def load_aware_problem(problem: Problem, snapshot: ClusterSnapshot | None, mode: str = "usage") -> tuple[Problem, int]:
    """The problem with CPU and memory ``allocated`` taken from observed usage.

    ``mode`` is one of :data:`SCORING_MODES`. Nodes the snapshot does not cover keep their
    requests. Usage is clipped to ``[0, capacity]``. Returns the problem (the same object when
    nothing changes) and how many nodes took observed values.
    """
    if mode not in SCORING_MODES:
        raise ValueError(f"scoring: must be one of {', '.join(SCORING_MODES)}, got {mode!r}")
    if mode == "requests" or snapshot is None or not snapshot.nodes:
        return problem, 0
    allocated = np.array(problem.allocated, dtype=np.float64, copy=True)
    columns = [(r, attr) for r, attr in (("cpu", "cpu_millicores"), ("memory", "memory_mib")) if r in problem.resource_index]
    used_nodes = 0
    for name, usage in snapshot.nodes.items():
        i = problem.node_index.get(name)
        if i is None:
            continue
        touched = False
        for r, attr in columns:
            value = getattr(usage, attr)
            if value is None:
                continue
            j = problem.resource_index[r]
            observed = min(max(float(value), 0.0), float(problem.capacity[i, j]))
            allocated[i, j] = observed if mode == "usage" else max(allocated[i, j], observed)
            touched = True
        used_nodes += touched
    if not used_nodes:
        return problem, 0
    return problem.replace(allocated=allocated), used_nodes
