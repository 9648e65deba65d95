"""A snapshot's Prometheus queries (7 by default, one after the other) share one overall deadline:
a server that answers each query just within the deadline of one request held the perception loop
for 7 x that deadline. Real HTTP servers on 127.0.0.1; the bounds are loose multiples of the
deadline, not exact times."""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from edge_agent.agent import Agent
from edge_agent.config import load_config
from iro_fed.metrics.prometheus import PrometheusClient, PrometheusUnavailable
from iro_fed.metrics.snapshot import build_snapshot as snapshot_within


@contextmanager
def serve(answer: Callable[[socketserver.StreamRequestHandler, threading.Event], None]) -> Iterator[str]:
    """A loopback HTTP server that reads each request's head and calls ``answer``; its URL."""
    stop = threading.Event()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            try:
                answer(self, stop)
            except OSError:  # the client gave up
                pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


ANSWER = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"node": "e1", "service": "shop"}, "value": [1.0, "2"]}]}}).encode()
TIMEOUT_S = 0.25  # prometheus.timeout_s; one request's deadline (and the snapshot's) is twice that
DEADLINE_S = 2 * TIMEOUT_S
PAD = 14  # bytes of leading white space, one every 0.025 s: each answer takes about 0.7 x DEADLINE_S


def slow(handler: socketserver.StreamRequestHandler, stop: threading.Event) -> None:
    """A good answer that takes most of one request's deadline: its body trickles (each byte well
    within the read timeout), then the JSON. One such answer is fine; seven in a row are not."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                        b"Connection: close\r\n\r\n" % (PAD + len(ANSWER)))
    for _ in range(PAD):
        if stop.wait(0.025):
            return
        handler.wfile.write(b" ")
        handler.wfile.flush()
    handler.wfile.write(ANSWER)


def healthy(handler: socketserver.StreamRequestHandler, stop: threading.Event) -> None:
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                        b"Connection: close\r\n\r\n%s" % (len(ANSWER), ANSWER))


def test_a_slow_prometheus_costs_a_snapshot_one_deadline_not_one_per_query() -> None:
    with serve(slow) as url:
        client = PrometheusClient(url, TIMEOUT_S)
        assert client.deadline_s == DEADLINE_S
        start = time.monotonic()
        with pytest.raises(PrometheusUnavailable, match="deadline") as err:
            snapshot_within(client)
        took = time.monotonic() - start
    # Before: 7 answers of about 0.35 s each, 2.45 s in all, and a snapshot.
    assert took < 3 * DEADLINE_S, f"the snapshot took {took:.2f} s"
    assert url in str(err.value)


def test_the_agents_perception_step_is_bounded_by_one_deadline(write_config: Callable[..., Any]) -> None:
    with serve(slow) as url:
        cfg = load_config(write_config(prometheus={"url": url, "scoring": "usage", "timeout_s": TIMEOUT_S}), env={})
        agent = Agent(cfg)
        try:
            start = time.monotonic()
            with pytest.raises(PrometheusUnavailable):
                agent._perception_step()
            took = time.monotonic() - start
        finally:
            agent.stop()
    assert took < 3 * DEADLINE_S, f"the snapshot took {took:.2f} s"
    assert agent.prometheus_state["up"] is False and "deadline" in agent.prometheus_state["last_error"]


def test_a_healthy_prometheus_still_answers_every_query_of_the_snapshot() -> None:
    with serve(healthy) as url:
        snap = snapshot_within(PrometheusClient(url, 5.0))
    usage = snap.nodes["e1"]
    assert (usage.cpu_millicores, usage.cpu_capacity_millicores) == (2000.0, 2000.0)
    assert snap.services["shop"].p99_latency_ms == 2000.0  # the last of the 7 queries was answered


def test_a_snapshot_past_its_deadline_sends_no_more_queries() -> None:
    asked: list[int] = []

    def slow_then_healthy(handler: socketserver.StreamRequestHandler, stop: threading.Event) -> None:
        asked.append(1)
        stop.wait(0.3)  # past the snapshot's 0.2 s deadline: every later query is one too many
        healthy(handler, stop)

    with serve(slow_then_healthy) as url:
        with pytest.raises(PrometheusUnavailable, match="overall 0.2 s deadline|overall deadline"):
            snapshot_within(PrometheusClient(url, 5.0), deadline_s=0.2)
    assert len(asked) == 1
