"""The extender and the webhook against hostile or broken input, over raw sockets on 127.0.0.1.

Every case gets a JSON reply that names what is wrong (never a dropped connection or a 500), and
the connection is either still in step (the next request is answered as itself) or closed.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from iro_fed.k8s.extender import MAX_BODY_BYTES as EXTENDER_MAX_BODY
from iro_fed.k8s.extender import ExtenderServer
from iro_fed.k8s.httpjson import MAX_JSON_DEPTH, loads_strict
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.k8s.webhook import MAX_BODY_BYTES as WEBHOOK_MAX_BODY
from iro_fed.k8s.webhook import Webhook, WebhookServer
from tests.k8s.helpers import extender_server, tls_files  # noqa: F401 (the ext and tls fixtures)

pytest.importorskip("cryptography")

# --- a raw HTTP/1.1 client: what goes on the wire is exactly what the test wrote -----------------


class Conn:
    """One connection; ``send`` writes bytes as given, ``response`` reads one response."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file = sock.makefile("rb")

    def send(self, data: bytes) -> Conn:
        self.sock.sendall(data)
        return self

    def response(self) -> tuple[int, dict[str, str], Any]:
        line = self.file.readline()
        assert line.startswith(b"HTTP/1.1 "), f"no response, got {line!r}"
        status = int(line.split()[1])
        headers: dict[str, str] = {}
        while (h := self.file.readline()) not in (b"\r\n", b""):
            k, _, v = h.decode("latin-1").partition(":")
            assert k.strip().lower() not in headers or k.strip().lower() == "allow", h
            headers[k.strip().lower()] = v.strip()
        raw = self.file.read(int(headers["content-length"]))
        return status, headers, json.loads(raw) if headers.get("content-type") == "application/json" else raw

    def closed(self) -> bool:
        """True when the server has closed the connection (EOF; a live one would block until timeout)."""
        return self.file.read(1) == b""

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
            length: bool = True) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: test\r\n"
    if length:
        head += f"Content-Length: {len(body)}\r\n"
    for k, v in (headers or {}).items():
        head += f"{k}: {v}\r\n"
    return head.encode("latin-1") + b"\r\n" + body


def pod_args(**extra: Any) -> dict[str, Any]:
    return {"Pod": make_pod("p"), "Nodes": {"items": [make_node("n1"), make_node("n2")]}, **extra}


@pytest.fixture
def connect(ext: ExtenderServer) -> Iterator[Any]:
    conns: list[Conn] = []

    def make() -> Conn:
        c = Conn(socket.create_connection(ext.server_address[:2], timeout=20))
        conns.append(c)
        return c

    yield make
    for c in conns:
        c.close()


@pytest.fixture
def hook(tls) -> Iterator[WebhookServer]:
    srv = WebhookServer(Webhook("scheduler-name"), tls[0], tls[1], "127.0.0.1", 0)
    srv.serve_in_thread()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def tls_connect(hook: WebhookServer, tls) -> Iterator[Any]:
    conns: list[Conn] = []
    ctx = ssl.create_default_context(cafile=tls[0])

    def make() -> Conn:
        raw = socket.create_connection(hook.server_address[:2], timeout=20)
        c = Conn(ctx.wrap_socket(raw, server_hostname="localhost"))
        conns.append(c)
        return c

    yield make
    for c in conns:
        c.close()


def review(obj: Any = None, **request: Any) -> dict[str, Any]:
    req = {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
           "namespace": "default", "object": make_pod("p") if obj is None else obj}
    req.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def still_in_step(conn: Conn, path: str = "/iro/filter") -> None:
    """The next request on the connection is answered as itself."""
    body = json.dumps(pod_args()).encode() if path == "/iro/filter" else json.dumps(review()).encode()
    status, _, reply = conn.send(request("POST", path, body)).response()
    assert status == 200, reply
    assert ("FailedNodes" in reply) if path == "/iro/filter" else (reply["kind"] == "AdmissionReview")


# --- JSON the Go side would never send -----------------------------------------------------------

NESTED = b'{"Pod": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def _deep_pod() -> bytes:
    args = pod_args()
    v: Any = "leaf"
    for _ in range(300):
        v = [v]
    args["Pod"]["spec"]["overhead"] = v
    return json.dumps(args).encode()


def _with(raw: str, old: str, new: str) -> bytes:
    assert old in raw
    return raw.replace(old, new, 1).encode()


