"""build_snapshot bounds all of its queries together: one overall deadline (default the client's
``deadline_s``), not one per query. Real HTTP servers on 127.0.0.1 that speak the Prometheus API;
the bounds are loose multiples of the deadline, not exact times."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from iro_fed.metrics import PrometheusClient, PrometheusUnavailable, SnapshotQueries, build_snapshot
from tests.metrics.promapi import params, serve, vector

ANSWER = vector([{"metric": {"node": "e1", "service": "shop"}, "value": [1.0, "2"]}])


@contextmanager
def prometheus(delay_s: float) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A loopback Prometheus API that answers every query after ``delay_s``; its URL and the
    parameters of each query it was sent."""
    asked: list[dict[str, str]] = []
    stop = threading.Event()

    def respond(handler):
        asked.append(params(handler))
        return None if stop.wait(delay_s) else (200, ANSWER)

    with serve(respond) as url:
        try:
            yield url, asked
        finally:
            stop.set()


def test_slow_answers_cost_the_snapshot_one_deadline_not_one_per_query() -> None:
    # Each answer takes 0.35 s, within one request's timeout (0.5 s) and deadline (1 s): the 9
    # queries took 3.15 s, and the snapshot came back.
    with prometheus(0.35) as (url, asked):
        client = PrometheusClient(url, timeout_s=0.5)
        start = time.monotonic()
        with pytest.raises(PrometheusUnavailable, match="deadline") as err:
            build_snapshot(client)
        took = time.monotonic() - start
    assert took < 2 * client.deadline_s, f"the snapshot took {took:.2f} s"
    assert len(asked) <= 3 and url in str(err.value)


def test_each_query_is_sent_with_what_is_left_as_its_server_timeout() -> None:
    with prometheus(0.0) as (url, asked):
        snap = build_snapshot(PrometheusClient(url, timeout_s=30.0), deadline_s=2.0)
    assert len(asked) == 9 and snap.services["shop"].p99_latency_ms == 2000.0  # every query answered
    # The server gives up when the snapshot does: never the client's 30 s per query.
    assert all(0 < float(q["timeout"]) <= 2.0 for q in asked), [q["timeout"] for q in asked]


def test_a_spent_deadline_sends_no_more_queries() -> None:
    with prometheus(0.4) as (url, asked):
        with pytest.raises(PrometheusUnavailable, match="overall 0.2 s deadline|overall deadline: 0.2 s"):
            build_snapshot(PrometheusClient(url, timeout_s=5.0), SnapshotQueries(), deadline_s=0.2)
    assert len(asked) == 1


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1", 1e10])  # 1e10: a deadline timer overflowed time_t
def test_a_bad_deadline_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(ValueError, match="deadline_s: must be a number of seconds > 0"):
        build_snapshot(PrometheusClient("http://127.0.0.1:9"), deadline_s=bad)  # type: ignore[arg-type]
