"""Node discovery from Prometheus joins only nodes of this site: not a node of another domain of the
problem file, not a node whose agent carries another site label, not a name no Kubernetes node has."""

from __future__ import annotations

import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Iterator

import pytest

from edge_agent.agent import Agent
from edge_agent.config import load_config
from iro_fed.metrics.snapshot import SnapshotQueries

#: (node, site label of its agent, cores, bytes of memory): what every agent of one Prometheus reports.
SERIES = [
    ("e2", "edge-1", 8.0, 16 * 2**30),  # in the site already (problem file)
    ("e5", "edge-1", 4.0, 8 * 2**30),  # a new node of the site: joins
    ("z1", "edge-1", 32.0, 64 * 2**30),  # a node of domain az-1 of the problem file
    ("Bad Name", "edge-1", 2.0, 2**30),  # not a Kubernetes node name
    ("o1", "edge-2", 4.0, 8 * 2**30),  # a node of another site's agent
]
_MATCHER = re.compile(r'\{site="([^"]*)"\}')


class _Prometheus(threading.Thread):
    """/api/v1/query: the capacity series of SERIES, filtered by a ``{site="..."}`` matcher in the
    query as Prometheus does (or not at all with ``honour_site=False``: another label set)."""

    def __init__(self, honour_site: bool) -> None:
        super().__init__(daemon=True)
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.queries: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
                outer.queries.append(query)
                m = _MATCHER.search(query)
                rows = [s for s in SERIES if not (honour_site and m) or s[1] == m.group(1)]
                col = 2 if "cpu_capacity" in query else 3 if "memory_capacity" in query else None
                result = [] if col is None else [{"metric": {"node": r[0]}, "value": [1.0, repr(r[col])]} for r in rows]
                body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def run(self) -> None:
        self.server.serve_forever()


@pytest.fixture
def prometheus() -> Iterator:
    started: list[_Prometheus] = []

    def start(honour_site: bool = True) -> _Prometheus:
        p = _Prometheus(honour_site)
        p.start()
        started.append(p)
        return p

    yield start
    for p in started:
        p.server.shutdown()
        p.server.server_close()


def _agent(write_config, url: str) -> Agent:
    cfg = load_config(write_config(prometheus={"url": url, "discover_nodes": True}, store={"path": None}), env={})
    return Agent(cfg)  # not started: perception steps by hand


def _site_nodes(agent: Agent) -> list[str]:
    return [n.name for n in agent.view.site.nodes]


def test_problem_file_nodes_of_other_domains_and_bad_names_do_not_join(write_config, prometheus) -> None:
    """Old code: z1 (domain az-1) and 'Bad Name' joined edge-1; /recommend could return them."""
    agent = _agent(write_config, prometheus(honour_site=False).url)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    agent.log.addHandler(handler)
    try:
        agent._perception_step()
        agent._perception_step()  # the same skips again: not logged again
    finally:
        agent.log.removeHandler(handler)
    assert _site_nodes(agent) == ["e1", "e2", "e3", "e4", "e5", "o1"]  # o1: no site label to tell it apart
    assert {n.domain for n in agent.view.site.nodes} == {"edge-1"}
    skipped = {
        r.fields["node"]: r.fields["reason"] for r in records if r.getMessage().startswith("node from Prometheus")
    }
    assert set(skipped) == {"z1", "Bad Name"}, skipped
    assert "another domain of the problem file" in skipped["z1"]
    assert "not a Kubernetes node name" in skipped["Bad Name"]
    assert len([r for r in records if r.getMessage().startswith("node from Prometheus")]) == 2  # once each
    reply = agent.recommend({"name": "w", "requests": {"cpu": 100, "memory": 64}, "k": 10})
    assert not {e["node"] for e in reply["nodes"]} & {"z1", "Bad Name"}


def test_only_nodes_whose_agents_carry_this_site_label_join(write_config, prometheus) -> None:
    """Old code: the default capacity queries had no site matcher, so o1 (an edge-2 agent's node)
    joined edge-1 through a Prometheus shared by both sites."""
    prom = prometheus(honour_site=True)
    agent = _agent(write_config, prom.url)
    agent._perception_step()
    assert _site_nodes(agent) == ["e1", "e2", "e3", "e4", "e5"]
    assert any('iro_node_cpu_capacity_cores{site="edge-1"}' in q for q in prom.queries), prom.queries
    assert any('iro_node_memory_capacity_bytes{site="edge-1"}' in q for q in prom.queries), prom.queries


def test_site_queries_keep_an_operators_own_query() -> None:
    from edge_agent.recommend import site_queries

    own = SnapshotQueries(cpu_capacity_cores="max by (node) (my_cores)")
    q = site_queries(own, 'a"b')
    assert q.cpu_capacity_cores == "max by (node) (my_cores)"
    assert q.memory_capacity_bytes == 'max by (node) (iro_node_memory_capacity_bytes{site="a\\"b"})'
    assert q.cpu_used_cores == own.cpu_used_cores
