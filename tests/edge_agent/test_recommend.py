"""POST /recommend over real HTTP: rankings equal the solver's own, terms equal the objective's,
bad input gets 400 naming the field, Pods and workload objects agree, fallbacks are stated."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest

import solvers
from iro_fed.model import ClusterState
from iro_fed.objective import evaluate
from iro_fed.problem_io import problem_from_dict

WEB = {"name": "shop/web", "requests": {"cpu": 1500, "memory": 2048}, "user_region": "users-eu"}


def independent_ranking(doc: dict, workload: dict, solver: str = "kube-default", k: int = 3) -> list[tuple[str, float, float]]:
    """(node, solver score, R after placing) computed without the agent, from the problem document."""
    doc["nodes"] = [n for n in doc["nodes"] if n["domain"] == "edge-1"]
    doc["workloads"] = [workload]
    problem = problem_from_dict(doc)
    top = solvers.make(solver, seed=0).rank(ClusterState(problem), 0, k)
    return [(problem.nodes[n].name, s, evaluate(problem, np.array([n])).score) for n, s in top]


def test_ranking_and_terms_match_solver_and_objective(start_agent, http, site_doc):
    agent, url = start_agent()
    status, reply = http("POST", f"{url}/recommend", WEB)
    assert status == 200, reply
    assert reply["source"] == "solver" and reply["solver"] == "kube-default"
    expected = independent_ranking(site_doc(), WEB)
    got = [(e["node"], e["score"], e["objective"]["score"]) for e in reply["nodes"]]
    assert [g[0] for g in got] == [e[0] for e in expected]
    for (_, s, r), (_, es, er) in zip(got, expected, strict=True):
        assert s == pytest.approx(es, abs=1e-9) and r == pytest.approx(er, abs=1e-9)
    # Only the site's nodes, never the tainted one, best first.
    assert {e["node"] for e in reply["nodes"]} <= {"e1", "e2", "e3"}
    assert all(e["domain"] == "edge-1" for e in reply["nodes"])
    scores = [e["score"] for e in reply["nodes"]]
    assert scores == sorted(scores, reverse=True)
    assert set(reply["nodes"][0]["objective"]["terms"]) == {"utilization", "latency", "cost", "carbon", "unplaced"}
    assert reply["feasible_nodes"] == 3


def test_k_from_request_and_other_solver(start_agent, http, site_doc):
    _, url = start_agent(recommend={"solver": "best-fit", "k": 1})
    status, reply = http("POST", f"{url}/recommend", {"workload": WEB, "k": 2})
    assert status == 200 and len(reply["nodes"]) == 2
    assert [e["node"] for e in reply["nodes"]] == [e[0] for e in independent_ranking(site_doc(), WEB, "best-fit", 2)]


def test_pod_json_equals_workload_object(start_agent, http, site_doc):
    _, url = start_agent()
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop", "annotations": {"iro-fed.io/user-region": "users-eu"}},
        "spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "500m", "memory": "1024Mi"}}},
        ]},
    }
    s1, from_pod = http("POST", f"{url}/recommend", pod)
    s2, from_wl = http("POST", f"{url}/recommend", WEB)
    assert s1 == s2 == 200
    assert from_pod["input"] == "pod" and from_pod["workload"] == "shop/web"
    assert [(e["node"], e["score"], e["objective"]) for e in from_pod["nodes"]] == \
           [(e["node"], e["score"], e["objective"]) for e in from_wl["nodes"]]
    assert "warnings" not in from_pod
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    status, warned = http("POST", f"{url}/recommend", {"pod": pod, "k": 1})
    assert status == 200 and len(warned["nodes"]) == 1
    assert warned["warnings"] == ["spec.affinity.podAntiAffinity (inter-pod anti-affinity is not evaluated)"]


def test_gpu_pod_goes_to_the_gpu_node(start_agent, http, site_doc):
    _, url = start_agent()
    status, reply = http("POST", f"{url}/recommend", {"name": "infer", "requests": {"cpu": 500}, "gpu": {"count": 1, "milli": 500}})
    assert status == 200 and [e["node"] for e in reply["nodes"]] == ["e3"]


def test_pod_that_fits_nowhere_gets_the_reason(start_agent, http, site_doc):
    _, url = start_agent()
    status, reply = http("POST", f"{url}/recommend", {"name": "huge", "requests": {"cpu": 64000}})
    assert status == 200 and reply["nodes"] == []
    assert reply["unplaced_reason"].startswith("0/4 nodes are available")
    assert "Insufficient cpu" in reply["unplaced_reason"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "requests": {"cpu": "lots"}}, "workload.requests.cpu"),
        ({"name": "x", "requests": {"gpu": 1}}, "workload.requests.gpu"),
        ({"requests": {"cpu": 1}}, "workload.name"),
        ({"name": "x", "user_region": "mars"}, "workload.user_region"),
        ({"name": "x", "allowed_domains": ["nowhere"]}, "workload.allowed_domains[0]"),
        ({"workload": WEB, "k": 0}, "k"),
        ({"workload": WEB, "k": "3"}, "k"),
        ([1, 2], "body"),
        ({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
            {"resources": {"requests": {"cpu": "12x"}}}]}}, "pod.spec.containers[0].resources.requests.cpu"),
        ({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}, "pod.spec.containers"),
        ({"kind": "Pod", "spec": {"containers": [{}]}}, "pod.metadata.name"),
    ],
)
def test_bad_requests_name_the_field(start_agent, http, site_doc, body, field):
    agent, url = start_agent()
    status, reply = http("POST", f"{url}/recommend", body)
    assert status == 400, reply
    assert reply["field"] == field
    assert reply["error"].startswith(field)


def test_transport_errors(start_agent, http, site_doc):
    agent, url = start_agent(listen={"max_body_bytes": 8192})
    status, reply = http("POST", f"{url}/recommend", raw=b"{not json")
    assert status == 400 and reply["field"] == "body" and "not valid JSON" in reply["error"]
    status, reply = http("POST", f"{url}/recommend", raw=b"[" * 4000 + b"]" * 4000)
    assert status == 400 and reply["field"] == "body"
    status, reply = http("POST", f"{url}/recommend", raw=json.dumps({"name": "x", "pad": "y" * 9000}).encode())
    assert status == 413 and "listen.max_body_bytes" in reply["error"]
    assert http("GET", f"{url}/recommend")[0] == 405
    assert http("GET", f"{url}/nope")[0] == 404
    # The agent still serves after all of that.
    assert http("POST", f"{url}/recommend", WEB)[0] == 200
    metrics = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    assert 'iro_agent_requests_total{code="400",handler="recommend"} 2.0' in metrics
    assert 'iro_agent_requests_total{code="413",handler="recommend"} 1.0' in metrics


def test_metrics_endpoint_counts_decisions(start_agent, http, site_doc):
    agent, url = start_agent()
    for _ in range(3):
        assert http("POST", f"{url}/recommend", WEB)[0] == 200
    http("POST", f"{url}/recommend", {"name": "huge", "requests": {"cpu": 64000}})
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    assert 'iro_agent_decisions_total{outcome="ranked",source="solver"} 3.0' in text
    assert 'iro_agent_decisions_total{outcome="no_fit",source="solver"} 1.0' in text
    assert 'iro_agent_decision_latency_seconds_count{source="solver"} 4.0' in text
    assert 'iro_agent_request_duration_seconds_bucket{handler="recommend",le="+Inf"} 4.0' in text


def test_decisions_are_recorded_in_the_store(start_agent, http, site_doc):
    agent, url = start_agent()
    replies = [http("POST", f"{url}/recommend", WEB)[1] for _ in range(4)]
    status, ack = http("POST", f"{url}/outcome", {"decision_id": replies[0]["decision_id"], "node": "e2",
                                                 "observed": {"latency_ms": 4.2}})
    assert status == 202 and ack["recorded"]
    assert http("POST", f"{url}/outcome", {"observed": {}})[1]["field"] == "decision_id"
    assert agent.store.flush()
    rows = agent.store.transitions()
    assert [r["decision_id"] for r in rows] == [r["decision_id"] for r in replies]
    for row, reply in zip(rows, replies, strict=True):
        assert row["candidates"] == [e["node"] for e in reply["nodes"]]
        assert row["reward"] == pytest.approx(reply["nodes"][0]["delta_r"], abs=1e-9)
        assert row["state"].shape == (len(agent.view.site.util_resources) + 2 * 3,) and np.isfinite(row["state"]).all()
    assert agent.store.counts() == {"transitions": 4, "outcomes": 1}


def test_no_solver_no_registry_uses_the_heuristic_and_says_so(start_agent, http, site_doc):
    _, url = start_agent(recommend={"solver": ""})
    status, reply = http("POST", f"{url}/recommend", WEB)
    assert status == 200 and reply["source"] == "heuristic" and reply["solver"] == "greedy-objective"
    assert "no policy registry or solver configured" in reply["fallback_reason"]
    assert [e["node"] for e in reply["nodes"]] == [e[0] for e in independent_ranking(site_doc(), WEB, "greedy-objective")]
