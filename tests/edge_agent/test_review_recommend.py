"""Review of /recommend's request wrapper and of node discovery from Prometheus."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from edge_agent.agent import Agent
from edge_agent.config import load_config

WEB = {"name": "web", "requests": {"cpu": 500, "memory": 512}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"workload": WEB, "kk": 1}, "kk"),  # a typo of k: 3 results came back, no word of it
        ({"pod": {"metadata": {"name": "p"}, "spec": {"containers": [{}]}}, "top_k": 1}, "top_k"),
        ({"workload": WEB, "pod": {"metadata": {"name": "p"}, "spec": {"containers": [{}]}}}, "workload"),  # pod won
    ],
)
def test_wrapper_fields_other_than_pod_workload_k_are_400(start_agent, http, body, field):
    _, url = start_agent(store={"path": None})
    status, reply = http("POST", f"{url}/recommend", body)
    assert status == 400 and reply["field"] == field, reply
    status, reply = http("POST", f"{url}/recommend", {"workload": WEB, "k": 1})
    assert status == 200 and len(reply["nodes"]) == 1


# --- node discovery with one bad series ------------------------------------------------------------

GOOD_CPU, GOOD_MEM = 4.0, 8 * 2**30


class _FakePrometheus(BaseHTTPRequestHandler):
    """/api/v1/query answered with the JSON a real Prometheus sends: capacity of a good node and
    of ``bad`` (a series the problem loader refuses), usage of the good one."""

    bad: dict[str, tuple[float, float]] = {}

    def do_GET(self) -> None:  # noqa: N802
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
        nodes = {"good": (GOOD_CPU, GOOD_MEM), **self.bad}
        if "cpu_capacity" in query:
            values = {n: c for n, (c, _) in nodes.items()}
        elif "memory_capacity" in query:
            values = {n: m for n, (_, m) in nodes.items()}
        elif "cpu_used" in query:
            values = {"good": 1.0}
        elif "memory_used" in query:
            values = {"good": float(2**30)}
        else:
            values = {}
        result = [{"metric": {"node": n}, "value": [1700000000.0, repr(v)]} for n, v in values.items()]
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_prometheus() -> Iterator:
    servers: list[ThreadingHTTPServer] = []

    def start(bad: dict[str, tuple[float, float]]) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_FakePrometheus,), {"bad": bad}))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


@pytest.mark.parametrize(
    "bad",
    [
        {" ": (2.0, 2**30)},  # a blank node name
        {"huge": (2.0, 2e16 * 2**20)},  # memory over the loader's 1e10 MiB
        {"many-cores": (2e7, 2**30)},  # 2e10 millicores
    ],
)
def test_one_bad_series_does_not_turn_discovery_off(fake_prometheus, tmp_path, bad):
    """It made the whole snapshot fail (ProblemValidationError): no node, 'prometheus
    unreachable', scoring with requests, every refresh."""
    url = fake_prometheus(bad)
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump({
        "site": "edge-lab", "node_name": "observer", "listen": {"port": 0},
        "prometheus": {"url": url, "scoring": "usage", "discover_nodes": True},
        "log_level": "error",
    }))
    agent = Agent(load_config(tmp_path / "agent.yaml", env={}))  # not started: one perception step by hand
    agent._perception_step()
    assert [n.name for n in agent.view.site.nodes] == ["good"]
    assert agent.view.load_aware and agent.prometheus_state["up"] is True
    ready, doc = agent.readiness()
    assert ready and doc["discovered_nodes"] == 1 and doc["scoring"] == "usage"
    reply = agent.recommend({"name": "w", "requests": {"cpu": 100, "memory": 64}})
    assert [e["node"] for e in reply["nodes"]] == ["good"]
