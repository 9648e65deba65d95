"""Memory a caller can make the webhook and the extender hold, and how the extender reads its Go
field names, over real HTTP(S) on 127.0.0.1.

The bodies a server holds at once are bounded by its ``body_budget`` counted as they are read (a
body still being sent included), not only once parsed; the header lines of a request are bounded
in all, not only per line; a key that Go's decoder would read as a protocol field is never ignored.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import uuid
from collections.abc import Iterator

import pytest

from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.k8s.webhook import Webhook, WebhookServer
from iro_fed.testing import wait_for
from tests.k8s.helpers import extender_server, serving, tls_files  # noqa: F401 (the ext and tls fixtures)

BUDGET = 4096


def review(name: str, padding: int = 0) -> bytes:
    pod = make_pod(name)
    if padding:
        pod["metadata"]["annotations"] = {"example.com/pad": "x" * padding}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "operation": "CREATE", "namespace": "default", "object": pod}}).encode()


class SmallWebhook(WebhookServer):
    max_parse_bytes = BUDGET
    body_timeout_s = 60.0  # a stalled body outlasts the test
    budget_wait_s = 0.5  # how long a body waits for room before its 503


class SmallExtender(ExtenderServer):
    max_parse_bytes = BUDGET
    body_timeout_s = 60.0
    budget_wait_s = 0.5


@pytest.fixture
def serve_webhook(tls) -> Iterator:
    yield from serving(lambda cls=SmallWebhook: cls(Webhook(), tls[0], tls[1], "127.0.0.1", 0))


@pytest.fixture
def serve_extender() -> Iterator:
    yield from serving(lambda cls=SmallExtender: cls(Extender(), "127.0.0.1", 0, "/iro"))


def held(srv) -> int:
    budget = getattr(srv, "body_budget", None)  # the extender had none: nothing was bounded
    return budget.held if budget is not None else 0


def connect(srv, cafile: str | None) -> socket.socket:
    raw = socket.create_connection(srv.server_address[:2], timeout=20)
    if cafile is None:
        return raw
    return ssl.create_default_context(cafile=cafile).wrap_socket(raw, server_hostname="localhost")


def request(srv, cafile: str | None, method: str, path: str, body: bytes = b"",
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict]:
    if cafile is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=20)
    else:
        conn = http.client.HTTPSConnection("localhost", srv.server_address[1], timeout=20,
                                           context=ssl.create_default_context(cafile=cafile))
    try:
        conn.request(method, path, body=body or None, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read())
    finally:
        conn.close()


def check_a_body_being_sent_holds_its_share(srv, cafile: str | None, path: str, body: bytes, error_key: str) -> None:
    assert 2 * len(body) > BUDGET >= len(body)
    stalled = connect(srv, cafile)
    try:
        # The headers and a first part of the body, then nothing: a client trickling its body
        # (or 256 of them, each with an 8 MiB Content-Length) within the body deadline.
        stalled.sendall(b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n" % (path.encode(), len(body)) + body[:100])
        # Before: nothing was counted until a body had all arrived, so every connection could
        # hold one of max_body_bytes at once, whatever the budget.
        wait_for(lambda: held(srv) == len(body), timeout=10, what="the stalled body's share of the budget")
        status, headers, reply = request(srv, cafile, "POST", path, body)
        assert status == 503 and headers["retry-after"] == "1" and reply["field"] == "body", reply
        assert f"{BUDGET} bytes" in reply[error_key] and "retry" in reply[error_key], reply
    finally:
        stalled.close()
    # The stalled request ends (its client went away) and gives its share back.
    wait_for(lambda: held(srv) == 0, timeout=10, what="the share given back")
    status, _, reply = request(srv, cafile, "POST", path, body)
    assert status == 200, reply


def test_a_webhook_body_still_being_sent_counts_against_the_budget(serve_webhook, tls):
    srv = serve_webhook()
    check_a_body_being_sent_holds_its_share(srv, tls[0], "/mutate", review("p", padding=2500), "message")


def test_an_extender_body_still_being_sent_counts_against_the_budget(serve_extender):
    srv = serve_extender()
    args = json.dumps({"Pod": make_pod("p"), "Nodes": {"items": [make_node("n1")]},
                       "pad": "x" * 2000}).encode()
    check_a_body_being_sent_holds_its_share(srv, None, "/iro/filter", args, "Error")


def test_the_extender_bounds_bodies_in_memory_by_default():
    # Before: no budget at all, so 256 connections could each hold a 256 MiB body (64 GiB).
    srv = ExtenderServer(Extender(), "127.0.0.1", 0)
    try:
        assert srv.body_budget.limit == srv.max_body_bytes
    finally:
        srv.server_close()


def test_a_body_larger_than_the_whole_budget_is_read_alone(serve_webhook, tls):
    # Read in several chunks, each charged while the request holds the earlier ones: it must not
    # wait for its own share.
    srv = serve_webhook()
    body = review("big", padding=700_000)
    status, _, reply = request(srv, tls[0], "POST", "/mutate", body)
    assert status == 200 and reply["response"]["allowed"] is True, reply
    wait_for(lambda: held(srv) == 0, timeout=10, what="the share given back after the reply")


@pytest.mark.parametrize("server", ["extender", "webhook"])
def test_header_lines_are_bounded_in_all(server, ext, serve_webhook, tls):
    srv, cafile, key = (ext, None, "Error") if server == "extender" else (serve_webhook(), tls[0], "message")
    big = {f"X-Pad-{i}": "v" * 40_000 for i in range(2)}  # each line under the stdlib's 64 KiB
    # Before: 200. The stdlib caps a line (64 KiB) and the count (100), not their sum: 6.5 MB of
    # header lines a request, held several times over while parsed, on each connection.
    status, _, reply = request(srv, cafile, "GET", "/healthz", headers=big)
    assert status == 431 and reply["field"] == "headers" and "65536 bytes" in reply[key], reply
    status, _, reply = request(srv, cafile, "GET", "/healthz", headers={"X-Pad": "v" * 40_000})
    assert status == 200 and reply["ok"] is True


# --- Go field names -------------------------------------------------------------------------------


def post_ext(ext: ExtenderServer, verb: str, args: dict) -> tuple[int, dict]:
    status, _, reply = request(ext, None, "POST", f"/iro/{verb}", json.dumps(args).encode())
    return status, reply


def test_a_meta_victim_uid_in_another_case_is_refused_not_read_as_empty(ext):
    args = {"Pod": make_pod("p"), "NodeNameToMetaVictims": {"n1": {"Pods": [{"uid": "u-1"}], "NumPDBViolations": 0}}}
    # Before: 200 with the victim's UID "" (Go reads "uid" as UID; kube could not resolve "").
    status, reply = post_ext(ext, "preempt", args)
    assert status == 400 and reply["field"] == "NodeNameToMetaVictims.n1.Pods[0].uid", reply
    assert "'UID'" in reply["Error"]
    args["NodeNameToMetaVictims"]["n1"]["Pods"] = [{"UID": "u-1"}]
    status, reply = post_ext(ext, "preempt", args)
    assert status == 200 and reply["NodeNameToMetaVictims"]["n1"]["Pods"] == [{"UID": "u-1"}], reply


def test_an_extender_args_key_in_another_case_is_named(ext):
    nodes = {"items": [make_node("n1")]}
    # Before: 400 naming Pod ("got null"), with no word of the "pod" that was sent.
    status, reply = post_ext(ext, "filter", {"pod": make_pod("p"), "Nodes": nodes})
    assert status == 400 and reply["field"] == "pod" and "'Pod'" in reply["Error"], reply
    # Both spellings: Go would take whichever came last; before, "pod" was ignored and this passed.
    status, reply = post_ext(ext, "prioritize", {"Pod": make_pod("p"), "pod": make_pod("q"), "Nodes": nodes})
    assert status == 400 and reply["field"] == "pod", reply
    status, reply = post_ext(ext, "bind", {"PodName": "p", "PodNamespace": "default", "Node": "n1", "podUID": "u"})
    assert status == 400 and reply["field"] == "podUID" and "'PodUID'" in reply["Error"], reply
    status, reply = post_ext(ext, "filter", {"Pod": make_pod("p"), "Nodes": nodes})
    assert status == 200 and [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n1"], reply