ARGS = json.dumps(pod_args())
LABELLED = json.dumps({**pod_args(), "Pod": make_pod("p", labels={"app": "SURROGATE"})})


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        (NESTED, "body", "nested deeper"),  # RecursionError in json.loads: the connection was dropped
        (_deep_pod(), "Pod.spec.overhead" + "[0]" * (MAX_JSON_DEPTH - 3), "nested deeper"),
        (_with(LABELLED, "SURROGATE", "\\ud800"), "Pod.metadata.labels.app", "lone UTF-16 surrogate"),
        (_with(LABELLED, '"app"', '"a\\udc00"'), "Pod.metadata.labels", "lone UTF-16 surrogate"),
        (_with(ARGS, '"Pod": {', '"Pod": {"priority": NaN, '), "Pod.priority", "NaN is not a JSON number"),
        (_with(ARGS, '"Pod": {', '"Pod": {"priority": -Infinity, '), "Pod.priority", "-Infinity is not"),
        (_with(ARGS, '"Pod": {', '"Pod": {"priority": 1e400, '), "Pod.priority", "overflows to infinity"),
        (_with(ARGS, '"Pod": {', '"Pod": {"priority": ' + "9" * 5000 + ", "), "Pod.priority", "64-bit range"),  # was a
        # dropped connection, then 'body: not valid JSON' with Python's int() digit limit
        (_with(ARGS, '"Pod": {', '"Pod": {"priority": 9223372036854775808, '), "Pod.priority", "64-bit"),
        (ARGS.encode("utf-16"), "body", "not UTF-8"),  # json.loads(bytes) took UTF-16
        (b"\xef\xbb\xbf" + ARGS.encode(), "body", "not valid JSON"),  # a BOM
        (b"[1, 2]", "body", "must be a JSON object"),
        (b'"Pod"', "body", "must be a JSON object"),
    ],
)
def test_json_kube_would_not_send_is_a_400_naming_the_field(connect, body, field, fragment):
    conn = connect()
    status, headers, reply = conn.send(request("POST", "/iro/filter", body)).response()
    assert status == 400, reply
    assert fragment in reply["Error"]
    assert reply["field"] == field and reply["Error"].startswith(field + ":")
    still_in_step(conn)  # the body was read: the connection carries on


def test_loads_strict_accepts_what_go_sends():
    doc = {"a": [1, -2, 2**63 - 1, -(2**63), 1.5, "é \U0001f600", None, True], "b": {"c": "\ud83d\ude00"}}
    assert loads_strict(json.dumps(doc).encode()) == json.loads(json.dumps(doc))
    nested: Any = 0
    for _ in range(MAX_JSON_DEPTH - 1):
        nested = [nested]
    assert loads_strict(json.dumps(nested).encode()) == nested


@pytest.mark.parametrize(
    ("verb", "args", "field"),
    [
        ("filter", {"Pod": [make_pod("p")], "Nodes": {"items": []}}, "Pod"),
        ("filter", pod_args(Nodes={"items": [{"metadata": "n1"}]}), "Nodes.items[0].metadata.name"),  # was a 200 'internal error'
        ("filter", pod_args(Nodes={"items": {"n1": {}}}), "Nodes.items"),
        ("filter", pod_args(Nodes={"items": [make_node("n1"), make_node("n1")]}), "Nodes.items[1].metadata.name"),
        ("filter", {"Pod": make_pod("p"), "NodeNames": ["n1", 7]}, "NodeNames[1]"),
        ("prioritize", {"Pod": make_pod("p"), "NodeNames": "n1"}, "NodeNames"),
        ("prioritize", {"Pod": {**make_pod("p"), "metadata": {"name": "p", "annotations": ["x"]}},
                        "Nodes": {"items": [make_node("n1")]}}, "Pod.metadata.annotations"),  # was a 500
        ("filter", {"Pod": {**make_pod("p"), "metadata": {"name": "p", "labels": {"a": 1}}},
                    "Nodes": {"items": [make_node("n1")]}}, "Pod.metadata.labels.a"),
        ("prioritize", pod_args(Nodes={"items": [{**make_node("n1"), "metadata": {"name": "n1", "resourceVersion": [1]}}]}),
         "Nodes.items[0].metadata.resourceVersion"),  # was a 500 (unhashable cache key)
        ("preempt", {"Pod": make_pod("p"), "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": "x"}}},
         "NodeNameToMetaVictims.n1.NumPDBViolations"),  # was a 500
        ("preempt", {"Pod": make_pod("p"), "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": 5}]}}},
         "NodeNameToMetaVictims.n1.Pods[0].UID"),
        ("preempt", {"Pod": make_pod("p"), "NodeNameToVictims": {"n1": {"Pods": [{"metadata": []}]}}},
         "NodeNameToVictims.n1.Pods[0].metadata"),
        ("preempt", {"Pod": make_pod("p"), "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims"),
        ("bind", {"PodName": "p", "PodNamespace": "default", "Node": "n1", "PodUID": 5}, "PodUID"),  # was ignored
        ("bind", {"PodName": ["p"], "PodNamespace": "default", "Node": "n1"}, "PodName"),
    ],
)
def test_wrong_types_are_a_400_naming_the_field(connect, verb, args, field):
    conn = connect()
    status, _, reply = conn.send(request("POST", f"/iro/{verb}", json.dumps(args).encode())).response()
    assert status == 400, reply
    assert reply["field"] == field and reply["Error"].startswith(field + ":"), reply
    still_in_step(conn)


