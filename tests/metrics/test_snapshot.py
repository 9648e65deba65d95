"""Load-aware scoring from a snapshot, and the client's errors against loopback servers."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import solvers
from iro_fed.metrics import (
    ClusterSnapshot,
    NodeUsage,
    PrometheusClient,
    PrometheusQueryError,
    PrometheusUnavailable,
    SnapshotQueries,
    load_aware_problem,
)
from iro_fed.metrics.local import LocalCollector
from iro_fed.model import ClusterState
from iro_fed.problem_io import problem_from_dict


def cluster():
    # Two equal nodes; by requests "busy" looks emptier (1 core) than "quiet" (4 cores), but it
    # really burns 7 cores while "quiet" idles at 0.5.
    return problem_from_dict({
        "domains": [{"name": "d"}],
        "nodes": [
            {"name": "busy", "domain": "d", "capacity": {"cpu": 8000, "memory": 16384}, "allocated": {"cpu": 1000, "memory": 2048}},
            {"name": "quiet", "domain": "d", "capacity": {"cpu": 8000, "memory": 16384}, "allocated": {"cpu": 4000, "memory": 4096}},
        ],
        "workloads": [{"name": "w", "requests": {"cpu": 500, "memory": 512}}],
    })


SNAP = ClusterSnapshot(taken_at=0.0, nodes={
    "busy": NodeUsage(cpu_millicores=7000.0, memory_mib=3000.0),
    "quiet": NodeUsage(cpu_millicores=500.0, memory_mib=20000.0),  # over capacity: clipped
    "gone": NodeUsage(cpu_millicores=1.0),  # not in the problem: ignored
})


def test_load_aware_problem_modes():
    p = cluster()
    same, n = load_aware_problem(p, SNAP, "requests")
    assert same is p and n == 0
    usage, n = load_aware_problem(p, SNAP, "usage")
    assert n == 2 and usage.allocated.tolist() == [[7000.0, 3000.0], [500.0, 16384.0]]
    mx, _ = load_aware_problem(p, SNAP, "max")
    assert mx.allocated.tolist() == [[7000.0, 3000.0], [4000.0, 16384.0]]
    assert p.allocated.tolist() == [[1000.0, 2048.0], [4000.0, 4096.0]]  # the original is untouched
    partial, n = load_aware_problem(p, ClusterSnapshot(0.0, {"busy": NodeUsage(memory_mib=100.0)}), "usage")
    assert n == 1 and partial.allocated.tolist() == [[1000.0, 100.0], [4000.0, 4096.0]]
    assert load_aware_problem(p, ClusterSnapshot(0.0), "usage") == (p, 0)
    with pytest.raises(ValueError, match="scoring: must be one of"):
        load_aware_problem(p, SNAP, "guess")


def test_load_aware_changes_what_solvers_choose():
    """Trimaran-style: with usage, a least-allocated scorer avoids the node that is really busy."""
    p = cluster()
    usage, _ = load_aware_problem(p, ClusterSnapshot(0.0, {k: NodeUsage(cpu_millicores=v.cpu_millicores)
                                                          for k, v in SNAP.nodes.items()}), "usage")
    pick = {}
    for name, prob in (("requests", p), ("usage", usage)):
        top = solvers.make("kube-default", seed=0).rank(ClusterState(prob), 0, 2)
        pick[name] = prob.nodes[top[0][0]].name
    assert pick == {"requests": "busy", "usage": "quiet"}


def test_snapshot_queries_from_dict():
    q = SnapshotQueries.from_dict({"cpu_used_cores": "x", "node_label": "instance"})
    assert q.cpu_used_cores == "x" and q.node_label == "instance" and q.service_qps == SnapshotQueries().service_qps
    with pytest.raises(ValueError, match="queries.cpu: unknown query"):
        SnapshotQueries.from_dict({"cpu": "x"})
    with pytest.raises(ValueError, match="queries.service_qps: expected a PromQL string"):
        SnapshotQueries.from_dict({"service_qps": 3})


class _Canned(BaseHTTPRequestHandler):
    status = 200
    body = b"{}"

    def do_GET(self):  # noqa: N802
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def serve(status: int, body: bytes):
    handler = type("H", (_Canned,), {"status": status, "body": body})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    ("status", "body", "error", "match"),
    [
        (503, b"overloaded", PrometheusUnavailable, "HTTP 503 overloaded"),
        (400, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode(),
         PrometheusQueryError, "bad_data: parse error"),
        (200, b"<html>", PrometheusQueryError, "not JSON"),
        (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(),
         PrometheusQueryError, "expected an instant vector"),
    ],
)
def test_client_errors(status, body, error, match):
    server, url = serve(status, body)
    try:
        with pytest.raises(error, match=match):
            PrometheusClient(url, timeout_s=2).query("up")
    finally:
        server.shutdown()
        server.server_close()


def test_client_timeout_on_a_server_that_never_answers():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the TCP connection, never answers
    try:
        with pytest.raises(PrometheusUnavailable, match="no answer within 0.3 s"):
            PrometheusClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.3).query("up")
    finally:
        listener.close()


def test_client_rejects_bad_settings():
    with pytest.raises(ValueError, match="prometheus url"):
        PrometheusClient("localhost:9090")
    with pytest.raises(ValueError, match="timeout_s"):
        PrometheusClient("http://x:1", timeout_s=0)


def test_local_collector_reads_the_node():
    psutil = pytest.importorskip("psutil")
    c = LocalCollector()
    a = c.collect()
    b = c.collect()
    assert a.cpu_capacity_cores == psutil.cpu_count(logical=True)
    assert 0 <= b.cpu_used_cores <= b.cpu_capacity_cores
    assert 0 < b.memory_used_bytes <= b.memory_capacity_bytes == psutil.virtual_memory().total
    assert b.disk_read_ops_total >= a.disk_read_ops_total and b.net_rx_bytes_total >= a.net_rx_bytes_total
    assert b.disk_iops >= 0 and np.isfinite(b.net_tx_bytes_per_s)
    assert set(b.to_dict()) >= {"cpu_used_cores", "memory_used_bytes", "disk_iops", "net_rx_bytes_per_s"}
