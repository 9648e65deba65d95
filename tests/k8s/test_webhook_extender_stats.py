"""The webhook's and the extender's ``stats`` under concurrent requests: every request is counted.

``stats[k] += 1`` is a read, an add and a write. CPython 3.11 happens not to switch threads inside
that statement, so N concurrent requests alone would not show a lost count; :class:`StoreGate`
makes the switch happen where the language allows it: a trace function (``f_trace_opcodes``) holds
each request thread just before the write of a counter until all N threads are there, so without a
lock every thread writes the value it read before the others wrote. With a lock the thread at the
gate holds it, the others wait for the lock, and the gate opens after ``timeout_s`` (the only wait:
the counts do not depend on it).
"""

from __future__ import annotations

import dis
import http.client
import json
import ssl
import sys
import threading
import types
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import iro_fed.k8s.httpjson as httpjson_module  # RequestStats.count: the webhook's and the extender's counters
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.testing import make_pod
from iro_fed.k8s.webhook import Webhook, WebhookServer
from tests.k8s.helpers import serving, tls_files  # noqa: F401 (tls_files: the tls fixture)

N = 8


class StoreGate:
    """Holds threads at the write (``STORE_SUBSCR``) of each ``stats[...] += ...`` line of ``module``
    until ``parties`` threads are there, or ``timeout_s`` has passed (then it stays open)."""

    def __init__(self, module: types.ModuleType, parties: int, timeout_s: float = 3.0) -> None:
        self.file = module.__file__
        self.lines = Path(self.file).read_text().splitlines()
        self.barrier = threading.Barrier(parties, timeout=timeout_s)
        self.held = 0  # times a thread reached the gate
        self._stores: dict[types.CodeType, frozenset[int]] = {}

    def _stores_of(self, code: types.CodeType) -> frozenset[int]:
        if code not in self._stores:
            out, line = set(), None
            for ins in dis.get_instructions(code):
                line = ins.positions.lineno if ins.positions and ins.positions.lineno else line
                text = self.lines[line - 1] if line else ""
                if ins.opname == "STORE_SUBSCR" and "stats[" in text and "+=" in text:
                    out.add(ins.offset)
            self._stores[code] = frozenset(out)
        return self._stores[code]

    def _call(self, frame: types.FrameType, event: str, arg: Any) -> Callable | None:
        if event != "call" or frame.f_code.co_filename != self.file or not self._stores_of(frame.f_code):
            return None
        frame.f_trace_lines = False
        frame.f_trace_opcodes = True
        return self._opcode

    def _opcode(self, frame: types.FrameType, event: str, arg: Any) -> Callable:
        if event == "opcode" and frame.f_lasti in self._stores[frame.f_code]:
            self.held += 1
            try:
                self.barrier.wait()
            except threading.BrokenBarrierError:
                pass  # a lock let only one thread in: the gate stays open from now on
        return self._opcode

    @contextmanager
    def installed(self) -> Iterator[StoreGate]:
        """Traces the threads started inside the block (the servers' request threads)."""
        threading.settrace(self._call)
        try:
            yield self
        finally:
            threading.settrace(None)


