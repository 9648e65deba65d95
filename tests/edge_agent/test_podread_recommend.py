"""/recommend reads a Pod's metadata, containers and GPU share as the API server and the scheduler
do: a pod the API server would refuse is a 400 naming the field, and nothing is recorded."""

from __future__ import annotations

from typing import Any

import pytest

from edge_agent.workload import BadRequest, pod_to_workload

RESOURCES = ("cpu", "memory")


def _pod(meta: dict[str, Any] | None = None, containers: tuple[str, ...] = ("app",), init: tuple[str, ...] = (),
         annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    container = {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
    meta = {"name": "web", "namespace": "shop", **(meta or {})}
    if annotations is not None:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"containers": [dict(container, name=n) for n in containers]}
    if init:
        spec["initContainers"] = [dict(container, name=n) for n in init]
    return {"kind": "Pod", "metadata": {k: v for k, v in meta.items() if v is not None}, "spec": spec}


BAD_PODS = [
    # metadata.name 5 was "required: a name (or generateName)"; "a/b" came back as shop/a/b
    (_pod({"name": 5}), "pod.metadata.name", "expected a string, got int"),
    (_pod({"name": "a/b"}), "pod.metadata.name", "RFC 1123 subdomain"),
    (_pod({"name": "Web"}), "pod.metadata.name", "RFC 1123 subdomain"),
    (_pod({"name": "web-"}), "pod.metadata.name", "RFC 1123 subdomain"),
    (_pod({"name": "w" * 254}), "pod.metadata.name", "no more than 253 characters"),
    (_pod({"name": None, "generateName": "web/"}), "pod.metadata.generateName", "RFC 1123 subdomain"),
    (_pod({"name": None, "generateName": 7}), "pod.metadata.generateName", "expected a string"),
    (_pod({"namespace": "Shop"}), "pod.metadata.namespace", "RFC 1123 label"),
    (_pod({"namespace": "a.b"}), "pod.metadata.namespace", "RFC 1123 label"),  # a label: no dots
    (_pod({"namespace": "n" * 64}), "pod.metadata.namespace", "no more than 63 characters"),
    (_pod({"namespace": 0}), "pod.metadata.namespace", "expected a string, got int"),  # was read as "default"
    # the API server refuses a repeated container name (one name space with init containers)
    (_pod(containers=("app", "app")), "pod.spec.containers[1].name", "Duplicate value: 'app'"),
    (_pod(init=("app",)), "pod.spec.initContainers[0].name", "Duplicate value: 'app'"),
    # iro-fed.io/gpu-milli: plain ASCII digits (int() took all of these)
    (_pod(annotations={"iro-fed.io/gpu-milli": "5_00"}), "pod.metadata.annotations.iro-fed.io/gpu-milli", "digits only"),
    (_pod(annotations={"iro-fed.io/gpu-milli": " 500 "}), "pod.metadata.annotations.iro-fed.io/gpu-milli", "digits only"),
    (_pod(annotations={"iro-fed.io/gpu-milli": "\uff15\uff10\uff10"}), "pod.metadata.annotations.iro-fed.io/gpu-milli", "digits only"),
]


@pytest.mark.parametrize(("pod", "field", "message"), BAD_PODS)
def test_pod_the_api_server_refuses_is_a_bad_request_naming_the_field(pod, field, message):
    with pytest.raises(BadRequest) as info:
        pod_to_workload(pod, RESOURCES)
    assert info.value.field == field and message in str(info.value)


@pytest.mark.parametrize(("pod", "field", "message"), [BAD_PODS[i] for i in (0, 1, 7, 11, 12, 13)])
def test_recommend_answers_400_naming_the_field_and_records_nothing(start_agent, http, pod, field, message):
    agent, url = start_agent()
    status, reply = http("POST", f"{url}/recommend", {"pod": pod, "k": 3})
    assert status == 400 and reply["field"] == field and message in reply["error"], reply
    status, good = http("POST", f"{url}/recommend", {"pod": _pod(), "k": 3})
    assert status == 200 and good["decision_id"], good
    agent.stop()  # flushes the store
    assert agent.store is not None and agent.store.written == 1  # the good request only


@pytest.mark.parametrize(
    ("meta", "name"),
    [
        ({}, "shop/web"),
        ({"name": "web.v1-2"}, "shop/web.v1-2"),
        ({"name": "w" * 253}, "shop/" + "w" * 253),
        ({"name": None, "generateName": "web-"}, "shop/web-"),  # a prefix may end in '-'
        ({"name": "", "generateName": "web-"}, "shop/web-"),
        ({"namespace": None}, "default/web"),
        ({"namespace": ""}, "default/web"),
        ({"namespace": "n" * 63}, "n" * 63 + "/web"),
    ],
)
def test_valid_names_are_read(meta, name):
    assert pod_to_workload(_pod(meta), RESOURCES)["name"] == name


def test_distinct_container_names_and_plain_gpu_share_are_read(start_agent, http):
    pod = _pod(containers=("app", "log"), init=("setup",), annotations={"iro-fed.io/gpu-milli": "0250"})
    wl = pod_to_workload(pod, RESOURCES)
    assert wl["requests"] == {"cpu": 1000.0, "memory": 2048.0} and wl["gpu"] == {"count": 1, "milli": 250}
    _, url = start_agent(store={"path": None})
    status, reply = http("POST", f"{url}/recommend", {"pod": pod, "k": 3})
    assert status == 200 and [n["node"] for n in reply["nodes"]] == ["e3"], reply  # the site's one GPU node
