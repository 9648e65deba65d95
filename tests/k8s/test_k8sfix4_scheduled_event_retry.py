"""A ``Scheduled`` Event whose POST failed after a successful Binding is sent again by the loop
(EVENT_RETRY_S apart, EVENT_TRIES tries in all, the same body), as client-go's event broadcaster
retries every Event write; a refusal (4xx but 429) is not retried. Before: it was logged and lost,
and with it the explanation of the placement (R, the terms, the runner-up).

The loopback API server's ``event_hook`` answers 500 (then 201); the queue's clock is a fake one
the test moves, so nothing depends on timing. The threaded test synchronises on watch events.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from iro_fed.k8s.client import Kube
from iro_fed.k8s.scheduler import EVENT_RETRY_S, EVENT_TRIES, IroScheduler
from iro_fed.k8s.testing import FakeApiServer, InjectedError, make_node, make_pod

HOUR = 3600.0


@pytest.fixture
def cluster(api: FakeApiServer) -> FakeApiServer:
    """One 4-CPU node and a pending 1-CPU pod ``web`` of ``iro``."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro"))
    return api


class Hook:
    """``event_hook`` answering ``code`` to the first ``failures`` Event POSTs (all when None);
    it keeps every body it was sent."""

    def __init__(self, failures: int | None, code: int = 500) -> None:
        self.failures, self.code = failures, code
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, ns: str, body: dict[str, Any]) -> None:
        self.bodies.append(copy.deepcopy(body))  # the server names the stored one
        if self.failures is None or self.failures > 0:
            if self.failures is not None:
                self.failures -= 1
            raise InjectedError(self.code, "InternalError" if self.code >= 500 else "Forbidden", "injected")


def bind(s: IroScheduler) -> list[str]:
    s.pending._list()
    batch = s.schedule_batch(s.ready_pods())
    assert {o.status for o in batch.pods} == {"bound"}
    return [o.key for o in batch.pods]


def scheduled(api: FakeApiServer, name: str = "web") -> list[dict[str, Any]]:
    return [e for e in api.list("events") if e["involvedObject"]["name"] == name and e["reason"] == "Scheduled"]


def posts(api: FakeApiServer) -> int:
    return len(api.requests_to("POST", "/events$"))


def test_a_scheduled_event_answered_500_is_sent_again_by_the_loop(cluster, sched, clock):
    cluster.event_hook = hook = Hook(failures=1)
    assert bind(sched) == ["default/web"]
    assert posts(cluster) == 1 and scheduled(cluster) == []
    sched._retry_events()  # not due yet: the loop never waits on it, it comes back later
    assert posts(cluster) == 1
    clock.advance(EVENT_RETRY_S)
    sched._retry_events()
    assert posts(cluster) == 2  # was 1: the Event was lost
    [event] = scheduled(cluster)
    assert event["message"].startswith("Successfully assigned default/web to n0 by iro")
    assert hook.bodies[1] == hook.bodies[0]  # the same Event, its first timestamp kept
    clock.advance(HOUR)
    sched._retry_events()
    assert posts(cluster) == 2  # posted: nothing held


def test_a_failing_scheduled_event_is_tried_event_tries_times_then_dropped(cluster, sched, clock):
    cluster.event_hook = Hook(failures=None)
    bind(sched)
    for _ in range(EVENT_TRIES + 3):
        clock.advance(EVENT_RETRY_S)
        sched._retry_events()
    assert posts(cluster) == EVENT_TRIES
    cluster.event_hook = None
    clock.advance(EVENT_RETRY_S)
    sched._retry_events()
    assert posts(cluster) == EVENT_TRIES and scheduled(cluster) == []


def test_a_refused_scheduled_event_is_not_sent_again(cluster, sched, clock):
    cluster.event_hook = Hook(failures=1, code=403)
    bind(sched)
    clock.advance(EVENT_RETRY_S)
    sched._retry_events()
    assert posts(cluster) == 1 and scheduled(cluster) == []


def test_while_the_server_fails_one_held_event_is_tried_per_pass(cluster, sched, clock):
    cluster.add_pod(make_pod("api", cpu="1", scheduler="iro"))
    cluster.event_hook = Hook(failures=None)
    assert sorted(bind(sched)) == ["default/api", "default/web"]
    assert posts(cluster) == 2
    clock.advance(EVENT_RETRY_S)
    sched._retry_events()
    assert posts(cluster) == 3  # the first failed: the other waits, its tries untouched
    cluster.event_hook = None
    clock.advance(EVENT_RETRY_S)
    sched._retry_events()
    assert posts(cluster) == 5
    assert len(scheduled(cluster, "web")) == len(scheduled(cluster, "api")) == 1


def test_the_running_loop_sends_it_again(cluster, kubeconfig, clock):
    hook = Hook(failures=1)
    cluster.event_hook = hook
    s = IroScheduler(Kube.from_kubeconfig(kubeconfig), identity="ev", leader_election=False, window_s=0,
                     poll_s=HOUR, watch_timeout_s=5, clock=clock).start()
    try:
        def bound(name: str) -> Callable[[], bool]:
            return lambda: any(o.key == f"default/{name}" and o.status == "bound" for b in s.batches for o in b.pods)

        assert cluster.wait_for(bound("web"), 20)
        assert scheduled(cluster) == []
        clock.advance(EVENT_RETRY_S)
        # A pending pod wakes the loop for sure (its timer would too, EVENT_RETRY_S on).
        cluster.add_pod(make_pod("probe", cpu="100m", scheduler="iro"))
        assert cluster.wait_for(bound("probe"), 20)
        assert cluster.wait_for(lambda: len(scheduled(cluster)) == 1, 20)  # was never sent again
    finally:
        s.stop()
