"""``iro scheduler --metrics-port`` serves /metrics through the bounded server of the extender
and the webhook: a capped number of connections (503 beyond it) and a deadline for a request's
line and headers. prometheus_client's ``start_http_server`` had neither: half-sent requests held
a thread each for ever."""

from __future__ import annotations

import gzip
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from iro_fed.federated.procs import free_port
from iro_fed.k8s.cli import METRICS_MAX_CONNECTIONS, METRICS_TIMEOUT_S, start_metrics_server
from iro_fed.k8s.testing import FakeApiServer
from iro_fed.testing import wait_for


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("iro_test_things", "Things.", registry=reg).inc(3)
    Counter("iro_test_other", "Other things.", registry=reg).inc()
    return reg


@pytest.fixture
def serve(registry: CollectorRegistry) -> Iterator:
    servers = []

    def start(host: str = "127.0.0.1", **kwargs):
        server = start_metrics_server(registry, host, 0, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _get(port: int, path: str = "/metrics", host: str = "127.0.0.1", headers: dict | None = None):
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _recv_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


PROMETHEUS_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"


@pytest.mark.parametrize("accept", [None, "text/plain", "application/openmetrics-text; version=1.0.0", PROMETHEUS_ACCEPT])
def test_the_content_type_and_body_are_prometheus_clients(serve, registry, accept) -> None:
    theirs, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        headers = {"Accept": accept} if accept else {}
        status, ours_headers, ours = _get(serve().server_address[1], headers=headers)
        _, their_headers, their_body = _get(theirs.server_address[1], headers=headers)
    finally:
        theirs.shutdown()
        theirs.server_close()
    assert status == 200
    assert ours_headers["Content-Type"] == their_headers["Content-Type"]
    assert ours == their_body and b"iro_test_things_total 3.0" in ours


def test_metrics_are_served_on_metrics_and_root(serve) -> None:
    port = serve().server_address[1]
    status, headers, body = _get(port)
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=")
    assert b"iro_test_things_total 3.0" in body
    assert _get(port, "/")[2] == body
    status, headers, body = _get(port, headers={"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip" and b"iro_test_things_total 3.0" in gzip.decompress(body)
    body = _get(port, "/metrics?name[]=iro_test_other_total")[2]
    assert b"iro_test_other_total" in body and b"iro_test_things" not in body
    status, _, body = _get(port, "/nope")
    assert status == 404 and b"GET /metrics" in body


def test_a_half_sent_request_gets_408_and_is_closed(serve) -> None:
    port = serve(timeout_s=0.5).server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        reply = _recv_all(s)
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    assert _get(port)[0] == 200


def test_connections_over_the_limit_get_503(serve) -> None:
    port = serve(max_connections=2).server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = _recv_all(s)
        assert reply.startswith(b"HTTP/1.1 503 "), reply
    finally:
        for s in idle:
            s.close()
    assert wait_for(lambda: _get(port)[0] == 200, timeout=10)


def _has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6(), reason="no IPv6 here")
def test_on_ipv6_any_it_takes_ipv6_and_ipv4_clients(serve) -> None:
    server = serve("::")
    assert server.address_family == socket.AF_INET6
    port = server.server_address[1]
    assert _get(port, host="::1")[0] == 200
    assert _get(port, host="127.0.0.1")[0] == 200


def _scrape(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.status
    except OSError:
        return 0  # not listening yet, or busy


def test_the_scheduler_metrics_port_is_bounded(tmp_path: Path) -> None:
    """Old code (prometheus_client.start_http_server): every connection got a thread and was
    served (200 past any number of idle ones), and a request whose headers never end held its
    thread for ever (no reply)."""
    api = FakeApiServer().start()
    port = free_port()
    try:
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig.yaml"))
        proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", "scheduler", "--name", "iro", "--kubeconfig",
                                 kubeconfig, "--no-leader-elect", "--metrics-port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        held: list[socket.socket] = []
        try:
            assert wait_for(lambda: proc.poll() is not None or _scrape(port) == 200, timeout=60)
            assert proc.poll() is None, proc.communicate()
            started = time.monotonic()
            half = socket.create_connection(("127.0.0.1", port), timeout=METRICS_TIMEOUT_S + 20)
            held.append(half)
            half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # the headers never end
            # More idle connections than the cap (a scrape connection may still hold a slot).
            held += [socket.create_connection(("127.0.0.1", port), timeout=30)
                     for _ in range(METRICS_MAX_CONNECTIONS + 4)]
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                reply = s.recv(65536)
            assert reply.startswith(b"HTTP/1.1 503 "), reply
            assert _recv_all(half).startswith(b"HTTP/1.1 408 ")
            assert time.monotonic() - started < METRICS_TIMEOUT_S + 20
            for s in held:
                s.close()
            assert wait_for(lambda: _scrape(port) == 200, timeout=30)
        finally:
            for s in held:
                s.close()
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        api.stop()
