"""The extender waits for room in its body and parse budgets no longer than kube-scheduler waits
for its answer: a request that finds the parse budget full gets 503 within the extender's
``httpTimeout`` as deploy/ configures it, over real HTTP on 127.0.0.1.

Before: ``ExtenderServer`` set no ``budget_wait_s``, so such a request waited until its 30 s body
deadline, long after kube-scheduler (5 s) had given up on the call.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from iro_fed.k8s.extender import ExtenderServer
from iro_fed.k8s.httpjson import decode_estimate, parse_estimate
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.testing import wait_for
from tests.k8s.test_hard5_parse_budget import post_json
from tests.k8s.test_odds6_parse_budget import HoldingExtender

ROOT = Path(__file__).resolve().parents[2]
#: kube-scheduler's DefaultExtenderTimeout (pkg/scheduler/extender.go), used when httpTimeout is unset.
DEFAULT_EXTENDER_TIMEOUT_S = 5.0
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration(text: str) -> float:
    """Seconds in a Go duration such as ``5s``, ``1m30s`` or ``500ms``."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a Go duration: {text!r}"
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def deployed_extender() -> dict[str, Any]:
    """The IRO extender's entry in deploy/'s KubeSchedulerConfiguration."""
    config = yaml.safe_load((ROOT / "deploy/base/kube-scheduler-config.yaml").read_text())
    (ext,) = [e for e in config["extenders"] if e.get("bindVerb")]
    return ext


def deployed_timeout_s() -> float:
    """How long kube-scheduler waits for an extender call (its http.Client timeout, the body sent
    and the answer read included) as deploy/ configures it."""
    value = deployed_extender().get("httpTimeout")
    return go_duration(str(value)) if value else DEFAULT_EXTENDER_TIMEOUT_S


def test_the_deployed_timeout_is_read() -> None:
    assert go_duration("5s") == 5.0 and go_duration("1m30s") == 90.0 and go_duration("500ms") == 0.5
    assert 0 < deployed_timeout_s() <= 30


def test_the_extender_waits_for_room_no_longer_than_kube_scheduler_waits_for_it() -> None:
    timeout_s = deployed_timeout_s()
    wait = getattr(ExtenderServer, "budget_wait_s", None)  # a server attribute the handler reads
    # Before: None, so a body waited until its 30 s body deadline. A body of one read waits at
    # most twice (body room, then parse room) and still needs time for its own work.
    assert wait is not None and 2 * wait < timeout_s - 1.0
    assert ExtenderServer.body_timeout_s >= timeout_s  # what None meant: a wait past kube-scheduler's


@pytest.fixture
def srv() -> Iterator[ExtenderServer]:
    # The deployed server as it is (no limit changed), under deploy/'s URL prefix.
    prefix = urlsplit(deployed_extender()["urlPrefix"]).path
    server = ExtenderServer(HoldingExtender(), "127.0.0.1", 0, prefix)
    server.serve_in_thread()
    yield server
    server.extender.release.set()
    server.shutdown()
    server.server_close()


def need(raw: bytes) -> int:
    """What the server charges a body to its parse budget."""
    parsed = parse_estimate(raw)[1]
    return parsed + decode_estimate(raw, parsed)


def filter_args(name: str, commas: int = 0) -> bytes:
    """An ExtenderArgs (NodeList mode, one node) whose pod carries ``commas`` commas in an
    annotation: each is reckoned as a value to come (parse_estimate), so a few MiB of body
    take the parse budget without the memory."""
    pod = make_pod(name, annotations={"example.com/pad": "," * commas} if commas else None)
    return json.dumps({"Pod": pod, "Nodes": {"items": [make_node("n1")]}}).encode()


def holder_filling(limit: int, room: int) -> bytes:
    """The holder's body: alone under ``limit``, with less than ``room`` left beside it."""
    base = filter_args("hold")
    # what one comma in the annotation adds, averaged over 1,000 (the string it sits in counts too)
    commas = (limit - need(base)) * 1000 // (need(filter_args("hold", 2000)) - need(filter_args("hold", 1000)))
    while need(body := filter_args("hold", commas)) > limit:
        commas -= 1
    assert limit - need(body) < room
    return body