def test_a_pod_snapshot_error_names_the_pod_field(ext, connect):
    args = {"Pod": make_pod("p", cpu="lots"), "Nodes": {"items": [make_node("n1")]}}
    status, _, reply = connect().send(request("POST", "/iro/prioritize", json.dumps(args).encode())).response()
    assert status == 400 and "invalid quantity 'lots'" in reply["Error"] and reply["field"].startswith("Pod")
    assert ext.extender.stats["errors"] == 0


# --- framing --------------------------------------------------------------------------------------


def test_content_length_with_transfer_encoding_is_refused_and_the_connection_closed(connect):
    body = json.dumps(pod_args()).encode()
    conn = connect().send(request("POST", "/iro/filter", body, {"Transfer-Encoding": "chunked"}))
    status, headers, reply = conn.response()
    assert status == 400 and reply["field"] == "Transfer-Encoding" and headers["connection"] == "close"
    assert conn.closed()


def test_chunked_bodies_need_a_content_length(connect):
    body = json.dumps(pod_args()).encode()
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    conn = connect().send(request("POST", "/iro/filter", chunked, {"Transfer-Encoding": "chunked"}, length=False))
    status, headers, reply = conn.response()
    assert status == 411 and "Content-Length" in reply["Error"] and headers["connection"] == "close"
    assert conn.closed()


@pytest.mark.parametrize("value", ["-1", "abc", "+2", "1_0", " ١٠", "0x10", "1e3"])
def test_a_content_length_that_is_not_plain_digits_is_a_400(connect, value):
    # "+2" and "1_0" were read as 2 and 10 (int() takes them), so the body ended elsewhere than the sender meant
    conn = connect()
    body = b"{}" if value == "+2" else b"0123456789"
    raw = f"POST /iro/filter HTTP/1.1\r\nHost: t\r\nContent-Length: {value}\r\n\r\n".encode() + body
    status, headers, reply = conn.send(raw).response()
    assert status == 400 and reply["field"] == "Content-Length" and "non-negative decimal integer" in reply["Error"]
    assert headers["connection"] == "close" and conn.closed()


def test_conflicting_content_lengths_are_a_400_and_equal_ones_are_one(connect):
    body = json.dumps(pod_args()).encode()
    conn = connect()
    status, _, reply = conn.send(request("POST", "/iro/filter", body, {"Content-Length": str(len(body))})).response()
    assert status == 200, reply  # the same value twice is one value (as Go reads it)
    conn.send(request("POST", "/iro/filter", body, {"Content-Length": "2"}))
    status, headers, reply = conn.response()
    assert status == 400 and "conflicting" in reply["Error"] and headers["connection"] == "close"
    assert conn.closed()


def test_an_oversized_body_is_a_413_before_anything_is_read(connect, tls_connect):
    conn = connect().send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (EXTENDER_MAX_BODY + 1))
    status, headers, reply = conn.response()  # no body was sent: a server that read it would wait
    assert status == 413 and headers["connection"] == "close" and conn.closed()
    conn = connect().send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\nContent-Length: " + b"9" * 40 + b"\r\n\r\n")
    assert conn.response()[0] == 413 and conn.closed()
    # the webhook said 400 here
    conn = tls_connect().send(b"POST /mutate HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (WEBHOOK_MAX_BODY + 1))
    status, headers, reply = conn.response()
    assert status == 413 and reply["field"] == "Content-Length" and conn.closed()


def test_expect_100_continue_gets_the_413_instead_of_a_go_ahead(connect):
    conn = connect().send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                          % (EXTENDER_MAX_BODY + 1))
    assert conn.response()[0] == 413


