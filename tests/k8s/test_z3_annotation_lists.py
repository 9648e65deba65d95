"""Comma-list pod annotations keep every entry: an empty one is refused naming the annotation and
its position, by the snapshot (scheduler, extender, webhook) and the edge agent alike. Dropped, it
hid a name lost in an edit, and ``iro-fed.io/allowed-domains: ","`` read as ``[]``: no domain
restriction at all, so a data-residency rule was lifted by a typo. A bound pod's
``iro-fed.io/gpu-cards`` with an empty entry is read as no annotation (first fit), as the other
malformed card lists are."""

from __future__ import annotations

from typing import Any

import pytest

from edge_agent.workload import BadRequest, pod_to_workload
from iro_fed.k8s import snapshot
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.snapshot import ClusterModel, PodSpecError, build_snapshot, workload_doc
from iro_fed.k8s.testing import make_node, make_pod
from tests.k8s.helpers import post_json as post
from tests.k8s.helpers import serving

RESOURCES = ("cpu", "memory")
DOMAINS = "iro-fed.io/allowed-domains"
MODELS = "iro-fed.io/gpu-models"


@pytest.fixture
def serve():
    yield from serving(lambda ext: ExtenderServer(ext, "127.0.0.1", 0, "/iro"))


def nodes() -> list[dict[str, Any]]:
    return [make_node("eu1", zone="eu", gpus=1, gpu_model="A100"), make_node("us1", zone="us", gpus=1, gpu_model="T4")]


EMPTY_ENTRIES = [
    # (annotation, value, the message's tail); before the fix the entry was dropped silently
    (DOMAINS, ",", "empty entry at position 1 of 2 in ','"),  # before: [] - every domain allowed
    (DOMAINS, "eu,,us", "empty entry at position 2 of 3 in 'eu,,us'"),
    (DOMAINS, "eu, ", "empty entry at position 2 of 2 in 'eu, '"),
    (DOMAINS, ",eu", "empty entry at position 1 of 2 in ',eu'"),
    (MODELS, "A100,", "empty entry at position 2 of 2 in 'A100,'"),
    (MODELS, "A100,,T4", "empty entry at position 2 of 3 in 'A100,,T4'"),
]


@pytest.mark.parametrize(("key", "value", "tail"), EMPTY_ENTRIES)
def test_the_extender_refuses_an_empty_entry_naming_the_annotation(serve, key, value, tail):
    srv = serve(Extender("best-fit"))
    pod = make_pod("p", gpus=1, annotations={key: value})
    status, res = post(srv.url, "/iro/filter", {"Pod": pod, "Nodes": {"items": nodes()}})
    assert status == 200
    assert res["Error"].startswith(f"pod default/p: metadata.annotations.{key}: {tail}"), res
    assert res["Nodes"] is None  # no node passes a pod the extender cannot read


@pytest.mark.parametrize(("key", "value", "tail"), EMPTY_ENTRIES)
def test_the_snapshot_and_the_agent_refuse_the_same_entry(key, value, tail):
    pod = make_pod("p", gpus=1, annotations={key: value})
    with pytest.raises(PodSpecError) as snap_err:
        workload_doc(pod, RESOURCES, [], {})
    assert snap_err.value.field == f"metadata.annotations.{key}"
    assert snap_err.value.reason.startswith(tail)
    with pytest.raises(PodSpecError):
        ClusterModel(nodes(), [], None).check_pod(pod)  # the scheduler's and webhook's check
    with pytest.raises(BadRequest) as agent_err:
        pod_to_workload(pod, RESOURCES)
    assert agent_err.value.field == f"pod.metadata.annotations.{key}"
    assert str(agent_err.value) == f"pod.metadata.annotations.{key}: {snap_err.value.reason}"


def test_gpu_models_are_checked_on_a_pod_without_a_gpu_too():
    pod = make_pod("p", annotations={MODELS: "A100,"})
    with pytest.raises(PodSpecError, match="empty entry at position 2 of 2"):
        workload_doc(pod, RESOURCES, [], {})
    with pytest.raises(BadRequest, match="empty entry at position 2 of 2"):
        pod_to_workload(pod, RESOURCES)


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_or_blank_annotation_still_reads_as_absent(serve, value):
    # Documented: an empty annotation reads as absent (docs/edge_agent.md), as for every
    # iro-fed.io annotation; the extender passes both nodes.
    pod = make_pod("p", gpus=1, annotations={DOMAINS: value, MODELS: value})
    assert snapshot.annotation_list(pod["metadata"]["annotations"], DOMAINS) is None
    doc = workload_doc(pod, RESOURCES, [], {})
    assert "allowed_domains" not in doc and "models" not in doc["gpu"]
    wl = pod_to_workload(pod, RESOURCES)
    assert "allowed_domains" not in wl and "models" not in wl["gpu"]
    srv = serve(Extender("best-fit"))
    _, res = post(srv.url, "/iro/filter", {"Pod": pod, "Nodes": {"items": nodes()}})
    assert res["Error"] == "" and [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["eu1", "us1"]


def test_well_formed_lists_restrict_as_before(serve):
    pod = make_pod("p", gpus=1, annotations={DOMAINS: " eu , us ", MODELS: "A100"})
    assert workload_doc(pod, RESOURCES, [], {})["allowed_domains"] == ["eu", "us"]
    assert pod_to_workload(pod, RESOURCES)["allowed_domains"] == ["eu", "us"]
    assert pod_to_workload(pod, RESOURCES)["gpu"]["models"] == ["A100"]
    srv = serve(Extender("best-fit"))
    _, res = post(srv.url, "/iro/filter", {"Pod": pod, "Nodes": {"items": nodes()}})
    assert [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["eu1"]
    assert res["FailedAndUnresolvableNodes"] == {"us1": "node(s) didn't have an allowed GPU model"}
    pod = make_pod("q", annotations={DOMAINS: "us"})
    _, res = post(srv.url, "/iro/filter", {"Pod": pod, "Nodes": {"items": nodes()}})
    assert [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["us1"]


# --- a bound pod's GPU cards ------------------------------------------------------------------


def gpu_free(cards: str) -> list[int]:
    """A 4-card node's free milli per card once a pod holding 2 whole cards, annotated ``cards``, is bound."""
    node = make_node("g", gpus=4, gpu_model="A100")
    bound = make_pod("holder", node="g", gpus=2, annotations={"iro-fed.io/gpu-cards": cards})
    return build_snapshot([node], [bound], [make_pod("p")]).problem.gpu_free[0].tolist()


def test_gpu_cards_with_an_empty_entry_are_read_as_no_annotation():
    assert gpu_free("2,3") == [1000, 1000, 0, 0]  # the cards the scheduler wrote
    # malformed: ignored, the pod's cards found by first fit
    assert gpu_free("2,x") == gpu_free("2,2") == [0, 0, 1000, 1000]
    # before: [2, 3] read from "2,,3" and "2,3,"
    assert gpu_free("2,,3") == [0, 0, 1000, 1000]
    assert gpu_free("2,3,") == [0, 0, 1000, 1000]
    # blanks around a number: not as the scheduler writes it (int() read them), first fit
    assert gpu_free(" 2, 3 ") == [0, 0, 1000, 1000]
