"""Feedback loop: predicted vs observed outcome of placements, drift detection, fine-tuning.

For every placement the scheduler makes, :class:`FeedbackLoop` records what it expected: the
node's CPU utilization once the pod runs, predicted by a :class:`UsageModel` from the CPU
*requested* on the node (pods rarely use exactly what they request). When a measurement of the
node arrives (``observe``: from metrics-server's NodeMetrics through :class:`NodeMetricsFeed`,
the edge agent or the simulator)
the absolute error against the latest prediction for that node enters an exponentially weighted
moving average. When the average passes ``threshold`` (after ``min_samples`` observations) the
loop fine-tunes: it refits the usage model on the recent experience (least squares of observed
usage on requests, over the observations since the moving error left the calm band of half
the threshold), records a :class:`DriftSignal` and calls ``on_drift`` (e.g. to ask the
federated server for a round). The error is then tracked against the refitted model.

Prometheus metrics (when ``prometheus_client`` is installed and a registry is given):
``iro_feedback_error`` (moving error), ``iro_feedback_observations_total``,
``iro_feedback_drift_total``, ``iro_feedback_usage_factor``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class UsageModel:
    """Actual CPU use = ``factor`` x requested CPU (one number, refitted on drift)."""

    factor: float = 1.0

    def predict(self, requested: float, capacity: float) -> float:
        """Predicted utilization in [0, 1+] of a node with ``requested`` of ``capacity``."""
        return self.factor * requested / capacity if capacity > 0 else 0.0

    def fit(self, samples: list[tuple[float, float, float]]) -> float:
        """Least squares through the origin of observed use on requests; returns the new factor."""
        num = sum(obs * cap * req for req, cap, obs in samples)
        den = sum(req * req for req, _, _ in samples)
        if den > 0:
            self.factor = num / den
        return self.factor


@dataclass
class Prediction:
    key: str  # the pod
    node: str
    requested_cpu: float
    capacity_cpu: float
    predicted_util: float
    at: float = field(default_factory=time.time)


@dataclass
class DriftSignal:
    """One fine-tuning trigger: the moving error that caused it and the refit it did."""

    at: float
    moving_error: float
    threshold: float
    samples: int
    factor_before: float
    factor_after: float
    error_after: float
    action: str


class FeedbackLoop:
    """Tracks prediction error per placement and triggers fine-tuning on drift."""

    def __init__(self, threshold: float = 0.1, alpha: float = 0.3, min_samples: int = 5, window: int = 200,
                 model: UsageModel | None = None, on_drift: Callable[[DriftSignal], Any] | None = None,
                 registry: Any = None) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha: must be in (0, 1], got {alpha}")
        if threshold <= 0:
            raise ValueError(f"threshold: must be > 0, got {threshold}")
        self.threshold = threshold
        self.alpha = alpha
        self.min_samples = min_samples
        self.model = model or UsageModel()
        self.on_drift = on_drift
        self.moving_error: float | None = None
        self.observations = 0
        self._drift_start: int | None = None
        self.experience: deque[tuple[int, float, float, float]] = deque(maxlen=window)
        self.latest: dict[str, Prediction] = {}
        self.signals: list[DriftSignal] = []
        self.errors: list[float] = []
        self._lock = threading.Lock()
        self._metrics = _metrics(registry) if registry is not None else None

    def record_placement(self, key: str, node: str, problem: Any, state: Any) -> Prediction:
        """Called by the scheduler after a bind: predict the node's utilization with the pod."""
        n = problem.node_index[node]
        cpu = problem.cpu_index
        return self.predict(key, node, float(state.allocated[n, cpu]), float(problem.capacity[n, cpu]))

    def predict(self, key: str, node: str, requested_cpu: float, capacity_cpu: float) -> Prediction:
        with self._lock:
            pred = Prediction(key, node, requested_cpu, capacity_cpu, self.model.predict(requested_cpu, capacity_cpu))
            self.latest[node] = pred
            return pred

    def observe(self, node: str, observed_util: float) -> float | None:
        """A measured utilization of ``node``; returns the error against its latest prediction
        (None when nothing was predicted for it)."""
        with self._lock:
            pred = self.latest.get(node)
            if pred is None:
                return None
            # Re-predict with the current model: after a fine-tune the same request means more.
            predicted = self.model.predict(pred.requested_cpu, pred.capacity_cpu)
            error = abs(observed_util - predicted)
            index = self.observations
            self.experience.append((index, pred.requested_cpu, pred.capacity_cpu, observed_util))
            self.moving_error = error if self.moving_error is None else (1 - self.alpha) * self.moving_error + self.alpha * error
            self.observations += 1
            self.errors.append(error)
            # The drift starts when the moving error leaves the calm band (half the threshold);
            # the refit uses only what was observed since then.
            if self.moving_error <= self.threshold / 2:
                self._drift_start = None
            elif self._drift_start is None:
                self._drift_start = index
            signal = None
            if (self._drift_start is not None and self.moving_error > self.threshold
                    and self.observations - self._drift_start >= self.min_samples):
                signal = self._fine_tune()
            if self._metrics:
                self._metrics["error"].set(self.moving_error)
                self._metrics["observations"].inc()
                self._metrics["factor"].set(self.model.factor)
        if signal is not None and self.on_drift is not None:
            self.on_drift(signal)
        return error

    def _fine_tune(self) -> DriftSignal:
        before = self.model.factor
        recent = [(req, cap, obs) for i, req, cap, obs in self.experience if i >= (self._drift_start or 0)]
        after = self.model.fit(recent)
        err_after = sum(abs(obs - self.model.predict(req, cap)) for req, cap, obs in recent) / len(recent)
        signal = DriftSignal(time.time(), float(self.moving_error or 0.0), self.threshold, len(recent), before, after,
                             err_after, "refit usage model on the experience since the drift began")
        self.signals.append(signal)
        self.moving_error = err_after
        self._drift_start = None
        if self._metrics:
            self._metrics["drift"].inc()
        return signal


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


def _metrics(registry: Any) -> dict[str, Any]:
    from prometheus_client import Counter, Gauge

    return {
        "error": Gauge("iro_feedback_error", "Moving absolute error of predicted node utilization", registry=registry),
        "observations": Counter("iro_feedback_observations", "Observed outcomes compared with predictions", registry=registry),
        "drift": Counter("iro_feedback_drift", "Fine-tuning triggers after drift", registry=registry),
        "factor": Gauge("iro_feedback_usage_factor", "Usage model: actual CPU use per requested CPU", registry=registry),
    }
