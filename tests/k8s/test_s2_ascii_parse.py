"""A body with a few characters past U+00FF is parsed as ASCII text with them escaped (the same
document, the same errors), so one such character no longer makes the whole text 2 or 4 bytes a
character; the servers make their parse budget in ``__init__``; the webhook waits for budget room
no longer than the API server waits for it. Over real HTTP(S) on 127.0.0.1 where a server is involved.

Before: one Chinese annotation in a NodeList-mode ExtenderArgs of 5,000 kubelet Nodes (87 MiB) was
reckoned at 590 MiB (the decoded text at 2 bytes a character: 174 MiB) and refused with a 413,
where the ASCII one (417 MiB) was served; the parse budget was made by the first request to need
it; the webhook's body waited for room until its 10 s body deadline, past the API server's 5 s.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.httpjson import JsonBodyError, decode_estimate, loads_strict, parse_estimate
from iro_fed.k8s.testing import make_pod
from iro_fed.k8s.webhook import Webhook, WebhookServer
from tests.k8s.helpers import extender_server, serving, tls_files  # noqa: F401 (the ext and tls fixtures)
from tests.k8s.test_hard5_parse_budget import node_list_args, post_json, raw_post

ROOT = Path(__file__).resolve().parents[2]
CJK = "\u4e2d\u6587"  # "Chinese": 2 characters stored at 2 bytes each, 3 bytes each in UTF-8


def with_annotation(body: bytes, text: str) -> bytes:
    """``body`` (:func:`node_list_args`) with one annotation more on its first node."""
    marker = b'"node.alpha.kubernetes.io/ttl": "0"'
    assert body.count(marker) > 0
    return body.replace(marker, marker + f', "example.com/note": "{text}"'.encode(), 1)


def node_names(reply: dict) -> list[str]:
    return [n["metadata"]["name"] for n in reply["Nodes"]["items"]]


def test_a_nodelist_with_one_chinese_annotation_is_served_as_the_ascii_one(ext: ExtenderServer) -> None:
    body = node_list_args(5000)
    plain, wide = with_annotation(body, "note"), with_annotation(body, CJK)
    del body
    status, reply = raw_post(ext.server_address[1], "/iro/filter", plain)
    assert status == 200 and len(reply["Nodes"]["items"]) == 5000, reply.get("Error")
    status, wide_reply = raw_post(ext.server_address[1], "/iro/filter", wide)
    # Before: 413, "... would take about 590 MiB once decoded and parsed, over the limit of 536870912 bytes".
    assert status == 200, wide_reply
    assert node_names(wide_reply) == node_names(reply)
    assert wide_reply["FailedNodes"] == reply["FailedNodes"] and not wide_reply.get("Error")
    assert wide_reply["Nodes"]["items"][0]["metadata"]["annotations"]["example.com/note"] == CJK
    # The text is reckoned as it is parsed: ASCII, 6 bytes longer than the body ("\uXXXX" twice),
    # and what the one string holding the characters may take at 2 bytes each (its own length).
    parsed = parse_estimate(wide)[1]
    assert decode_estimate(wide, parsed) == (len(wide) + 6) + len(f'"{CJK}"'.encode()) - 1
    assert decode_estimate(plain, parsed) == len(plain)


def parse_peak(raw: bytes) -> int:
    tracemalloc.start()
    try:
        loads_strict(raw)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("wide", ["\u00e9\u4e2d", "\U0001f600"], ids=["bmp", "astral"])
def test_one_wide_character_takes_the_memory_of_an_ascii_one(wide: str) -> None:
    # 4 MiB of short strings and one wide character: the text json parses stays 1 byte a character.
    items = [f"value-{i:05d}" for i in range(300_000)]
    plain = json.dumps({"note": "xx", "items": items}).encode()
    body = json.dumps({"note": wide, "items": items}, ensure_ascii=False).encode()
    assert len(body) > 4 << 20
    extra = parse_peak(body) - parse_peak(plain)
    # Before: the whole text was decoded at the widest character's 2 or 4 bytes: 4 or 12 MiB more.
    assert extra < len(body) // 16, f"{extra >> 10} KiB more for one {wide!r}"


def stored(s: str) -> int:
    """The bytes CPython stores ``s``'s characters in: 1, 2 or 4 a character, by the widest."""
    widest = max(map(ord, s))
    return len(s) * (1 if widest < 0x100 else 2 if widest < 0x10000 else 4)


def ascii_length(s: str) -> int:
    """``s`` in ASCII with JSON escapes: 6 characters for one past U+007F, 12 (a pair) past U+FFFF."""
    return sum(1 if ord(c) < 0x80 else 6 if ord(c) < 0x10000 else 12 for c in s)


@pytest.mark.parametrize("text", ["plain ascii", "caf\u00e9", "\u4e2d\u6587", "emoji \U0001f600",
                                  "\\ud83d\\ude00 escaped", "\\u2028 escaped", "\u4e2d" * 60_000, "\U0001f600" * 30_000])