def test_a_body_that_stops_arriving_is_a_408_and_the_connection_closes(ext, connect, hook, tls_connect):
    # The server gives the body a deadline; the test sends a part of it and nothing more, so the
    # outcome does not depend on how fast anything runs (a server without one would never answer).
    ext.body_timeout_s = hook.body_timeout_s = 0.5
    conn = connect().send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"Pod\": ")
    status, headers, reply = conn.response()
    assert status == 408 and reply["field"] == "body" and "8 of 100 bytes" in reply["Error"]
    assert headers["connection"] == "close" and conn.closed()
    conn = tls_connect().send(b"POST /mutate HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{")
    status, headers, reply = conn.response()
    assert status == 408 and "1 of 100 bytes" in reply["message"] and conn.closed()


def test_a_body_cut_short_by_the_client_is_answered(connect):
    conn = connect().send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"Pod\": ")
    conn.sock.shutdown(socket.SHUT_WR)
    status, _, reply = conn.response()
    assert status == 400 and "ended after 8 of 100 bytes" in reply["Error"]


SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"


def test_after_a_404_the_unread_body_does_not_become_the_next_request(tls_connect):
    # The webhook answered 404 without reading the body: the body was then parsed as a request.
    conn = tls_connect()
    status, headers, reply = conn.send(request("POST", "/nope", SMUGGLED)).response()
    assert status == 404 and "unknown path /nope" in reply["message"]
    still_in_step(conn, "/mutate")


def test_a_get_with_a_body_does_not_smuggle_a_request(connect):
    conn = connect()
    status, _, reply = conn.send(request("GET", "/healthz", SMUGGLED)).response()
    assert status == 200 and reply["ok"] is True
    still_in_step(conn)  # the next response is the filter's, not a second /healthz


# --- methods and paths ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [("GET", "/iro/filter", "POST"), ("PUT", "/iro/prioritize", "POST"), ("DELETE", "/iro/bind", "POST"),
     ("POST", "/healthz", "GET"), ("PATCH", "/readyz", "GET")],
)
def test_a_wrong_method_is_a_405_with_allow(connect, method, path, allow):
    conn = connect()
    status, headers, reply = conn.send(request(method, path, b"{}")).response()
    assert status == 405 and headers["allow"] == allow and headers["content-type"] == "application/json"
    assert reply["field"] == "method" and method in reply["Error"]
    still_in_step(conn)


def test_head_gets_a_405_without_a_body(connect):
    conn = connect()
    conn.send(b"HEAD /iro/filter HTTP/1.1\r\nHost: t\r\n\r\n")
    line = conn.file.readline()
    assert line.startswith(b"HTTP/1.1 405")
    headers = {}
    while (h := conn.file.readline()) != b"\r\n":
        k, _, v = h.decode().partition(":")
        headers[k.lower()] = v.strip()
    assert headers["allow"] == "POST"
    still_in_step(conn)  # no body followed the headers, or it would be read as this response


def test_webhook_methods_and_paths(tls_connect):
    conn = tls_connect()
    status, headers, reply = conn.send(request("GET", "/mutate")).response()
    assert status == 405 and headers["allow"] == "POST" and "GET" in reply["message"]
    status, _, reply = conn.send(request("GET", "/nope")).response()
    assert status == 404 and reply["field"] == "path"
    still_in_step(conn, "/mutate")


def test_an_unknown_method_is_a_405_with_allow(connect):
    # Every method token is routed (as Go's ServeMux does), as the edge agent always did: it said 501 and closed.
    conn = connect()
    status, headers, reply = conn.send(b"BREW /iro/filter HTTP/1.1\r\nHost: t\r\n\r\n").response()
    assert status == 405 and headers["allow"] == "POST" and headers["content-type"] == "application/json"
    assert reply == {"Error": "method BREW is not served on /iro/filter (use POST)", "field": "method"}
    still_in_step(conn)


