"""Helpers shared by the Kubernetes tests (the fixtures of the loopback API server are in conftest.py)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest

import solvers
from iro_fed.k8s.client import Kube
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.scheduler import IroScheduler
from iro_fed.k8s.testing import FakeApiServer, make_pod, self_signed_cert
from iro_fed.model import ClusterState

S = TypeVar("S")


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


#: Topology keys of the pod-rule tests.
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def relist(s: IroScheduler) -> None:
    """The scheduler's watches' stores listed afresh: nodes, bound pods, pending pods."""
    s.cache.nodes._list()
    s.cache.pods._list()
    s.pending._list()


def make_scheduler(kubeconfig: str, clock: Clock, **kw: Any) -> IroScheduler:
    """A scheduler the test runs by hand (no thread, no leader election, no batching window), its
    queue timed on ``clock``; nodes, bound and pending pods listed once."""
    kube = Kube.from_kubeconfig(kubeconfig, user_agent="iro-scheduler/q")
    s = IroScheduler(kube, identity="q", leader_election=False, window_s=0, clock=clock, **kw)
    relist(s)
    return s


def cycle(s: IroScheduler) -> Any:
    """One pass of the loop: the watches' stores relisted, then a batch of the ready pods (None: none)."""
    relist(s)
    pods = s.ready_pods()
    return s.schedule_batch(pods) if pods else None


def settle(s: IroScheduler, limit: int = 5) -> list[Any]:
    """Batches until no pod is ready, at most ``limit`` (the clock does not move: no backoff ends)."""
    batches = []
    for _ in range(limit):
        batch = cycle(s)
        if batch is None:
            break
        batches.append(batch)
    return batches


def anti(app: str, key: str = HOST) -> dict[str, Any]:
    """Required pod anti-affinity to pods labelled app=APP across KEY."""
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}


def affinity(app: str, key: str = ZONE) -> dict[str, Any]:
    """Required pod affinity to pods labelled app=APP within KEY."""
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}


def spread(app: str, skew: int = 1, key: str = ZONE) -> list[dict[str, Any]]:
    """A DoNotSchedule topology spread constraint over ``key`` for the pods labelled ``app``."""
    return [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": app}}}]


def churn(api: FakeApiServer, s: IroScheduler, i: int = 0) -> None:
    """A cluster change that can fit pods (kube's NodeLabelChange: node ``n0``'s labels change)
    but leaves the size of any node as it was, and the nodes watch delivers it. A bound pod's
    status update would not do: it moves no pod (see test_sched_fix_queueing_hints)."""
    node = api.get("nodes", "n0")
    node["metadata"]["labels"]["iro-test/churn"] = str(i)
    api.update("nodes", node)
    s.cache.nodes._list()


def pod_with(containers, init=(), overhead=None, node=None):
    """Pod ``p`` whose containers have these ``resources``, with these init containers (each
    the rest of its container object: ``resources``, ``restartPolicy``) and overhead."""
    pod = make_pod("p", node=node)
    pod["spec"]["containers"] = [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)]
    if init:
        pod["spec"]["initContainers"] = [dict({"name": f"i{i}"}, **r) for i, r in enumerate(init)]
    if overhead:
        pod["spec"]["overhead"] = overhead
    return pod


def serving(make: Callable[..., S]) -> Iterator[Callable[..., S]]:
    """The body of a ``serve`` fixture (``yield from serving(make)``): it yields ``start(*args)``,
    which makes a server with ``make(*args)`` and serves it in a thread; every server started is
    shut down after the test."""
    servers: list[Any] = []

    def start(*args: Any, **kwargs: Any) -> S:
        srv = make(*args, **kwargs)
        srv.serve_in_thread()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(name="ext")
def extender_server() -> Iterator[ExtenderServer]:
    """Fixture ``ext`` (import ``extender_server``): an extender with the default solver served on
    127.0.0.1 (prefix ``/iro``) for one test."""
    srv = ExtenderServer(Extender(), "127.0.0.1", 0, "/iro")
    srv.serve_in_thread()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module", name="tls")
def tls_files(tmp_path_factory) -> tuple[str, str]:
    """Fixture ``tls`` (import ``tls_files``): the files of a self-signed certificate for
    ``localhost`` and of its key, one pair per test module; skips without ``cryptography``."""
    pytest.importorskip("cryptography")
    cert, key = self_signed_cert(tmp_path_factory.mktemp("tls"), ("localhost",))
    return str(cert), str(key)


def fit_and_balance(problem, w: int = 0) -> tuple[list[int], list[int]]:
    """kube-default's NodeResourcesFit and NodeResourcesBalancedAllocation scores of workload
    ``w`` on every node of ``problem``."""
    solver = solvers.make("kube-default")
    solver.reset(problem)
    scores = solver.plugin_scores(ClusterState(problem), w, np.arange(problem.num_nodes))
    return scores["NodeResourcesFit"].tolist(), scores["NodeResourcesBalancedAllocation"].tolist()


def post_json(url: str, path: str, body: Any) -> tuple[int, Any]:
    """POST ``body`` as JSON to ``path`` of the server at ``url``: (status, the parsed answer)."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, json.loads(raw)