def concurrently(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(i)`` for i < n, each in its own thread, all started together."""
    start = threading.Barrier(n)
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        start.wait(30)
        try:
            out[i] = call(i)
        except Exception as exc:  # reported by the assertions
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


@pytest.fixture
def serve_webhook(tls):
    yield from serving(lambda hook: WebhookServer(hook, tls[0], tls[1], "127.0.0.1", 0))


@pytest.fixture
def serve_extender():
    yield from serving(lambda ext: ExtenderServer(ext, "127.0.0.1", 0, "/iro"))


def _mutate(srv: WebhookServer, cafile: str) -> tuple[int, dict]:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                          "operation": "CREATE", "namespace": "default", "object": make_pod("p")}}
    conn = http.client.HTTPSConnection("localhost", srv.server_address[1],
                                       context=ssl.create_default_context(cafile=cafile), timeout=30)
    try:
        conn.request("POST", "/mutate", body=json.dumps(review).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _get(host: str, port: int, path: str, cafile: str | None = None) -> dict:
    conn = (http.client.HTTPSConnection("localhost", port, context=ssl.create_default_context(cafile=cafile), timeout=30)
            if cafile else http.client.HTTPConnection(host, port, timeout=30))
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


@pytest.mark.skipif(sys.gettrace() is not None, reason="the gate replaces the debugger's or coverage's trace function")
def test_webhook_counts_every_one_of_n_concurrent_reviews(serve_webhook, tls):
    hook = Webhook("scheduler-name")
    srv = serve_webhook(hook)
    with StoreGate(httpjson_module, N).installed() as gate:
        replies = concurrently(N, lambda i: _mutate(srv, tls[0]))
    assert all(r[0] == 200 and "patch" in r[1]["response"] for r in replies), replies
    assert gate.held >= N  # every request thread met the gate at its first count
    # Unlocked, all N threads read reviews == 0 and wrote 1.
    assert hook.stats["reviews"] == N and hook.stats["mutated"] == N and hook.stats["skipped"] == 0
    assert _get(*srv.server_address[:2], "/healthz", tls[0])["stats"]["reviews"] == N


@pytest.mark.skipif(sys.gettrace() is not None, reason="the gate replaces the debugger's or coverage's trace function")
def test_extender_counts_every_one_of_n_concurrent_requests(serve_extender):
    ext = Extender("best-fit")
    srv = serve_extender(ext)
    host, port = srv.server_address[:2]

    def bind(i: int) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(host, port, timeout=30)
        try:
            body = {"PodName": f"p{i}", "PodNamespace": "default", "PodUID": "", "Node": "n1"}
            conn.request("POST", "/iro/bind", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    with StoreGate(httpjson_module, N).installed() as gate:
        replies = concurrently(N, bind)
    # Without --kubeconfig a bind is answered with an Error, after it is counted.
    assert all(r[0] == 200 and "without --kubeconfig" in r[1]["Error"] for r in replies), replies
    assert gate.held >= N
    assert ext.stats["bind"] == N
    assert _get(host, port, "/healthz")["stats"]["bind"] == N


class _UnsyncedCache:
    synced = False


def test_webhook_is_not_ready_until_its_cluster_cache_syncs(serve_webhook, tls):
    # /readyz answered 200 before the affinity cache had synced: a new replica joined the Service and
    # admitted every pod without a recommendation; /healthz (liveness) stays 200 meanwhile.
    cache = _UnsyncedCache()
    srv = serve_webhook(Webhook("affinity", cache=cache, solver="best-fit"))  # type: ignore[arg-type]
    host, port = srv.server_address[:2]

    def status(path: str) -> int:
        conn = http.client.HTTPSConnection("localhost", port, context=ssl.create_default_context(cafile=tls[0]), timeout=30)
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        finally:
            conn.close()

    assert (status("/readyz"), status("/healthz")) == (503, 200)
    cache.synced = True
    assert (status("/readyz"), status("/healthz")) == (200, 200)
    assert _get(host, port, "/readyz", tls[0])["ok"] is True


def test_a_refused_connection_is_not_reported_as_a_timeout():
    # urllib3's NewConnectionError subclasses its ConnectTimeoutError: the reflector logged "no answer
    # from the API server in time" for an API server that refused the connection at once.
    from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError

    from iro_fed.k8s.client import _refused, _timed_out

    refused = MaxRetryError(None, "/api/v1/pods", NewConnectionError(None, "Connection refused"))
    timeout = MaxRetryError(None, "/api/v1/pods", ReadTimeoutError(None, "/api/v1/pods", "read timed out"))
    assert _refused(refused) and not _refused(timeout) and _timed_out(timeout)
