"""NodeMetricsFeed does not take a scrape timestamp far ahead of its own clock as a node's mark
(feedback leftovers): one scrape from a kubelet whose clock ran ahead muted the node."""

from __future__ import annotations

import pytest

from iro_fed.k8s.feedback import FeedbackLoop, NodeMetricsFeed

T0 = 1_796_000_000.0


def test_a_scrape_stamped_far_ahead_does_not_mute_the_node(api, kube):
    """A kubelet clock an hour ahead (NTP corrected it a minute later): the scrape it stamped
    T0+3600 became n0's mark, and every correct scrape of the next hour was "not newer" and
    skipped; the bad scrape also completed decisions made after it was really taken."""
    clock = [T0 - 60]
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: clock[0])
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)  # at T0 - 60
    feed = NodeMetricsFeed(kube, loop, interval_s=30)
    api.set_node_metrics("n0", "2", at=T0 + 3600)
    clock[0] = T0
    assert feed.poll() == 1  # fed, at the poll's time
    assert loop.by_key["ns/p0"].observed_util == pytest.approx(0.25)
    clock[0] = T0 + 30
    loop.predict("ns/p1", "n0", 4000.0, 8000.0)  # after that scrape was taken
    assert feed.poll() == 0 and feed.repeats == 1  # the same scrape read again: still fed once
    assert loop.by_key["ns/p1"].observed_util is None  # it cannot show ns/p1
    api.set_node_metrics("n0", "4", at=T0 + 60)  # the clock corrected: the next scrape
    clock[0] = T0 + 70
    assert feed.poll() == 1 and loop.observations == 2
    assert loop.by_key["ns/p1"].observed_util == pytest.approx(0.5)
    api.set_node_metrics("n0", "4", at=T0 + 50)  # older than the last one fed: not newer
    assert feed.poll() == 0 and loop.observations == 2
    assert feed.ahead == 1  # the one scrape fed at the poll's time


def test_a_scrape_within_the_tolerance_is_trusted_and_the_tolerance_is_checked(api, kube):
    clock = [T0]
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: clock[0])
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)
    feed = NodeMetricsFeed(kube, loop, interval_s=3600, max_ahead_s=20)
    api.set_node_metrics("n0", "2", at=T0 + 20)  # 20 s ahead: within max_ahead_s, its own mark
    assert feed.poll() == 1 and feed.ahead == 0
    api.set_node_metrics("n0", "2", at=T0 + 10)  # not newer than T0 + 20
    assert feed.poll() == 0 and feed.repeats == 1
    for bad in (-1.0, float("nan"), float("inf"), "10", True):
        with pytest.raises(ValueError, match="max_ahead_s"):
            NodeMetricsFeed(kube, loop, max_ahead_s=bad)


def test_a_scrape_stamped_in_the_second_of_a_bind_is_not_counted_against_it(api, kube):
    """``metav1.Time`` has whole seconds: a scrape stamped T0 was taken in [T0, T0 + 1). Fed at
    T0 + 1 (the end of that second), it counted a pod bound at T0 + 0.5, possibly after it."""
    clock = [T0 - 60]
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: clock[0])
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)  # at T0 - 60
    clock[0] = T0 + 0.5
    loop.predict("ns/p1", "n0", 6000.0, 8000.0)  # bound at T0 + 0.5: 6000m on the node now
    feed = NodeMetricsFeed(kube, loop, interval_s=30, current=lambda node: ({"default": 6000.0}, 8000.0))
    api.set_node_metrics("n0", "2", at=T0)  # taken at T0 + 0.2, before the bind: p0's 2000m only
    clock[0] = T0 + 20
    assert feed.poll() == 0 and loop.observations == 0  # was 1, with an error of 0.5
    assert loop.by_key["ns/p1"].observed_util is None
    api.set_node_metrics("n0", "6", at=T0 + 15)  # the next scrape shows p1
    clock[0] = T0 + 30
    assert feed.poll() == 1 and loop.errors[-1] == pytest.approx(0.0)
    assert loop.by_key["ns/p1"].observed_util == pytest.approx(0.75)
    assert loop.by_key["ns/p1"].observed_at == T0 + 15  # the start of the second it names


def test_without_current_requests_a_scrape_in_the_second_of_a_bind_does_not_complete_it(api, kube):
    clock = [T0 - 60]
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: clock[0])
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)
    clock[0] = T0 + 0.5
    loop.predict("ns/p1", "n0", 6000.0, 8000.0)
    api.set_node_metrics("n0", "2", at=T0)
    clock[0] = T0 + 20
    assert NodeMetricsFeed(kube, loop, interval_s=30).poll() == 1  # judged as what it saw: p0
    assert loop.experience[-1].requests == {"default": 2000.0} and loop.errors[-1] == pytest.approx(0.0)
    assert loop.by_key["ns/p0"].observed_util == pytest.approx(0.25)
    assert loop.by_key["ns/p1"].observed_util is None  # was completed with 0.25 (error -0.5)
