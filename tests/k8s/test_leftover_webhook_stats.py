"""The webhook's ``/healthz`` stats count as the extender's do: a 5xx (the body budget full, the
handler's own fault) is an ``errors``, a 4xx from the client's input a ``bad_requests``, an unknown
path or method neither. The webhook used to count its 503s as bad requests and had no ``errors``."""

from __future__ import annotations

import http.client
import json
import ssl
import types
from collections.abc import Iterator

import pytest

from iro_fed.k8s.extender import Extender, _ExtenderHandler
from iro_fed.k8s.webhook import Webhook, WebhookServer, _WebhookHandler
from tests.k8s.helpers import serving, tls_files  # noqa: F401 (tls_files: the tls fixture)

BUDGET = 4096


class NoWaitWebhook(WebhookServer):
    max_parse_bytes = BUDGET
    budget_wait_s = 0.0  # a body finding the budget held gets its 503 at once: no timing involved


@pytest.fixture
def serve(tls) -> Iterator:
    yield from serving(lambda: NoWaitWebhook(Webhook(), tls[0], tls[1], "127.0.0.1", 0))


def call(srv: WebhookServer, cafile: str, method: str, path: str, body: bytes = b"") -> tuple[int, dict]:
    conn = http.client.HTTPSConnection("localhost", srv.server_address[1], timeout=20,
                                       context=ssl.create_default_context(cafile=cafile))
    try:
        conn.request(method, path, body=body or None, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def counts(srv: WebhookServer, cafile: str) -> tuple[int, int]:
    status, reply = call(srv, cafile, "GET", "/healthz")
    assert status == 200
    return reply["stats"]["bad_requests"], reply["stats"]["errors"]


def test_a_503_is_an_error_and_a_400_a_bad_request(serve, tls):
    srv = serve()
    assert counts(srv, tls[0]) == (0, 0)
    assert srv.body_budget.acquire(BUDGET, 0.0)  # another request's body holds the whole budget
    try:
        status, reply = call(srv, tls[0], "POST", "/mutate", b'{"kind": "AdmissionReview"}')
    finally:
        srv.body_budget.release(BUDGET)
    assert status == 503 and reply["field"] == "body", reply
    assert counts(srv, tls[0]) == (0, 1)
    status, reply = call(srv, tls[0], "POST", "/mutate", b"not json")
    assert status == 400, reply
    assert counts(srv, tls[0]) == (1, 1)
    assert call(srv, tls[0], "GET", "/nowhere")[0] == 404
    assert counts(srv, tls[0]) == (1, 1)


@pytest.mark.parametrize("code", [400, 404, 405, 408, 411, 413, 431, 500, 503, 505])
def test_the_webhook_and_the_extender_count_every_status_alike(code):
    hook, ext = Webhook(), Extender()
    hook.close()  # its review pool: not used here
    for handler, target in ((_WebhookHandler, types.SimpleNamespace(webhook=hook)),
                            (_ExtenderHandler, types.SimpleNamespace(extender=ext))):
        h = handler.__new__(handler)  # on_error reads only the server's counters
        h.server = target
        h.on_error(code)
    got = hook.stats_snapshot()
    want = ext.stats_snapshot()
    assert (got["bad_requests"], got["errors"]) == (want["bad_requests"], want["errors"])
    assert (got["bad_requests"], got["errors"]) == ((0, 1) if code >= 500 else (0, 0) if code in (404, 405) else (1, 0))
