"""Review of the Prometheus client: duration parameters a real Prometheus accepts, answers that
are not HTTP or are cut short, and result shapes that are not Prometheus's JSON."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from iro_fed.metrics import PrometheusClient, PrometheusQueryError, PrometheusUnavailable


def test_fractional_timeout_and_exact_step_against_real_prometheus(run_prometheus):
    """Prometheus reads ``timeout`` as float seconds or whole units: "1.5s" was a 400 bad_data on
    every query (prometheus.timeout_s: 1.5 or 0.5 broke perception); ``step`` lost digits to :g."""
    prom = run_prometheus([])
    client = PrometheusClient(prom.url, timeout_s=1.5)
    [sample] = client.query("1")
    assert sample.value == 1.0 and sample.labels == {}
    [series] = client.query_range("1", 0, 2 * 1234567, step_s=1234567)
    assert [t for t, _ in series.points] == [0.0, 1234567.0, 2469134.0]


def _raw_server(answer: bytes) -> tuple[socket.socket, str]:
    """A TCP server on 127.0.0.1 that reads a request and writes ``answer``, then closes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def raw_server() -> Iterator:
    listeners: list[socket.socket] = []

    def start(answer: bytes) -> str:
        listener, url = _raw_server(answer)
        listeners.append(listener)
        return url

    yield start
    for listener in listeners:
        listener.close()


def _json_answer(doc: object) -> bytes:
    body = json.dumps(doc).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "BadStatusLine"),  # the URL names a port of another service
        (b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{"status":"success"', "IncompleteRead"),  # cut short
    ],
)
def test_broken_http_answers_are_unavailable(raw_server, answer, match):
    """http.client's own errors (not OSErrors) escaped as BadStatusLine / IncompleteRead."""
    url = raw_server(answer)
    client = PrometheusClient(url, timeout_s=2)
    with pytest.raises(PrometheusUnavailable, match=match):
        client.query("up")
    if match == "BadStatusLine":  # ready() reads no body: a cut-short one answers 200
        assert client.ready() is False  # raised BadStatusLine before


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"resultType": "vector", "result": [1]}, "expected a series object"),
        ({"resultType": "vector", "result": [{"metric": None, "value": [1, "1"]}]}, "expected a series object"),
        ({"resultType": "vector", "result": [{"metric": {}, "value": [1]}]}, r"expected a \[time, value\] pair"),
        ({"resultType": "vector", "result": [{"metric": {}, "value": ["x", "1"]}]}, "not a timestamp"),
        ({"resultType": "scalar", "result": ["x", "1"]}, "not a timestamp"),
    ],
)
def test_malformed_results_are_query_errors(raw_server, data, match):
    """The documented errors only: these raised AttributeError, TypeError or ValueError."""
    url = raw_server(_json_answer({"status": "success", "data": data}))
    with pytest.raises(PrometheusQueryError, match=match):
        PrometheusClient(url, timeout_s=2).query("up")


@pytest.mark.parametrize(
    ("result", "match"),
    [
        ([{"metric": {}, "values": [[1]]}], r"expected a \[time, value\] pair"),
        ([{"metric": {}, "values": {"a": 1}}], "expected a list of values"),
        ([None], "expected a series object"),
        (None, "expected a matrix"),
    ],
)
def test_malformed_range_results_are_query_errors(raw_server, result, match):
    url = raw_server(_json_answer({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    with pytest.raises(PrometheusQueryError, match=match):
        PrometheusClient(url, timeout_s=2).query_range("up", 0, 10, 1)


def test_special_values_and_native_histograms_stay_nan(raw_server):
    """Values are strings ("NaN", "+Inf"); a native-histogram sample has no float value."""
    data = {"resultType": "vector", "result": [
        {"metric": {"node": "a"}, "value": [10, "+Inf"]},
        {"metric": {"node": "b"}, "value": [10, "NaN"]},
        {"metric": {"node": "c"}, "histogram": [10, {"count": "1", "sum": "1", "buckets": []}]},
    ]}
    url = raw_server(_json_answer({"status": "success", "data": data}))
    samples = PrometheusClient(url, timeout_s=2).query("x")
    assert [s.labels["node"] for s in samples] == ["a", "b", "c"]
    assert samples[0].value == float("inf") and samples[1].value != samples[1].value
    assert samples[2].value != samples[2].value
