"""A server that stops (the edge agent on SIGTERM, the extender, the webhook) answers the requests
still arriving and closes only the connections with no request started; a connection that ends
inside the request line or the headers is a cut request (400), not a complete one.

Before: ``close_idle_reads`` ended the read side of every connection, so a body half sent got
``400 body: ended after 10 of 33 bytes`` at once and headers half sent a 411 (or were served as
if complete); the end of the stream before the blank line was read as the end of the headers.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.httpjson import ConnectionLimit, RoutedJsonHandler, serve_in_thread
from iro_fed.testing import wait_for
from tests.k8s.helpers import tls_files  # noqa: F401 (the tls fixture)


class _Handler(RoutedJsonHandler):
    error_key = "error"

    def routes(self) -> dict[str, dict[str, Any]]:
        return {
            "/echo": {"POST": lambda: self._send(200, self.read_json())},
            "/ping": {"GET": lambda: self._send(200, {"ok": True})},
        }


class _Server(ConnectionLimit, ThreadingHTTPServer):
    """As the edge agent's: request threads joined by server_close()."""

    daemon_threads = False
    block_on_close = True
    header_timeout_s = body_timeout_s = idle_timeout_s = 20.0


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    serve_in_thread(srv, "f8-test")
    yield srv
    srv.shutdown()
    srv.server_close()


def _connect(srv: Any) -> socket.socket:
    sock = socket.create_connection(srv.server_address[:2], timeout=15)
    wait_for(lambda: srv.open_connections() >= 1, timeout=10)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def _one_reply(sock: socket.socket) -> bytes:
    """One reply of a keep-alive connection, whole (headers, then Content-Length bytes)."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    head, _, body = raw.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _reply(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def _stop_in_background(srv: Any, close: bool = True) -> threading.Thread:
    """shutdown() and close_idle_reads() now; server_close() (which joins the request threads) in a thread."""
    srv.shutdown()
    srv.close_idle_reads()
    t = threading.Thread(target=srv.server_close if close else (lambda: None), daemon=True)
    t.start()
    return t


def test_a_body_still_arriving_when_the_server_stops_is_read_and_answered(server):
    body = b'{"name":"a","requests":{"cpu":1}}'
    sock = _connect(server)
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:10])
    closing = _stop_in_background(server)
    sock.sendall(body[10:])
    status, headers, doc = _reply(_read_all(sock))  # then the server closes the connection
    assert (status, doc) == (200, json.loads(body))
    assert headers["connection"] == "close"
    closing.join(15)
    assert not closing.is_alive()


def test_headers_still_arriving_when_the_server_stops_are_read_and_answered(server):
    sock = _connect(server)
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
    closing = _stop_in_background(server)
    sock.sendall(b"Content-Length: 2\r\n\r\n{}")
    status, headers, doc = _reply(_read_all(sock))
    assert (status, doc) == (200, {})
    assert headers["connection"] == "close"
    closing.join(15)
    assert not closing.is_alive()


def test_idle_connections_close_at_once_when_the_server_stops(server):
    idle = _connect(server)
    idle.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    first = _one_reply(idle)
    assert first.startswith(b"HTTP/1.1 200") and b"Connection: close" not in first
    fresh = socket.create_connection(server.server_address[:2], timeout=15)  # sent nothing yet
    wait_for(lambda: server.open_connections() == 2, timeout=10)
    closing = _stop_in_background(server)
    assert idle.recv(65536) == b""  # closed without waiting for the idle timeout (20 s; recv's 15 s)
    assert fresh.recv(65536) == b""
    closing.join(15)
    assert not closing.is_alive() and server.open_connections() == 0


def test_a_request_sent_whole_just_before_the_stop_is_answered(server):
    sock = _connect(server)
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    closing = _stop_in_background(server)
    status, headers, doc = _reply(_read_all(sock))
    assert (status, doc) == (200, {"ok": True})
    closing.join(15)


@pytest.mark.parametrize(
    "sent, field",
    [
        (b"GET /ping HTTP/1.1\r\nHost: x\r\n", "headers"),
        (b"GET /ping HTTP/1.1\r\nHost: x", "headers"),
        (b"GET /ping HTTP/1.1\r\n", "headers"),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\n", "headers"),
        (b"GET /ping HTTP/1.1", "request line"),
    ],
)
def test_a_connection_ended_inside_the_headers_is_a_cut_request(server, sent, field):
    """The client ends its side (shutdown SHUT_WR) before the blank line: a 400 naming the part,
    never the request served as complete (a GET's 200) nor a 411 for a Content-Length not yet sent."""
    sock = _connect(server)
    sock.sendall(sent)
    sock.shutdown(socket.SHUT_WR)
    status, headers, doc = _reply(_read_all(sock))
    assert status == 400 and doc["field"] == field
    assert "connection was closed before the end of the" in doc["error"]
    assert headers["connection"] == "close"


def test_the_extender_answers_a_request_in_flight_when_it_stops():
    """Its request threads are daemons: wait_closed() is what keeps the process up for the reply
    (iro extender's stop path), and idle connections no longer hold it."""
    srv = ExtenderServer(Extender(), "127.0.0.1", 0, "/iro")
    srv.serve_in_thread()
    try:
        idle = _connect(srv)
        busy = socket.create_connection(srv.server_address[:2], timeout=15)
        wait_for(lambda: srv.open_connections() == 2, timeout=10)
        body = json.dumps({"Pod": {"metadata": {"name": "p"}}, "Nodes": None, "NodeNames": []}).encode()
        busy.sendall(b"POST /iro/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:5])
        _stop_in_background(srv, close=False)
        assert idle.recv(100) == b""
        assert not srv.wait_closed(0.05)  # the request under way holds its connection
        busy.sendall(body[5:])
        status, headers, doc = _reply(_read_all(busy))
        assert status == 200 and headers["connection"] == "close" and "Error" in doc
        assert srv.wait_closed(15)
    finally:
        srv.server_close()


def test_the_webhook_closes_an_idle_tls_connection_and_answers_one_under_way(tls):
    """TLS: the idle wait polls the socket, with bytes already decrypted counted as there."""
    pytest.importorskip("cryptography")
    import ssl

    from iro_fed.k8s.webhook import Webhook, WebhookServer

    srv = WebhookServer(Webhook(), tls[0], tls[1], "127.0.0.1", 0)
    srv.serve_in_thread()
    ctx = ssl.create_default_context(cafile=tls[0])
    try:
        idle = ctx.wrap_socket(
            socket.create_connection(srv.server_address[:2], timeout=15), server_hostname="localhost"
        )
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert _one_reply(idle).startswith(b"HTTP/1.1 200")
        busy = ctx.wrap_socket(
            socket.create_connection(srv.server_address[:2], timeout=15), server_hostname="localhost"
        )
        busy.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")  # the blank line not yet
        wait_for(lambda: srv.open_connections() == 2, timeout=10)
        _stop_in_background(srv, close=False)
        assert idle.recv(100) == b""
        busy.sendall(b"\r\n")
        status, headers, _ = _reply(_read_all(busy))
        assert status == 200 and headers["connection"] == "close"
        assert srv.wait_closed(15)
    finally:
        srv.server_close()
