"""Operator audit of ``iro scheduler`` (loopback API server, real kubernetes client).

Before:
* a pod with ``spec.schedulingGates`` was scheduled: it took the room of a real pod, its Binding
  got 409 from the API server, and once its gates were removed it waited out ASSUME_TTL_S (60 s)
  in ``_conflicts``; the loopback API server bound gated pods and pods being deleted;
* with no nodes the condition and the Event said "0/0 nodes are available.";
* on stop the Lease was released before the Bindings under way had finished;
* ``--kubeconfig`` naming a plain-text file failed with "'str' object does not support item assignment".
"""

from __future__ import annotations

import copy
import threading

import pytest

from iro_fed.cli import main
from iro_fed.k8s.client import Kube
from iro_fed.k8s.scheduler import IroScheduler
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from iro_fed.testing import wait_for
from tests.k8s.helpers import Clock, make_scheduler

GATED = "Scheduling is blocked due to non-empty scheduling gates"


def _gated(name: str, cpu: str = "800m") -> dict:
    pod = make_pod(name, cpu=cpu, scheduler="iro")
    pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return pod


def _condition(api: FakeApiServer, key: str) -> dict | None:
    conds = api.get("pods", key)["status"].get("conditions") or []
    return next((c for c in conds if c.get("type") == "PodScheduled"), None)


def _status_patches(api: FakeApiServer, name: str) -> int:
    return sum(r["method"] == "PATCH" and r["path"].endswith(f"/pods/{name}/status") for r in api.requests)


# --- 1. scheduling gates -------------------------------------------------------------------------


