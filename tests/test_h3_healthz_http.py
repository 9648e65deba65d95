"""``iro scheduler``'s metrics server answers ``GET /healthz`` from ``IroScheduler.health`` (the
liveness probe of deploy/base/scheduler.yaml): 200 while the loop progresses, 503 when it is wedged."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry  # noqa: E402

from iro_fed.k8s.cli import start_metrics_server  # noqa: E402


def _get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_healthz_follows_the_schedulers_health():
    state = {"ok": True}

    def health() -> tuple[bool, str]:
        return (True, "scheduling loop progressed 1 s ago") if state["ok"] else (False, "no progress for 200 s")

    server = start_metrics_server(CollectorRegistry(), "127.0.0.1", 0, health=health)
    try:
        port = server.server_address[1]
        assert _get(port, "/healthz") == (200, {"ok": True, "status": "scheduling loop progressed 1 s ago"})
        state["ok"] = False
        assert _get(port, "/healthz") == (503, {"ok": False, "error": "no progress for 200 s"})
    finally:
        server.shutdown()
        server.server_close()


def test_without_health_there_is_no_healthz():
    server = start_metrics_server(CollectorRegistry(), "127.0.0.1", 0)
    try:
        status, body = _get(server.server_address[1], "/healthz")
        assert status == 404 and "GET /metrics" in body["error"]
    finally:
        server.shutdown()
        server.server_close()
