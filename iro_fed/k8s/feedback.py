"""The feedback loop's Kubernetes feed: measured node CPU from metrics-server.

The loop itself (decisions, usage model, drift detection, fine-tuning, Prometheus metrics) is
:mod:`iro_fed.feedback`; its names are re-exported here so older imports keep working.
:class:`NodeMetricsFeed` polls ``metrics.k8s.io`` NodeMetrics and feeds each node's measured
CPU share to :meth:`~iro_fed.feedback.FeedbackLoop.observe` at the measurement's
``timestamp``: metrics-server serves the kubelet's last scrape (15-60 s old), and a measurement
taken before a placement cannot show its pod, so it does not complete that decision. Each
measurement is fed once (metrics-server refreshes a node's usage once per scrape, 60 s by
default, more slowly than the feed polls), against the node's current requests and allocatable
CPU when the caller can tell them (the scheduler's cache), else those of its latest decision.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
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
    _is_finite_number,
)
from iro_fed.problem_io import show_value

__all__ = ["CurrentNode", "Decision", "DriftSignal", "FeedbackConfig", "FeedbackLoop", "NodeMetricsFeed", "Prediction",
           "Trigger", "UsageModel"]


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


#: What a node holds now: its CPU requests (millicores) by workload class and its allocatable CPU
#: (millicores); None when the node is not known (any more).
CurrentNode = Callable[[str], tuple[Mapping[str, float], float] | None]


class NodeMetricsFeed:
    """Feeds a :class:`FeedbackLoop` with measured node CPU utilization from metrics-server
    (``metrics.k8s.io`` NodeMetrics usage over the node's allocatable CPU).

    Measurements are fed at the start of the second their ``timestamp`` names (``metav1.Time``
    has whole seconds: a scrape stamped ``s`` was taken in ``[s, s + 1)``, and none is taken as
    later than it may be, so a pod bound within that second is not counted in it: fed at
    ``s + 1``, a scrape taken before such a bind was judged against requests with the new pod);
    the loop's clock must be epoch seconds, as its default is, so the scheduler's clock and the
    kubelets' are compared: they are assumed to agree to within a poll.

    Each measurement is fed once: metrics-server keeps serving a node's last scrape (the window
    ``[timestamp - window, timestamp]``) until the next one, 60 s later by default, so a poll
    every 30 s read each one twice, which doubled its weight in the moving error and let a
    trigger fire on half the evidence. Per node, an item whose ``timestamp`` is not newer than
    the last one fed is skipped (an item without a readable ``timestamp`` cannot be told apart:
    it is fed at the poll's time, as before).

    A ``timestamp`` more than ``max_ahead_s`` (default: ``interval_s``) ahead of the loop's clock
    when the poll read it is not trusted (a kubelet clock that ran ahead, corrected later): the
    item is fed at the poll's time, and that time, not its ``timestamp``, becomes the node's
    mark for newer scrapes (the same item read again is still skipped). Taken as the mark, one
    scrape stamped an hour ahead muted the node for that hour: every later, correct scrape was
    "not newer" and skipped. How this meets the rule above: a ``timestamp`` within
    ``max_ahead_s`` is trusted as the scrape's time, so a pod bound up to that skew before the
    ``timestamp`` but after the real scrape can be counted in it (the rule holds to within the
    clocks' agreement); an item fed at the poll's time (stamped too far ahead, or unstamped) has
    no trusted time, and every pod bound before the poll counts in it.

    ``current(node) -> (requests by class, allocatable CPU) | None``: what the node holds now
    (the scheduler's cache). The requests recorded with the node's latest decision go stale as
    pods finish or are deleted: a node that emptied kept being compared with requests it no
    longer had (systematic negative errors, spurious fine-tunes). With ``current`` a node it
    does not know (None) is skipped, and so is a measurement older than the node's latest
    decision (the cache already counts that pod, the measurement cannot show it: the next
    scrape will). Without it, the requests of the node's newest decision made by the
    measurement's time and that decision's capacity are used.
    """

    def __init__(self, kube: Any, loop: FeedbackLoop, interval_s: float = 30.0,
                 current: CurrentNode | None = None, max_ahead_s: float | None = None) -> None:
        # Numbers as the rest of the library reads them (numpy scalars too); an int past the float
        # range is refused by name (float() raised OverflowError). Past TIMEOUT_MAX the thread's
        # Event.wait raised OverflowError at start, and the feed stopped silently.
        if not _is_finite_number(interval_s) or not 0 < interval_s <= threading.TIMEOUT_MAX:  # 0: a busy loop
            raise ValueError(f"interval_s: must be a finite number > 0 and at most {threading.TIMEOUT_MAX:.0f} "
                             f"seconds, got {show_value(interval_s)}")
        if max_ahead_s is not None and (not _is_finite_number(max_ahead_s) or max_ahead_s < 0):
            raise ValueError(f"max_ahead_s: must be a finite number >= 0 or None, got {show_value(max_ahead_s)}")
        if current is not None and not callable(current):
            raise ValueError(f"current: expected a callable node -> (requests, capacity) or None, got {current!r}")
        self.kube = kube
        self.loop = loop
        self.interval_s = float(interval_s)
        self.current = current
        # The clocks are assumed to agree within a poll: a timestamp further ahead is not the node's.
        self.max_ahead_s = float(interval_s if max_ahead_s is None else max_ahead_s)
        self.polls = 0
        self.errors = 0
        self.repeats = 0  # items skipped because they were fed already (the same scrape read again)
        self.ahead = 0  # items fed at the poll's time: their timestamp was more than max_ahead_s ahead
        # node -> (mark, timestamp) of the last measurement fed: a newer one has a timestamp past
        # the mark (its timestamp, or the poll's time where that was ahead) and is not that one.
        self._fed_at: dict[str, tuple[float, float]] = {}
        self._polling = threading.Lock()  # a poll by hand beside the thread's must not feed an item twice
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> int:
        """One read of NodeMetrics; returns how many observations it fed."""
        with self._polling:
            return self._poll()

    def _poll(self) -> int:
        from iro_fed.k8s.quantity import QuantityError, cpu_millicores

        fed = 0
        items = self.kube.node_metrics()
        received = float(self.loop.clock())  # after the read: the scrapes it returned were taken by then
        for item in items:
            node = (item.get("metadata") or {}).get("name")
            pred = self.loop.latest.get(node)
            cpu = (item.get("usage") or {}).get("cpu")
            if pred is None or cpu is None:
                continue  # only nodes the loop made decisions on are judged
            stamp = _timestamp(item.get("timestamp"))
            last = self._fed_at.get(node)
            if stamp is not None and last is not None and (stamp <= last[0] or stamp == last[1]):
                self.repeats += 1
                continue
            ahead = stamp is not None and stamp > received + self.max_ahead_s
            at = None if stamp is None else received if ahead else stamp
            if self.current is not None:
                now = self.current(node)
                if now is None:
                    continue  # the node is gone (or not in the cache yet)
                requests, capacity = now
                if at is not None and pred.at > at:
                    continue  # measured before the node's latest placement, which the cache counts
            else:
                requests, capacity = None, pred.capacity_cpu
            if not capacity or capacity <= 0:
                continue
            try:
                used = cpu_millicores(cpu, f"NodeMetrics {node}: usage.cpu")
            except QuantityError:
                continue
            if self.loop.observe(node, used / capacity, requests=requests, capacity=capacity if requests is not None else None,
                                 at=at) is None:
                continue  # measured before any decision on the node: nothing to compare
            if stamp is not None:
                self._fed_at[node] = (received if ahead else stamp, stamp)
                self.ahead += ahead
            fed += 1
        # The loop forgets nodes past its max_nodes (autoscaled away, renamed); so does the feed,
        # or a long-running scheduler kept every node name it ever saw. Safe: a node the loop
        # decides on again is judged only by scrapes taken after that decision.
        latest = self.loop.latest
        for gone in [n for n in self._fed_at if n not in latest]:
            del self._fed_at[gone]
        self.polls += 1
        return fed

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:  # metrics-server missing or down: keep scheduling, try later
                self.errors += 1

    def start(self) -> NodeMetricsFeed:
        if self._thread is not None or self._stop.is_set():
            # A second thread would feed every measurement twice (the same race as no dedupe).
            raise RuntimeError("NodeMetricsFeed.start: already started (or stopped); make a new feed")
        self._thread = threading.Thread(target=self._run, name="node-metrics-feed", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
