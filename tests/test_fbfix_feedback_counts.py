"""Latency readings have their own index in the feedback loop, and refit_every / settle_every
count node observations only (docs/feedback.md, fix of the feedback leftovers)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from iro_fed.feedback import FeedbackLoop, observe_snapshot


def _reading(loop: FeedbackLoop, r: int, p99: float) -> None:
    """Two new web pods on n0/n1, then one service P99 reading (no node metrics in the snapshot)."""
    for i in range(2):
        loop.record_decision(f"web-{r}-{i}", f"n{i}", {"web": 1000.0}, 4000.0, klass="web",
                             network_latency_ms=4.0, at=100.0 + r)
    observe_snapshot(loop, SimpleNamespace(nodes={}, services={"web": SimpleNamespace(p99_latency_ms=p99)}),
                     at=100.5 + r)


def test_a_latency_drift_with_no_node_observed_is_refitted_on_the_readings_since_it():
    """Latency readings were indexed by the count of node observations: with none after the
    drift began, the fine-tune found no "recent" sample (samples=0, error_after=0.0) and fitted
    the offset on the whole window, pre-drift readings included (10.57 ms, not 22)."""
    loop = FeedbackLoop(calibration=0, latency_threshold_ms=5.0, min_samples=5, alpha=0.5, cooldown=1000,
                        refit_every=10)
    for r in range(20):
        _reading(loop, r, 6.0)  # 2 ms over the network latency: calm
    assert loop.signals == []
    for r in range(20, 40):
        _reading(loop, r, 25.0 if r % 2 else 27.0)  # the service got about 20 ms slower
    assert [t.quantity for t in loop.signals] == ["latency_ms"]
    t = loop.signals[0]
    # Fitted on the readings since the drift (5 readings of 2 pods: 27, 25, 27, 25, 27 ms).
    assert t.samples == 10
    assert loop.model.latency_offset_ms["web"] == pytest.approx(26.2 - 4.0)
    assert t.error_after == pytest.approx(0.96)  # in-sample |observed - expected| of those, in ms
    for r in range(40, 50):
        _reading(loop, r, 28.0)  # still calm (1.8 ms off); readings alone do not refit
    assert loop.model.latency_offset_ms["web"] == pytest.approx(22.2)
    # Node observations afterwards refit (a new class calibrated, then calm refits): on the
    # readings since the drift only, not on the 6 ms ones before it.
    loop.record_decision("job", "n9", {"batch": 2000.0}, 8000.0, klass="batch", at=200.0)
    for k in range(30):
        loop.observe("n9", 0.25, requests={"batch": 2000.0}, capacity=8000.0, at=201.0 + k)
    assert loop.model.latency_offset_ms["web"] == pytest.approx((20 * 26.0 + 10 * 28.0) / 30 - 4.0)
    assert len(loop.signals) == 1


def _web_on(loop: FeedbackLoop, key: str) -> None:
    loop.record_decision(key, "n", {"web": 2000.0}, 8000.0, klass="web", network_latency_ms=2.0)


def test_refit_every_counts_node_observations_not_latency_readings():
    """Each latency reading counted towards ``refit_every`` too: with one per node observation,
    the calm refit came after 2 node observations instead of 4."""
    loop = FeedbackLoop(threshold=0.1, min_samples=1, calibration=1, refit_every=4, cooldown=1000)
    _web_on(loop, "p0")
    loop.observe("n", 0.125, requests={"web": 2000.0}, capacity=8000.0)  # calibrates: factor 0.5
    assert loop.calibrations and loop.model.factor_of("web") == pytest.approx(0.5)
    factors = []
    for i in range(1, 5):
        _web_on(loop, f"p{i}")
        loop.observe("n", 0.15, requests={"web": 2000.0}, capacity=8000.0)  # now 0.6: calm (error 0.025)
        loop.observe_latency(f"p{i}", 7.0)
        factors.append(loop.model.factor_of("web"))
    assert factors[:3] == [pytest.approx(0.5)] * 3  # no refit before the 4th node observation
    assert factors[3] > 0.55  # refitted then
    assert loop.signals == []


def test_settle_every_counts_node_observations_not_latency_readings():
    """During a cooldown, settling refits came every ``settle_every`` node observations and
    latency readings together: twice as often with one reading per observation."""
    loop = FeedbackLoop(threshold=0.1, alpha=1.0, calm=0.0, min_samples=3, calibration=3, cooldown=1000,
                        settle_every=2)
    for i in range(3):
        _web_on(loop, f"c{i}")
        loop.observe("n", 0.125, requests={"web": 2000.0}, capacity=8000.0)  # factor 0.5
    for i in range(3):
        _web_on(loop, f"s{i}")
        loop.observe("n", 0.25, requests={"web": 2000.0}, capacity=8000.0)  # factor 1.0: drift
    assert len(loop.signals) == 1
    t = loop.signals[0]
    for i in range(6):
        _web_on(loop, f"a{i}")
        # Noisy (never an error of 0: calm=0 keeps the detector disarmed through the cooldown).
        loop.observe("n", 0.25 + (0.01 if i % 2 else -0.01), requests={"web": 2000.0}, capacity=8000.0)
        loop.observe_latency(f"a{i}", 7.0)
    assert loop.detectors["utilization"].in_cooldown
    assert t.settle_refits == 3