def test_a_gated_pod_is_not_scheduled_and_leaves_its_room_to_others(api: FakeApiServer, kubeconfig: str, clock: Clock):
    api.add_node(make_node("n0", cpu="1", memory="4Gi", zone="z1"))
    api.add_pod(_gated("gated"))
    api.add_pod(make_pod("real", cpu="800m", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock)
    ready = s.ready_pods()
    assert [p["metadata"]["name"] for p in ready] == ["real"]
    cond = _condition(api, "default/gated")
    assert cond is not None and (cond["status"], cond["reason"], cond["message"]) == ("False", "SchedulingGated", GATED)
    result = s.schedule_batch(ready)
    assert [(o.key, o.status, o.node) for o in result.pods] == [("default/real", "bound", "n0")]
    assert api.get("pods", "default/gated")["spec"].get("nodeName") is None
    # The condition is patched once, not on every read of the queue.
    s.pending._list()
    s.ready_pods()
    s.ready_pods()
    assert _status_patches(api, "gated") == 1
    assert not [e for e in api.list("events") if e["involvedObject"]["name"] == "gated"]


def test_a_pod_whose_gates_are_removed_is_tried_at_once(api: FakeApiServer, kubeconfig: str, clock: Clock):
    api.add_node(make_node("n0", cpu="4", memory="4Gi", zone="z1"))
    api.add_pod(_gated("gated"))
    s = make_scheduler(kubeconfig, clock)
    assert s.ready_pods() == []
    # A Binding of a gated pod (a race with an older version of it) is refused with the API
    # server's 409, and the pod is not tried again while it is unchanged ...
    [outcome] = s.schedule_batch([api.get("pods", "default/gated")]).pods
    assert outcome.status == "conflict"
    assert (
        outcome.message
        == 'Operation cannot be fulfilled on pods/binding "gated": pod gated has non-empty .spec.schedulingGates'
    )
    assert api.get("pods", "default/gated")["spec"].get("nodeName") is None
    # ... but once its gates are removed it is a pod to try now, not after ASSUME_TTL_S.
    pod = copy.deepcopy(api.get("pods", "default/gated"))
    pod["spec"].pop("schedulingGates")
    api.update("pods", pod)
    s.pending._list()
    ready = s.ready_pods()
    assert [p["metadata"]["name"] for p in ready] == ["gated"]
    [outcome] = s.schedule_batch(ready).pods
    assert (outcome.status, outcome.node) == ("bound", "n0")


def test_the_loopback_api_server_refuses_to_bind_a_pod_being_deleted(api: FakeApiServer, kube: Kube):
    api.add_node(make_node("n0"))
    pod = make_pod("going")
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    api.add_pod(pod)
    result = kube.bind("default", "going", "n0")
    assert (result.ok, result.status) == (False, 409)
    assert (
        result.message
        == 'Operation cannot be fulfilled on pods/binding "going": pod going is being deleted, cannot be assigned to a host'
    )
    assert api.get("pods", "default/going")["spec"].get("nodeName") is None


# --- 4. no nodes ---------------------------------------------------------------------------------


def test_with_no_nodes_the_pod_gets_kubes_no_nodes_message(api: FakeApiServer, kubeconfig: str, clock: Clock):
    api.add_pod(make_pod("lonely", cpu="100m", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock)
    [outcome] = s.schedule_batch(s.ready_pods()).pods
    assert (outcome.status, outcome.message) == ("unschedulable", "no nodes available to schedule pods")
    cond = _condition(api, "default/lonely")
    # ErrNoNodesAvailable: status UnschedulableAndUnresolvable, which kube reports as Unschedulable.
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False",
        "Unschedulable",
        "no nodes available to schedule pods",
    )
    [event] = [e for e in api.list("events") if e["reason"] == "FailedScheduling"]
    assert event["message"] == "no nodes available to schedule pods"
    # A node added moves it once its backoff is over.
    api.add_node(make_node("n0", cpu="8", memory="16Gi", zone="z1"))
    s.cache.nodes._list()
    s.pending._list()
    clock.advance(1.0)
    ready = s.ready_pods()
    assert [p["metadata"]["name"] for p in ready] == ["lonely"]
    [outcome] = s.schedule_batch(ready).pods
    assert (outcome.status, outcome.node) == ("bound", "n0")


# --- 3. the Lease outlives the Bindings under way -----------------------------------------------


def test_stop_releases_the_lease_only_after_the_bindings_under_way(api: FakeApiServer, kube: Kube):
    api.add_node(make_node("n0", cpu="8", memory="16Gi", zone="z1"))
    s = IroScheduler(
        kube, name="iro", identity="a", window_s=0, lease_duration=15, renew_deadline=10, retry_period=0.2, poll_s=0.1
    )
    order: list[str] = []
    released = threading.Event()
    entered = threading.Event()
    real_release = s.elector.release

    def release() -> bool:
        order.append("release")
        released.set()
        return real_release()

    s.elector.release = release  # type: ignore[method-assign]

    def hook(ns: str, name: str, body: dict) -> None:
        entered.set()
        # Held until the elector has stopped and the lease could have been given up (the old
        # code released it right then), or a while after that (the new code waits for us).
        assert wait_for(lambda: s.elector._thread is not None and not s.elector._thread.is_alive(), timeout=30)
        released.wait(3.0)
        order.append(f"bound {name}")

    api.binding_hook = hook
    s.start()
    try:
        assert s.elector.wait_leader(20)
        api.add_pod(make_pod("a", cpu="100m", scheduler="iro"))
        assert entered.wait(20)
    finally:
        s.stop()
    assert order == ["bound a", "release"]
    assert api.get("pods", "default/a")["spec"]["nodeName"] == "n0"
    assert api.get("leases", "iro-system/iro-scheduler")["spec"].get("holderIdentity") in ("", None)


# --- 5. a kubeconfig that is not a mapping -------------------------------------------------------


def test_a_plain_text_kubeconfig_is_refused_naming_what_it_is(tmp_path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "hostname"
    path.write_text("vm-1234\n")
    with pytest.raises(ValueError, match=r"not a kubeconfig: expected a YAML mapping, got a string"):
        Kube.from_kubeconfig(str(path))
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n")
    with pytest.raises(ValueError, match=r"not a kubeconfig: expected a YAML mapping, got a list"):
        Kube.from_kubeconfig(str(listed))
    assert main(["scheduler", "--kubeconfig", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--kubeconfig: cannot load" in err and "not a kubeconfig: expected a YAML mapping, got a string" in err
    assert "item assignment" not in err
