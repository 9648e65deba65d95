"""The shared pod reader (iro_fed.k8s.snapshot) reads what the API server and kube-scheduler read.

* Container names: the API server refuses a pod whose ``spec.containers[i].name`` or
  ``spec.initContainers[i].name`` is missing or not a DNS-1123 label of at most 63 characters
  (``validateContainerCommon``); the reader refuses it too, naming the field and the value, in
  the scheduler's, extender's, webhook's and edge agent's readings alike. Only container names:
  the webhook reads a new pod under a placeholder pod name.
* ``iro-fed.io/gpu-milli`` as Go's ``strconv.Atoi`` reads it: an optional sign, ASCII digits,
  the 64-bit range; the value then 1..1000.
* Node affinity ``Gt`` / ``Lt`` integers as ``strconv.ParseInt``: a digit string longer than
  Python's int() takes (4,300 digits) is read, or refused by name, never a bare ValueError.
* ``spec.ephemeralContainers`` count for nothing: kube's ``PodRequests`` reads containers and
  init containers only (the API refuses resources on an ephemeral container).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from edge_agent.workload import BadRequest, pod_to_workload
from iro_fed.k8s.extender import Extender, ExtenderServer
from iro_fed.k8s.snapshot import ClusterModel, PodSpecError, build_snapshot, pod_demand, pod_requests, workload_doc
from iro_fed.k8s.testing import make_node, make_pod
from tests.k8s.helpers import serving
from tests.k8s.test_extender import post

RESOURCES = ("cpu", "memory")
ANN = "iro-fed.io/gpu-milli"


def _pod(containers: list[Any], init: list[Any] = ()) -> dict[str, Any]:
    """Pod shop/web whose containers (and init containers) have these names (None: no name)."""
    pod = make_pod("web", namespace="shop")
    app = {k: v for k, v in pod["spec"]["containers"][0].items() if k != "name"}

    def named(n: Any) -> dict[str, Any]:
        return dict(app) if n is None else dict(app, name=n)

    pod["spec"]["containers"] = [named(n) for n in containers]
    if init:
        pod["spec"]["initContainers"] = [named(n) for n in init]
    return pod


BAD_NAMES = [
    # (containers, init containers, field, reason): every pod here was read before
    ([None], [], "spec.containers[0].name", "Required value"),
    ([""], [], "spec.containers[0].name", "Required value"),
    (["app", None], [], "spec.containers[1].name", "Required value"),
    (["app"], [None], "spec.initContainers[0].name", "Required value"),
    (["App"], [], "spec.containers[0].name", "Invalid value: 'App': a lowercase RFC 1123 label"),
    (["app_1"], [], "spec.containers[0].name", "Invalid value: 'app_1': a lowercase RFC 1123 label"),
    (["-app"], [], "spec.containers[0].name", "Invalid value: '-app'"),
    (["app-"], [], "spec.containers[0].name", "Invalid value: 'app-'"),
    (["a.b"], [], "spec.containers[0].name", "Invalid value: 'a.b'"),  # a label: no dots
    (["app "], [], "spec.containers[0].name", "Invalid value: 'app '"),
    (["\u00e4pp"], [], "spec.containers[0].name", "Invalid value: '\u00e4pp'"),
    (["a" * 64], [], "spec.containers[0].name", f"Invalid value: '{'a' * 63}...': must be no more than 63 characters, got 64"),
    (["app"], ["Setup"], "spec.initContainers[0].name", "Invalid value: 'Setup'"),
    (["app"], ["setup", "x" * 100], "spec.initContainers[1].name",
     f"Invalid value: '{'x' * 63}...': must be no more than 63 characters, got 100"),
]


@pytest.mark.parametrize(("containers", "init", "field", "reason"), BAD_NAMES)
def test_container_name_the_api_server_refuses_is_refused_naming_field_and_value(containers, init, field, reason):
    pod = _pod(containers, init)
    with pytest.raises(PodSpecError) as info:
        pod_demand(pod, RESOURCES)
    assert info.value.field == field and info.value.reason.startswith(reason)
    assert str(info.value).startswith(f"pod shop/web: {field}: {reason}")
    for read in (lambda: pod_requests(pod, RESOURCES), lambda: workload_doc(pod, RESOURCES, [], {}),
                 lambda: build_snapshot([make_node("n0")], [], [pod])):
        with pytest.raises(PodSpecError, match=re.escape(f"{field}: {reason}")):
            read()
    # The edge agent's /recommend reading: a 400 naming the field under pod.
    with pytest.raises(BadRequest) as bad:
        pod_to_workload(pod, RESOURCES)
    assert bad.value.field == f"pod.{field}" and reason in str(bad.value)


def test_a_long_bad_name_is_quoted_short():
    pod = _pod(["A" * 1_000_000])
    with pytest.raises(PodSpecError) as info:
        pod_demand(pod, RESOURCES)
    assert len(str(info.value)) < 300 and "got 1000000" in str(info.value)


@pytest.mark.parametrize("names", [["a"], ["a" * 63], ["0abc"], ["web-1", "log"], ["1"]])
def test_dns_label_container_names_are_read(names):
    pod = _pod(names, ["setup", "sidecar-2"])
    assert pod_demand(pod, RESOURCES).requests == {"cpu": 500.0 * len(names), "memory": 512.0 * len(names)}
    assert len(build_snapshot([make_node("n0")], [], [pod]).problem.workloads) == 1


def test_a_new_pod_under_the_webhooks_placeholder_name_is_read():
    # The webhook names a pod that has only generateName "<prefix>(new)": pod names are not the
    # reader's to check, only container names.
    pod = _pod(["app"])
    pod["metadata"]["name"] = "web-(new)"
    snap = ClusterModel([make_node("n0")], []).with_pods([pod])
    assert [w.name for w in snap.problem.workloads] == ["shop/web-(new)"]


def test_a_bound_pod_with_a_bad_container_name_is_left_out_of_usage_with_a_warning():
    bad = _pod(["App"])
    bad["spec"]["nodeName"] = "n0"
    good = make_pod("ok", cpu="1", node="n0")
    model = ClusterModel([make_node("n0")], [bad, good])
    assert model.problem.allocated[0, 0] == 1000.0  # the good pod only
    assert any("spec.containers[0].name: Invalid value: 'App'" in w for w in model.warnings)


@pytest.fixture
def serve():
    yield from serving(lambda ext: ExtenderServer(ext, "127.0.0.1", 0, "/iro"))


def test_extender_refuses_a_pod_without_container_name_naming_it(serve):
    srv = serve(Extender())
    args = {"Pod": _pod([None]), "Nodes": {"items": [make_node("n0")]}}
    status, res = post(srv.url, "/iro/filter", args)
    assert status == 200 and "pod shop/web: spec.containers[0].name: Required value" in res["Error"]
    assert not res["Nodes"]
    status, res = post(srv.url, "/iro/prioritize", args)
    assert status == 400 and "spec.containers[0].name: Required value" in res["Error"]


# --- iro-fed.io/gpu-milli: what strconv.Atoi takes --------------------------------------------


@pytest.mark.parametrize(("text", "milli"), [
    ("+500", 500), ("+0500", 500), ("+1", 1), ("+1000", 1000),  # a leading + was refused before
    ("500", 500), ("0250", 250), ("+" + "0" * 5000 + "7", 7),
])
def test_gpu_milli_reads_what_atoi_reads(text, milli):
    pod = make_pod("p", annotations={ANN: text})
    d = pod_demand(pod, RESOURCES)
    assert (d.gpu_count, d.gpu_milli) == (1, milli)
    snap = build_snapshot([make_node("n0", gpus=1)], [], [pod])
    assert (int(snap.problem.wl_gpu_count[0]), int(snap.problem.wl_gpu_milli[0])) == (1, milli)
    wl = pod_to_workload(dict(pod, kind="Pod"), RESOURCES)
    assert wl["gpu"] == {"count": 1, "milli": milli}


@pytest.mark.parametrize("text", ["+", "-", "++5", "+-5", "-+5", " +5", "+5 ", "5+", "+5_00", "+\uff15", "0x10", "5.0", ""])
def test_gpu_milli_refuses_what_atoi_refuses_by_name(text):
    with pytest.raises(PodSpecError) as info:
        pod_demand(make_pod("p", annotations={ANN: text}), RESOURCES)
    assert info.value.field == f"metadata.annotations.{ANN}"
    assert "an optional sign and ASCII decimal digits only" in info.value.reason and repr(text) in info.value.reason


@pytest.mark.parametrize(("text", "beyond"), [
    ("-5", False), ("-0", False), ("+0", False), ("+1001", False),  # Atoi reads them; 1..1000 refuses them
    ("9223372036854775807", False),  # int64's largest: read, out of 1..1000
    ("9223372036854775808", True), ("-9223372036854775809", True), ("-" + "9" * 5000, True),  # Atoi: out of range
])
def test_gpu_milli_out_of_range_names_the_annotation(text, beyond):
    with pytest.raises(PodSpecError, match=r"must be 1\.\.1000") as info:
        pod_demand(make_pod("p", annotations={ANN: text}), RESOURCES)
    assert info.value.field == f"metadata.annotations.{ANN}"
    assert ("beyond the 64-bit range" in info.value.reason) == beyond
    assert len(info.value.reason) < 120


# --- node affinity Gt / Lt: strconv.ParseInt on any length ----------------------------------


def _gt(value: str) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": [value]}]}]}}}


def test_gt_value_with_leading_zeros_past_pythons_int_limit_is_read():
    # ParseInt takes any number of leading zeros; int() raised ValueError past 4,300 digits.
    nodes = [make_node("old", labels={"gen": "2"}), make_node("new", labels={"gen": "5"})]
    snap = build_snapshot(nodes, [], [make_pod("p", affinity=_gt("0" * 5000 + "3"))])
    label = next(iter(snap.problem.workloads[0].node_selector))
    assert [n.name for n in snap.problem.nodes if n.labels.get(label) == "true"] == ["new"]


def test_gt_value_past_int64_is_refused_by_name():
    path = ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].values[0]")
    with pytest.raises(PodSpecError) as info:
        build_snapshot([make_node("n0")], [], [make_pod("p", affinity=_gt("1" * 5000))])
    assert info.value.field == path and "operator Gt needs an integer value" in info.value.reason
    assert len(str(info.value)) < 300  # the value quoted short


def test_node_label_past_int64_does_not_match_gt():
    # A NodeList from an extender request is not validated: a huge label value is not an integer.
    nodes = [make_node("huge", labels={"gen": "9" * 5000}), make_node("new", labels={"gen": "5"})]
    snap = build_snapshot(nodes, [], [make_pod("p", affinity=_gt("1"))])
    label = next(iter(snap.problem.workloads[0].node_selector))
    assert [n.name for n in snap.problem.nodes if n.labels.get(label) == "true"] == ["new"]


# --- ephemeral containers ---------------------------------------------------------------------


def test_ephemeral_containers_add_nothing_to_the_request():
    # kube's PodRequests sums spec.containers and spec.initContainers only; an ephemeral container
    # (kubectl debug) runs on what the pod already has. Even one that (invalidly) sets resources.
    plain = _pod(["app"], ["setup"])
    debug = json.loads(json.dumps(plain))
    debug["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "targetContainerName": "app",
         "resources": {"requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}},
        {"name": "app", "image": "busybox"},  # even a name taken by an app container is not read
    ]
    debug["spec"]["nodeName"] = "n0"
    assert pod_requests(debug, RESOURCES) == pod_requests(plain, RESOURCES) == {"cpu": 500.0, "memory": 512.0,
                                                                                 "nvidia.com/gpu": 0.0}
    assert pod_demand(debug, RESOURCES) == pod_demand(plain, RESOURCES)
    model = ClusterModel([make_node("n0", gpus=1)], [debug])
    assert model.problem.allocated[0].tolist() == [500.0, 512.0] and model.warnings == []
    assert model.problem.gpu_free[0].tolist() == [1000]


def test_the_extender_snapshot_cache_does_not_hide_a_bad_container_name():
    # Nodes with a resourceVersion let the extender reuse a snapshot by the pod's shape; the shape
    # left container names out, so a pod like a good one got its snapshot and no error.
    node = make_node("n0")
    node["metadata"]["resourceVersion"] = "7"
    ext = Extender()
    good = _pod(["app"])
    assert ext.filter({"Pod": good, "Nodes": {"items": [node]}})["Error"] in ("", None)
    bad = _pod(["Bad_Name"])
    res = ext.filter({"Pod": bad, "Nodes": {"items": [node]}})
    assert "spec.containers[0].name" in (res["Error"] or "") and not res["Nodes"]
