"""A review the webhook refuses for its body or parse budget (503: the API server admits the pod
unchanged, failurePolicy Ignore) is counted: ``stats["budget_refused"]`` on /healthz and the
Prometheus counter ``iro_webhook_budget_refused_total``. Such refusals used to be counted nowhere
but in the catch-all ``errors``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from iro_fed.k8s.webhook import STAT_HELP, Webhook, WebhookCollector, WebhookServer
from tests.k8s.helpers import serving, tls_files  # noqa: F401 (tls_files: the tls fixture)
from tests.k8s.test_leftover_webhook_stats import call

BUDGET = 4096
REVIEW = b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": "u1"}}'


class NoWaitWebhook(WebhookServer):
    max_parse_bytes = BUDGET
    max_parse_memory = 1 << 20
    budget_wait_s = 0.0  # a body finding a budget held gets its 503 at once: no timing involved


@pytest.fixture
def serve(tls) -> Iterator:
    yield from serving(lambda: NoWaitWebhook(Webhook(), tls[0], tls[1], "127.0.0.1", 0))


def _stats(srv: WebhookServer, cafile: str) -> dict[str, int]:
    status, reply = call(srv, cafile, "GET", "/healthz")
    assert status == 200
    return reply["stats"]


def test_budget_refusals_are_counted_and_exported(serve, tls) -> None:
    srv = serve()
    assert _stats(srv, tls[0])["budget_refused"] == 0
    assert srv.body_budget.acquire(BUDGET, 0.0)  # other requests' bodies hold the whole body budget
    try:
        status, reply = call(srv, tls[0], "POST", "/mutate", REVIEW)
    finally:
        srv.body_budget.release(BUDGET)
    assert status == 503 and reply["field"] == "body", reply
    limit = srv.parse_budget.limit
    assert srv.parse_budget.acquire(limit, 0.0)  # other requests' parses hold the whole parse budget
    try:
        status, reply = call(srv, tls[0], "POST", "/mutate", REVIEW)
    finally:
        srv.parse_budget.release(limit)
    assert status == 503 and reply["field"] == "body", reply
    # Neither a review answered nor a bad request (400) nor an unknown path counts.
    assert call(srv, tls[0], "POST", "/mutate", REVIEW)[0] == 200
    assert call(srv, tls[0], "POST", "/mutate", b"not json")[0] == 400
    assert call(srv, tls[0], "GET", "/nowhere")[0] == 404
    stats = _stats(srv, tls[0])
    assert stats["budget_refused"] == 2 and stats["errors"] == 2 and stats["reviews"] == 1, stats

    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    registry.register(WebhookCollector(srv.webhook))
    text = prometheus_client.generate_latest(registry).decode()
    assert "# TYPE iro_webhook_budget_refused_total counter" in text
    assert "iro_webhook_budget_refused_total 2.0" in text and "iro_webhook_reviews_total 1.0" in text, text
    assert registry.get_sample_value("iro_webhook_errors_total") == 2.0
    assert {f"iro_webhook_{k}" for k in STAT_HELP} <= {m.name for m in registry.collect()}
