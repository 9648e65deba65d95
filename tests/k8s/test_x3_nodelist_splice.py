"""NodeList-mode filter replies carry the request's own JSON text of the passing nodes (spliced,
not re-encoded), over real HTTP on 127.0.0.1; the document is the one re-encoding gave.

Re-encoding the passing Node objects of a 5,000-node NodeList took ~0.6 s of kube-scheduler's 5 s
httpTimeout. The items' text is known from the one parse (json's scanner is called once per item),
so the reply is json.dumps's bytes around the request's bytes of each passing node.
"""

from __future__ import annotations

import http.client
import json
import random
import tracemalloc
from typing import Any

import pytest

from iro_fed.k8s import httpjson
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.testing import make_node, make_pod
from tests.k8s.helpers import serving

NAMES = ["plain", "nöde", "узел", "节点", "nœud-😀", "a\"quote", "back\\slash", "tab\tname"]
QUANTITIES = ["8", "1500m", "0.5", "1e1", "16", "250m", "1.25"]
MEMORIES = ["32Gi", "1000Mi", "0.5Ti", "123456789", "1e9", "64G"]


@pytest.fixture
def serve():
    yield from serving(lambda ext: ExtenderServer(ext, "127.0.0.1", 0, "/iro"))


def post(srv: ExtenderServer, verb: str, body: bytes) -> tuple[int, bytes]:
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("POST", f"/iro/{verb}", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def random_nodes(rng: random.Random, n: int) -> list[dict[str, Any]]:
    nodes = []
    for i in range(n):
        name = f"{rng.choice(NAMES)}-{i}"
        taints = [{"key": "dedicated", "value": rng.choice(["db", "ml"]), "effect": "NoSchedule"}] if rng.random() < 0.2 else None
        gpus = rng.choice([0, 0, 1, 4])
        node = make_node(name, cpu=rng.choice(QUANTITIES), memory=rng.choice(MEMORIES), zone=f"z{i % 3}",
                         gpus=gpus, gpu_model="A100" if gpus else "", taints=taints,
                         annotations={"note": rng.choice(["é", "中文", "😀", "plain", "\\u00e9 \"q\"", "\u2028"]),
                                      "iro-fed.io/allocated": json.dumps({"cpu": rng.choice(["0", "500m", "1"])})})
        node["metadata"]["uid"] = f"uid-{i}"
        node["metadata"]["resourceVersion"] = str(rng.randrange(1, 10**9))
        node["status"]["images"] = [{"names": [f"img-{k}"], "sizeBytes": rng.randrange(10**9)} for k in range(rng.randrange(3))]
        node["status"]["weight"] = rng.choice([1.5, 0.1, 1e-7, 12345678901234, -0.0])
        nodes.append(node)
    return nodes


def args_body(pod: dict, nodes: list[dict], compact: bool, ascii_only: bool = True) -> bytes:
    doc = {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    return json.dumps(doc, separators=(",", ":") if compact else None, ensure_ascii=ascii_only).encode()


def reencoded(body: bytes) -> bytes:
    """The reply as the extender wrote it before: the filter result through json.dumps."""
    return json.dumps(Extender("greedy-objective").filter(json.loads(body)), check_circular=False).encode()


@pytest.mark.parametrize("seed", range(6))
def test_random_nodelists_get_the_document_reencoding_gave(serve, seed: int) -> None:
    rng = random.Random(seed)
    srv = serve(Extender("greedy-objective"))
    nodes = random_nodes(rng, 40)
    pod = make_pod("p", cpu=rng.choice(["500m", "2", "6"]), memory="1Gi", gpus=rng.choice([0, 1]),
                   tolerations=[{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}])
    for compact in (False, True):
        for ascii_only in (True, False):
            body = args_body(pod, nodes, compact, ascii_only)
            status, reply = post(srv, "filter", body)
            assert status == 200, reply
            want = reencoded(body)
            assert json.loads(reply) == json.loads(want)
            if not compact and ascii_only:  # the request written as json.dumps writes: the very bytes
                assert reply == want
            status, ranked = post(srv, "prioritize", body)
            assert status == 200 and json.loads(ranked) == Extender("greedy-objective").prioritize(json.loads(body))


def test_the_reply_carries_the_requests_own_bytes_of_each_passing_node(serve) -> None:
    srv = serve(Extender("greedy-objective"))
    nodes = [make_node(f"n{i}", cpu="8") for i in range(3)] + [make_node("tiny", cpu="100m")]
    # As Go writes them (compact), with what json.dumps would write otherwise: 1.0e3, an escaped
    # "/" and a raw "é" keep their spelling.
    items = [json.dumps(n, separators=(",", ":"))[:-1] + ',"extra":[1.0e3,"a\\/b","é"]}' for n in nodes]
    body = ('{"Pod":' + json.dumps(make_pod("p", cpu="1")) + ',"Nodes":{"metadata":{},"items":['
            + ",".join(items) + ']},"NodeNames":null}').encode()
    status, reply = post(srv, "filter", body)
    assert status == 200, reply
    doc = json.loads(reply)
    assert [n["metadata"]["name"] for n in doc["Nodes"]["items"]] == ["n0", "n1", "n2"]
    assert doc["FailedNodes"] == {"tiny": "Insufficient cpu"}
    for text in items[:3]:
        assert text.encode() in reply
    assert doc == json.loads(reencoded(body))


def test_a_node_changed_between_two_calls_is_answered_as_it_is_now(serve) -> None:
    srv = serve(Extender("greedy-objective"))
    nodes = [make_node(f"n{i}", cpu="8", annotations={"v": "1"}) for i in range(3)]
    for i, n in enumerate(nodes):
        n["metadata"].update(uid=f"u{i}", resourceVersion="1")
    pod = make_pod("p", cpu="4")
    status, reply = post(srv, "filter", args_body(pod, nodes, compact=True))
    assert status == 200 and len(json.loads(reply)["Nodes"]["items"]) == 3
    # A new version of n1: smaller, and its annotation changed.
    nodes[1]["metadata"]["resourceVersion"] = "2"
    nodes[1]["status"]["allocatable"]["cpu"] = "2"
    nodes[2]["metadata"]["annotations"]["v"] = "2"  # same version, other text: the reply is this request's
    status, reply = post(srv, "filter", args_body(pod, nodes, compact=True))
    doc = json.loads(reply)
    assert [n["metadata"]["name"] for n in doc["Nodes"]["items"]] == ["n0", "n2"]
    assert doc["Nodes"]["items"][1]["metadata"]["annotations"]["v"] == "2"
    assert doc["FailedNodes"] == {"n1": "Insufficient cpu"}


@pytest.mark.parametrize("body", [
    b'{"Pod":{},"Nodes":{"items":[1,]}}', b'{"Nodes":{"items":[{}]}} x', b'{"Nodes":{"items":[{"a":NaN}]}}',
    b'{"Nodes":{"items":[{"n":1e400}]}}', b'{"Nodes":{"items":["\\ud800"]}}', b'{"Nodes":{"items":[{"a":"\x01"}]}}',
    b'{"Nodes":{"items":[' + b"[" * 150 + b"]" * 150 + b"]}}", b'{"Nodes":{"items":[99999999999999999999]}}',
    '{"Nodes":{"items":[{"é":1} 2]}}'.encode(), '{"Nodes":{"items":["😀",]}}'.encode(), b"\xef\xbb\xbf{}",
    b'{"Nodes" {"items":[]}}', b'{"Nodes":{"items":[{}]}', b'[1]', b'{"Nodes":{"items":{}}}',
])
def test_errors_are_those_of_the_plain_parse(serve, body: bytes) -> None:
    srv = serve(Extender("greedy-objective"))
    status, reply = post(srv, "filter", body)
    status2, reply2 = post(srv, "prioritize", body)  # parsed as before
    assert status == status2 == 400
    assert json.loads(reply) == json.loads(reply2)
    try:
        httpjson.loads_strict(body)
    except httpjson.JsonBodyError as exc:
        with pytest.raises(httpjson.JsonBodyError) as spans_exc:
            httpjson.loads_with_spans(body, ("Nodes", "items"))
        assert (str(spans_exc.value), spans_exc.value.field) == (str(exc), exc.field)
    else:
        assert httpjson.loads_with_spans(body, ("Nodes", "items"))[0] == httpjson.loads_strict(body)


@pytest.mark.parametrize("body", [
    b'{"Nodes":[1],"x":{"items":[1]}}',
    b' {"Nodes" : { "items" : [ {  } , [ ] ] } } ', b'{"N\\u006fdes":{"items":[1,{"q":2}]}}',
    '{"Nodes":{"items":[{"n":"é中😀"},{"m":"\\u00e9"}]}}'.encode(), '{"Nodes":{"items":[{"n":"é"}]}}'.encode(),
])
def test_the_spans_are_the_items_text(body: bytes) -> None:
    doc, spans = httpjson.loads_with_spans(body, ("Nodes", "items"))
    assert doc == httpjson.loads_strict(body)
    items = (doc.get("Nodes") or {}).get("items") if isinstance(doc.get("Nodes"), dict) else None
    if not isinstance(items, list):
        assert spans is None
        return
    assert spans is not None and spans.items is items  # (a repeated "Nodes" is refused: test_f8_duplicate_keys)
    assert [json.loads(bytes(spans.text(k))) for k in range(len(items))] == items


def _peak(f) -> int:
    tracemalloc.start()
    try:
        f()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("items", [
    [{"k" * 48: 0}] * 20_000, [{"abcdefgh": 0}] * 20_000, [{f"key-{j}-" + "x" * 24: 1000 + j for j in range(10)}] * 2_000,
    [{"metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}", "topology.kubernetes.io/zone": "z"}}}
     for i in range(5_000)],
], ids=["48-char keys", "8-char keys", "10 keys", "node-like"])
def test_the_spans_parse_is_charged_for_its_own_keys(items: list) -> None:
    # Each item's keys are its own (json.loads shares them): the charge covers them.
    raw = json.dumps({"Pod": {}, "Nodes": {"items": items}}, separators=(",", ":")).encode()
    values, plain, copied = httpjson.parse_estimates(raw)
    assert (values, plain) == httpjson.parse_estimate(raw)
    need = plain + httpjson.decode_estimate(raw, plain)
    assert need + copied >= _peak(lambda: httpjson.loads_with_spans(raw, ("Nodes", "items")))


