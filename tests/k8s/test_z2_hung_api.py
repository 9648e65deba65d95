"""Nothing waits for ever on an API server that stopped answering (a hung API server, or a proxy
that dropped the connection without closing it): the loopback API server's stall switch
(``FakeApiServer.stall``) reads a request and then sends nothing, and stops open watches.

Before: lists and watches had no client-side timeout (a reflector's cache silently stopped
changing, for good); the Lease calls had none either (a hung renew kept the elector in the call,
never giving leadership up, and a stop's release hung); the extender's bind waited 30 s by default
while kube-scheduler gives up on it after 5 s. Real HTTP on 127.0.0.1, the real client.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iro_fed.k8s.client import ClusterCache, Kube, Reflector
from iro_fed.k8s.leader import LeaderElector
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from tests.k8s.test_x4_api_timeouts import _start_extender, _stop, bind_over_http

LEASES = r"/leases"


def _wait(predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _in_thread(call: Callable[[], Any], timeout: float = 60.0) -> tuple[bool, Any]:
    """Run ``call`` in a daemon thread: (whether it ended within ``timeout``, its result or error);
    a call that hangs for good must fail the test, not hang it."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as exc:  # the outcome under test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return (not thread.is_alive()), (out[0] if out else None)


# --- reads -----------------------------------------------------------------------------------


@pytest.mark.parametrize("read", ["list_nodes", "list_pods", "node_metrics"])
def test_a_read_of_a_silent_api_server_fails_instead_of_waiting_for_ever(api: FakeApiServer, kube: Kube,
                                                                         read: str) -> None:
    api.add_node(make_node("n1"))
    kube.read_timeout_s = 0.5
    api.stall()
    ended, result = _in_thread(getattr(kube, read))
    assert ended, f"{read} still waits for a server that sends nothing"
    assert "timed out" in str(result), result  # urllib3's read timeout (after its 3 retries)
    assert api.stalled_requests >= 1
    api.resume()
    assert getattr(kube, read)() is not None  # answered again


def test_a_dead_watch_is_given_up_and_the_reflector_lists_and_watches_again(api: FakeApiServer, kube: Kube,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    api.add_node(make_node("n1"))
    reflector = Reflector(kube.core.list_node, "nodes", watch_timeout_s=1, read_timeout_s=1).start()
    try:
        assert reflector.synced.wait(30)
        assert api.wait_for(lambda: api.open_watches("nodes") == 1, timeout=30)
        with caplog.at_level(logging.WARNING, logger="iro_fed.k8s"):
            api.stall("^/api/v1/nodes$")  # the open watch goes silent, and so does every new request
            api.add_node(make_node("n2"))  # a change the dead watch never delivers
            # The silent watch is given up (after its timeoutSeconds plus a read's wait) and a
            # relist tried, which the stall holds too: the error is counted and logged.
            assert _wait(lambda: reflector.errors >= 1 and api.stalled_requests >= 2), \
                (reflector.errors, api.stalled_requests)
        assert "nodes: no answer from the API server in time" in caplog.text, caplog.text
        assert sorted(reflector.store) == ["n1"]
        api.resume()  # answered again: the reflector catches up by itself
        assert _wait(lambda: sorted(reflector.store) == ["n1", "n2"]), sorted(reflector.store)
        assert reflector.lists >= 2
    finally:
        reflector.stop()


def test_a_cache_whose_first_list_gets_no_answer_syncs_once_the_server_answers(api: FakeApiServer,
                                                                               kube: Kube) -> None:
    api.add_node(make_node("n1"))
    kube.read_timeout_s = 0.5
    api.stall("^/api/v1/nodes$")
    cache = ClusterCache(kube, watch_timeout_s=1).start()
    try:
        assert {cache.nodes.read_timeout_s, cache.pods.read_timeout_s} == {0.5}
        assert _wait(lambda: cache.nodes.errors >= 1), api.stalled_requests  # the list timed out
        assert not cache.nodes.synced.is_set()
        api.resume()
        assert cache.wait_synced(30)
        assert [n["metadata"]["name"] for n in cache.nodes.items()] == ["n1"]
    finally:
        cache.stop()


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5"])
def test_a_reflector_read_timeout_must_be_a_positive_number(kube: Kube, bad: Any) -> None:
    with pytest.raises(ValueError, match="read_timeout_s: must be a finite number of seconds > 0"):
        Reflector(kube.core.list_node, "nodes", read_timeout_s=bad)


# --- leader election --------------------------------------------------------------------------


def test_a_hung_renew_gives_leadership_up_and_the_elector_campaigns_again(api: FakeApiServer, kube: Kube) -> None:
    lost, started = threading.Event(), threading.Event()
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=3, renew_deadline=2, retry_period=0.2,
                      on_started=started.set, on_stopped=lost.set)
    assert a.lease_timeout_s == 1.0  # each Lease call: half the renew deadline
    a.start()
    try:
        assert a.wait_leader(30)
        started.clear()
        api.stall(LEASES)  # the next renew's GET gets no answer
        # Given up (on_stopped), not stuck in the call while counted as leader.
        assert lost.wait(30), "the elector still waits for the hung renew"
        assert not a.is_leader() and api.stalled_requests >= 1
        api.resume()
        assert started.wait(30) and a.wait_leader(30)  # the lease is still ours: renewed again
        assert a.transitions == 2
    finally:
        a.stop(release=False)


