"""Cluster snapshot from Prometheus: observed usage next to requests, and load-aware scoring.

:func:`build_snapshot` runs a handful of PromQL queries (:class:`SnapshotQueries`, defaults
read the recording rules of ``deploy/prometheus/iro-fed-rules.yaml``) and returns a
:class:`ClusterSnapshot`: per node the CPU and memory really used (and the capacity the node
reports, and what its pods use), per service the request rate, the P99 latency and the error
ratio. The queries run one after the other within one overall deadline (``deadline_s``).

:func:`load_aware_problem` is the load-aware scoring switch (in the spirit of the
scheduler-plugins Trimaran plugins, which score nodes by their measured load instead of the
sum of requests): it returns the same :class:`~iro_fed.model.Problem` whose ``allocated``
columns for CPU and memory come from the observed usage. Every solver then scores with usage
through the unchanged objective and feasibility code; nothing else needs to know.

A node's usage is its pods' usage plus a *base load* no pod explains (the kubelet, the container
runtime, system daemons, the agent itself). ``max`` keeps that base load on top of the requests,
as Koordinator's LoadAwareScheduling keeps the node's usage less its pods' usage under its
estimate of the pods: ``max(requests + base, usage)`` with ``base = max(usage - pods' usage, 0)``.
Without a pods' usage reading for a node (its query is empty or returned no series for it)
the base load cannot be told from the pods' and ``max`` is ``max(requests, usage)``, which
counts only the part of the base load above the requests' unused share.
"""

from __future__ import annotations

import copy
import math
import re
import time
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from iro_fed.metrics.prometheus import (
    MAX_TIMEOUT_S,
    PrometheusClient,
    PrometheusQueryError,
    PrometheusUnavailable,
    Sample,
    _positive,
)
from iro_fed.model import Problem

#: How a snapshot's usage enters the problem's ``allocated``: ``requests`` keeps what the
#: problem says (the sum of requests), ``usage`` replaces CPU and memory with the observed
#: usage, ``max`` takes the larger of requests plus the node's base load and usage per node
#: (never under-counts a node that is busier than its requests, never frees room that requests
#: have promised, never drops what the node's daemons use: see the module docstring).
SCORING_MODES = ("requests", "usage", "max")

BYTES_PER_MIB = 1024.0 * 1024.0
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class SnapshotQueries:
    """The PromQL behind a snapshot; an empty string skips that query.

    Node queries must return one series per node with the node's name in ``node_label``;
    service queries one series per service with its name in ``service_label``. Units: CPU in
    cores, memory in bytes, latency in seconds, rates per second (Prometheus base units).

    ``pods_cpu_used_cores`` / ``pods_memory_used_bytes``: what the node's pods use (recording
    rules over cAdvisor's container series, scraped per node with a ``node`` label:
    deploy/prometheus);
    with the node's usage they give its base load (:func:`load_aware_problem`). A Prometheus
    without those series answers an empty vector: the node then has no pods' usage reading.
    """

    node_label: str = "node"
    cpu_used_cores: str = "node:iro_cpu_used_cores:avg1m"
    memory_used_bytes: str = "node:iro_memory_used_bytes:avg1m"
    cpu_capacity_cores: str = "max by (node) (iro_node_cpu_capacity_cores)"
    memory_capacity_bytes: str = "max by (node) (iro_node_memory_capacity_bytes)"
    pods_cpu_used_cores: str = "node:iro_pods_cpu_used_cores:rate1m"
    pods_memory_used_bytes: str = "node:iro_pods_memory_used_bytes:avg1m"
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
            # Not a query: a label no series can carry would drop every series without a word.
            if key.endswith("_label") and not _LABEL_NAME.fullmatch(value):
                raise ValueError(f"{path}.{key}: expected a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*), "
                                 f"got {value!r}")
        return cls(**doc)


@dataclass
class NodeUsage:
    """Observed usage of one node (None where Prometheus had no series); ``pods_*`` is the part
    its pods use, the rest is its base load."""

    cpu_millicores: float | None = None
    memory_mib: float | None = None
    cpu_capacity_millicores: float | None = None
    memory_capacity_mib: float | None = None
    pods_cpu_millicores: float | None = None
    pods_memory_mib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: _round(getattr(self, k)) for k in ("cpu_millicores", "memory_mib", "cpu_capacity_millicores",
                                                       "memory_capacity_mib", "pods_cpu_millicores", "pods_memory_mib")}


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