def test_decode_estimate_covers_the_text_parsed_and_its_widest_string(text: str) -> None:
    raw = ('{"k":"' + text + "x" * 100_000 + '","n":[1,2]}').encode()
    decoded = raw.decode()
    string = json.loads(decoded)["k"]
    # The text json parses: ASCII with escapes where that is smaller than the decoded text (the
    # first four: one wide character; not the last two), and what the string holds beyond one
    # byte a character. Before, the text was always the decoded one: 4 times the body for an emoji.
    parsed_text = min(stored(decoded), ascii_length(decoded)) if max(decoded) > "\xff" else len(decoded)
    real = parsed_text + stored(string) - len(string)
    estimate = decode_estimate(raw, parse_estimate(raw)[1])
    assert real <= estimate <= 8 * len(raw)


def piece_crossing(text: str) -> str:
    """``text`` around where a body is cut into pieces to escape (every 256 KiB)."""
    return "a" * ((256 << 10) - 20) + text + "b" * 40


DOCS: list[Any] = [
    {"k": "plain", "n": [1, 2.5, -3, True, None]},
    {"caf\u00e9": "\u00fcber \u00f1", "\u4e2d": "\u6587\u5b57"},
    {"emoji": "\U0001f600 and \U0001f680", "mixed": "\u00e9\u4e2d\U0001f600\x7f"},
    {"escapes": 'quote " backslash \\ slash / \b\f\n\r\t \x01 \x1f', "wide": "\\\u4e2d \\\\\U0001f600"},
    {"long": piece_crossing("\\\\\u4e2d\\\"\U0001f600\u00e9"), "after": ["\u6587"] * 3},
    ["\u4e2d" * 100_000, "\\" * 7 + "\u00e9", {"\U0001f600": {"\u4e2d": [1, {"x": "\u00e9"}]}}],
]


@pytest.mark.parametrize("doc", DOCS, ids=range(len(DOCS)))
@pytest.mark.parametrize("ensure_ascii", [False, True], ids=["utf8", "escaped"])
@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "indented"])
def test_the_document_is_the_one_sent(doc: Any, ensure_ascii: bool, indent: int | None) -> None:
    raw = json.dumps(doc, ensure_ascii=ensure_ascii, indent=indent).encode()
    parsed = loads_strict(raw)
    assert parsed == json.loads(raw) == doc
    assert json.dumps(parsed) == json.dumps(doc)  # the same characters, not only equal values


