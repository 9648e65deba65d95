"""What all requests parse at once is bounded by a server's ``parse_budget`` (503 past it, as for
body bytes), and the decoded text (up to 4 bytes a character in CPython) is reckoned before
parsing, over real HTTP on 127.0.0.1 with concurrent clients in threads.

Before: ``max_parse_memory`` was per request, so ~20 extender bodies of 12 MiB, each reckoned just
under 512 MiB, parsed at once (~10 GB); and one emoji in a body made its text 4 times its size
(1 GiB for 256 MiB) with nothing reckoned for it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.testing import wait_for
from tests.k8s.test_hard5_parse_budget import post_json

LIMIT = 1 << 20  # max_parse_memory (and so the parse budget) of the test server


class HoldingExtender(Extender):
    """A real extender whose filter for the pod named "hold" waits (parsed body in hand) until the
    test lets it go: a request that holds its share of the parse budget for as long as needed."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if args["Pod"]["metadata"]["name"] == "hold":
            self.entered.set()
            self.release.wait(60)
        return super().filter(args)


class SmallExtender(ExtenderServer):
    max_parse_memory = LIMIT
    budget_wait_s = 0.2  # how long a body waits for parse room before its 503


@pytest.fixture
def srv() -> Iterator[SmallExtender]:
    server = SmallExtender(HoldingExtender(), "127.0.0.1", 0, "/iro")
    server.serve_in_thread()
    yield server
    server.extender.release.set()
    server.shutdown()
    server.server_close()


def args(name: str, pad: str = "") -> bytes:
    pod = make_pod(name, annotations={"example.com/pad": pad} if pad else None)
    return json.dumps({"Pod": pod, "Nodes": {"items": [make_node("n1")]}}, ensure_ascii=False).encode()


def post(srv: ExtenderServer, body: bytes) -> tuple[int, dict[str, str], dict]:
    return post_json(srv.server_address[1], "/iro/filter", body, timeout=60)


def parse_held(srv: ExtenderServer) -> int:
    budget = getattr(srv, "parse_budget", None)  # before: none, nothing bounded the parses at once
    return budget.held if budget is not None else 0


def test_concurrent_parses_are_bounded_by_the_servers_budget(srv: SmallExtender) -> None:
    ext = srv.extender
    holder_body = args("hold", "h" * 320_000)  # reckoned at ~0.6 of the budget (its string's contents counted)
    big = args("big", "b" * 250_000)  # under max_parse_memory alone, not beside the holder
    small = args("small")
    with ThreadPoolExecutor(8) as pool:
        try:
            holder = pool.submit(post, srv, holder_body)
            assert ext.entered.wait(30), "the holding request never reached its filter"
            assert parse_held(srv) > 600_000
            # Four at once while the holder parses: before, each alone passed and all were parsed
            # together; now they wait for room (budget_wait_s) and get a 503 to retry.
            for status, headers, reply in pool.map(lambda _: post(srv, big), range(4)):
                assert status == 503 and headers["retry-after"] == "1" and reply["field"] == "body", reply
                assert f"at most about {LIMIT} bytes" in reply["Error"] and "retry" in reply["Error"], reply
            # A body that fits beside the holder is served at once, and one over max_parse_memory
            # alone is a 413 at once, not a wait.
            status, _, reply = post(srv, small)
            assert status == 200 and [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n1"], reply
            status, _, reply = post(srv, args("huge", "x" * (LIMIT + 1)))
            assert status == 413 and reply["field"] == "body" and f"over the limit of {LIMIT} bytes" in reply["Error"]
            assert parse_held(srv) > 600_000  # the holder still holds its share
            ext.release.set()
            status, _, reply = holder.result(timeout=60)
            assert status == 200 and reply["Nodes"]["items"], reply
        finally:
            ext.release.set()  # a failed check must not leave the holder (and the pool) waiting
    wait_for(lambda: parse_held(srv) == 0, timeout=10, what="the holder's share given back after its reply")
    status, _, reply = post(srv, big)  # the retry now has room
    assert status == 200 and reply["Nodes"]["items"], reply
    wait_for(lambda: parse_held(srv) == 0 and srv.body_budget.held == 0, timeout=10, what="every share given back")
    stats = ext.stats_snapshot()
    assert stats["errors"] == 4 and stats["bad_requests"] == 1, stats  # the 503s are the server's, the 413 the client's


def test_the_parse_budget_defaults_to_max_parse_memory(srv: SmallExtender) -> None:
    assert post(srv, args("p"))[0] == 200
    assert srv.parse_budget.limit == LIMIT


@pytest.mark.parametrize("wide", ["\U0001f600", "\\ud83d\\ude00"], ids=["utf8", "escaped"])
def test_one_wide_character_is_reckoned_for_the_whole_text(srv: SmallExtender, wide: str) -> None:
    # ~0.35 MiB reckoned as ASCII; with one character past U+FFFF the text is 4 bytes a character
    # (and so is the string that holds it). Before: 200 after parsing ~3 MiB for a 0.3 MiB body.
    pad = "a" * 300_000
    body = args("p", pad + wide).replace(b"\\\\ud83d\\\\ude00", b"\\ud83d\\ude00")  # the escape as sent
    assert (b"\\ud83d" in body) == (wide != "\U0001f600")
    status, _, reply = post(srv, body)
    assert status == 413 and reply["field"] == "body", reply
    assert "once decoded and parsed" in reply["Error"] and f"over the limit of {LIMIT} bytes" in reply["Error"]
    # Latin-1 characters keep 1 byte each: the same body with an "é" is served.
    status, _, reply = post(srv, args("p", pad + "\u00e9"))
    assert status == 200, reply


def stored(s: str) -> int:
    """The bytes CPython stores ``s``'s characters in: 1, 2 or 4 a character, by the widest."""
    widest = max(map(ord, s))
    return len(s) * (1 if widest < 0x100 else 2 if widest < 0x10000 else 4)


# An emoji's body is parsed as escaped ASCII now: test_s2_ascii_parse reckons that case.
@pytest.mark.parametrize("text", ["plain ascii", "caf\u00e9", "\u4e2d\u6587",
                                  "\\ud83d\\ude00 escaped", "\\u2028 escaped", "\\u003c go's html escape"])
def test_decode_estimate_covers_the_text_and_its_widest_string(text: str) -> None:
    from iro_fed.k8s.httpjson import decode_estimate  # here: the old module had none (see the server test)

    raw = ('{"k":"' + text + "x" * 100_000 + '","n":[1,2]}').encode()
    decoded = raw.decode()
    string = json.loads(decoded)["k"]
    # The text, and what the string holds beyond one byte a character (that much is the body's).
    real = stored(decoded) + stored(string) - len(string)
    assert real <= decode_estimate(raw) <= 8 * len(raw)
    if raw.isascii() and b"\\u" not in raw or text == "caf\u00e9":
        assert decode_estimate(raw) == len(raw)  # no more than the text for 1-byte characters
