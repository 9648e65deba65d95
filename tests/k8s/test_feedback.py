"""The feedback loop's Kubernetes side: NodeMetrics from the loopback API server feed the loop
(iro_fed.feedback), which is re-exported from iro_fed.k8s.feedback for older imports."""

from __future__ import annotations

import numpy as np
import pytest

import iro_fed.feedback as generic
from iro_fed.k8s.feedback import FeedbackLoop, NodeMetricsFeed, UsageModel


def test_the_loop_is_the_generic_one():
    assert FeedbackLoop is generic.FeedbackLoop and UsageModel is generic.UsageModel


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


def test_one_class_shift_triggers_one_fine_tune_and_the_error_comes_back_down():
    rng = np.random.default_rng(7)
    fired = []
    loop = FeedbackLoop(threshold=0.08, alpha=0.3, min_samples=5, on_drift=fired.append)
    before = run(loop, rng, factor=1.0, steps=40)
    assert loop.signals == [] and len(loop.calibrations) == 1 and np.mean(before[5:]) < 0.03
    shifted = run(loop, rng, factor=1.8, steps=40)  # pods now use 80 % more than they request
    assert len(loop.signals) == 1 and fired == loop.signals
    sig = loop.signals[0]
    assert sig.moving_error > sig.threshold
    assert sig.factor_before == pytest.approx(1.0, abs=0.02)
    assert sig.factor_after == pytest.approx(1.8, abs=0.1)
    assert sig.error_after < sig.threshold
    assert sig.samples >= 5  # refit only on what was observed since the shift
    assert max(shifted[:5]) > 0.08  # right after the shift the error is large
    assert np.mean(shifted[-20:]) < 0.03  # and small again after the fine-tune
    assert loop.model.factor == pytest.approx(1.8, abs=0.05)


def test_node_metrics_feed_observes_nodes_with_a_decision_and_skips_the_rest(api, kube):
    loop = FeedbackLoop(threshold=0.1, calibration=0)
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)
    api.node_metrics = {"n0": {"cpu": "1", "memory": "1Gi"},  # 1000m of 8000m
                        "n1": {"cpu": "3", "memory": "1Gi"},  # no decision there: skipped
                        "n2": {"cpu": "bogus", "memory": "1Gi"}}
    loop.predict("ns/p2", "n2", 1000.0, 4000.0)
    feed = NodeMetricsFeed(kube, loop, interval_s=3600)
    assert feed.poll() == 1 and feed.polls == 1
    d = loop.by_key["ns/p0"]
    assert d.observed_util == pytest.approx(0.125)
    assert d.errors["utilization"] == pytest.approx(0.125 - 0.25)
    assert loop.by_key["ns/p2"].observed_util is None  # an unreadable quantity is not an observation


def test_node_metrics_with_a_base_load_do_not_fine_tune_on_every_cooldown(api, kube):
    """metrics-server counts the kubelet and system daemons, which no pod requests: every node
    shows 2,500m more than its pods use. No usage factor explains that, so fine-tunes cannot
    remove the error; they must come ever more rarely, not once per cooldown for ever."""
    loop = FeedbackLoop(threshold=0.1, alpha=0.3, min_samples=5, cooldown=20, calibration=5)
    requested = {f"n{i}": 1000.0 + 1500.0 * i for i in range(5)}  # 1000m .. 7000m of 8 cores
    for node, req in requested.items():
        loop.predict(f"ns/{node}-pod", node, req, 8000.0)
    api.node_metrics = {node: {"cpu": f"{int(req + 2500)}m", "memory": "1Gi"} for node, req in requested.items()}
    feed = NodeMetricsFeed(kube, loop, interval_s=3600)
    for _ in range(200):  # 1,000 observations: 50 cooldowns
        assert feed.poll() == 5
    at = [t.observation for t in loop.signals]
    assert 1 <= len(at) <= 6, at
    assert all(b - a >= 2 * 20 for a, b in zip(at[1:], at[2:], strict=False)), at
    d = loop.by_key["ns/n0-pod"]
    assert d.observed_util == pytest.approx(3500 / 8000)  # usage over the same allocatable CPU as predicted