def old_error(raw: bytes) -> str:
    """The message for ``raw`` when it was parsed from ``raw.decode()``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"body: not UTF-8 (byte {exc.start}: {exc.reason})"
    with pytest.raises(ValueError) as info:
        json.loads(text)
    return f"body: not valid JSON: {info.value}"


INVALID = [
    '{"a": "\u4e2d\x01"}',  # a raw control after a wide character (escaped, it would be valid)
    '{"a": "\u4e2d\\\u00e9"}',  # "\" before a wide character: an invalid escape ("\\u00e9" would be valid)
    '{"a": "\\\\\\\U0001f600"}',  # an odd run of them
    '{"a": "\u4e2d",\n "b": [1,,2]}',  # the column and character counted in characters sent
    '["\u4e2d"] \u00e9',  # extra data
    '[\u4e2d]',  # a wide character outside a string
    '"\u4e2d\U0001f600',  # a string left open at the end
    '{"\u4e2d": 1, "b": tru}',
    '\ufeff{"a": "\u4e2d"}',  # a BOM
    '{"a": "\u4e2d", "b": "' + piece_crossing('\\\u6587') + '"}',
    '["' + piece_crossing("\u4e2d") + '", x]',
]


@pytest.mark.parametrize("text", INVALID, ids=range(len(INVALID)))
def test_invalid_json_is_named_as_before(text: str) -> None:
    raw = text.encode()
    with pytest.raises(JsonBodyError) as info:
        loads_strict(raw)
    assert str(info.value) == old_error(raw)


@pytest.mark.parametrize("bad", [b"\xff", b"\xe4\xb8", b"\xc3(", b"\xed\xa0\x80", b"\xf0\x9f\x98"],
                         ids=["start", "cut", "continuation", "surrogate", "cut-astral"])
@pytest.mark.parametrize("where", [10, (256 << 10) - 1, 300_000])
def test_invalid_utf8_is_refused_as_before(bad: bytes, where: int) -> None:
    raw = json.dumps({"a": "\u4e2d" + "x" * 400_000}, ensure_ascii=False).encode()
    raw = raw[:where] + bad + raw[where:]
    with pytest.raises(JsonBodyError) as info:
        loads_strict(raw)
    assert str(info.value) == old_error(raw)
    assert str(info.value).startswith("body: not UTF-8")


def test_invalid_utf8_after_a_wide_character_is_a_400_as_before(ext: ExtenderServer) -> None:
    body = json.dumps({"Pod": make_pod("p", annotations={"n": CJK}), "Nodes": {"items": []},
                       "pad": "x" * 600_000}, ensure_ascii=False).encode()
    body = body.replace(b"xxxxx", b"xx\xffxx", 1)
    status, reply = raw_post(ext.server_address[1], "/iro/filter", body)
    assert status == 400 and reply["field"] == "body", reply
    assert reply["Error"] == old_error(body)


# --- the parse budget is made with the server ------------------------------------------------------


class TotalExtender(ExtenderServer):
    max_parse_total = 3 << 20


def test_the_extender_makes_its_parse_budget_in_init() -> None:
    srv = ExtenderServer(Extender(), "127.0.0.1", 0)
    small = TotalExtender(Extender(), "127.0.0.1", 0)
    try:
        # Before: none until a first request made one (under a lock).
        assert getattr(srv, "parse_budget", None) is not None
        assert srv.parse_budget.limit == srv.max_parse_memory and srv.parse_budget.held == 0
        assert small.parse_budget.limit == 3 << 20
    finally:
        srv.server_close()
        small.server_close()


def test_the_webhook_makes_its_parse_budget_in_init(tls) -> None:
    srv = WebhookServer(Webhook(), tls[0], tls[1], "127.0.0.1", 0)
    try:
        assert getattr(srv, "parse_budget", None) is not None
        assert srv.parse_budget.limit == srv.max_parse_memory and srv.parse_budget.held == 0
    finally:
        srv.server_close()


def test_the_budget_made_in_init_is_the_one_requests_hold(ext: ExtenderServer) -> None:
    budget = ext.parse_budget
    status, _ = raw_post(ext.server_address[1], "/iro/filter", node_list_args(2))
    assert status == 200 and ext.parse_budget is budget


# --- the webhook's wait for budget room ------------------------------------------------------------


def deployed_webhook() -> tuple[float, float]:
    """(timeoutSeconds, --budget-s) of the webhook in deploy/."""
    text = (ROOT / "deploy/base/webhook.yaml").read_text()
    return (float(re.search(r"timeoutSeconds:\s*(\d+)", text).group(1)),  # type: ignore[union-attr]
            float(re.search(r"--budget-s=([0-9.]+)", text).group(1)))  # type: ignore[union-attr]


def test_the_webhook_waits_for_room_no_longer_than_the_api_server_waits_for_it() -> None:
    timeout_s, budget_s = deployed_webhook()
    wait = WebhookServer.budget_wait_s
    # Before: None, so a body waited until its 10 s body deadline.
    # budget_wait_s bounds all of a request's waits (body room, then parse room), before budget_s.
    assert wait is not None and wait + budget_s < timeout_s
    assert WebhookServer.body_timeout_s >= timeout_s  # what None meant: a wait past the API server's


class HoldingWebhook(Webhook):
    """A real webhook whose review of the pod named "hold" waits (its parse share held) until let go."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def review(self, doc: Any) -> dict[str, Any]:
        if doc["request"]["object"]["metadata"]["name"] == "hold":
            self.entered.set()
            self.release.wait(60)
        return super().review(doc)


def dense_review(name: str) -> bytes:
    """A 3 MiB AdmissionReview of a pod with a value every 10 bytes: ~38 MiB reckoned parsed."""
    pod = make_pod(name)
    pod["spec"]["containers"][0]["args"] = ["abcdefg"] * 290_000
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "operation": "CREATE", "namespace": "default", "object": pod}},
                      separators=(",", ":")).encode()


@pytest.fixture
def serve_holding(tls) -> Iterator:
    yield from serving(lambda: WebhookServer(HoldingWebhook(), tls[0], tls[1], "127.0.0.1", 0))


def post_review(srv: WebhookServer, cafile: str, body: bytes, timeout: float) -> tuple[int, dict[str, str], dict]:
    return post_json(srv.server_address[1], "/mutate", body, ssl.create_default_context(cafile=cafile), timeout)


def test_a_pod_that_finds_no_parse_room_is_answered_before_the_api_server_gives_up(serve_holding, tls) -> None:
    srv = serve_holding()
    hook = srv.webhook
    timeout_s, _ = deployed_webhook()
    first, second = dense_review("hold"), dense_review("second")
    assert 3 << 20 > len(first) > 2_900_000
    parsed = parse_estimate(first)[1]
    assert parsed < srv.max_parse_memory < 2 * parsed  # one parses alone, two do not fit at once
    result: list[Any] = []
    holder = threading.Thread(target=lambda: result.append(post_review(srv, tls[0], first, 60)))
    holder.start()
    try:
        assert hook.entered.wait(30), "the first review never started"
        # The API server waits timeoutSeconds for the call (the client's read timeout here).
        # Before: no answer within it (the body waited for room up to its 10 s deadline).
        status, headers, reply = post_review(srv, tls[0], second, timeout_s)
        assert status == 503 and headers["retry-after"] == "1" and reply["field"] == "body", reply
        assert "retry" in reply["message"]
    finally:
        hook.release.set()
        holder.join(60)
    assert result and result[0][0] == 200, result
    status, _, reply = post_review(srv, tls[0], second, 60)  # its retry, with room again
    assert status == 200 and reply["response"]["allowed"] is True, reply