def test_a_nodelist_charged_over_the_limit_with_its_keys_is_parsed_plainly(serve) -> None:
    items = [json.dumps(make_node(f"n{i}", cpu="8"), separators=(",", ":"))[:-1] + ',"x":1.0e3}' for i in range(200)]
    body = ('{"Pod":' + json.dumps(make_pod("p", cpu="1")) + ',"Nodes":{"metadata":{},"items":['
            + ",".join(items) + ']},"NodeNames":null}').encode()
    values, plain, copied = httpjson.parse_estimates(body)
    need = plain + httpjson.decode_estimate(body, plain)
    assert copied > 0

    class Tight(ExtenderServer):
        max_parse_memory = need + copied - 1  # the plain parse fits, the spans parse does not

    srv = serve(Extender("greedy-objective"))
    tight = Tight(Extender("greedy-objective"), "127.0.0.1", 0, "/iro")
    tight.serve_in_thread()
    try:
        status, reply = post(tight, "filter", body)
    finally:
        tight.shutdown()
        tight.server_close()
    status2, reply2 = post(srv, "filter", body)
    assert status == status2 == 200
    assert json.loads(reply) == json.loads(reply2) == json.loads(reencoded(body))
    assert reply == reencoded(body)  # re-encoded: 1000.0
    assert b'"x":1.0e3' in reply2  # spliced