@pytest.mark.parametrize(
    ("raw", "status", "field", "fragment"),
    [
        (b"G(T /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 400, "request line", "not a method: 'G(T'"),
        (b"POST /iro/filter HTTP/9.9\r\n\r\n", 505, "request line", "Invalid HTTP version"),
        (b"GET /healthz HTTP/9\r\n\r\n", 400, "request line", "Bad request version"),
        (b"GET /healthz\r\n\r\n", 400, "request line", "HTTP/0.9 is not served"),  # HTTP/0.9: a bare body came back
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, "request line", "over 65536 bytes"),
        (b"GET /healthz HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 431, "headers", "Too many headers"),
        (b"GET /healthz HTTP/1.1\r\nX-A: " + b"b" * 70_000 + b"\r\n\r\n", 431, "headers", "Line too long"),
    ],
)
def test_protocol_errors_are_json_naming_the_part_and_close(connect, raw, status, field, fragment):
    conn = connect()
    got, headers, reply = conn.send(raw).response()
    assert got == status and headers["content-type"] == "application/json", reply
    assert reply["field"] == field and reply["Error"].startswith(f"{field}: ") and fragment in reply["Error"], reply
    assert headers["connection"] == "close" and closed_or_reset(conn)


@pytest.mark.parametrize(
    ("raw", "status", "field"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411, "Transfer-Encoding"),
        (b"POST /iro/nope HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}", 400,
         "Content-Length"),
    ],
)
def test_framing_is_checked_whatever_the_path_and_method(connect, raw, status, field):
    # A GET /healthz with a chunked body was answered 200 (and closed); the framing error comes first now.
    conn = connect()
    got, headers, reply = conn.send(raw).response()
    assert got == status and reply["field"] == field and headers["connection"] == "close" and conn.closed()


def test_no_100_continue_for_a_body_that_will_not_be_read(connect):
    # "100 Continue" went out for a path that reads no body: the client then sent a body for nothing.
    for head in (b"POST /iro/nope HTTP/1.1\r\n", b"PUT /iro/filter HTTP/1.1\r\n"):
        conn = connect().send(head + b"Host: t\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
        status, headers, _ = conn.response()  # the final answer at once, not "100 Continue"
        assert status in (404, 405) and headers["connection"] == "close" and conn.closed()
    conn = connect().send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert conn.file.readline() == b"HTTP/1.1 100 Continue\r\n"  # a body that will be read gets its go-ahead


def test_a_client_that_sends_an_oversized_body_anyway_reads_its_413(ext):
    """A client without Expect writes the whole body before it reads its reply: the server closing
    at once (with the body unread) reset the connection under it (EPIPE / ECONNRESET) instead."""
    import http.client

    ext.max_body_bytes = 8192
    conn = http.client.HTTPConnection(*ext.server_address[:2], timeout=30)
    conn.request("POST", "/iro/filter", b" " * (8 << 20), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["field"] == "Content-Length"
    conn.close()


def test_unknown_paths_are_a_json_404(connect):
    conn = connect()
    for method in ("GET", "POST"):
        status, headers, reply = conn.send(request(method, "/iro/nope", b"{}")).response()
        assert status == 404 and headers["content-type"] == "application/json" and "/iro/nope" in reply["Error"]
    still_in_step(conn)


# --- the webhook: a malformed review is a 400, a review of a malformed pod is answered -------------


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": ["x"]}, "request"),
        (review(uid=5), "request.uid"),
        (review(uid=""), "request.uid"),
        (review(kind="Pod"), "request.kind"),  # was an 'internal error' warning
        (review(operation=["CREATE"]), "request.operation"),
        (review(namespace={"name": "x"}), "request.namespace"),
        ([review()], "body"),
    ],
)
def test_a_malformed_review_is_a_400_naming_the_field(tls_connect, doc, field):
    conn = tls_connect()
    status, _, reply = conn.send(request("POST", "/mutate", json.dumps(doc).encode())).response()
    assert status == 400 and reply["field"] == field and reply["message"].startswith(field + ":"), reply
    still_in_step(conn, "/mutate")


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({**make_pod("p"), "metadata": {"name": "p", "labels": ["a"]}}, "request.object.metadata.labels"),
        ({**make_pod("p"), "metadata": "p"}, "request.object.metadata"),
        ({**make_pod("p"), "spec": []}, "request.object.spec"),
        ("a pod", "request.object"),
    ],
)
def test_a_review_of_a_pod_that_cannot_be_read_is_admitted_with_the_reason(tls_connect, obj, field):
    # failurePolicy: Ignore (deploy/base/webhook.yaml): the pod is admitted unchanged, and says why.
    doc = review(obj)
    status, _, reply = tls_connect().send(request("POST", "/mutate", json.dumps(doc).encode())).response()
    assert status == 200
    resp = reply["response"]
    assert resp["uid"] == doc["request"]["uid"] and resp["allowed"] is True and "patch" not in resp
    assert resp["status"]["code"] == 400 and resp["status"]["message"].startswith(field + ":")
    assert field in resp["warnings"][0] and "admitted unchanged" in resp["warnings"][0]


