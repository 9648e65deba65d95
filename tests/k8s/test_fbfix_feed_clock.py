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