def second_request(verb: str) -> bytes:
    if verb == "bindVerb":
        return json.dumps({"PodName": "second", "PodNamespace": "default", "PodUID": "u-2", "Node": "n1"}).encode()
    return filter_args("second")


def post(srv: ExtenderServer, verb: str, body: bytes, timeout: float) -> tuple[int, dict[str, str], dict]:
    return post_json(srv.server_address[1], f"{srv.url_prefix}/{verb}", body, timeout=timeout)


@pytest.mark.parametrize("verb_key", ["filterVerb", "prioritizeVerb", "bindVerb"])
def test_a_request_that_finds_no_parse_room_is_answered_before_kube_scheduler_gives_up(
        srv: ExtenderServer, verb_key: str) -> None:
    ext = srv.extender
    verb = deployed_extender()[verb_key]
    timeout_s = deployed_timeout_s()
    second = second_request(verb_key)
    limit = srv.parse_budget.limit
    first = holder_filling(limit, need(second))
    assert len(first) < 8 << 20 and len(second) < 256 << 10  # the second is one read (one body-budget wait)
    result: list[Any] = []
    holder = threading.Thread(target=lambda: result.append(post(srv, deployed_extender()["filterVerb"], first, 60)))
    holder.start()
    try:
        assert ext.entered.wait(30), "the holding request never reached its filter"
        assert srv.parse_budget.held + need(second) > limit  # the parse budget has no room for it
        # kube-scheduler's client gives up after httpTimeout (the read timeout here).
        try:
            status, headers, reply = post(srv, verb, second, timeout_s)
        except TimeoutError:  # before: the body waited for room until its 30 s body deadline
            pytest.fail(f"no answer within httpTimeout ({timeout_s:g} s)")
        assert status == 503 and headers["retry-after"] == "1" and reply["field"] == "body", reply
        assert "parses at most about" in reply["Error"] and "retry" in reply["Error"], reply
    finally:
        ext.release.set()
        holder.join(60)
    assert result and result[0][0] == 200 and result[0][2]["Nodes"]["items"], result
    wait_for(lambda: srv.parse_budget.held == 0, timeout=10, what="the holder's share given back after its reply")
    status, _, reply = post(srv, verb, second, 60)  # kube-scheduler's retry, with room again
    assert status == 200, reply
    if verb_key == "bindVerb":  # started without a kubeconfig: it answers, and binds nothing
        assert "cannot bind" in reply["Error"], reply
    assert ext.stats_snapshot()["errors"] == 1  # the 503 is the server's error, not a bad request


def test_budget_wait_bounds_all_of_a_requests_waits_not_each() -> None:
    """A body waits once per 256 KiB read and again for its parse: each wait bounded alone let an
    8 MiB body wait 32 x budget_wait_s. A request that has used its allowance gets no more."""
    import threading
    import time
    from types import SimpleNamespace

    from iro_fed.k8s.httpjson import ByteBudget, RoutedJsonHandler

    budget = ByteBudget(10)
    assert budget.acquire(10, 0)  # another request holds it all
    request = SimpleNamespace(budget_wait_s=5.0, _budget_waited=0.0)
    release = threading.Timer(0.5, budget.release, args=(10,))
    release.start()
    try:
        # The first wait gets room once the other request lets go.
        assert RoutedJsonHandler._acquire(request, budget, 4, time.monotonic() + 30, 0)
        spent = request._budget_waited
        assert 0 < spent < 5.0
        assert budget.acquire(6, 0, 4)  # full again
        request._budget_waited = 5.0  # this request has waited its whole allowance
        later = threading.Timer(0.5, budget.release, args=(6,))
        later.start()
        # Before: another 5 s wait, which the release above would end with room (True).
        assert RoutedJsonHandler._acquire(request, budget, 1, time.monotonic() + 30, 4) is False
        later.join()
    finally:
        release.cancel()
