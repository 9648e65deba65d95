"""FeedbackLoop: summary() reads everything under the loop's lock, and per-node state is kept
for a bounded number of nodes without changing what the loop says about the nodes it keeps."""

from __future__ import annotations

import threading

import pytest

from iro_fed.feedback import FeedbackLoop, UsageModel


class WatchedLoop(FeedbackLoop):
    """A FeedbackLoop that notes, on each read of ``observations``, whether the reading thread
    holds the loop's lock (another thread then cannot take it: a non-blocking try, no waiting)."""

    def __init__(self, *args, **kwargs) -> None:
        self.unlocked_reads = 0
        super().__init__(*args, **kwargs)

    @property
    def observations(self) -> int:
        if hasattr(self, "_lock"):
            free: list[bool] = []

            def probe() -> None:
                took = self._lock.acquire(blocking=False)
                if took:
                    self._lock.release()
                free.append(took)

            t = threading.Thread(target=probe)
            t.start()
            t.join()
            self.unlocked_reads += free[0]
        return self._observations

    @observations.setter
    def observations(self, value: int) -> None:
        self._observations = value


def test_summary_reads_the_shared_state_under_the_lock():
    # Before, summary() copied the decisions under the lock but read the counters, moving errors,
    # factors and each decision's errors after releasing it, while observe() changes them under it.
    loop = WatchedLoop(threshold=0.2, calibration=0, clock=lambda: 0.0, model=UsageModel(factors={"default": 1.0}))
    loop.record_decision("p", "n1", 1000.0, 4000.0, at=0.0)
    loop.observe("n1", 0.3, at=1.0)
    loop.unlocked_reads = 0
    out = loop.summary()
    assert out["observations"] == 1 and out["decisions"] == 1
    assert out["decision_mae_utilization"] == pytest.approx(0.05)
    assert loop.unlocked_reads == 0


def _run(loop: FeedbackLoop, nodes: list[str]) -> list[float | None]:
    errors = []
    for i, node in enumerate(nodes):
        loop.record_decision(f"p{i}", node, 1000.0 + i, 4000.0, at=float(i))
        errors.append(loop.observe(node, 0.3, at=float(i) + 0.5))
    return errors


def test_per_node_state_is_bounded_and_live_nodes_are_unchanged():
    # Before, latest / _basis kept one entry for every node name ever seen (autoscaled nodes come
    # and go under new names): a long-running scheduler's memory grew without bound.
    churn = [f"gone-{i}" for i in range(50)]
    live = ["a", "b", "c"] * 10
    bounded = FeedbackLoop(threshold=0.2, calibration=0, clock=lambda: 0.0, max_nodes=5)
    unbounded = FeedbackLoop(threshold=0.2, calibration=0, clock=lambda: 0.0)
    assert _run(bounded, churn + live) == _run(unbounded, churn + live)
    assert len(bounded.latest) <= 5 and len(bounded._basis) <= 5 and len(bounded.pending) <= 5
    assert len(unbounded.latest) == 53
    for node in "abc":  # the nodes still in use: the same state, the same answers
        assert bounded.latest[node] == unbounded.latest[node]
        assert bounded.observe(node, 0.4, at=100.0) == unbounded.observe(node, 0.4, at=100.0)
    assert bounded.summary() == unbounded.summary()
    # a node forgotten is as one never decided on: nothing is known of it
    assert bounded.observe("gone-0", 0.5, at=101.0) is None


def test_max_nodes_is_checked_and_defaults_past_the_largest_cluster():
    from iro_fed.feedback import DEFAULT_MAX_NODES

    assert FeedbackLoop().max_nodes == DEFAULT_MAX_NODES >= 20_000
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(ValueError, match="max_nodes: must be an integer >= 1"):
            FeedbackLoop(max_nodes=bad)
