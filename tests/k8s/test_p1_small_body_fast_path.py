"""A small request body is read without numpy's fixed costs, with the same answers.

The extender's node-cache requests are ~7 KiB: the parse-memory scan (``_scan_all``, ~90 us) and
the key count (``_keys_by_colons``, ~65 us) were numpy calls' fixed costs, a third of the server's
time per request, and filter throughput under 4 connections fell by half. Now:

* a body of at most ``_COUNTED_BODY`` bytes is charged ``_counted_bound`` (one bincount), which is
  at least each term of the scan, and never decides a 413 or gives up spans where the scan would not;
* a body with few objects has each object's pairs checked as json parses it; where one repeats a
  key the body is parsed again the counting way, so the errors and their order are the same;
* a small reply goes out with its headers in one write.
"""

from __future__ import annotations

import json
import random
import socketserver

import pytest

from iro_fed.k8s import httpjson
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.httpjson import JsonBodyError, loads_strict, loads_with_spans
from iro_fed.k8s.testing import make_node, make_pod
from tests.k8s.test_g5_key_count import random_value, spaced
from tests.k8s.test_hard5_parse_budget import post_json


def corpus(seed: int, count: int) -> list[bytes]:
    """Random JSON bodies (escapes, quotes and colons in strings, characters past U+007F, every
    separator and whitespace), some with a key repeated, some made invalid."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        value = {"Pod": random_value(rng), "Nodes": {"items": [random_value(rng) for _ in range(rng.randint(0, 3))]}}
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, None, 1]),
                          separators=rng.choice([None, (",", ":"), (", ", " : ")]))
        if rng.random() < 0.3:
            text = spaced(rng, text)
        r = rng.random()
        if r < 0.15 and '"Pod"' in text:
            text = text.replace('"Pod"', '"Nodes": 1, "Pod"', 1)  # "Nodes" twice at the top
        elif r < 0.25:
            text = text[: rng.randint(1, max(len(text) - 1, 1))]  # cut short: invalid
        elif r < 0.3:
            text = text.replace("1", "1e999", 1)  # a number that overflows to infinity
        out.append(text.encode())
    return out


def outcome(parse, raw: bytes) -> tuple:
    try:
        result = parse(raw)
    except JsonBodyError as exc:
        return "error", str(exc), exc.field
    if isinstance(result, tuple):
        doc, spans = result
        texts = None if spans is None else [bytes(spans.text(k)) for k in range(len(spans.items))]
        return "ok", json.dumps(doc), texts
    return "ok", json.dumps(result)


@pytest.mark.parametrize("seed", range(6))
def test_the_pairs_check_gives_the_counts_answers(seed: int) -> None:
    checked = refused = 0
    for raw in corpus(seed, 120):
        for path in (None, ("Nodes", "items")):
            fast = outcome(lambda r, path=path: httpjson._loads(r, 100, path), raw)
            counted = outcome(lambda r, path=path: httpjson._loads(r, 100, path, pairs=False), raw)
            assert fast == counted, raw
            checked += 1
            refused += fast[0] == "error" and "duplicate field" in fast[1]
    assert checked == 240 and refused > 5  # repeated keys among them, refused both ways


def test_a_small_body_is_parsed_without_counting_its_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(raw: bytes) -> int:
        raise AssertionError("keys counted")

    pod = make_pod("web-0", cpu="1", memory="1Gi")
    raw = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": [f"node-{i}" for i in range(500)]}).encode()
    repeated = raw.replace(b'"Nodes": null', b'"Nodes": null, "Nodes": null')
    monkeypatch.setattr(httpjson, "_keys_by_colons", refuse)
    monkeypatch.setattr(httpjson, "_keys_in_text", refuse)
    assert loads_strict(raw) == json.loads(raw)
    assert loads_with_spans(raw, ("Nodes", "items"))[0] == json.loads(raw)
    monkeypatch.undo()  # a repeated key: parsed again with the count, which names it
    for parse in (loads_strict, lambda r: loads_with_spans(r, ("Nodes", "items"))):
        with pytest.raises(JsonBodyError) as err:
            parse(repeated)
        assert err.value.field == "Nodes" and "duplicate field" in str(err.value)


def test_a_repeated_key_in_a_walked_object_is_refused() -> None:
    # The objects along the spans' path are read by _walk itself, not by json's hook.
    raw = b'{"Nodes":{"items":[{"a":1}],"items":[]},"Pod":{}}'
    with pytest.raises(JsonBodyError) as err:
        loads_with_spans(raw, ("Nodes", "items"))
    assert err.value.field == "Nodes.items"


@pytest.mark.parametrize("seed", range(4))
def test_the_counted_bound_is_at_least_the_scan(seed: int) -> None:
    for raw in corpus(seed, 150):
        for keys in (False, True):
            bound = httpjson._counted_bound(raw, keys)
            scanned = httpjson._scan_all(raw, keys)
            assert all(b >= s for b, s in zip(bound, scanned, strict=True)), (raw, bound, scanned)


def test_the_counted_bound_of_an_extender_body_is_close_to_the_scan() -> None:
    pod = make_pod("web-0", cpu="1", memory="1Gi")
    raw = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": [f"node-{i:05d}" for i in range(500)]}).encode()
    values, need, copied = httpjson.parse_charge(raw, True, httpjson.MAX_PARSE_MEMORY)
    assert (values, need - values * httpjson.PARSE_VALUE_BYTES) == httpjson._counted_bound(raw, True)[:2]
    exact = httpjson.parse_estimates(raw)
    assert exact[1] + exact[2] <= need + copied <= 2 * (exact[1] + exact[2])


def test_a_large_body_or_one_near_the_limit_is_charged_the_scan() -> None:
    big = json.dumps({"items": ["x" * 100] * 400}).encode()
    assert len(big) > httpjson._COUNTED_BODY
    assert httpjson.parse_charge(big, True, httpjson.MAX_PARSE_MEMORY) == httpjson.parse_estimates(big)
    assert httpjson.parse_charge(big, False, httpjson.MAX_PARSE_MEMORY) == (*httpjson.parse_estimate(big), 0)
    escaped = json.dumps({"a": ['\\"' * 200] * 20}).encode()  # built strings: the bound is 6 bytes a byte
    bound = httpjson._counted_bound(escaped, True)
    bound_need = bound[0] * httpjson.PARSE_VALUE_BYTES + bound[1]
    exact = httpjson.parse_estimates(escaped)
    assert bound_need > exact[1]
    # A limit between the two: the scan's charge, so the body is not refused where it was served.
    limit = exact[1] + httpjson.decode_estimate(escaped, exact[1]) + exact[2]
    assert limit < bound_need
    assert httpjson.parse_charge(escaped, True, limit) == exact


class SmallLimit(ExtenderServer):
    max_parse_memory = 80_000  # a 16 KiB body's scan charges ~45 KB, its counted bound ~134 KB


def test_a_body_that_fits_by_the_scan_is_served_under_a_tight_limit() -> None:
    # With a backslash its counted bound is over the limit; the scan's estimate is under it.
    pod = make_pod("p", cpu="100m", annotations={"note": '\\"' * 4000})
    body = json.dumps({"Pod": pod, "Nodes": {"items": [make_node("n1")]}}).encode()
    assert len(body) <= httpjson._COUNTED_BODY
    bound = httpjson._counted_bound(body, True)
    assert bound[0] * httpjson.PARSE_VALUE_BYTES + bound[1] > SmallLimit.max_parse_memory
    srv = SmallLimit(Extender(), "127.0.0.1", 0, "/iro")
    srv.serve_in_thread()
    try:
        status, _, reply = post_json(srv.server_address[1], "/iro/filter", body, timeout=30)
        assert status == 200 and [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n1"], reply
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_small_reply_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[int] = []
    real = socketserver._SocketWriter.write

    def counted(self, b) -> int:
        writes.append(len(b))
        return real(self, b)

    srv = ExtenderServer(Extender(), "127.0.0.1", 0, "/iro")
    srv.serve_in_thread()
    try:
        body = json.dumps({"Pod": make_pod("p", cpu="100m"), "Nodes": {"items": [make_node("n1")]}}).encode()
        monkeypatch.setattr(socketserver._SocketWriter, "write", counted)
        status, headers, reply = post_json(srv.server_address[1], "/iro/filter", body, timeout=30)
        assert status == 200 and reply["Nodes"]["items"], reply
        assert len(writes) == 1 and writes[0] > int(headers["content-length"]), writes
    finally:
        monkeypatch.undo()
        srv.shutdown()
        srv.server_close()


def test_a_prioritize_reply_is_json_dumps_bytes() -> None:
    from iro_fed.k8s.extender import host_priority_list_json

    rng = random.Random(3)
    for _ in range(200):
        hosts = ["".join(rng.choice(['a', '-', '"', '\\', '\u00e9', '\u4e2d', '\U0001f600', '\n', '1'])
                         for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(0, 20))]
        result = [{"Host": h, "Score": rng.choice([0, 5, 10, 11, -1, 2**40])} for h in hosts]
        assert host_priority_list_json(result) == json.dumps(result).encode()
    # Not a prioritize result: None (json.dumps writes it)
    for odd in ({"Host": "a", "Score": 1}, [{"Host": "a", "Score": 1.5}], [{"Host": 1, "Score": 1}],
                [{"Host": "a", "Score": 1, "x": 2}], [{"Host": "a"}], [["a", 1]], [{"Host": "a", "Score": True}]):
        assert host_priority_list_json(odd) is None


def test_the_prioritize_reply_over_http_is_the_result() -> None:
    ext = Extender()
    srv = ExtenderServer(ext, "127.0.0.1", 0, "/iro")
    srv.serve_in_thread()
    try:
        nodes = {"items": [make_node(f"n{i}", cpu=str(2 + i)) for i in range(4)]}
        body = json.dumps({"Pod": make_pod("p", cpu="1"), "Nodes": nodes}).encode()
        status, _, reply = post_json(srv.server_address[1], "/iro/prioritize", body, timeout=30)
        assert status == 200
        assert reply == ext.prioritize(json.loads(body))
        assert [r["Host"] for r in reply] == ["n0", "n1", "n2", "n3"] and max(r["Score"] for r in reply) > 0
    finally:
        srv.shutdown()
        srv.server_close()
