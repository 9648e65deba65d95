"""Perception layer: what the cluster really uses, from Prometheus and from the local node.

* :mod:`iro_fed.metrics.prometheus`: a Prometheus HTTP API client with timeouts and clear errors.
* :mod:`iro_fed.metrics.snapshot`: a cluster snapshot (usage per node, latency / QPS / errors
  per service) and load-aware scoring (``allocated`` from observed usage).
* :mod:`iro_fed.metrics.local`: psutil readings of the local node (needs the ``agent`` extra).
"""

from __future__ import annotations

from iro_fed.metrics.prometheus import (
    PrometheusClient,
    PrometheusError,
    PrometheusQueryError,
    PrometheusUnavailable,
    Sample,
    Series,
)
from iro_fed.metrics.snapshot import (
    SCORING_MODES,
    ClusterSnapshot,
    NodeUsage,
    ServiceStats,
    SnapshotQueries,
    build_snapshot,
    load_aware_problem,
)

__all__ = [
    "SCORING_MODES",
    "ClusterSnapshot",
    "NodeUsage",
    "PrometheusClient",
    "PrometheusError",
    "PrometheusQueryError",
    "PrometheusUnavailable",
    "Sample",
    "Series",
    "ServiceStats",
    "SnapshotQueries",
    "build_snapshot",
    "load_aware_problem",
]
