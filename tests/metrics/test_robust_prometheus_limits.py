"""The Prometheus client's overall deadline and answer size cap, against real loopback servers:
one that trickles its answer (each byte well within the socket timeout, so only a deadline ends
the request) and ones that answer far more than the client reads."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from iro_fed.metrics.prometheus import (
    DEFAULT_MAX_BYTES,
    PrometheusClient,
    PrometheusQueryError,
    PrometheusUnavailable,
)

OK = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


@pytest.fixture
def raw_server() -> Iterator[Callable[[Callable[[socket.socket, threading.Event], None]], str]]:
    """``serve(answer)``: a loopback server whose every connection is handled by ``answer(conn,
    stop)`` after the request's headers are read; its base URL. Stopped after the test."""
    stop = threading.Event()
    listeners: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def serve(answer: Callable[[socket.socket, threading.Event], None]) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def handle(conn: socket.socket) -> None:
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                try:
                    answer(conn, stop)
                except OSError:  # the client went away: what these servers wait for
                    pass

        def accept() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                t = threading.Thread(target=handle, args=(conn,), daemon=True)
                t.start()
                threads.append(t)

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        threads.append(t)
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    yield serve
    stop.set()
    for listener in listeners:
        try:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (close alone does not)
        except OSError:
            pass
        listener.close()
    for t in threads:
        t.join(10)


def trickle(conn: socket.socket, stop: threading.Event, head: bytes = b"", pad: bytes = b" ") -> None:
    """Send ``head``, then one byte of ``pad`` every 10 ms until the client goes away."""
    conn.sendall(head)
    while not stop.wait(0.01):
        conn.sendall(pad)


def run_bounded(call: Callable[[], object]) -> BaseException | None:
    """``call()`` in a thread, joined for at most 60 s (generous: a bound the client must set
    itself, which the test only checks it does); what it raised."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the request never ended: no overall deadline"
    return raised[0] if raised else None


def test_a_trickled_body_ends_at_the_deadline(raw_server) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    url = raw_server(lambda conn, stop: trickle(conn, stop, head))
    client = PrometheusClient(url, timeout_s=5, deadline_s=0.3)  # each byte comes well within 5 s
    exc = run_bounded(lambda: client.query("up"))
    assert isinstance(exc, PrometheusUnavailable), exc
    assert "within the 0.3 s deadline (deadline_s)" in str(exc) and url in str(exc)


def test_trickled_headers_end_at_the_deadline(raw_server) -> None:
    url = raw_server(lambda conn, stop: trickle(conn, stop, b"HTTP/1.1 200 OK\r\nX-Pad: ", pad=b"a"))
    client = PrometheusClient(url, timeout_s=5, deadline_s=0.3)
    exc = run_bounded(lambda: client.query_range("up", 0, 60, 15))
    assert isinstance(exc, PrometheusUnavailable) and "deadline" in str(exc), exc
    assert run_bounded(lambda: client.ready()) is None  # ready() is bounded too: False, not a hang


def test_the_default_deadline_is_twice_the_timeout(raw_server) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"  # no length: until the close
    url = raw_server(lambda conn, stop: trickle(conn, stop, head))
    client = PrometheusClient(url, timeout_s=1)
    exc = run_bounded(lambda: client.query("up"))
    assert isinstance(exc, PrometheusUnavailable) and "within the 2 s deadline" in str(exc), exc
    assert client.deadline_s == 2.0


def test_an_answer_declared_over_the_cap_is_refused_unread(raw_server) -> None:
    def huge(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10485760\r\n\r\n")
        stop.wait()  # the body never comes: a client that waited for it would hang on its timeout

    url = raw_server(huge)
    client = PrometheusClient(url, timeout_s=30, max_bytes=1 << 20)
    exc = run_bounded(lambda: client.query("up"))
    assert isinstance(exc, PrometheusQueryError), exc
    assert "10485760 bytes, more than the 1048576 bytes read at most (max_bytes)" in str(exc)


@pytest.mark.parametrize("framing", ["close-delimited", "chunked"])
def test_an_answer_that_grows_past_the_cap_is_refused(raw_server, framing) -> None:
    # A valid JSON answer of 4 MiB (a query that matched far too many series), without a length.
    series = [{"metric": {"node": f"n{i}"}, "value": [1.0, "1"]} for i in range(110_000)]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": series}}).encode()
    assert len(body) > 4 << 20

    def big(conn: socket.socket, stop: threading.Event) -> None:
        if framing == "chunked":
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for start in range(0, len(body), 65536):
                part = body[start:start + 65536]
                conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            conn.sendall(b"0\r\n\r\n")
        else:
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)
        conn.shutdown(socket.SHUT_WR)

    url = raw_server(big)
    exc = run_bounded(lambda: PrometheusClient(url, timeout_s=10, max_bytes=1 << 20).query("up"))
    assert isinstance(exc, PrometheusQueryError), exc
    assert "more than the 1048576 bytes read at most (max_bytes)" in str(exc)
    # Under the cap the same answer is read whole.
    exc = run_bounded(lambda: PrometheusClient(url, timeout_s=10, max_bytes=8 << 20).query("up"))
    assert exc is None


def test_a_small_answer_is_unaffected(raw_server) -> None:
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(OK), OK))

    url = raw_server(answer)
    assert PrometheusClient(url, timeout_s=5, deadline_s=10, max_bytes=len(OK)).query("up") == []


def test_the_limits_are_checked_and_documented() -> None:
    assert DEFAULT_MAX_BYTES == 32 * 1024 * 1024
    client = PrometheusClient("http://127.0.0.1:9", timeout_s=3)
    assert (client.deadline_s, client.max_bytes) == (6.0, DEFAULT_MAX_BYTES)
    for bad in (0, -1.0, float("nan"), float("inf"), True, "5"):
        with pytest.raises(ValueError, match="prometheus deadline_s: must be a number of seconds > 0"):
            PrometheusClient("http://127.0.0.1:9", deadline_s=bad)
    for bad in (0, -5, 1.5, True, "1"):
        with pytest.raises(ValueError, match="prometheus max_bytes: must be an integer >= 1"):
            PrometheusClient("http://127.0.0.1:9", max_bytes=bad)