def test_a_stop_during_a_hung_api_server_returns_without_the_release(api: FakeApiServer, kube: Kube) -> None:
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=3, renew_deadline=2, retry_period=0.2).start()
    assert a.wait_leader(30)
    api.stall(LEASES)
    ended, result = _in_thread(a.stop)  # a clean stop releases the lease: its GET gets no answer
    assert ended, "stop() still waits for the release"
    assert result is None
    assert api.get("leases", "iro-system/l")["spec"]["holderIdentity"] == "a"  # not released: it expires


def test_a_lease_call_that_times_out_is_sent_once_with_the_clients_user_agent(api: FakeApiServer,
                                                                              kube: Kube) -> None:
    a = LeaderElector(kube, "l", "iro-system", "a", lease_duration=3, renew_deadline=2, retry_period=0.2)
    assert a._try()  # creates the lease
    assert {r["user_agent"] for r in api.requests if "/leases" in r["path"]} == {"iro-test"}
    api.stall(LEASES)
    ended, released = _in_thread(a.release)
    assert ended and released is False
    # One GET, not urllib3's 1 + 3 retries each waiting the timeout again (4 x 1 s past the 2 s deadline).
    assert api.stalled_requests == 1


# --- the extender's bind ----------------------------------------------------------------------


def test_the_extenders_default_bind_wait_ends_before_its_callers_timeout(api: FakeApiServer, kubeconfig: str,
                                                                          tmp_path: Path) -> None:
    api.add_node(make_node("n1"))
    pod = api.add_pod(make_pod("p"))
    # No --api-timeout-s: the bind waits 0.8 x the caller's 1.25 s, not Kube.write_timeout_s (30 s).
    proc = _start_extender(["--kubeconfig", kubeconfig, "--http-timeout-s", "1.25"], tmp_path / "ready")
    try:
        url = (tmp_path / "ready").read_text().strip()
        api.stall(r"/binding$")
        status, answer = bind_over_http(url, pod, "n1")
        assert status == 200 and api.stalled_requests == 1
        assert "failed (HTTP 0): ReadTimeoutError" in answer["Error"], answer
        waited = float(re.search(r"read timeout=([0-9.]+)", answer["Error"]).group(1))  # type: ignore[union-attr]
        assert 0 < waited <= 1.0, answer
    finally:
        out, _ = _stop(proc)
    assert "writes 1 s (default: 0.8 x the caller timeout, at most 30 s), watches 60 s" in out, out


def test_the_extenders_default_bind_wait_with_kubes_http_timeout(kubeconfig: str, tmp_path: Path) -> None:
    out, _ = _stop(_start_extender(["--kubeconfig", kubeconfig], tmp_path / "ready"))
    assert "writes 4 s (default: 0.8 x the caller timeout, at most 30 s), watches 60 s" in out, out
    out, _ = _stop(_start_extender(["--kubeconfig", kubeconfig, "--http-timeout-s", "3600"], tmp_path / "ready2"))
    assert "writes 30 s (default: 0.8 x the caller timeout, at most 30 s)" in out, out
    # Given, it is the operator's (below --http-timeout-s: tests/k8s/test_f1_timeouts.py).
    out, _ = _stop(_start_extender(["--kubeconfig", kubeconfig, "--http-timeout-s", "20", "--api-timeout-s", "12"],
                                   tmp_path / "ready3"))
    assert "writes 12 s, watches 60 s" in out, out


def test_the_api_clients_connections_keep_alive(api: FakeApiServer, kube: Kube) -> None:
    # TCP keepalive with client-go's timings: an idle watch's connection is not dropped silently by
    # a proxy, and a peer gone for good is noticed (the read timeouts above catch a hung server).
    kube.list_nodes()
    pool = kube.api.rest_client.pool_manager.connection_from_url(api.url)
    socks = [conn.sock for conn in list(pool.pool.queue) if conn is not None and conn.sock is not None]
    assert socks, "no pooled connection"
    for sock in socks:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
