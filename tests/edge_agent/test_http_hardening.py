"""The agent's HTTP server against hostile or broken clients, over raw sockets on 127.0.0.1:
JSON it must refuse, request framing that could smuggle a request, clients that trickle bytes or
reset the connection, wrong methods, and the stdlib's own error replies (all JSON)."""

from __future__ import annotations

import http.client
import json
import logging
import select
import socket
import struct
from typing import Any

import pytest

WEB = {"name": "web", "requests": {"cpu": 500, "memory": 512}}


def exchange(port: int, data: bytes, *, timeout: float = 30.0) -> bytes:
    """Send ``data`` on a new connection and read everything until the server closes it. A test
    that expects the connection to stay open must not use this (it would wait for ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def responses(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Split what the server sent into (status, headers, body) replies (Content-Length framed)."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, f"not an HTTP reply: {raw[:200]!r}"
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        n = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:n]))
        raw = rest[n:]
    return out


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
            % (path.encode(), extra, len(body)) + body)


def one_error(raw: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    """The one reply the server sent before closing, with its JSON body."""
    replies = responses(raw)
    assert len(replies) == 1, replies
    status, headers, body = replies[0]
    assert headers["content-type"] == "application/json"
    return status, headers, json.loads(body)


@pytest.fixture
def agent_port(start_agent) -> tuple[Any, int]:
    agent, _ = start_agent(listen={"request_timeout_s": 30})
    return agent, agent.port


# --- JSON the agent refuses ---------------------------------------------------------------------

DEEP = b"[" * 900 + b"]" * 900  # parses (under the recursion limit), but nothing needs it


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        ("/recommend", b'{"name": "\\ud800", "requests": {"cpu": 100}}', "name", "lone UTF-16 surrogate"),
        ("/recommend", b'{"name": "w", "requests": {"\\udc00x": 100}}', "requests", "lone UTF-16 surrogate"),
        ("/outcome", b'{"decision_id": "d", "observed": {"note": "a\\udbff"}}', "observed.note", "lone UTF-16"),
        ("/recommend", b'{"name": "w", "requests": {"cpu": NaN}}', "requests.cpu", "NaN is not a JSON number"),
        ("/outcome", b'{"decision_id": "d", "observed": {"latency_ms": -Infinity}}', "observed.latency_ms",
         "-Infinity is not a JSON number"),
        ("/outcome", b'{"decision_id": "d", "observed": {"v": [1, 1e400]}}', "observed.v[1]", "overflows to infinity"),
        ("/outcome", b'{"decision_id": "d", "observed": {"n": 99999999999999999999}}', "observed.n",
         "outside the 64-bit range"),
        # More digits than int() converts (4,300): json's error named Python's limit, not the field.
        ("/outcome", b'{"decision_id": "d", "observed": {"v": [1, -' + b"9" * 5000 + b"]}}", "observed.v[1]",
         "outside the 64-bit range"),
        ("/recommend", b'{"name": "w", "x": ' + DEEP + b"}", "x" + "[0]" * 99, "nested deeper than 100 levels"),
        ("/outcome", b'{"decision_id": "d", "observed": ' + DEEP + b"}", "observed" + "[0]" * 99, "nested deeper"),
        ("/recommend", b"[" * 200_000 + b"]" * 200_000, "body", "nested deeper than 100 levels"),
        ("/recommend", b'{"name": "w\xff"}', "body", "not UTF-8 (byte 11: invalid start byte)"),
        ("/recommend", '{"name": "w"}'.encode("utf-16"), "body", "not UTF-8 (byte 0"),
        ("/recommend", b'{"name": "\xed\xa0\x80"}', "body", "not UTF-8"),  # a surrogate encoded as UTF-8
        ("/recommend", b"[1, 2]", "body", "expected a JSON object, got list"),
        ("/outcome", b'"decision"', "body", "expected a JSON object, got str"),
        ("/outcome", b"null", "body", "expected a JSON object, got null"),
        ("/recommend", b"", "body", "not valid JSON"),
    ],
)
def test_hostile_json_gets_400_naming_the_field(agent_port, http, path, body, field, message):
    agent, port = agent_port
    status, headers, reply = one_error(exchange(port, post(path, body)))
    assert status == 400, reply
    assert reply["field"] == field and reply["error"].startswith(f"{field}: ") and message in reply["error"], reply
    assert headers["connection"] == "close"
    # Nothing of it reached the store, and the agent serves on.
    assert agent.store.flush() and agent.store.failed == 0 and agent.store.counts()["outcomes"] == 0
    assert http("POST", f"http://127.0.0.1:{port}/recommend", WEB)[0] == 200


# --- framing: a request must not be able to smuggle another one --------------------------------

SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n"


@pytest.mark.parametrize(
    ("request_bytes", "status", "field", "message"),
    [
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"0\r\n\r\n" + SMUGGLED, 400, "Transfer-Encoding", "not accepted together with Content-Length"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}" + SMUGGLED,
         400, "Transfer-Encoding", "not accepted together with Content-Length"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" + SMUGGLED,
         411, "Transfer-Encoding", "'chunked' is not accepted: send the body with Content-Length"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}" + SMUGGLED,
         400, "Content-Length", "conflicting values ['2', '40']"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nContent-Length: +2\r\n\r\n{}" + SMUGGLED,
         400, "Content-Length", "expected a non-negative decimal integer, got '+2'"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nContent-Length: 0_2\r\n\r\n{}" + SMUGGLED,
         400, "Content-Length", "non-negative decimal integer"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nContent-Length: \xb2\r\n\r\n{}" + SMUGGLED,  # '\u00b2'.isdigit()
         400, "Content-Length", "non-negative decimal integer"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nContent-Length: 2, 2\r\n\r\n{}" + SMUGGLED,  # a list in one line: Go refuses it too
         400, "Content-Length", "non-negative decimal integer"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n" + SMUGGLED,
         400, "Content-Length", "non-negative decimal integer, got '-1'"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n" + SMUGGLED,
         413, "Content-Length", "over the limit of 1048576 (listen.max_body_bytes)"),
        (b"POST /recommend HTTP/1.1\r\nHost: a\r\n\r\n" + SMUGGLED, 411, "Content-Length", "required"),
        # Endpoints that read no body must not serve it as the next request either.
        (post("/nope", SMUGGLED), 404, "path", "unknown path '/nope'"),
        (post("/healthz", SMUGGLED), 405, "method", "method POST is not served on /healthz (use GET, HEAD)"),
        (b"GET /readyz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + SMUGGLED,
         411, "Transfer-Encoding", "not accepted"),
        (b"GET /nope HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n" + SMUGGLED,
         400, "Content-Length", "conflicting values"),  # framing is checked before the path
    ],
)
def test_ambiguous_framing_is_refused_and_the_connection_closed(agent_port, request_bytes, status, field, message):
    agent, port = agent_port
    got, headers, reply = one_error(exchange(port, request_bytes))  # one reply: the smuggled GET never ran
    assert got == status and reply["field"] == field and message in reply["error"], reply
    assert headers["connection"] == "close"


def test_the_same_content_length_twice_is_one_value(agent_port):
    """As Go's net/http reads it (RFC 9112 6.3 lets a recipient take a list of equal values); the
    extender and webhook read it the same way."""
    agent, port = agent_port
    body = json.dumps(WEB).encode()
    raw = exchange(port, post("/recommend", body, b"Connection: close\r\nContent-Length: %d\r\n" % len(body)))
    replies = responses(raw)
    assert [r[0] for r in replies] == [200] and json.loads(replies[0][2])["nodes"], replies


def test_a_body_sent_with_get_is_not_read_as_the_next_request(agent_port):
    agent, port = agent_port
    raw = exchange(port, b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(SMUGGLED)
                   + SMUGGLED)
    replies = responses(raw)
    assert [r[0] for r in replies] == [200] and replies[0][1]["connection"] == "close"


def test_keep_alive_still_works_for_well_framed_requests(agent_port):
    agent, port = agent_port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for path in ("/healthz", "/nope", "/readyz"):  # a 404 without a body keeps the connection
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        assert resp.status in (200, 404) and not resp.will_close
    body = json.dumps(WEB)
    conn.request("POST", "/recommend", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["nodes"]
    conn.close()


# --- slow and oversized requests -----------------------------------------------------------------


def trickle(port: int, head: bytes, drip: bytes, *, every_s: float = 0.1, max_s: float = 60.0) -> bytes:
    """Send ``head``, then ``drip`` one byte at a time until the server answers (or ``max_s`` pass:
    a server without a request deadline keeps reading for as long as bytes come)."""
    with socket.create_connection(("127.0.0.1", port), timeout=max_s) as s:
        s.sendall(head)
        for i in range(int(max_s / every_s)):
            if select.select([s], [], [], every_s)[0]:
                break
            try:
                s.sendall(drip[i % len(drip):][:1])
            except OSError:
                break
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
    return out


def test_a_client_that_trickles_its_headers_gets_408(start_agent, http):
    agent, url = start_agent(listen={"request_timeout_s": 0.5})
    raw = trickle(agent.port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n", b"X-Slow: " + b"a" * 1000)
    status, headers, reply = one_error(raw)
    assert status == 408 and reply["field"] == "headers", reply
    assert reply["error"] == "headers: did not arrive within 0.5 s (listen.request_timeout_s)", reply
    assert headers["connection"] == "close"
    assert http("GET", f"{url}/healthz")[0] == 200


def test_a_client_that_trickles_its_body_gets_408(start_agent, http):
    agent, url = start_agent(listen={"request_timeout_s": 0.5})
    raw = trickle(agent.port, b"POST /recommend HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n", b" ")
    status, headers, reply = one_error(raw)
    assert status == 408 and reply["field"] == "body" and "arrived within 0.5 s (listen.request_timeout_s)" in reply["error"]
    assert http("POST", f"{url}/recommend", WEB)[0] == 200


def test_an_oversized_body_gets_413_before_it_is_sent(start_agent):
    agent, _ = start_agent(listen={"max_body_bytes": 8192})
    with socket.create_connection(("127.0.0.1", agent.port), timeout=30) as s:
        s.sendall(b"POST /recommend HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1000000000\r\n\r\n")
        first = s.recv(65536)  # the client waits for "100 Continue" before it sends 1 GB: it must not come
        assert first.startswith(b"HTTP/1.1 413 "), first
        rest = first
        while chunk := s.recv(65536):
            rest += chunk
    status, headers, reply = one_error(rest)
    assert reply["field"] == "Content-Length" and "listen.max_body_bytes" in reply["error"]
    # A body that fits gets "100 Continue", then its reply.
    body = json.dumps(WEB).encode()
    with socket.create_connection(("127.0.0.1", agent.port), timeout=30) as s:
        s.sendall(b"POST /recommend HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nConnection: close\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        assert s.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    assert responses(out)[0][0] == 200


def test_a_client_that_sends_an_oversized_body_anyway_reads_its_413(start_agent):
    """A client without Expect writes the whole body before it reads: closing on it at once would
    reset the connection under it (EPIPE / ECONNRESET) instead of answering 413."""
    agent, _ = start_agent(listen={"max_body_bytes": 8192})
    conn = http.client.HTTPConnection("127.0.0.1", agent.port, timeout=30)
    conn.request("POST", "/recommend", b" " * (8 << 20), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 413 and "listen.max_body_bytes" in json.loads(resp.read())["error"]
    conn.close()


# --- methods and paths ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/recommend", 405, "POST"),
        ("PUT", "/recommend", 405, "POST"),
        ("DELETE", "/outcome", 405, "POST"),
        ("POST", "/healthz", 405, "GET, HEAD"),
        ("PATCH", "/metrics", 405, "GET, HEAD"),
        ("OPTIONS", "/readyz", 405, "GET, HEAD"),
        ("BREW", "/snapshot", 405, "GET, HEAD"),
        ("PUT", "/nope", 404, None),
        ("GET", "/recommend/extra", 404, None),
    ],
)
def test_wrong_method_gets_405_with_allow_and_unknown_path_404(agent_port, method, path, status, allow):
    agent, port = agent_port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, body=b"" if method in ("POST", "PUT", "PATCH") else None)
    resp = conn.getresponse()
    reply = json.loads(resp.read())
    assert resp.status == status and resp.getheader("Allow") == allow
    assert resp.getheader("Content-Type") == "application/json" and reply["error"] and "field" in reply
    conn.close()


def test_head_is_get_without_the_body(agent_port):
    agent, port = agent_port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for path in ("/readyz", "/metrics", "/federation"):
        conn.request("GET", path)
        get = conn.getresponse()
        get_body = get.read()
        conn.request("HEAD", path)
        head = conn.getresponse()
        assert head.read() == b"" and head.status == get.status == 200
        assert head.getheader("Content-Type") == get.getheader("Content-Type")
        assert int(head.getheader("Content-Length")) > 0 and len(get_body) > 0
    conn.request("HEAD", "/recommend")
    head = conn.getresponse()
    assert head.status == 405 and head.getheader("Allow") == "POST" and head.read() == b""
    conn.close()


@pytest.mark.parametrize(
    ("request_bytes", "status", "field"),
    [
        (b"GET /healthz HTTP/9\r\n\r\n", 400, "request line"),
        (b"GET /healthz\r\n\r\n", 400, "request line"),  # HTTP/0.9: no status line, no headers
        (b"G(T /healthz HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request line"),
        (b"GET /healthz HTTP/2.0\r\nHost: a\r\n\r\n", 505, "request line"),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, "request line"),
        (b"GET /healthz HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 431, "headers"),
        (b"GET /healthz HTTP/1.1\r\nX-A: " + b"b" * 70_000 + b"\r\n\r\n", 431, "headers"),
    ],
)
def test_malformed_requests_get_json_errors(agent_port, http, request_bytes, status, field):
    agent, port = agent_port
    got, headers, reply = one_error(exchange(port, request_bytes))
    assert got == status and reply["field"] == field and reply["error"].startswith(f"{field}: "), reply
    assert http("GET", f"http://127.0.0.1:{port}/healthz")[0] == 200


# --- a client that resets the connection -----------------------------------------------------


def test_a_client_reset_is_one_log_line_not_a_traceback(agent_port, wait_for, capfd):
    agent, port = agent_port
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    level = agent.log.level
    agent.log.addHandler(handler)
    agent.log.setLevel(logging.INFO)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        assert s.recv(12) == b"HTTP/1.1 200"  # the reply has begun
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST: the server's next write or read on it fails
        lost = wait_for(lambda: [r for r in records if r.getMessage() == "client connection lost"], timeout=30)
    finally:
        agent.log.removeHandler(handler)
        agent.log.setLevel(level)
    assert len(lost) == 1 and lost[0].levelno == logging.INFO
    assert lost[0].fields["error"].startswith(("ConnectionResetError", "BrokenPipeError"))
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred during processing" not in err, err
