"""NodeMetricsFeed's numbers (v4): every bad ``interval_s`` / ``max_ahead_s`` is a ValueError naming the
argument (an int past the float range raised OverflowError from float(); an interval past
threading.TIMEOUT_MAX was accepted and the feed's thread died at its first wait), and numpy
scalars are numbers here as everywhere else in the library (np.int64 was refused)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from iro_fed.k8s.feedback import FeedbackLoop, NodeMetricsFeed

T0 = 1_796_000_000.0

BAD_INTERVALS = [10**400, -10**400, 10**10, 1e300, threading.TIMEOUT_MAX * 2, float("nan"), float("inf"),
                 0, 0.0, -1, True, "30", None, np.float64("nan"), np.float32("inf"), np.int64(0), np.int64(-5)]
BAD_AHEADS = [10**400, -10**400, float("nan"), float("inf"), -1, -0.5, True, "10", np.float64("nan"),
              np.float32("-inf"), np.int64(-1)]


def _id(value: object) -> str:
    return f"{type(value).__name__}:{value!r}"[:32]


@pytest.mark.parametrize("bad", BAD_INTERVALS, ids=_id)
def test_a_bad_interval_is_a_value_error_naming_it(bad) -> None:
    with pytest.raises(ValueError, match="^interval_s: must be a finite number > 0") as err:
        NodeMetricsFeed(None, FeedbackLoop(threshold=0.1), interval_s=bad)
    assert len(str(err.value)) < 200  # a huge int is described, not printed


@pytest.mark.parametrize("bad", BAD_AHEADS, ids=_id)
def test_a_bad_max_ahead_is_a_value_error_naming_it(bad) -> None:
    with pytest.raises(ValueError, match="^max_ahead_s: must be a finite number >= 0 or None") as err:
        NodeMetricsFeed(None, FeedbackLoop(threshold=0.1), interval_s=30, max_ahead_s=bad)
    assert len(str(err.value)) < 200


def test_the_longest_wait_threading_supports_is_accepted() -> None:
    feed = NodeMetricsFeed(None, FeedbackLoop(threshold=0.1), interval_s=threading.TIMEOUT_MAX)
    assert feed.interval_s == feed.max_ahead_s == threading.TIMEOUT_MAX


def test_numpy_numbers_are_read_as_numbers(api, kube) -> None:
    clock = [T0]
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: clock[0])
    loop.predict("ns/p0", "n0", 2000.0, 8000.0)
    # the default tolerance is the interval, kept as a float
    feed = NodeMetricsFeed(kube, loop, interval_s=np.float32(30))
    assert type(feed.interval_s) is float and feed.interval_s == feed.max_ahead_s == 30.0
    feed = NodeMetricsFeed(kube, loop, interval_s=np.int64(3600), max_ahead_s=np.int64(20))
    assert type(feed.interval_s) is float and type(feed.max_ahead_s) is float
    api.set_node_metrics("n0", "2", at=T0 + 20)  # 20 s ahead: within max_ahead_s, trusted as its time
    assert feed.poll() == 1 and feed.ahead == 0
    api.set_node_metrics("n0", "2", at=T0 + 10)  # not newer than T0 + 20
    assert feed.poll() == 0 and feed.repeats == 1
