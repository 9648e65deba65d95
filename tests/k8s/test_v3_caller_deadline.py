"""The extender's and the webhook's body and header deadlines are what their caller waits
(kube-scheduler's extender ``httpTimeout``, the API server's webhook ``timeoutSeconds``, as
deploy/ sets them), configurable per server; a stalled sender gets 408 by that deadline and its
share of the body budget back. Over real HTTP(S) on 127.0.0.1.

Before: 30 s for the extender and 10 s for the webhook, while their callers give up after 5 s: a
body that stopped half-way held its connection and its bytes of the body budget until then.
"""

from __future__ import annotations

import json
import math
import re
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from iro_fed.k8s import extender, webhook
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.testing import make_pod
from iro_fed.k8s.webhook import Webhook, WebhookServer
from iro_fed.testing import wait_for
from tests.k8s.helpers import serving, tls_files  # noqa: F401 (the tls fixture)
from tests.k8s.test_server_hardening import Conn
from tests.k8s.test_u3_extender_budget_wait import deployed_timeout_s

ROOT = Path(__file__).resolve().parents[2]
SMALL_S = 0.5  # the deadline the stalling tests set; the client waits far longer (CLIENT_WAIT_S)
CLIENT_WAIT_S = 60.0


def deployed_webhook_timeout_s() -> float:
    text = (ROOT / "deploy/base/webhook.yaml").read_text()
    return float(re.search(r"timeoutSeconds:\s*(\d+)", text).group(1))  # type: ignore[union-attr]


def test_the_deadlines_are_the_deployed_callers_timeouts() -> None:
    # Before: ExtenderServer 30 s and WebhookServer 10 s, against 5 s in deploy/ for both callers.
    HTTP_TIMEOUT_S, TIMEOUT_SECONDS = extender.HTTP_TIMEOUT_S, webhook.TIMEOUT_SECONDS
    assert HTTP_TIMEOUT_S == deployed_timeout_s()
    assert ExtenderServer.body_timeout_s == ExtenderServer.header_timeout_s == HTTP_TIMEOUT_S
    assert TIMEOUT_SECONDS == deployed_webhook_timeout_s()
    assert WebhookServer.body_timeout_s == WebhookServer.header_timeout_s == TIMEOUT_SECONDS
    # What a request may wait for budget room stays inside the body deadline.
    assert ExtenderServer.budget_wait_s is not None and ExtenderServer.budget_wait_s < HTTP_TIMEOUT_S
    assert WebhookServer.budget_wait_s is not None and WebhookServer.budget_wait_s < TIMEOUT_SECONDS


@pytest.fixture
def serve() -> Iterator:
    yield from serving(lambda **kw: ExtenderServer(Extender(), "127.0.0.1", 0, "/iro", **kw))


@pytest.fixture
def serve_hook(tls) -> Iterator:
    yield from serving(lambda **kw: WebhookServer(Webhook(), tls[0], tls[1], "127.0.0.1", 0, **kw))


def args_body() -> bytes:
    return json.dumps({"Pod": make_pod("p"), "Nodes": {"items": []}}).encode()


def test_the_extender_deadlines_are_its_setting(serve) -> None:
    srv = serve(http_timeout_s=7.5)
    assert srv.body_timeout_s == srv.header_timeout_s == 7.5
    assert ExtenderServer.body_timeout_s == extender.HTTP_TIMEOUT_S  # the class default is untouched


def test_a_stalled_extender_body_gets_408_and_its_budget_back(serve) -> None:
    srv = serve(http_timeout_s=SMALL_S)
    body = args_body()
    half = len(body) // 2
    conn = Conn(socket.create_connection(srv.server_address[:2], timeout=CLIENT_WAIT_S))
    try:
        conn.send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body[:half])
        # Half of the body is held in the body budget while the rest is awaited.
        wait_for(lambda: srv.body_budget.held > 0, what="the body's share of the budget")
        # The client waits far longer than the deadline: the server's 408 ends the wait, not the client.
        status, headers, reply = conn.response()
        assert status == 408, reply
        assert reply["field"] == "body" and f"{half} of {len(body)} bytes arrived within {SMALL_S:g} s" in reply["Error"]
        assert headers["connection"] == "close" and conn.closed()
    finally:
        conn.close()
    wait_for(lambda: srv.body_budget.held == 0, what="the stalled body's share given back")
    assert srv.extender.stats_snapshot()["bad_requests"] == 1
    # And the server goes on serving whole bodies within the same deadline.
    conn = Conn(socket.create_connection(srv.server_address[:2], timeout=CLIENT_WAIT_S))
    try:
        status, _, reply = conn.send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
                                     % len(body) + body).response()
        assert status == 200 and reply["Error"] == "", reply
    finally:
        conn.close()


def test_stalled_extender_headers_get_408(serve) -> None:
    srv = serve(http_timeout_s=SMALL_S)
    conn = Conn(socket.create_connection(srv.server_address[:2], timeout=CLIENT_WAIT_S))
    try:
        status, headers, reply = conn.send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\n").response()
        assert status == 408 and reply["field"] == "headers" and f"within {SMALL_S:g} s" in reply["Error"], reply
        assert conn.closed()
    finally:
        conn.close()


def test_a_stalled_review_gets_408(serve_hook, tls) -> None:
    srv = serve_hook(timeout_seconds=SMALL_S)
    assert srv.body_timeout_s == srv.header_timeout_s == SMALL_S
    ctx = ssl.create_default_context(cafile=tls[0])
    raw = socket.create_connection(srv.server_address[:2], timeout=CLIENT_WAIT_S)
    conn = Conn(ctx.wrap_socket(raw, server_hostname="localhost"))
    try:
        status, headers, reply = conn.send(b"POST /mutate HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n"
                                           b'{"kind": ').response()
        assert status == 408 and reply["field"] == "body", reply
        assert f"9 of 100 bytes arrived within {SMALL_S:g} s" in reply["message"] and conn.closed()
    finally:
        conn.close()
    wait_for(lambda: srv.body_budget.held == 0, what="the stalled review's share given back")


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, True, "5"])
def test_a_bad_deadline_is_refused_naming_the_argument(bad, tls) -> None:
    with pytest.raises(ValueError, match="http_timeout_s: must be a finite number of seconds > 0"):
        ExtenderServer(Extender(), "127.0.0.1", 0, http_timeout_s=bad)
    with pytest.raises(ValueError, match="timeout_seconds: must be a finite number of seconds > 0"):
        WebhookServer(Webhook(), tls[0], tls[1], "127.0.0.1", 0, timeout_seconds=bad)
