"""A real Prometheus scraping a running edge agent: the snapshot built from Prometheus equals what
the agent exported; the agent switches to load-aware scoring when Prometheus comes up.

One module-scoped scene: an agent (in this process, real HTTP on 127.0.0.1) configured with a
Prometheus URL that nothing serves yet, then Prometheus started on that port with the project's
recording rules and a 1 s scrape of the agent. The agent's node readings are taken once
(`collect.interval_s` 3600), so every sample Prometheus stores is the same value and averages are
exact.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from edge_agent.agent import Agent
from edge_agent.config import load_config
from iro_fed.metrics import (
    PrometheusClient,
    PrometheusQueryError,
    PrometheusUnavailable,
    SnapshotQueries,
    build_snapshot,
)
from iro_fed.problem_io import write_json_atomic
from iro_fed.testing import wait_for

SITE = {
    "resources": ["cpu", "memory"],
    "domains": [{"name": "edge-1", "kind": "edge", "carbon_intensity": 200.0, "price_per_hour": {"cpu": 0.05}}],
    "nodes": [
        {"name": "agent-node", "domain": "edge-1", "capacity": {"cpu": 64000, "memory": 1048576},
         "allocated": {"cpu": 100, "memory": 100}},
        {"name": "other", "domain": "edge-1", "capacity": {"cpu": 64000, "memory": 1048576},
         "allocated": {"cpu": 2000, "memory": 4096}},
    ],
}
# Service figures of the agent itself (handler = service), over the whole test (5m windows).
AGENT_SERVICE_QUERIES = {
    "service_label": "handler",
    "service_qps": "sum by (handler) (rate(iro_agent_requests_total[5m]))",
    "service_error_ratio": 'sum by (handler) (rate(iro_agent_requests_total{code=~"4..|5.."}[5m]))'
                           " / sum by (handler) (rate(iro_agent_requests_total[5m]))",
    "service_p99_seconds": "histogram_quantile(0.99, sum by (handler, le) (rate(iro_agent_request_duration_seconds_bucket[5m])))",
}


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def scene(tmp_path_factory, run_prometheus, free_port_factory):
    work = tmp_path_factory.mktemp("scene")
    write_json_atomic(work / "site.json", SITE)
    prom_port = free_port_factory()
    (work / "agent.yaml").write_text(yaml.safe_dump({
        "problem": "site.json", "site": "edge-1", "node_name": "agent-node",
        "listen": {"port": 0},
        "recommend": {"solver": "kube-default"},
        "prometheus": {"url": f"http://127.0.0.1:{prom_port}", "scoring": "usage", "refresh_interval_s": 0.5,
                       "timeout_s": 10, "queries": AGENT_SERVICE_QUERIES},  # 10: see _observer
        "collect": {"interval_s": 3600},
        "backoff": {"initial_s": 0.2, "max_s": 0.5},
        "log_level": "error",
    }))
    agent = Agent(load_config(work / "agent.yaml", env={}))
    agent.start()
    url = f"http://127.0.0.1:{agent.port}"
    # Prometheus is not up yet: the agent serves with requests and says so.
    wait_for(lambda: agent.prometheus_state["up"] is False, what="the agent to notice Prometheus is down")
    down_ready = json.loads(urllib.request.urlopen(f"{url}/readyz", timeout=5).read())
    wait_for(lambda: agent.metrics._local is not None, what="the first node reading")
    prom = run_prometheus([f"127.0.0.1:{agent.port}"], port=prom_port)
    yield {"agent": agent, "url": url, "prom": prom, "down_ready": down_ready}
    agent.stop()


def readyz(url: str) -> dict:
    try:  # a loaded machine answers late: that is not what the tests check
        return json.loads(urllib.request.urlopen(f"{url}/readyz", timeout=30).read())
    except urllib.error.HTTPError as exc:  # 503 while not ready: the body still says why
        return json.loads(exc.read())


def exported(url: str) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_snapshot_from_prometheus_matches_the_agent_export(scene):
    url, prom = scene["url"], scene["prom"]
    client = PrometheusClient(prom.url, timeout_s=5)
    queries = SnapshotQueries(**AGENT_SERVICE_QUERIES)
    snap = wait_for(lambda: (s := build_snapshot(client, queries)).nodes.get("agent-node")
                    and s.nodes["agent-node"].cpu_millicores is not None and s, what="recorded node usage")
    values = exported(url)
    labels = (("node", "agent-node"), ("site", "edge-1"))
    node = snap.nodes["agent-node"]
    assert node.cpu_millicores == pytest.approx(values[("iro_node_cpu_used_cores", labels)] * 1000, rel=1e-12)
    assert node.memory_mib == pytest.approx(values[("iro_node_memory_used_bytes", labels)] / 2**20, rel=1e-12)
    assert node.cpu_capacity_millicores == pytest.approx(values[("iro_node_cpu_capacity_cores", labels)] * 1000, rel=1e-12)
    assert node.memory_capacity_mib == pytest.approx(values[("iro_node_memory_capacity_bytes", labels)] / 2**20, rel=1e-12)
    assert node.memory_mib > 0 and node.cpu_capacity_millicores >= 1000
    assert set(snap.nodes) == {"agent-node"}  # only what the agent exported

    # The recorded 1m/5m utilization equals the exported used / capacity.
    util = client.query('node:iro_memory_utilization:avg1m{node="agent-node"}')
    assert util[0].value == pytest.approx(values[("iro_node_memory_used_bytes", labels)]
                                          / values[("iro_node_memory_capacity_bytes", labels)], rel=1e-12)

    # Service figures: 5 good and 2 bad recommendations, then Prometheus must have seen all 7.
    for _ in range(5):
        assert post(f"{url}/recommend", {"name": "w", "requests": {"cpu": 100}}) == 200
    for _ in range(2):
        assert post(f"{url}/recommend", {"name": "w", "requests": {"cpu": "lots"}}) == 400
    wait_for(lambda: (r := client.query('sum(iro_agent_requests_total{handler="recommend"})')) and r[0].value == 7,
             what="Prometheus to scrape the 7 requests")
    snap = build_snapshot(client, queries)
    rec = snap.services["recommend"]
    assert rec.error_rate == pytest.approx(2 / 7, rel=1e-9)
    assert rec.qps > 0
    # The P99 lies inside the agent's own histogram: at most the smallest bucket bound that holds all requests.
    values = exported(url)
    bounds = sorted(float(dict(k[1])["le"]) for k, v in values.items()
                    if k[0] == "iro_agent_request_duration_seconds_bucket" and dict(k[1])["handler"] == "recommend"
                    and v == values[("iro_agent_request_duration_seconds_count", (("handler", "recommend"),))])
    assert 0 < rec.p99_latency_ms <= bounds[0] * 1000
    assert snap.to_dict()["services"]["recommend"]["error_rate"] == pytest.approx(2 / 7, rel=1e-6)


def test_agent_switches_to_load_aware_scoring(scene):
    agent, url = scene["agent"], scene["url"]
    down = scene["down_ready"]
    assert down["status"] == "degraded" and down["prometheus"]["up"] is False and down["scoring"] == "requests"
    # Generous: the agent's next snapshot after Prometheus has data; slow only on a loaded machine.
    ready = wait_for(lambda: (r := readyz(url))["scoring"] == "usage" and r, timeout=120, what="load-aware scoring")
    assert ready["prometheus"]["up"] is True and ready["load_aware_nodes"] == 1 and ready["status"] == "ok"
    i = agent.view.site.node_index["agent-node"]
    cpu, mem = agent.view.site.resource_index["cpu"], agent.view.site.resource_index["memory"]

    def usage_in_view() -> bool:
        # The agent replaces its snapshot, then its view: read both again until they are of one
        # refresh with both usages measured (a first CPU rate needs two scrapes; under load a
        # refresh could fall between the two reads here).
        usage, view = agent.snapshot.nodes["agent-node"], agent.view
        if usage.cpu_millicores is None or usage.memory_mib is None or agent.snapshot.nodes["agent-node"] is not usage:
            return False
        return (view.cluster.allocated[i, cpu] == pytest.approx(min(usage.cpu_millicores, 64000.0))
                and view.cluster.allocated[i, mem] == pytest.approx(min(usage.memory_mib, 1048576.0)))

    wait_for(usage_in_view, timeout=60, what="the agent's view to carry the snapshot's CPU and memory usage")
    j = agent.view.site.node_index["other"]
    assert list(agent.view.cluster.allocated[j]) == [2000.0, 4096.0]  # not in the snapshot: requests kept
    req = urllib.request.Request(f"{url}/recommend", data=json.dumps({"name": "w", "requests": {"cpu": 100}}).encode(),
                                 method="POST")
    reply = json.loads(urllib.request.urlopen(req, timeout=10).read())
    assert reply["scoring"] == "usage"
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    assert "iro_agent_load_aware_active 1.0" in text and 'iro_agent_dependency_up{dependency="prometheus"} 1.0' in text

    def served() -> dict:
        return json.loads(urllib.request.urlopen(f"{url}/snapshot", timeout=5).read())["snapshot"]["nodes"]["agent-node"]

    assert served()["requests"] == {"cpu": 100.0, "memory": 100.0}  # requests next to usage
    # The usage served is the agent's snapshot's (read again where a refresh came between the reads).
    wait_for(lambda: served()["memory_mib"] == pytest.approx(agent.snapshot.nodes["agent-node"].memory_mib, rel=1e-6),
             timeout=60, what="/snapshot to serve the agent's memory usage")


def test_client_against_real_prometheus(scene, free_port_factory):
    client = PrometheusClient(scene["prom"].url, timeout_s=5)
    assert client.ready()
    [s] = client.query("vector(3)")
    assert s.value == 3.0 and s.labels == {}
    assert client.query("1 + 1")[0].value == 2.0  # scalar
    now = time.time()
    [series] = client.query_range("vector(time())", now - 10, now, 2)
    assert len(series.points) == 6 and all(t == pytest.approx(v) for t, v in series.points)
    with pytest.raises(PrometheusQueryError, match="bad_data"):
        client.query("sum by (node (x)")
    with pytest.raises(ValueError, match="step_s"):
        client.query_range("up", now - 10, now, 0)
    with pytest.raises(PrometheusUnavailable, match="cannot connect"):
        PrometheusClient(f"http://127.0.0.1:{free_port_factory()}", timeout_s=1).query("up")
    with pytest.raises(PrometheusQueryError, match="queries.cpu_used_cores"):
        build_snapshot(client, SnapshotQueries(cpu_used_cores="rate(up)"))


def _observer(tmp_path, prom_url: str, site: str) -> Agent:
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump({
        "site": site, "node_name": "observer", "listen": {"port": 0},
        # timeout_s 10: a snapshot (9 queries) gets 20 s, not 4 s, so a loaded machine does not fail it.
        "prometheus": {"url": prom_url, "scoring": "usage", "discover_nodes": True, "refresh_interval_s": 0.3,
                       "timeout_s": 10},
        "collect": {"interval_s": 3600}, "backoff": {"initial_s": 0.2, "max_s": 0.5}, "log_level": "error",
    }))
    return Agent(load_config(tmp_path / "agent.yaml", env={}))


def _wait_for_usage(url: str, prom_url: str) -> dict:
    """The observer's /readyz once it is ready and scores with usage. A chain of periodic steps
    leads there (Prometheus applies new targets every 5 s, scrapes every 1 s, evaluates the
    rules every 1 s; the agent reads every 0.3 s): 5-10 s on an idle or busy machine (measured
    up to 9.3 s at load 17 on 2 cores), so the bound is generous (120 s), and a failure says
    which link is missing (the last /readyz, Prometheus's scrape of the agent)."""
    last: dict = {}

    def ready() -> dict | bool:
        r = last["readyz"] = readyz(url)
        return r["ready"] and r["scoring"] == "usage" and r

    try:
        return wait_for(ready, timeout=120, what="discovered nodes with their usage")
    except AssertionError as exc:
        targets = json.loads(urllib.request.urlopen(f"{prom_url}/api/v1/targets", timeout=30).read())
        scrapes = [{k: t.get(k) for k in ("scrapeUrl", "health", "lastError", "lastScrape", "lastScrapeDuration")}
                   for t in targets["data"]["activeTargets"]]
        raise AssertionError(f"{exc}; last /readyz: {last.get('readyz')}; Prometheus scrapes: {scrapes}") from None


def test_site_nodes_discovered_from_prometheus(scene, tmp_path):
    """Without a problem file, an agent takes its site's nodes from Prometheus (capacity and usage):
    those whose agents carry its site label (site="edge-1"), not another site's."""
    prom = scene["prom"]
    agent = _observer(tmp_path, prom.url, "edge-1")
    agent.start()
    try:
        url = f"http://127.0.0.1:{agent.port}"
        first = readyz(url)
        # Usage comes a scrape or two after capacity (rates need two samples): scoring waits for it.
        ready = _wait_for_usage(url, prom.url)
        assert ready["nodes"] == 1 and ready["discovered_nodes"] == 1
        if not first["ready"]:  # caught before the first snapshot: not ready, and why
            assert "the site has no nodes yet" in " ".join(first["degraded"])
        site = agent.view.site
        [node] = site.nodes
        assert node.name == "agent-node" and node.domain == "edge-1" and node.labels["iro-fed.io/discovered"] == "true"
        values = exported(scene["url"])
        labels = (("node", "agent-node"), ("site", "edge-1"))
        assert site.capacity[0, site.resource_index["cpu"]] == int(values[("iro_node_cpu_capacity_cores", labels)] * 1000)
        assert site.capacity[0, site.resource_index["memory"]] == int(values[("iro_node_memory_capacity_bytes", labels)] / 2**20)
        # Memory only: the discovered node is this machine, whose CPUs a busy CI run can keep 100 % used
        # (usage-based scoring then rightly finds no room for any CPU request).
        req = urllib.request.Request(f"{url}/recommend", data=json.dumps({"name": "w", "requests": {"memory": 16}}).encode(),
                                     method="POST")
        reply = json.loads(urllib.request.urlopen(req, timeout=10).read())
        assert [e["node"] for e in reply["nodes"]] == ["agent-node"] and reply["scoring"] == "usage", reply
        # An agent of another site, on the same Prometheus, takes none of edge-1's nodes.
        other = _observer(tmp_path, prom.url, "edge-lab")
        other._perception_step()  # not started: one snapshot by hand (a real Prometheus runs the query)
        assert other.prometheus_state["up"] is True and other.view.site.num_nodes == 0
    finally:
        agent.stop()
