"""A FailedScheduling Event whose POST failed is not counted as posted: it is posted again at the
pod's next attempts, at most EVENT_TRIES tries in a row, then dropped until EVENT_REPEAT_S (as
client-go's event broadcaster retries a write a few times, then drops it). Loopback API server
answering 500 to Event POSTs; the queue's clock is a fake one, so nothing depends on timing."""

from __future__ import annotations

import pytest

from iro_fed.k8s.scheduler import EVENT_REPEAT_S, EVENT_TRIES, IroScheduler
from iro_fed.k8s.testing import FakeApiServer, InjectedError, make_node, make_pod
from tests.k8s.helpers import churn


@pytest.fixture
def cluster(api: FakeApiServer) -> FakeApiServer:
    """One 4-CPU node and a pending 8-CPU pod of ``iro`` that fits nowhere."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("big", cpu="8", scheduler="iro"))
    return api


def attempt(api: FakeApiServer, s: IroScheduler, clock, i: int) -> None:
    """A cluster change that leaves ``big`` unfittable, its backoff waited out, and one pass."""
    churn(api, s, i)
    clock.advance(10)
    s.pending._list()
    pods = s.ready_pods()
    assert [p["metadata"]["name"] for p in pods] == ["big"]
    outcome = s.schedule_batch(pods).pods[0]
    assert outcome.status == "unschedulable"


def event_posts(api: FakeApiServer) -> int:
    return len(api.requests_to("POST", "/events$"))


def failed_scheduling(api: FakeApiServer) -> list[dict]:
    return [e for e in api.list("events") if e["involvedObject"]["name"] == "big" and e["reason"] == "FailedScheduling"]


def fail_500(ns: str, body: dict) -> None:
    raise InjectedError(500, "InternalError", "etcd timed out")


def test_an_event_answered_500_is_posted_at_the_next_attempt(cluster, sched, clock):
    cluster.event_hook = fail_500
    attempt(cluster, sched, clock, 0)
    assert event_posts(cluster) == 1 and failed_scheduling(cluster) == []
    cluster.event_hook = None
    attempt(cluster, sched, clock, 1)  # the failed POST counted as posted: nothing sent for 600 s
    assert event_posts(cluster) == 2
    assert len(failed_scheduling(cluster)) == 1
    attempt(cluster, sched, clock, 2)  # posted now: the unchanged failure is not posted again
    assert event_posts(cluster) == 2


def test_a_failing_event_is_tried_a_few_times_then_dropped_until_the_repeat(cluster, sched, clock):
    cluster.event_hook = fail_500
    for i in range(EVENT_TRIES + 3):
        attempt(cluster, sched, clock, i)
    assert event_posts(cluster) == EVENT_TRIES  # one per attempt, then dropped
    clock.advance(EVENT_REPEAT_S)
    cluster.event_hook = None
    attempt(cluster, sched, clock, 99)
    assert event_posts(cluster) == EVENT_TRIES + 1 and len(failed_scheduling(cluster)) == 1
