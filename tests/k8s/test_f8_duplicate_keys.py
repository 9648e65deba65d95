"""A key sent twice in one JSON object is refused (400 naming its path) by every server that
reads JSON bodies (the edge agent, the extender, the webhook), as Kubernetes' strict field
validation refuses it; :func:`loads_with_spans` (the extender's NodeList path) too.

Before: the last one won silently: ``"requests": {"cpu": "100m", "cpu": "900"}`` was served with 900.
"""

from __future__ import annotations

import http.client
import json
import random

import pytest

from iro_fed.k8s import httpjson
from iro_fed.k8s.httpjson import JsonBodyError, loads_strict, loads_with_spans
from tests.k8s.helpers import extender_server  # noqa: F401 (the ext fixture)

_POD = (
    b'{"pod":{"metadata":{"name":"web"},"spec":{"containers":[{"name":"c","resources":'
    b'{"requests":{"cpu":"100m","cpu":"900"}}}]}}}'
)


@pytest.mark.parametrize(
    "raw, path",
    [
        (_POD, "pod.spec.containers[0].resources.requests.cpu"),
        (b'{"a":1,"a":1}', "a"),
        (b'{"a":1, "b":2, "a" : {"c":[]}}', "a"),
        (b'[{"x":{}},{"y":[1,{"z":1,"z":2}]}]', "[1].y[1].z"),
        (b'{"a\\u0062":1,"ab":2}', "ab"),  # the same key once decoded, as Go reads it
        ('{"\u00e9":1,"\u00e9":2,"\u4e2d":0}'.encode(), "\u00e9"),  # parsed from the escaped text (_ascii_text)
        (b'{"Nodes":{"items":[{"a":1}]},"Nodes":null}', "Nodes"),  # on the NodeList path itself
        (b'{"Nodes":{"items":[{"m":{"k":"\\"","k":"x"}}]}}', "Nodes.items[0].m.k"),
    ],
)
def test_a_repeated_key_is_refused_naming_its_path(raw, path):
    for parse in (loads_strict, lambda r: loads_with_spans(r, ("Nodes", "items"))):
        with pytest.raises(JsonBodyError) as err:
            parse(raw)
        assert err.value.field == path
        assert str(err.value) == f"{path}: duplicate field (sent twice in one object)"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1,"b":{"a":1},"c":[{"a":1},{"a":2}]}',  # the same key in different objects
        b'{"a:":":","b\\":":"\\\\","c":"\\\\\\":"}',  # colons and escaped quotes inside strings
        b'{"":1," ":{"":2}}',
        b'["a:", "b", {"k": "v"}]',
    ],
)
def test_the_same_key_in_different_objects_is_not_a_repeat(raw):
    assert loads_strict(raw) == json.loads(raw)


def test_keys_are_counted_exactly_across_pieces(monkeypatch):
    """Escaped quotes, runs of backslashes and colons inside strings, with the text cut into pieces
    of every size: the count of keys sent is json's own."""
    rnd = random.Random(8)
    alphabet = ["a", ":", '"', "\\", " ", "\u00e9", "{"]

    def text() -> str:
        return "".join(rnd.choice(alphabet) * rnd.choice([1, 1, 2, 3, 40]) for _ in range(rnd.randint(0, 5)))

    def value(depth: int = 0):
        r = rnd.random()
        if depth > 3 or r < 0.35:
            return text()
        if r < 0.65:
            return [value(depth + 1) for _ in range(rnd.randint(0, 3))]
        return {text(): value(depth + 1) for _ in range(rnd.randint(0, 3))}

    def keys(raw: bytes) -> int:
        n = [0]

        def count(pairs):
            n[0] += len(pairs)
            return {}

        json.loads(raw, object_pairs_hook=count)
        return n[0]

    for _ in range(300):
        raw = json.dumps(value(), ensure_ascii=rnd.random() < 0.5, indent=rnd.choice([None, 1])).encode()
        for piece in (1, 2, 7, 64 << 10):
            monkeypatch.setattr(httpjson, "_KEYS_PIECE", piece)
            assert httpjson._keys_in_text(raw) == keys(raw), (piece, raw)


def test_the_extender_refuses_a_repeated_key_with_a_400(ext):
    body = '{"Pod":{"metadata":{"name":"p","name":"q"}},"Nodes":null,"NodeNames":["n1"]}'
    host, port = ext.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("POST", "/iro/filter", body=body.encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    doc = json.loads(resp.read())
    conn.close()
    assert resp.status == 400
    assert doc == {
        "Error": "Pod.metadata.name: duplicate field (sent twice in one object)",
        "field": "Pod.metadata.name",
    }
