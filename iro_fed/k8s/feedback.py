"""The feedback loop's Kubernetes feed: measured node CPU from metrics-server.

The loop itself (decisions, usage model, drift detection, fine-tuning, Prometheus metrics) is
:mod:`iro_fed.feedback`; its names are re-exported here so older imports keep working.
:class:`NodeMetricsFeed` polls ``metrics.k8s.io`` NodeMetrics and feeds each node's measured
CPU share (usage / the node's allocatable CPU of its latest decision) to
:meth:`~iro_fed.feedback.FeedbackLoop.observe`.
"""

from __future__ import annotations

import threading
from typing import Any

from iro_fed.feedback import (
    Decision,
    DriftSignal,
    FeedbackConfig,
    FeedbackLoop,
    Prediction,
    Trigger,
    UsageModel,
)

__all__ = ["Decision", "DriftSignal", "FeedbackConfig", "FeedbackLoop", "NodeMetricsFeed", "Prediction", "Trigger",
           "UsageModel"]


class NodeMetricsFeed:
    """Feeds a :class:`FeedbackLoop` with measured node CPU utilization from metrics-server
    (``metrics.k8s.io`` NodeMetrics usage / the node's allocatable CPU of the prediction)."""

    def __init__(self, kube: Any, loop: FeedbackLoop, interval_s: float = 30.0) -> None:
        self.kube = kube
        self.loop = loop
        self.interval_s = interval_s
        self.polls = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> int:
        """One read of NodeMetrics; returns how many observations it fed."""
        from iro_fed.k8s.quantity import QuantityError, cpu_millicores

        fed = 0
        for item in self.kube.node_metrics():
            node = (item.get("metadata") or {}).get("name")
            pred = self.loop.latest.get(node)
            cpu = (item.get("usage") or {}).get("cpu")
            if pred is None or cpu is None or pred.capacity_cpu <= 0:
                continue
            try:
                used = cpu_millicores(cpu, f"NodeMetrics {node}: usage.cpu")
            except QuantityError:
                continue
            self.loop.observe(node, used / pred.capacity_cpu)
            fed += 1
        self.polls += 1
        return fed

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:  # metrics-server missing or down: keep scheduling, try later
                self.errors += 1

    def start(self) -> NodeMetricsFeed:
        self._thread = threading.Thread(target=self._run, name="node-metrics-feed", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
