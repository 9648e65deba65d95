"""A large request body is parsed and answered with the cyclic GC paused (json makes millions of
containers, none in a cycle, and the collections walked the half-built document again and again:
most of the parse time of a 5,000-node NodeList), and the GC is on again once the request is done;
the pause is shared by threads and never kept on for good. Over real HTTP on 127.0.0.1.

Before: the GC ran all along. A 5,000-node NodeList filter (87 MiB) took 2.4-5.4 s end to end on
loopback on a shared 2-CPU machine (median 2.9 s), 1.7-3.0 s with the pause (median 1.9 s), with
byte-identical replies.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest

from iro_fed.k8s import httpjson
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.httpjson import loads_strict
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.testing import wait_for
from tests.k8s.helpers import serving
from tests.k8s.test_hard5_parse_budget import raw_post

PAUSE_AT = getattr(httpjson, "_GC_PAUSE_CHARS", 1 << 20)  # a body this long is parsed with the GC paused


class RecordingExtender(Extender):
    """A real extender that notes whether the cyclic GC was on while it filtered."""

    def __init__(self) -> None:
        super().__init__()
        self.gc_on: list[bool] = []

    def filter(self, args: Any) -> dict[str, Any]:
        self.gc_on.append(gc.isenabled())
        return super().filter(args)


@pytest.fixture
def serve() -> Iterator:
    yield from serving(lambda: ExtenderServer(RecordingExtender(), "127.0.0.1", 0, "/iro"))


def args_body(nodes: int, padding: int = 0) -> bytes:
    items = [make_node(f"n{i}") for i in range(nodes)]
    items[0]["metadata"]["annotations"] = {"example.com/padding": "x" * padding}
    return json.dumps({"Pod": make_pod("p"), "Nodes": {"items": items}}).encode()


def test_a_large_body_is_parsed_and_answered_with_the_gc_paused(serve) -> None:
    server = serve()
    small, large = args_body(3), args_body(3, padding=PAUSE_AT)
    assert gc.isenabled()
    for body in (small, large, small):
        status, reply = raw_post(server.server_address[1], "/iro/filter", body)
        assert status == 200 and [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n0", "n1", "n2"], reply
        wait_for(gc.isenabled, what="the GC on again after the request")  # set once the reply is out
    # Before: [True, True, True].
    assert server.extender.gc_on == [True, False, True]


def test_the_pause_is_shared_and_ends_with_the_last_parse() -> None:
    pause = httpjson._GcPause()
    assert gc.isenabled()
    try:
        assert pause.enter() and not gc.isenabled()
        assert pause.enter()  # a second parse at once
        pause.leave()
        assert not gc.isenabled()  # the first is still parsing
        pause.leave()
        assert gc.isenabled()
    finally:
        gc.enable()


def test_parses_in_a_row_do_not_keep_the_gc_off() -> None:
    pause = httpjson._GcPause()
    try:
        assert pause.enter()
        pause._since -= httpjson._GC_PAUSE_MAX_S + 1  # as if it had been off that long
        assert not pause.enter()  # this parse runs as things are, and is not waited for
        pause.leave()
        assert gc.isenabled()
    finally:
        gc.enable()


def test_a_gc_turned_off_elsewhere_stays_off() -> None:
    pause = httpjson._GcPause()
    gc.disable()
    try:
        assert not pause.enter()
        assert not gc.isenabled()
    finally:
        gc.enable()


def collections_during(parse: Any) -> int:
    """How many collections of the cyclic GC ran while ``parse()`` ran."""
    runs: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.collect()
    gc.callbacks.append(note)
    try:
        parse()
    finally:
        gc.callbacks.remove(note)
    return len(runs)


def test_loads_strict_parses_a_large_text_without_collections() -> None:
    doc = {"items": [{"a": [i, str(i)]} for i in range(120_000)]}
    raw = json.dumps(doc).encode()
    assert len(raw) >= PAUSE_AT
    # Before: hundreds (a collection every 700 containers made, 240,000 of them here).
    assert collections_during(lambda: loads_strict(raw)) == 0
    assert gc.isenabled() and loads_strict(raw) == doc
    small = json.dumps({"items": [[i] for i in range(5_000)]}).encode()
    assert len(small) < PAUSE_AT
    assert collections_during(lambda: loads_strict(small)) > 0  # a small text parses as it always did
