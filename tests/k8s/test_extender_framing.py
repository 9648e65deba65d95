"""Header lines that are not ``Name: value``, over a raw socket to a real extender on 127.0.0.1.

The stdlib's header parser ends the headers at such a line and keeps the lines after it as a
payload no one reads: the request was served without its ``Content-Length`` (411, connection
kept) and its body was then read as the next request. Go's net/http refuses the request (400).
"""

from __future__ import annotations

import json
import socket

import pytest

from iro_fed.k8s.extender import ExtenderServer
from tests.k8s.helpers import extender_server  # noqa: F401 (the ext fixture)

SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


def exchange(srv: ExtenderServer, data: bytes) -> list[tuple[int, dict]]:
    """Send ``data``, read until the server closes, and return every (status, JSON body) it sent."""
    with socket.create_connection(srv.server_address[:2], timeout=20) as sock:
        sock.sendall(data)
        f = sock.makefile("rb")
        out = []
        while line := f.readline():
            status = int(line.split()[1])
            headers = {}
            while (h := f.readline()) not in (b"\r\n", b""):
                k, _, v = h.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            out.append((status, json.loads(f.read(int(headers["content-length"])))))
        return out


@pytest.mark.parametrize(
    ("header", "shown"),
    [
        (b"Content-Length : %d", "Content-Length : "),  # space before the colon
        (b"Transfer-Encoding : chunked\r\nContent-Length: %d", "Transfer-Encoding : chunked"),
        (b"X-No-Colon\r\nContent-Length: %d", "X-No-Colon"),
        (b" X-Folded: a\r\nContent-Length: %d", " X-Folded: a"),  # the first header line a continuation
    ],
)
def test_a_malformed_header_line_is_a_400_and_the_body_never_becomes_a_request(ext, header, shown):
    head = b"POST /iro/bind HTTP/1.1\r\n" + (header % len(SMUGGLED)) + b"\r\nHost: t\r\n\r\n"
    replies = exchange(ext, head + SMUGGLED)
    # Before: a 411 (or a 400 about PodName) on a kept connection, then a 200 for the smuggled GET.
    assert len(replies) == 1, replies
    status, reply = replies[0]
    assert status == 400 and reply["field"] == "headers", reply
    assert reply["Error"].startswith("headers: malformed header line") and shown.strip() in reply["Error"], reply


def test_a_folded_header_value_is_still_one_header(ext):
    # obs-fold after a header: Go's textproto joins it to the value, and so does the stdlib.
    body = json.dumps({"PodName": "p", "PodNamespace": "default", "Node": "n1"}).encode()
    data = (b"POST /iro/bind HTTP/1.1\r\nHost: t\r\nX-A: b\r\n c\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
            % len(body)) + body
    assert exchange(ext, data) == [(200, {"Error": "this extender cannot bind: it was started without --kubeconfig"})]
