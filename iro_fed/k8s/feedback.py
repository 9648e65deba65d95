"""The feedback loop's Kubernetes feed: measured node CPU from metrics-server.

The loop itself (decisions, usage model, drift detection, fine-tuning, Prometheus metrics) is
:mod:`iro_fed.feedback`; its names are re-exported here so older imports keep working.
:class:`NodeMetricsFeed` polls ``metrics.k8s.io`` NodeMetrics and feeds each node's measured
CPU share (usage / the node's allocatable CPU of its latest decision) to
:meth:`~iro_fed.feedback.FeedbackLoop.observe` at the measurement's ``timestamp``:
metrics-server serves the kubelet's last scrape (15-60 s old), and a measurement taken before a
placement cannot show its pod, so it does not complete that decision.
"""

from __future__ import annotations

import math
import threading
from datetime import UTC, datetime
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


def _timestamp(value: Any) -> float | None:
    """A NodeMetrics ``timestamp`` (RFC 3339, ``metav1.Time``) in epoch seconds; None if absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.timestamp()


class NodeMetricsFeed:
    """Feeds a :class:`FeedbackLoop` with measured node CPU utilization from metrics-server
    (``metrics.k8s.io`` NodeMetrics usage / the node's allocatable CPU of the prediction).

    Measurements are fed at the end of the second their ``timestamp`` names (``metav1.Time`` has
    whole seconds: none is taken as older than it may be); the loop's clock must be epoch seconds,
    as its default is, so the scheduler's clock and the kubelets' are compared: they are assumed
    to agree to within a poll."""

    def __init__(self, kube: Any, loop: FeedbackLoop, interval_s: float = 30.0) -> None:
        if isinstance(interval_s, bool) or not isinstance(interval_s, int | float) \
                or not math.isfinite(interval_s) or interval_s <= 0:  # 0 would poll the API server in a busy loop
            raise ValueError(f"interval_s: must be a finite number > 0, got {interval_s!r}")
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
            at = _timestamp(item.get("timestamp"))
            if self.loop.observe(node, used / pred.capacity_cpu, at=None if at is None else at + 1.0) is None:
                continue  # measured before any decision on the node: nothing to compare
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
