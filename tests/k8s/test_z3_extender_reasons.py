"""The extender's per-node reasons use the filters' capacity test (``free + fit_tolerance >=
demand``, relative to each node's capacity), as ``resource_fit`` and ``feasibility.explain`` do.
With the old absolute 1e-9 a full 1e-6 node refused a 1e-9 pod with no shortage named
("Insufficient resources"), and a 1e10 node short by less than its tolerance (0.01) was said to
lack a resource that fits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from iro_fed.feasibility import explain, feasible_nodes
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.snapshot import ClusterConfig, build_snapshot
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState
from tests.k8s.helpers import post_json as post
from tests.k8s.helpers import serving

# "scratch" has no '/' and is not memory-like: read in its base unit, so 1n is 1e-9 of it.
CONFIG = ClusterConfig(resources=("cpu", "memory", "scratch"))


@pytest.fixture
def serve():
    yield from serving(lambda ext: ExtenderServer(ext, "127.0.0.1", 0, "/iro"))


def scratch_node(name: str, scratch: str, used: str, cpu: str = "8") -> dict[str, Any]:
    """A Node with ``scratch`` allocatable, ``used`` of it taken (NodeList mode's annotation)."""
    node = make_node(name, cpu=cpu, annotations={"iro-fed.io/allocated": json.dumps({"scratch": used})})
    node["status"]["allocatable"]["scratch"] = node["status"]["capacity"]["scratch"] = scratch
    return node


def scratch_pod(name: str, scratch: str, cpu: str = "500m") -> dict[str, Any]:
    pod = make_pod(name, cpu=cpu)
    pod["spec"]["containers"][0]["resources"]["requests"]["scratch"] = scratch
    return pod


def filter_reasons(serve, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> tuple[list[str], dict[str, str]]:
    srv = serve(Extender("best-fit", config=CONFIG))
    status, res = post(srv.url, "/iro/filter", {"Pod": pod, "Nodes": {"items": nodes}})
    assert status == 200 and res["Error"] == "", res
    assert res["FailedAndUnresolvableNodes"] == {}, res
    return [n["metadata"]["name"] for n in res["Nodes"]["items"]], res["FailedNodes"]


def test_a_full_micro_node_names_its_shortage(serve):
    # A full 1e-6 node and a 1e-9 pod: the filter refuses it (tolerance 1e-18); the reason said
    # only "Insufficient resources", naming no resource, while explain() counts "Insufficient scratch".
    nodes = [scratch_node("tiny", "1u", "1u"), scratch_node("roomy", "1u", "0")]
    pod = scratch_pod("p", "1n")
    passed, failed = filter_reasons(serve, pod, nodes)
    assert passed == ["roomy"]
    assert failed == {"tiny": "Insufficient scratch"}
    state = ClusterState(build_snapshot(nodes, None, [pod], CONFIG).problem)
    assert explain(state, 0) == "1/2 nodes are available: 1 Insufficient scratch."


def test_a_huge_node_within_tolerance_is_not_said_to_lack_it(serve):
    # 1e10 of scratch, all used: tolerance 0.01, so a 0.005 request fits (resource_fit and
    # explain agree). The node fails on cpu alone; the reason also listed scratch.
    nodes = [scratch_node("huge", "10G", "10G", cpu="1"), scratch_node("fits", "10G", "10G")]
    pod = scratch_pod("p", "5m", cpu="2")
    passed, failed = filter_reasons(serve, pod, nodes)
    assert passed == ["fits"]
    assert failed == {"huge": "Insufficient cpu"}
    state = ClusterState(build_snapshot(nodes, None, [pod], CONFIG).problem)
    assert feasible_nodes(state, 0).tolist() == [False, True]
    assert explain(state, 0) == "1/2 nodes are available: 1 Insufficient cpu."


def test_a_real_shortage_at_both_scales_is_still_named(serve):
    # Past the tolerance the shortage is listed, beside the other ones of the node.
    nodes = [scratch_node("tiny", "1u", "999n", cpu="1"), scratch_node("huge", "10G", "10G", cpu="1")]
    passed, failed = filter_reasons(serve, scratch_pod("p", "2n", cpu="2"), nodes)
    assert passed == []
    assert failed == {"tiny": "Insufficient cpu, Insufficient scratch", "huge": "Insufficient cpu"}
    passed, failed = filter_reasons(serve, scratch_pod("q", "20m", cpu="2"), nodes)
    assert failed == {"tiny": "Insufficient cpu, Insufficient scratch", "huge": "Insufficient cpu, Insufficient scratch"}
