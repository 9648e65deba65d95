"""A reading taken before a bind, arriving after it, must not be judged against the pod (s8).

The caller's ``requests`` (what the node holds now, e.g. the scheduler's cache) count a pod
bound after the reading was taken, which the reading cannot show: the error looked as large as
the pod's share of the node and could fire a fine-tune on nothing. The metrics-server feed's
side of this (a scrape stamped in the second of a bind) is in tests/k8s/test_fbfix_feed_clock.py.
"""

from __future__ import annotations

import pytest

from iro_fed.feedback import FeedbackLoop

T0 = 1_796_000_000.0


def test_a_reading_taken_before_a_bind_is_not_judged_against_requests_with_its_pod():
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: T0 + 100)  # readings arrive at T0 + 100
    loop.record_decision("p0", "n0", {"default": 2000.0}, 8000.0, at=T0)
    loop.record_decision("p1", "n0", {"default": 8000.0}, 8000.0, at=T0 + 30)  # p1 bound at T0 + 30
    # taken at T0 + 20: p0 only (2000m of 8000m); the node holds p0 and p1 now
    assert loop.observe("n0", 0.25, requests={"default": 8000.0}, capacity=8000.0, at=T0 + 20) is None  # was 0.75
    assert loop.observations == 0 and not loop.experience
    assert loop.by_key["p0"].observed_util is None and loop.by_key["p1"].observed_util is None  # both still wait
    # the next reading, taken after the bind, shows both pods and completes both decisions
    assert loop.observe("n0", 1.0, requests={"default": 8000.0}, capacity=8000.0, at=T0 + 40) == pytest.approx(0.0)
    assert loop.by_key["p0"].observed_util == 1.0 and loop.by_key["p1"].observed_util == 1.0
    assert loop.experience[-1].requests == {"default": 8000.0}


def test_readings_taken_before_binds_do_not_fire_a_fine_tune():
    """Pods use exactly what they request; every reading was taken 5 s before the latest bind on
    its node and read just after it. Judged against the requests with the new pod, each gave an
    error of 0.125 (the pod's share) and the loop fine-tuned a model that was right."""
    loop = FeedbackLoop(threshold=0.1, alpha=0.5, min_samples=2, calibration=0)
    loop.model.factors["default"] = 1.0
    held = {f"n{i}": 0.0 for i in range(3)}
    for step in range(6):
        for j, node in enumerate(held):
            at = T0 + 60 * step + j
            before = held[node]
            held[node] += 2000.0
            loop.record_decision(f"p{step}-{node}", node, {"default": held[node]}, 16000.0, at=at)
            loop.observe(node, before / 16000.0, requests={"default": held[node]}, capacity=16000.0, at=at - 5)
    assert loop.signals == []  # was a fine-tune after two readings (factor 1.0 refitted to 0.0)
    assert loop.model.factors["default"] == 1.0
    for j, node in enumerate(held):  # readings taken after the binds: judged, and right
        assert loop.observe(node, held[node] / 16000.0, requests={"default": held[node]}, capacity=16000.0,
                            at=T0 + 400 + j) == pytest.approx(0.0)
    assert loop.signals == [] and loop.moving_error == pytest.approx(0.0)


def test_a_latency_reading_taken_before_a_bind_does_not_complete_its_decision():
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: T0 + 100)
    loop.record_decision("p0", "n0", 1000.0, 8000.0, network_latency_ms=5.0, at=T0 + 30)
    assert loop.observe_latency("p0", 40.0, at=T0 + 20) is None  # was 35.0: a reading from before p0 ran
    d = loop.by_key["p0"]
    assert d.observed_latency_ms is None and "latency_ms" not in d.errors and loop.latency_readings == 0
    assert loop.observe_latency("p0", 5.0, at=T0 + 40) == pytest.approx(0.0)
    assert d.observed_latency_ms == 5.0