def build_snapshot(client: PrometheusClient, queries: SnapshotQueries | None = None, at: float | None = None,
                   deadline_s: float | None = None) -> ClusterSnapshot:
    """Query Prometheus and assemble a snapshot.

    The queries (9 by default) run one after the other within one overall deadline of
    ``deadline_s`` seconds (default: the client's ``deadline_s``, the bound of one request): each
    gets only what is left of it, as its request's deadline and (at most ``timeout_s``) as the
    server-side ``timeout``, and none is sent once it is spent. With a deadline per query, a
    server answering each one slowly, just within it, held the caller for 9 x ``deadline_s``.

    Raises :class:`~iro_fed.metrics.prometheus.PrometheusUnavailable` when the server cannot
    be reached or the overall deadline passes, :class:`~iro_fed.metrics.prometheus.PrometheusQueryError`
    (naming the query setting) when one of the queries is rejected, and ValueError naming
    ``deadline_s`` when it is not a number of seconds > 0.
    """
    if deadline_s is None:
        deadline_s = client.deadline_s
    elif not _positive(deadline_s) or deadline_s > MAX_TIMEOUT_S:  # past it, a deadline timer overflows time_t
        raise ValueError(f"deadline_s: must be a number of seconds > 0 and at most {MAX_TIMEOUT_S:g}, got {deadline_s!r}")
    overall_s = float(deadline_s)
    ends = time.monotonic() + overall_s
    q = queries or SnapshotQueries()
    snap = ClusterSnapshot(taken_at=at if at is not None else time.time(), source=client.base_url)

    def run(key: str, label: str, scale: float) -> dict[str, float]:
        promql = getattr(q, key)
        if not promql:
            return {}
        left = ends - time.monotonic()
        if left <= 0:
            raise PrometheusUnavailable(f"{client.base_url}: the snapshot's queries took more than its overall "
                                        f"{overall_s:g} s deadline (deadline_s), before queries.{key}")
        # A copy keeps a subclass's behaviour; the server gives up at the same time (its ``timeout``).
        part = copy.copy(client)
        part.timeout_s, part.deadline_s = min(client.timeout_s, left), left
        try:
            samples = part.query(promql, time=at)
        except PrometheusQueryError as exc:
            raise PrometheusQueryError(f"queries.{key}: {exc}") from exc
        except PrometheusUnavailable as exc:
            if ends - time.monotonic() <= 0:
                raise PrometheusUnavailable(f"{exc} (the snapshot's overall deadline: {overall_s:g} s)") from exc
            raise
        return {k: v * scale for k, v in _by_label(samples, label, key).items()}

    node_columns = {
        "cpu_used_cores": ("cpu_millicores", 1000.0),
        "memory_used_bytes": ("memory_mib", 1.0 / BYTES_PER_MIB),
        "cpu_capacity_cores": ("cpu_capacity_millicores", 1000.0),
        "memory_capacity_bytes": ("memory_capacity_mib", 1.0 / BYTES_PER_MIB),
        "pods_cpu_used_cores": ("pods_cpu_millicores", 1000.0),
        "pods_memory_used_bytes": ("pods_memory_mib", 1.0 / BYTES_PER_MIB),
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
    requests. With ``max``, a node's base load (its usage less its pods', where both were read)
    is added to its requests (see the module docstring). Observed values are clipped to
    ``[0, capacity]`` (``max`` never goes below the requests). Returns the problem (the same
    object when nothing changes) and how many nodes took observed values.
    """
    if mode not in SCORING_MODES:
        raise ValueError(f"scoring: must be one of {', '.join(SCORING_MODES)}, got {mode!r}")
    if mode == "requests" or snapshot is None or not snapshot.nodes:
        return problem, 0
    allocated = np.array(problem.allocated, dtype=np.float64, copy=True)
    columns = [(r, attr, pods_attr) for r, attr, pods_attr in (("cpu", "cpu_millicores", "pods_cpu_millicores"),
                                                               ("memory", "memory_mib", "pods_memory_mib"))
               if r in problem.resource_index]
    used_nodes = 0
    for name, usage in snapshot.nodes.items():
        i = problem.node_index.get(name)
        if i is None:
            continue
        touched = False
        for r, attr, pods_attr in columns:
            value = getattr(usage, attr)
            if value is None:
                continue
            j = problem.resource_index[r]
            observed = max(float(value), 0.0)
            capacity = float(problem.capacity[i, j])
            if mode == "usage":
                allocated[i, j] = min(observed, capacity)
            else:
                requested = float(allocated[i, j])
                pods = getattr(usage, pods_attr)
                # What no pod explains stays on the node when its pods grow to their requests.
                base = 0.0 if pods is None else max(observed - float(pods), 0.0)
                allocated[i, j] = max(requested, min(max(requested + base, observed), capacity))
            touched = True
        used_nodes += touched
    if not used_nodes:
        return problem, 0
    return problem.replace(allocated=allocated), used_nodes
