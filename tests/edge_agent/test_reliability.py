"""The agent keeps serving when Prometheus is down: request-based scoring, said in /readyz and a metric."""

from __future__ import annotations

import socket
import time

from iro_fed.federated.procs import free_port


def test_prometheus_down_keeps_serving_with_requests(start_agent, http):
    port = free_port()  # nothing listens there
    agent, url = start_agent(prometheus={"url": f"http://127.0.0.1:{port}", "scoring": "usage", "timeout_s": 0.5,
                                         "refresh_interval_s": 0.1})
    deadline = time.monotonic() + 10
    while agent.prometheus_state["up"] is not False and time.monotonic() < deadline:
        time.sleep(0.05)
    status, ready = http("GET", f"{url}/readyz")
    assert status == 200 and ready["ready"] is True and ready["status"] == "degraded"
    assert ready["prometheus"]["up"] is False and "cannot connect" in ready["prometheus"]["last_error"]
    assert ready["scoring"] == "requests" and "prometheus unreachable: scoring with requests" in ready["degraded"]
    status, reply = http("POST", f"{url}/recommend", {"name": "w", "requests": {"cpu": 500}})
    assert status == 200 and reply["scoring"] == "requests" and reply["nodes"]
    assert "no usable snapshot" in reply["scoring_note"]
    metrics = http("GET", f"{url}/metrics")[1]
    assert 'iro_agent_dependency_up{dependency="prometheus"} 0.0' in metrics
    assert "iro_agent_load_aware_active 0.0" in metrics
    failures = agent.metrics.dependency_failures.labels("prometheus")._value.get()
    assert failures >= 1


def test_stop_closes_idle_keepalive_and_lets_a_half_sent_request_finish(start_agent, wait_for):
    import http.client
    import threading

    agent, url = start_agent(listen={"request_timeout_s": 60})
    idle = http.client.HTTPConnection("127.0.0.1", agent.port, timeout=30)
    idle.request("GET", "/healthz")
    assert idle.getresponse().read()  # keep-alive connection, now idle (like a Prometheus scraper)
    half = socket.create_connection(("127.0.0.1", agent.port), timeout=30)
    body = b'{"name": "w", "requests": {"cpu": 100}}'
    half.sendall(b"POST /recommend HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
    wait_for(lambda: agent.server.open_connections() == 2)  # accepted (the stop closes the listening socket)
    stopper = threading.Thread(target=agent.stop)
    stopper.start()
    assert idle.sock.recv(1) == b""  # the idle one is closed at once (not after the 60 s request timeout)
    half.sendall(body[10:])  # the request in flight is read to its end and answered
    reply = b""
    while chunk := half.recv(65536):
        reply += chunk
    stopper.join(30)
    assert not stopper.is_alive()
    assert reply.startswith(b"HTTP/1.1 200") and b"Connection: close" in reply
    assert agent.store._closed
    half.close()
    idle.close()


def test_connections_are_bounded(start_agent, http):
    from http.client import HTTPConnection

    agent, url = start_agent(listen={"max_connections": 2})
    held = []
    for _ in range(2):
        c = HTTPConnection("127.0.0.1", agent.port, timeout=10)
        c.request("GET", "/healthz")
        assert c.getresponse().read()
        held.append(c)  # kept open (keep-alive): both slots taken
    status, reply = http("GET", f"{url}/healthz")
    assert status == 503 and "listen.max_connections" in reply["error"]
    held[0].close()
    deadline = time.monotonic() + 10
    while http("GET", f"{url}/healthz")[0] != 200:  # a slot frees once the server sees the close
        assert time.monotonic() < deadline
        time.sleep(0.05)
    held[1].close()


def test_a_prometheus_that_answers_but_fails_the_read_is_not_called_unreachable(start_agent, http):
    """A reachable Prometheus whose answers cannot be read (here: 400 bad_data for every query,
    as a rejected query override gets) is reported with the reason, not as unreachable."""
    import json

    from tests.metrics.test_snapshot import serve

    server, prometheus = serve(400, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode())
    try:
        agent, url = start_agent(prometheus={"url": prometheus, "scoring": "usage", "timeout_s": 2, "refresh_interval_s": 0.1})
        deadline = time.monotonic() + 10
        while agent.prometheus_state["up"] is not False and time.monotonic() < deadline:
            time.sleep(0.05)
        status, ready = http("GET", f"{url}/readyz")
    finally:
        server.shutdown()
    reasons = [d for d in ready["degraded"] if d.startswith("prometheus")]
    assert len(reasons) == 1 and reasons[0].startswith("prometheus read failed (PrometheusQueryError"), reasons