def test_a_missing_pod_object_is_admitted_with_the_reason(tls_connect):
    doc = review()
    del doc["request"]["object"]
    status, _, reply = tls_connect().send(request("POST", "/mutate", json.dumps(doc).encode())).response()
    assert status == 200 and reply["response"]["allowed"] is True
    assert reply["response"]["status"]["message"].startswith("request.object:")


def test_webhook_json_checks(tls_connect):
    conn = tls_connect()
    for body, fragment in [(NESTED, "nested deeper"), (json.dumps(review()).encode("utf-32"), "not UTF-8"),
                           (json.dumps(review()).replace('"CREATE"', "NaN").encode(), "NaN")]:
        status, _, reply = conn.send(request("POST", "/mutate", body)).response()
        assert status == 400 and fragment in reply["message"], reply
    still_in_step(conn, "/mutate")


def test_a_node_of_a_type_go_refuses_is_a_400_and_one_the_model_cannot_read_is_refused_alone(connect):
    node = make_node("n1")
    node["status"]["allocatable"] = ["cpu"]  # no v1.Node: the body is no ExtenderArgs
    args = json.dumps({"Pod": make_pod("p"), "Nodes": {"items": [node]}}).encode()
    conn = connect()
    for verb in ("prioritize", "filter"):
        status, _, reply = conn.send(request("POST", f"/iro/{verb}", args)).response()
        assert status == 400 and reply["field"] == "Nodes.items[0].status.allocatable", reply
    node["status"]["allocatable"] = {"cpu": "lots"}  # a bad quantity: that node is refused, not the request
    args = json.dumps({"Pod": make_pod("p"), "Nodes": {"items": [node, make_node("n2")]}}).encode()
    status, _, reply = conn.send(request("POST", "/iro/filter", args)).response()
    assert status == 200 and reply["Error"] == "" and [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n2"]
    assert "status.allocatable.cpu" in reply["FailedAndUnresolvableNodes"]["n1"]


def test_affinity_mode_checks_the_affinity_it_would_patch(tls):
    srv = WebhookServer(Webhook("affinity"), tls[0], tls[1], "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        ctx = ssl.create_default_context(cafile=tls[0])
        conn = Conn(ctx.wrap_socket(socket.create_connection(srv.server_address[:2], timeout=20), server_hostname="localhost"))
        pod = make_pod("p")
        pod["spec"]["affinity"] = {"nodeAffinity": []}  # was an 'internal error' warning
        status, _, reply = conn.send(request("POST", "/mutate", json.dumps(review(pod)).encode())).response()
        assert status == 200 and reply["response"]["allowed"] is True
        assert reply["response"]["status"]["message"].startswith("request.object.spec.affinity.nodeAffinity:")
        conn.close()
    finally:
        srv.shutdown()
        srv.server_close()


# --- slow clients and too many of them -------------------------------------------------------------


def drip_until_answered(conn: Conn, data: bytes, pace_s: float = 0.05, start: bytes = b"") -> int:
    """Send ``start`` at once, then ``data`` one byte at a time (each well within any per-read timeout) until the server
    says something or closes. The server is given a short deadline, so the outcome does not
    depend on how fast anything runs; a server without a deadline is still listening when the
    bytes run out (``len(data) * pace_s`` seconds), and the test fails."""
    conn.sock.sendall(start)
    for i in range(len(data)):
        if select.select([conn.sock], [], [], pace_s)[0]:
            return i
        conn.sock.sendall(data[i:i + 1])
    raise AssertionError(f"no reply after {len(data)} bytes sent one at a time")


def closed_or_reset(conn: Conn) -> bool:
    try:
        return conn.file.read(1) == b""
    except ConnectionResetError:
        return True




def test_headers_that_trickle_in_get_a_408_and_the_connection_closes(ext, connect):
    # Each byte arrives well within the 120 s per-read timeout: it was restarted by every byte,
    # so the thread was held for as long as the client kept sending.
    ext.header_timeout_s = 0.5
    conn = connect()
    assert drip_until_answered(conn, b"X-Slow: " + b"a" * 400, start=b"POST /iro/filter HTTP/1.1\r\nHost: t\r\n") > 1
    status, headers, reply = conn.response()
    assert status == 408 and reply["field"] == "headers" and "within 0.5 s" in reply["Error"]
    assert headers["connection"] == "close" and closed_or_reset(conn)


def test_a_request_line_that_trickles_in_gets_a_408(ext, connect):
    ext.header_timeout_s = 0.5
    conn = connect()
    assert drip_until_answered(conn, b"POST /iro/" + b"a" * 400) > 1
    status, _, reply = conn.response()
    assert status == 408 and reply["field"] == "request line" and closed_or_reset(conn)


def test_webhook_headers_that_trickle_in_get_a_408(hook, tls_connect):
    hook.header_timeout_s = 0.5
    conn = tls_connect()
    # A first exchange reads what TLS 1.3 sends after the handshake (session tickets), so the
    # socket is readable only when the reply comes.
    assert conn.send(request("GET", "/healthz")).response()[0] == 200
    assert drip_until_answered(conn, b"X-Slow: " + b"a" * 400, start=b"POST /mutate HTTP/1.1\r\nHost: t\r\n") > 1
    status, headers, reply = conn.response()
    assert status == 408 and reply["field"] == "headers" and "within 0.5 s" in reply["message"]
    assert closed_or_reset(conn)


def test_the_request_deadline_starts_again_for_each_request(ext, connect):
    # Keep-alive: the time a connection was idle before a request is not held against it.
    ext.header_timeout_s = 0.5
    conn = connect()
    for _ in range(2):
        assert conn.send(request("GET", "/healthz")).response()[0] == 200
        select.select([conn.sock], [], [], 0.8)  # idle past the request deadline: still open
    assert conn.send(request("GET", "/healthz")).response()[0] == 200


def test_an_idle_keep_alive_connection_closes_quietly(ext, connect, monkeypatch):
    from iro_fed.k8s.extender import _ExtenderHandler

    monkeypatch.setattr(_ExtenderHandler, "timeout", 0.3)
    conn = connect()
    assert conn.send(request("GET", "/healthz")).response()[0] == 200
    assert conn.file.read(1) == b""  # no 408: nothing of a next request was sent


def test_connections_over_max_connections_get_a_503_at_once(ext, connect):
    ext.max_connections = 2
    held = [connect(), connect()]
    for c in held:  # answered: each holds a slot (and a thread) now
        assert c.send(request("GET", "/healthz")).response()[0] == 200
    extra = connect()
    status, headers, reply = extra.response()  # nothing sent: a served connection would wait for a request
    assert status == 503 and headers["retry-after"] == "1" and "too many connections" in reply["Error"]
    assert headers["connection"] == "close" and closed_or_reset(extra)
    # A connection that ends frees its slot (the slot goes before the server closes the socket).
    status, headers, _ = held[0].send(request("GET", "/healthz", headers={"Connection": "close"})).response()
    assert status == 200 and held[0].closed()
    assert connect().send(request("GET", "/healthz")).response()[0] == 200


def test_a_connection_reset_mid_request_frees_its_slot(ext, connect):
    ext.max_connections = 1
    conn = connect()
    assert conn.send(request("GET", "/healthz")).response()[0] == 200
    conn.send(b"POST /iro/filter HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{")
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()  # RST, with the body unfinished
    deadline = time.monotonic() + 20
    while ext.open_connections():  # the handler sees the reset, then the slot goes
        assert time.monotonic() < deadline, "slot still held after the client reset"
        time.sleep(0.02)
    assert connect().send(request("GET", "/healthz")).response()[0] == 200


def test_webhook_connections_over_max_connections_are_closed_at_once(hook, tls_connect):
    hook.max_connections = 2
    held = [tls_connect(), tls_connect()]
    for c in held:
        assert c.send(request("GET", "/healthz")).response()[0] == 200
    with pytest.raises((ssl.SSLError, OSError)):  # no reply over TLS without a handshake: closed
        tls_connect()
    status, _, _ = held[0].send(request("GET", "/healthz", headers={"Connection": "close"})).response()
    assert status == 200 and held[0].closed()
    assert tls_connect().send(request("GET", "/healthz")).response()[0] == 200
