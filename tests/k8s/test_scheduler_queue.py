"""The unschedulable-pod queue of ``iro scheduler`` (kube-scheduler's unschedulablePods, backoffQ
and the 5-minute flush). No thread runs: the stores are lists taken at chosen moments and the
queue's clock is a fake one the test moves, so nothing depends on timing. Solves are counted
from the batches the real solver produced."""

from __future__ import annotations

import pytest

from iro_fed.k8s.client import Kube
from iro_fed.k8s.scheduler import IroScheduler
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from tests.k8s.helpers import churn
from tests.k8s.helpers import make_scheduler as make


@pytest.fixture
def cluster(api: FakeApiServer) -> FakeApiServer:
    """One 4-CPU node running a pod, and a pending 8-CPU pod of ``iro`` that fits nowhere."""
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("running", cpu="1", node="n0"))
    api.add_pod(make_pod("big", cpu="8", scheduler="iro"))
    return api


def step(s: IroScheduler) -> list[str]:
    """One pass of the scheduler's loop: the pods ready now are solved as one batch. Returns the
    keys the solver was given (none: no solve)."""
    s.pending._list()  # the pending pods as they are now (our own status patches included)
    pods = s.ready_pods()
    if not pods:
        return []
    batch = s.schedule_batch(pods)
    s.batches.append(batch)
    return [o.key for o in batch.pods]


def attempts_of(s: IroScheduler) -> list[tuple[int | None, float | None]]:
    return [(o.attempts, o.backoff_s) for b in s.batches for o in b.pods if o.key == "default/big"]


def test_an_unrelated_change_within_the_backoff_does_not_solve_the_pod_again(cluster, sched, clock):
    assert step(sched) == ["default/big"]
    assert attempts_of(sched) == [(1, 1.0)]
    churn(cluster, sched)
    clock.advance(0.5)
    assert step(sched) == []  # changed, but backing off
    clock.advance(0.5)
    assert step(sched) == ["default/big"]  # backoff over and the cluster changed since
    assert attempts_of(sched) == [(1, 1.0), (2, 2.0)]


def test_the_backoff_alone_does_not_solve_it_again_without_a_change(cluster, sched, clock):
    assert step(sched) == ["default/big"]
    clock.advance(60)
    assert step(sched) == []  # nothing changed since its attempt: it would fail the same way
    status = sched.queue_status()["default/big"]
    assert status["attempts"] == 1 and status["retry_in_s"] == 0 and not status["cluster_changed"]
    churn(cluster, sched)
    assert sched.queue_status()["default/big"]["cluster_changed"]
    assert step(sched) == ["default/big"]
    assert len(sched.batches) == 2


def test_the_backoff_doubles_per_attempt_and_stops_at_10_s(cluster, sched, clock):
    assert step(sched) == ["default/big"]
    expected = [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    for i, delay in enumerate(expected):
        churn(cluster, sched, i)
        clock.advance(delay - 0.01)
        assert step(sched) == [], f"attempt {i + 2} came before its {delay} s backoff"
        assert sched.queue_status()["default/big"]["retry_in_s"] == pytest.approx(0.01)
        clock.advance(0.01)
        assert step(sched) == ["default/big"]
    assert attempts_of(sched) == [(n, d) for n, d in zip(range(1, 8), [*expected, 10.0], strict=True)]
    # the retries were solved, but the unchanged failure was reported once
    events = [e for e in cluster.list("events") if e["involvedObject"]["name"] == "big"]
    assert [e["reason"] for e in events] == ["FailedScheduling"]
    assert len(cluster.requests_to("PATCH", "/pods/big/status$")) == 1


def test_a_pod_unschedulable_for_5_min_is_tried_again_without_any_change(cluster, sched, clock):
    assert step(sched) == ["default/big"]
    clock.advance(299.5)
    assert step(sched) == []
    clock.advance(0.5)
    assert step(sched) == ["default/big"]  # flushed, as podMaxInUnschedulablePodsDuration does
    assert attempts_of(sched) == [(1, 1.0), (2, 2.0)]
    clock.advance(299.5)
    assert step(sched) == []  # the wait counts from the last attempt
    clock.advance(0.5)
    assert step(sched) == ["default/big"]


def test_the_flush_delay_and_the_backoffs_are_settings(cluster, kubeconfig, clock):
    s = make(kubeconfig, clock, pod_initial_backoff_s=0.5, pod_max_backoff_s=1.5, max_unschedulable_s=30)
    try:
        assert step(s) == ["default/big"]
        for i in range(3):
            churn(cluster, s, i)
            clock.advance(1.5)
            assert step(s) == ["default/big"]
        clock.advance(30)
        assert step(s) == ["default/big"]
    finally:
        s.stop()
    assert attempts_of(s) == [(1, 0.5), (2, 1.0), (3, 1.5), (4, 1.5), (5, 1.5)]


@pytest.mark.parametrize("kw", [{"pod_initial_backoff_s": 0}, {"pod_max_backoff_s": 0.5}, {"max_unschedulable_s": -1}])
def test_bad_queue_settings_are_refused_by_name(kubeconfig, kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        IroScheduler(Kube.from_kubeconfig(kubeconfig), leader_election=False, **kw)


def test_a_pod_update_is_tried_at_once_with_its_attempts_reset(cluster, sched, clock):
    assert step(sched) == ["default/big"]
    for i in range(2):
        churn(cluster, sched, i)
        clock.advance(10)
        assert step(sched) == ["default/big"]
    assert attempts_of(sched)[-1] == (3, 4.0)
    # the scheduler's own PodScheduled patch changed the pod's resourceVersion: not an update
    assert cluster.get("pods", "default/big")["status"]["conditions"][0]["reason"] == "Unschedulable"
    assert step(sched) == []
    # a label added to the pod (no cluster change, backoff not over): tried now, attempts from 1
    pod = cluster.get("pods", "default/big")
    pod["metadata"].setdefault("labels", {})["tier"] = "batch"
    cluster.update("pods", pod)
    assert step(sched) == ["default/big"]
    assert attempts_of(sched)[-1] == (1, 1.0)
    assert step(sched) == []
    # its requests lowered so that it fits: tried at once again, and bound
    pod = cluster.get("pods", "default/big")
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    cluster.update("pods", pod)
    assert step(sched) == ["default/big"]
    assert sched.batches[-1].pods[0].status == "bound"
    assert "default/big" not in sched.queue_status()


def test_a_pod_recreated_under_its_name_is_a_new_pod(cluster, sched, clock):
    assert step(sched) == ["default/big"]
    churn(cluster, sched)
    clock.advance(0.5)
    assert step(sched) == []
    cluster.delete("pods", "default/big")
    cluster.add_pod(make_pod("big", cpu="8", scheduler="iro"))  # same spec, new UID
    assert step(sched) == ["default/big"]
    assert attempts_of(sched) == [(1, 1.0), (1, 1.0)]
