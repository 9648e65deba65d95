"""``iro scheduler``'s batch edges: a chain of pods waiting on batch-mates in any queue order is placed
in one batch; the batch log line accounts for every pod; each pod's rules are parsed once per batch
check. Loopback API server, real kubernetes client, a scheduler run by hand."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np
import pytest

pytest.importorskip("kubernetes")

from iro_fed.k8s.testing import FakeApiServer, InjectedError, make_node, make_pod  # noqa: E402
from tests.k8s.helpers import ZONE, Clock, affinity, anti, cycle, make_scheduler  # noqa: E402


def node_of(api: FakeApiServer, name: str) -> str | None:
    return api.get("pods", f"default/{name}")["spec"].get("nodeName")


def web_api_db(api: FakeApiServer) -> None:
    """web waits for api, api for db (pod affinity within the zone), db must run in zone a; the queue
    (by priority) has web first."""
    api.add_pod(make_pod("web", cpu="1", scheduler="iro", labels={"app": "web"}, affinity=affinity("api"), priority=9))
    api.add_pod(make_pod("api", cpu="1", scheduler="iro", labels={"app": "api"}, affinity=affinity("db"), priority=5))
    api.add_pod(make_pod("db", cpu="1", scheduler="iro", labels={"app": "db"}, node_selector={ZONE: "a"}, priority=1))


def zone_nodes(api: FakeApiServer) -> None:
    api.add_node(make_node("a0", cpu="8", zone="a"))
    api.add_node(make_node("b0", cpu="16", zone="b"))


# --- 1. waiters on batch-mates that come later in the queue ------------------------------------------------


def test_a_chain_of_waiters_in_reverse_queue_order_is_placed_in_one_batch(api, kubeconfig):
    """web waits for api, api for db, db is placed by the solver; the queue has web first. The
    single pass placed api after db, but had judged web before api was placed: web was reported
    unschedulable (a FailedScheduling Event, a backoff) though api landed in the same batch."""
    zone_nodes(api)
    web_api_db(api)
    s = make_scheduler(kubeconfig, Clock())
    try:
        batch = cycle(s)
        assert {o.key: o.status for o in batch.pods} == {"default/web": "bound", "default/api": "bound",
                                                          "default/db": "bound"}
        assert s.queue_status() == {}
    finally:
        s.stop()
    assert [node_of(api, p) for p in ("db", "api", "web")] == ["a0", "a0", "a0"]
    assert not [e for e in api.list("events") if e["reason"] == "FailedScheduling"]


def test_a_longer_chain_in_any_order_and_an_orphan(api, kubeconfig):
    """Four links queued in an order that needs three passes (d waits for c, c for b, b for a;
    queue d, c, b then a): all bound. A pod whose target is in no batch stays unschedulable."""
    zone_nodes(api)
    links = [("d", "c"), ("c", "b"), ("b", "a2")]
    for k, (name, target) in enumerate(links):
        api.add_pod(make_pod(name, cpu="1", scheduler="iro", labels={"app": name}, affinity=affinity(target),
                             priority=10 - k))
    api.add_pod(make_pod("a2", cpu="1", scheduler="iro", labels={"app": "a2"}, node_selector={ZONE: "b"}, priority=1))
    api.add_pod(make_pod("orphan", cpu="1", scheduler="iro", labels={"app": "o"}, affinity=affinity("nobody"),
                         priority=8))
    s = make_scheduler(kubeconfig, Clock())
    try:
        batch = cycle(s)
        status = {o.key.split("/")[1]: o.status for o in batch.pods}
    finally:
        s.stop()
    assert status == {"d": "bound", "c": "bound", "b": "bound", "a2": "bound", "orphan": "unschedulable"}
    assert {node_of(api, p) for p in ("a2", "b", "c", "d")} == {"b0"}


def test_a_waiter_whose_target_finds_no_node_is_not_placed(api, kubeconfig):
    """api waits for db but has no room in db's zone: it is left for the next batch (deferred); web,
    waiting for api, which is bound nowhere, is unschedulable, as before."""
    api.add_node(make_node("a0", cpu="1", zone="a"))
    api.add_node(make_node("b0", cpu="16", zone="b"))
    web_api_db(api)
    s = make_scheduler(kubeconfig, Clock())
    try:
        batch = cycle(s)
    finally:
        s.stop()
    assert {o.key: o.status for o in batch.pods} == {"default/web": "unschedulable", "default/api": "deferred",
                                                      "default/db": "bound"}


# --- 2. the batch log line adds up ------------------------------------------------------------------------


def _line(caplog: pytest.LogCaptureFixture) -> tuple[int, dict[str, int]]:
    [msg] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch of ")]
    head, _, rest = msg.partition(": ")
    parts = rest.split(", solved by ")[0].split(", ")
    counts = {words: int(n) for n, words in (part.split(" ", 1) for part in parts)}
    return int(head.removeprefix("batch of ")), counts


def test_the_batch_line_counts_invalid_pods_and_failed_bindings(api, kubeconfig, caplog):
    """One pod bound, one whose Binding fails (500), one with an unreadable request: the line used to
    say "batch of 3: 1 bound, 0 unschedulable, 0 left for the next batch", the other two nowhere."""
    api.add_node(make_node("n0", cpu="8"))
    api.add_pod(make_pod("ok", cpu="1", scheduler="iro"))
    api.add_pod(make_pod("bad", cpu="lots", scheduler="iro"))
    api.add_pod(make_pod("flaky", cpu="1", scheduler="iro"))

    def hook(ns: str, name: str, body: dict[str, Any]) -> None:
        if name == "flaky":
            raise InjectedError(500, "InternalError", "etcd timeout")

    api.binding_hook = hook
    s = make_scheduler(kubeconfig, Clock())
    try:
        with caplog.at_level(logging.INFO, logger="iro_fed.k8s.scheduler"):
            batch = cycle(s)
    finally:
        s.stop()
    assert Counter(o.status for o in batch.pods) == {"bound": 1, "invalid": 1, "bind-error": 1}
    size, counts = _line(caplog)
    assert size == 3 and sum(counts.values()) == 3, counts
    assert counts["invalid"] == 1 and counts["binding failed"] == 1


def test_a_batch_of_invalid_pods_only_is_logged(api, kubeconfig, caplog):
    api.add_node(make_node("n0", cpu="8"))
    api.add_pod(make_pod("bad", cpu="lots", scheduler="iro"))
    s = make_scheduler(kubeconfig, Clock())
    try:
        with caplog.at_level(logging.INFO, logger="iro_fed.k8s.scheduler"):
            batch = cycle(s)
    finally:
        s.stop()
    assert [o.status for o in batch.pods] == ["invalid"]
    size, counts = _line(caplog)
    assert size == 1 and counts == {"bound": 0, "unschedulable": 0, "left for the next batch": 0, "invalid": 1}


def test_batch_counts_words_every_status():
    from iro_fed.k8s.scheduler import PodOutcome, _batch_counts

    statuses = ["bound", "bound", "conflict", "not-leader", "deferred", "odd"]
    text = _batch_counts([PodOutcome(f"ns/p{i}", None, st, "") for i, st in enumerate(statuses)])
    assert text == ("2 bound, 0 unschedulable, 1 left for the next batch, 1 already bound (409), "
                    "1 not bound (not the leader), 1 odd")


# --- 3. each pod's rules parsed once per batch check --------------------------------------------------------


def test_the_batch_check_parses_each_pods_rules_once(monkeypatch):
    """Three anti-affine replicas, the solver stacked the first two on n0: the second fails against
    the first and moves to n1, then the third fails against it and moves to n2. A moved pod's rules
    were parsed five times (the check, the placed view, the selector keys, its template, its
    relocation); now each pod's once, with the same result."""
    from iro_fed.k8s import scheduler, snapshot
    from iro_fed.k8s.snapshot import ClusterModel
    from iro_fed.model import ClusterState

    nodes = [make_node(f"n{i}", cpu="8") for i in range(3)]
    pods = [make_pod(f"db-{i}", cpu="1", labels={"app": "db"}, affinity=anti("db")) for i in range(3)]
    model = ClusterModel(nodes, [], pending=pods)
    problem = model.with_pods(pods).problem
    model.placed()  # the bound pods (none) parsed before counting
    solved = np.array([0, 0, 1])
    state = ClusterState.with_assignment(problem, solved, {})
    parses: Counter[str] = Counter()
    real = snapshot.pod_rules

    def counting(pod: Any, pending: bool = True) -> Any:
        parses[pod["metadata"]["name"]] += 1
        return real(pod, pending)

    monkeypatch.setattr(snapshot, "pod_rules", counting)
    monkeypatch.setattr(scheduler, "pod_rules", counting)
    order: list[Any] = []
    conflicts, kept = scheduler._batch_conflicts(model, problem, pods, solved, state, order)
    assert conflicts == {}
    assert state.assignment.tolist() == [0, 1, 2]  # db-1 took n1, so db-2 moved on to n2
    assert [(w, node) for w, node, _ in order] == [(0, "n0"), (1, "n1"), (2, "n2")]
    assert sorted(node for node, _ in kept.pods()) == ["n0", "n1", "n2"]
    # The rules kept are those of a placed pod, as pod_rules(pod, pending=False) reads them.
    assert [rules for _, _, rules in order] == [real(p, pending=False) for p in pods]
    assert parses == {"db-0": 1, "db-1": 1, "db-2": 1}
