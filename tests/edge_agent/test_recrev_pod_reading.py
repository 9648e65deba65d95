"""Review of /recommend's Pod reading: the GPU share and the annotations read as the scheduler reads them."""

from __future__ import annotations

from typing import Any

import pytest

from edge_agent.workload import pod_to_workload
from iro_fed.k8s.snapshot import workload_doc

RESOURCES = ("cpu", "memory")


def _pod(annotations: dict[str, Any], requests: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "infer", "namespace": "ml", "annotations": annotations},
            "spec": {"containers": [{"name": "app", "resources": {"requests": requests or {"cpu": "500m", "memory": "1Gi"}}}]}}


def test_gpu_share_annotation_without_a_gpu_request_asks_for_a_card(start_agent, http):
    # A GPU-share pod (iro-fed.io/gpu-milli, no nvidia.com/gpu): the scheduler places it on a GPU
    # node; /recommend ignored the annotation and ranked the CPU-only nodes e2 and e1 too.
    pod = _pod({"iro-fed.io/gpu-milli": "500"})
    assert workload_doc(pod, RESOURCES, [], {})["gpu"] == {"count": 1, "milli": 500}
    assert pod_to_workload(pod, RESOURCES)["gpu"] == {"count": 1, "milli": 500}
    _, url = start_agent(store={"path": None})
    status, reply = http("POST", f"{url}/recommend", {"pod": pod, "k": 3})
    assert status == 200, reply
    assert [n["node"] for n in reply["nodes"]] == ["e3"]  # the site's one GPU node
    assert reply["feasible_nodes"] == 1


@pytest.mark.parametrize(
    ("annotations", "requests", "field"),
    [
        # ["T4"] read as the model "['T4']": 200 with no node at all instead of a 400
        ({"iro-fed.io/gpu-models": ["T4"]}, {"nvidia.com/gpu": "1"}, "pod.metadata.annotations.iro-fed.io/gpu-models"),
        ({"iro-fed.io/gpu-milli": 500}, {"nvidia.com/gpu": "1"}, "pod.metadata.annotations.iro-fed.io/gpu-milli"),
        ({"iro-fed.io/allowed-domains": ["edge-1"]}, None, "pod.metadata.annotations.iro-fed.io/allowed-domains"),
        # a share of one card on a pod asking for 2 cards: named the workload's gpu.milli, not the annotation
        ({"iro-fed.io/gpu-milli": "500"}, {"nvidia.com/gpu": "2"}, "pod.metadata.annotations.iro-fed.io/gpu-milli"),
    ],
)
def test_bad_annotation_is_400_naming_it_and_nothing_is_recorded(start_agent, http, annotations, requests, field):
    agent, url = start_agent()
    status, reply = http("POST", f"{url}/recommend", {"pod": _pod(annotations, requests), "k": 3})
    assert status == 400 and reply["field"] == field, reply
    status, good = http("POST", f"{url}/recommend", {"pod": _pod({}), "k": 3})
    assert status == 200 and good["decision_id"]
    agent.stop()  # flushes the store
    assert agent.store is not None and agent.store.written == 1  # the good request only


def test_empty_annotations_read_as_absent_as_the_scheduler_reads_them(start_agent, http):
    # The scheduler takes this pod; /recommend answered 400 (class '' and max-latency-ms '').
    pod = _pod({"iro-fed.io/class": "", "iro-fed.io/max-latency-ms": "", "iro-fed.io/user-region": ""})
    wl = workload_doc(pod, RESOURCES, [], {})
    assert "class" not in wl and "max_latency_ms" not in wl
    _, url = start_agent(store={"path": None})
    status, reply = http("POST", f"{url}/recommend", {"pod": pod, "k": 3})
    assert status == 200 and len(reply["nodes"]) == 3, reply


@pytest.mark.parametrize(("requests", "name", "message"), [
    ({"cpu": "100m", "example.com/foo": "-1"}, "example.com/foo", "invalid quantity '-1': must not be negative"),
    ({"cpu": "100m", "hugepages-2Mi": "12Qi"}, "hugepages-2Mi", "invalid quantity '12Qi'"),
    ({"cpu": "100m", "ephemeral-storage": "abc"}, "ephemeral-storage", "invalid quantity 'abc'"),
    ({"cpu": "100m", "example.com/foo": "1.5"}, "example.com/foo", "an extended resource must be a whole number"),
])
def test_a_bad_quantity_of_a_resource_the_model_does_not_read_is_400_naming_it(start_agent, http, requests, name,
                                                                               message):
    # Read only for the model's resources, these passed (200 and a ranking); the webhook and the
    # API server refuse them.
    _, url = start_agent(store={"path": None})
    status, reply = http("POST", f"{url}/recommend", {"pod": _pod({}, requests), "k": 3})
    assert status == 400, reply
    field = f"pod.spec.containers[0].resources.requests.{name}"
    assert reply["field"] == field and message in reply["error"], reply


def test_good_quantities_of_other_resources_are_still_taken():
    requests = {"cpu": "100m", "memory": "1Gi", "example.com/foo": "2", "hugepages-2Mi": "4Mi", "ephemeral-storage": "1Gi"}
    assert pod_to_workload(_pod({}, requests), RESOURCES)["requests"] == {"cpu": 100.0, "memory": 1024.0}


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({"affinity": {"nodeAffinity": 5}}, "pod.spec.affinity.nodeAffinity", "expected an object"),
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, "topologyKey": "h"}]}}},
     "pod.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector."
     "matchExpressions[0].operator", "unknown operator 'Bogus'"),
    ({"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10**9, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "h"}}]}}},
     "pod.spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "1..100"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule",
                                     "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}]},
     "pod.spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator", "unknown operator"),
    ({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "5"}]},
     "pod.spec.tolerations[0].tolerationSeconds", "expected an integer (seconds), got string '5'"),
    ({"nodeName": 5}, "pod.spec.nodeName", "expected a string"),
])
def test_fields_the_scheduler_reads_and_recommend_does_not_are_still_checked(start_agent, http, spec, field, message):
    # A site has no pods to match, so /recommend ignored these and answered 200; the scheduler,
    # the extender and the API server refuse them.
    pod = _pod({})
    pod["spec"].update(spec)
    _, url = start_agent(store={"path": None})
    status, reply = http("POST", f"{url}/recommend", {"pod": pod, "k": 3})
    assert status == 400, reply
    assert reply["field"] == field and message in reply["error"], reply


def test_the_scheduler_reader_refuses_a_toleration_seconds_that_is_not_an_integer():
    from iro_fed.k8s.snapshot import PodSpecError

    pod = _pod({})
    pod["spec"]["tolerations"] = [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1.5}]
    with pytest.raises(PodSpecError, match=r"spec\.tolerations\[0\]\.tolerationSeconds: expected an integer"):
        workload_doc(pod, RESOURCES, [], {})
    pod["spec"]["tolerations"][0]["tolerationSeconds"] = 300
    assert workload_doc(pod, RESOURCES, [], {})["tolerations"][0]["operator"] == "Exists"
