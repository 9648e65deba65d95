"""The webhook reviewed as the API server and an attacker in the cluster use it, over real TLS on
127.0.0.1: what it mutates, how much memory a caller can make it take, and certificate renewal."""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import threading
import uuid
from pathlib import Path

import pytest

from iro_fed.k8s.testing import make_pod, self_signed_cert
from iro_fed.k8s.webhook import MAX_BODY_BYTES, Webhook, WebhookServer
from tests.k8s.helpers import serving, tls_files  # noqa: F401 (tls_files: the tls fixture)

pytest.importorskip("cryptography")


@pytest.fixture
def serve(tls):
    yield from serving(lambda hook, cls=WebhookServer, files=tls: cls(hook, files[0], files[1], "127.0.0.1", 0))


def post(srv: WebhookServer, cafile: str, body: dict | bytes) -> tuple[int, dict[str, str], dict]:
    ctx = ssl.create_default_context(cafile=cafile)
    conn = http.client.HTTPSConnection("localhost", srv.server_address[1], context=ctx, timeout=20)
    try:
        conn.request("POST", "/mutate", body=body if isinstance(body, bytes) else json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read())
    finally:
        conn.close()


def review(pod: dict, group: str = "", padding: int = 0) -> dict:
    if padding:
        pod["metadata"]["annotations"] = {"example.com/pad": "x" * padding}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "kind": {"group": group, "version": "v1", "kind": "Pod"},
                        "resource": {"group": group, "version": "v1", "resource": "pods"}, "operation": "CREATE",
                        "namespace": "default", "object": pod, "dryRun": False}}


# --- what is mutated ---------------------------------------------------------------------------------


def test_a_custom_resource_of_kind_pod_is_not_mutated(serve, tls):
    srv = serve(Webhook())
    _, _, core = post(srv, tls[0], review(make_pod("p")))
    assert json.loads(base64.b64decode(core["response"]["patch"])) == [
        {"op": "add", "path": "/spec/schedulerName", "value": "iro"}]
    # A CRD example.com/v1 Pod (a configuration with apiGroups ["*"]) got spec.schedulerName added.
    status, _, crd = post(srv, tls[0], review(make_pod("p"), group="example.com"))
    assert status == 200 and crd["response"]["allowed"] is True
    assert "patch" not in crd["response"] and "patchType" not in crd["response"], crd


# --- memory: bodies parsed at once -------------------------------------------------------------------


def test_a_review_over_the_body_limit_is_a_413_before_it_is_read(serve, tls):
    # 16 MiB were read and parsed: "[{},{},...]" that long is ~440 MB of Python objects, past the
    # deployment's 512 MiB limit from one request of any pod that can reach the Service.
    srv = serve(Webhook())
    ctx = ssl.create_default_context(cafile=tls[0])
    raw = socket.create_connection(srv.server_address[:2], timeout=20)
    with ctx.wrap_socket(raw, server_hostname="localhost") as s:  # the headers only: no body is read
        s.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n" % (9 * 1024 * 1024))
        resp = http.client.HTTPResponse(s)
        resp.begin()
        status, reply = resp.status, json.loads(resp.read())
    assert status == 413 and reply["field"] == "Content-Length" and str(MAX_BODY_BYTES) in reply["message"], reply
    assert post(srv, tls[0], review(make_pod("p"), padding=MAX_BODY_BYTES // 2))[0] == 200


class SmallBudget(WebhookServer):
    max_parse_bytes = 4096  # one ~3 KB review at a time
    body_timeout_s = 3.0  # how long a body waits for its share before a 503


def test_bodies_parsed_at_once_are_bounded_and_a_request_past_it_gets_503(serve, tls):
    entered, release = threading.Event(), threading.Event()
    hook = Webhook("affinity", budget_s=30)
    calls = []

    def recommend(pod, namespace):  # the first review is held here, with its parsed body
        calls.append(pod["metadata"]["name"])
        if len(calls) == 1:
            entered.set()
            release.wait(30)
        return [("n1", 1.0)]

    hook.recommend = recommend
    srv = serve(hook, SmallBudget)
    first: list = []
    t = threading.Thread(target=lambda: first.append(post(srv, tls[0], review(make_pod("a"), padding=2500))))
    t.start()
    try:
        assert entered.wait(20)
        # Before: parsed and answered alongside, however many bodies were in memory already.
        status, headers, reply = post(srv, tls[0], review(make_pod("b"), padding=2500))
        assert status == 503 and headers["retry-after"] == "1" and reply["field"] == "body", reply
        assert "retry" in reply["message"] and calls == ["a"]
        # A small review fits beside it.
        status, _, reply = post(srv, tls[0], review(make_pod("c")))
        assert status == 200 and "patch" in reply["response"], reply
    finally:
        release.set()
        t.join(30)
    assert first[0][0] == 200 and "patch" in first[0][2]["response"]
    # Its share is given back once it has replied: the next big review goes through (waiting for it if need be).
    status, _, reply = post(srv, tls[0], review(make_pod("d"), padding=2500))
    assert status == 200 and "patch" in reply["response"]


# --- certificate renewal -----------------------------------------------------------------------------


def served_cert(srv: WebhookServer, cafile: str) -> bytes:
    """The DER certificate a new connection is served, verified against ``cafile``."""
    ctx = ssl.create_default_context(cafile=cafile)
    raw = socket.create_connection(srv.server_address[:2], timeout=20)
    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
        return s.getpeercert(binary_form=True)


def der(cert_file: str | Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(Path(cert_file).read_text())


def replace(src: Path, dst: Path) -> None:
    """Swap ``dst`` for a copy of ``src`` at once, as the kubelet updates a Secret volume."""
    tmp = dst.with_suffix(".new")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def test_a_renewed_certificate_is_served_to_new_connections(serve, tmp_path):
    live_cert, live_key = self_signed_cert(tmp_path / "live", ("localhost",))
    new_cert, new_key = self_signed_cert(tmp_path / "renewed", ("localhost",))
    srv = serve(Webhook(), WebhookServer, (str(live_cert), str(live_key)))
    assert served_cert(srv, str(live_cert)) == der(live_cert)
    replace(new_key, live_key)
    replace(new_cert, live_cert)
    # Before: the certificate loaded at start, until it expired (then every call failed).
    assert served_cert(srv, str(new_cert)) == der(new_cert)
    status, _, reply = post(srv, str(new_cert), review(make_pod("p")))
    assert status == 200 and reply["response"]["allowed"] is True


def test_a_certificate_that_does_not_load_keeps_the_current_one(serve, tmp_path):
    live_cert, live_key = self_signed_cert(tmp_path / "live", ("localhost",))
    other_cert, _ = self_signed_cert(tmp_path / "other", ("localhost",))
    srv = serve(Webhook(), WebhookServer, (str(live_cert), str(live_key)))
    current = der(live_cert)
    keep = tmp_path / "current.crt"
    shutil.copyfile(live_cert, keep)
    replace(other_cert, live_cert)  # a certificate whose key is not the one beside it
    assert served_cert(srv, str(keep)) == current
    assert post(srv, str(keep), review(make_pod("p")))[0] == 200
