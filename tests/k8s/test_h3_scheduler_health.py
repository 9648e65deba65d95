"""``IroScheduler.health``: the liveness of the scheduling loop (``/healthz`` of the metrics server): a
loop that has ended, or that makes no progress while pods wait, is reported; an idle one is not.
The loop runs on its thread against the loopback API server; time is the scheduler's fake clock."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from iro_fed.k8s.scheduler import LOOP_STALL_MIN_S, IroScheduler  # noqa: E402
from iro_fed.k8s.testing import make_node, make_pod  # noqa: E402
from tests.k8s.helpers import Clock, make_scheduler  # noqa: E402


def test_the_stall_limit_covers_the_loops_longest_step(kubeconfig):
    s = make_scheduler(kubeconfig, Clock(), time_limit_s=30.0, poll_s=1.0)
    try:
        # poll 1 + window 0 + solve 30 + the write timeout of one Binding, three times over.
        assert s.stall_s == pytest.approx(3 * (1 + 0 + 30 + s.kube.write_timeout_s))
    finally:
        s.stop()
    s = make_scheduler(kubeconfig, Clock(), stall_s=5.0)
    s.stop()
    assert s.stall_s == 5.0
    with pytest.raises(ValueError, match="stall_s"):
        make_scheduler(kubeconfig, Clock(), stall_s=0.0)
    assert LOOP_STALL_MIN_S >= 60


def test_a_wedged_batch_with_pods_pending_is_unhealthy(api, kubeconfig):
    """The batch never returns (a call with no timeout, a deadlock): the process was alive for ever.
    Healthy while within stall_s; unhealthy past it with the pod still pending; healthy again once
    the loop moves on."""
    api.add_node(make_node("n0", cpu="8"))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro"))
    clock = Clock()
    s = make_scheduler(kubeconfig, clock, stall_s=120.0)
    entered, release = threading.Event(), threading.Event()

    def wedged(pods: list[dict[str, Any]]) -> Any:
        entered.set()
        release.wait(30)
        raise RuntimeError("released")

    s.schedule_batch = wedged  # type: ignore[method-assign]
    assert s.health() == (True, "not running")
    s.start()
    try:
        assert entered.wait(20), "the loop never reached the batch"
        ok, why = s.health()
        assert ok, why
        clock.advance(119.0)
        assert s.health()[0]
        clock.advance(2.0)
        ok, why = s.health()
        assert not ok
        assert "no progress for 121 s (limit 120 s) with 1 pod(s) pending" in why
    finally:
        release.set()
        s.stop()
    assert s.health() == (True, "stopping")


def test_an_idle_loop_is_healthy_however_long(api, kubeconfig):
    """Nothing pending: a loop that has not passed for long (here: the clock jumps) is not wedged."""
    api.add_node(make_node("n0", cpu="8"))
    clock = Clock()
    s = make_scheduler(kubeconfig, clock, stall_s=10.0)
    entered, release = threading.Event(), threading.Event()
    real_next = s._next_wake_s

    def held() -> float:  # the loop parks here (no pod: it would only sleep)
        entered.set()
        release.wait(30)
        return real_next()

    s._next_wake_s = held  # type: ignore[method-assign]
    s.start()
    try:
        assert entered.wait(20)
        clock.advance(1000.0)
        ok, why = s.health()
        assert ok and "no pod pending" in why, why
    finally:
        release.set()
        s.stop()


def test_a_loop_that_ended_on_an_error_is_unhealthy(api, kubeconfig):
    """An error outside the batch's try (here: reading the queue) ends the loop's thread: nothing is
    scheduled again, while the process and its metrics server live on."""
    api.add_node(make_node("n0", cpu="8"))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro"))
    s = make_scheduler(kubeconfig, Clock())

    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("queue corrupted")

    s.ready_pods = broken  # type: ignore[method-assign]
    s.start()
    try:
        assert s._thread is not None
        s._thread.join(20)
        assert not s._thread.is_alive()
        ok, why = s.health()
        assert not ok and "has ended" in why
    finally:
        s.stop()


def test_health_is_a_method_of_the_scheduler():
    assert callable(IroScheduler.health)
