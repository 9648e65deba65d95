"""Feedback loop: a distribution shift raises the error past the threshold, the fine-tune brings it down."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.k8s.feedback import FeedbackLoop, UsageModel


def run(loop: FeedbackLoop, rng: np.random.Generator, factor: float, steps: int) -> list[float]:
    """Nodes of 8 cores with random requests; pods use ``factor`` x their request (+ noise)."""
    errors = []
    for i in range(steps):
        node = f"n{i % 5}"
        requested = float(rng.uniform(1000, 5000))
        loop.predict(f"pod-{i}", node, requested, 8000.0)
        observed = factor * requested / 8000.0 + float(rng.normal(0, 0.01))
        errors.append(loop.observe(node, observed))
    return errors


def test_shift_triggers_fine_tuning_and_the_error_comes_back_down():
    rng = np.random.default_rng(7)
    fired = []
    loop = FeedbackLoop(threshold=0.08, alpha=0.3, min_samples=5, on_drift=fired.append)
    before = run(loop, rng, factor=1.0, steps=40)
    assert loop.signals == [] and np.mean(before) < 0.03  # calibrated: no trigger
    shifted = run(loop, rng, factor=1.8, steps=40)  # pods now use 80 % more than they request
    assert len(loop.signals) >= 1 and fired == loop.signals
    sig = loop.signals[0]
    assert sig.moving_error > sig.threshold
    assert sig.factor_before == pytest.approx(1.0)
    assert sig.factor_after == pytest.approx(1.8, abs=0.1)
    assert sig.error_after < sig.threshold
    assert sig.samples >= 5  # refit only on what was observed since the shift
    assert max(shifted[:5]) > 0.08  # right after the shift the error is large
    assert np.mean(shifted[-20:]) < 0.03  # and small again after the fine-tune
    assert loop.model.factor == pytest.approx(1.8, abs=0.05)


def test_observation_without_prediction_and_bad_settings():
    loop = FeedbackLoop()
    assert loop.observe("unknown", 0.5) is None
    with pytest.raises(ValueError, match="alpha"):
        FeedbackLoop(alpha=0)
    with pytest.raises(ValueError, match="threshold"):
        FeedbackLoop(threshold=0)


def test_usage_model_fit_is_least_squares_through_the_origin():
    m = UsageModel()
    assert m.fit([(1000, 4000, 0.5), (2000, 4000, 1.0)]) == pytest.approx(2.0)
    assert m.predict(1000, 4000) == pytest.approx(0.5)


def test_prometheus_metrics_are_exported():
    prom = pytest.importorskip("prometheus_client")
    registry = prom.CollectorRegistry()
    loop = FeedbackLoop(threshold=0.05, min_samples=2, registry=registry)
    for _ in range(3):
        loop.predict("p", "n", 1000, 4000)
        loop.observe("n", 0.9)
    assert registry.get_sample_value("iro_feedback_drift_total") >= 1
    assert registry.get_sample_value("iro_feedback_observations_total") == 3
    assert registry.get_sample_value("iro_feedback_usage_factor") == pytest.approx(loop.model.factor)
