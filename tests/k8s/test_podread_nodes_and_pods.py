"""The shared Pod / Node reader (iro_fed.k8s.snapshot) reads zones, the GPU share annotation and
container names as Kubernetes does.

* A node's zone / region: kube's ``GetZoneKey`` (``component-helpers/node/topology``) reads
  ``failure-domain.beta.kubernetes.io/zone`` first and ``topology.kubernetes.io/zone`` only when
  the beta label is absent (region likewise); solvers.kube_default keys its node list the same way.
* ``iro-fed.io/gpu-milli``: plain ASCII decimal digits (as Go's ``strconv.Atoi`` reads it, sign aside).
* Containers and init containers share one name space: the API server refuses a repeated name.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from iro_fed.k8s import snapshot
from iro_fed.k8s.snapshot import PodSpecError, build_snapshot, pod_demand, workload_doc
from iro_fed.k8s.testing import make_node, make_pod
from solvers import kube_default
from solvers.kube_default import zone_interleaved_order

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
GA_ZONE = "topology.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
GA_REGION = "topology.kubernetes.io/region"
RESOURCES = ("cpu", "memory")
ANN = "iro-fed.io/gpu-milli"


def _domains(labels: list[dict[str, str]]) -> dict[str, str]:
    """Node name -> the domain the snapshot gives it, for nodes n0, n1, ... with these labels."""
    nodes = [make_node(f"n{i}", labels=lab) for i, lab in enumerate(labels)]
    problem = build_snapshot(nodes, [], []).problem
    return {n.name: problem.domains[problem.node_domain[i]].name for i, n in enumerate(problem.nodes)}


@pytest.mark.parametrize(
    ("labels", "domain"),
    [
        ({BETA_ZONE: "eu-a"}, "eu-a"),  # was "default": the beta label was not read
        ({BETA_ZONE: "eu-a", GA_REGION: "eu"}, "eu-a"),  # was "eu"
        ({GA_ZONE: "eu-b"}, "eu-b"),
        ({BETA_ZONE: "eu-a", GA_ZONE: "eu-b"}, "eu-a"),  # both: the beta one, as GetZoneKey (was "eu-b")
        ({BETA_REGION: "eu"}, "eu"),  # region only, beta (was "default")
        ({BETA_REGION: "eu", GA_REGION: "us"}, "eu"),  # was "us"
        ({GA_REGION: "us"}, "us"),
        ({BETA_ZONE: "", GA_ZONE: "eu-b", GA_REGION: "us"}, "us"),  # a present beta label wins even empty
        ({}, "default"),
    ],
)
def test_node_domain_reads_zone_and_region_as_get_zone_key(labels, domain):
    assert _domains([labels]) == {"n0": domain}


def test_snapshot_domains_group_nodes_as_kube_defaults_node_tree():
    # One list of labels, two readers: the snapshot's domains and kube-default's zone keys give
    # the same groups (the labels are read from one pair of constants).
    assert snapshot.ZONE_LABELS is kube_default.ZONE_LABELS
    assert snapshot.REGION_LABELS is kube_default.REGION_LABELS
    labels = [{BETA_ZONE: "a", GA_ZONE: "x"}, {GA_ZONE: "a"}, {BETA_ZONE: "b", GA_ZONE: "a"}, {BETA_ZONE: "a"}]
    nodes = [make_node(f"n{i}", labels=lab) for i, lab in enumerate(labels)]
    problem = build_snapshot(nodes, [], []).problem
    assert [problem.domains[d].name for d in problem.node_domain] == ["a", "a", "b", "a"]
    assert [problem.nodes[i].name for i in zone_interleaved_order(problem)] == ["n0", "n2", "n1", "n3"]


@pytest.mark.parametrize("text", ["5_00", " 500 ", "500 ", "\uff15\uff10\uff10", "\u0665\u0660\u0660", "500\n", "5e2", ""])
def test_gpu_milli_takes_plain_ascii_digits_only(text):
    pod = make_pod("p", annotations={ANN: text})
    with pytest.raises(PodSpecError) as info:
        pod_demand(pod, RESOURCES)
    assert info.value.field == f"metadata.annotations.{ANN}"
    assert "decimal digits only" in info.value.reason and repr(text) in info.value.reason
    with pytest.raises(PodSpecError, match=f"metadata.annotations.{ANN}"):
        build_snapshot([make_node("n0", gpus=1)], [], [pod])


@pytest.mark.parametrize(("text", "milli"), [("500", 500), ("1", 1), ("1000", 1000), ("0250", 250), ("0" * 5000 + "7", 7)])
def test_gpu_milli_plain_digits_are_read(text, milli):
    d = pod_demand(make_pod("p", annotations={ANN: text}), RESOURCES)
    assert (d.gpu_count, d.gpu_milli) == (1, milli)


@pytest.mark.parametrize("text", ["0", "1001", "0000", "9" * 5000, "-5"])
def test_gpu_milli_out_of_range_names_the_annotation(text):
    with pytest.raises(PodSpecError, match=r"must be 1\.\.1000") as info:
        pod_demand(make_pod("p", annotations={ANN: text}), RESOURCES)
    assert info.value.field == f"metadata.annotations.{ANN}"


def _pod(containers: list[str], init: list[str] = ()) -> dict[str, Any]:
    pod = make_pod("web", namespace="shop")
    app = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [dict(app, name=n) for n in containers]
    if init:
        pod["spec"]["initContainers"] = [dict(app, name=n) for n in init]
    return pod


@pytest.mark.parametrize(
    ("containers", "init", "field"),
    [
        (["app", "app"], [], "spec.containers[1].name"),
        (["app", "log", "app"], [], "spec.containers[2].name"),
        (["app"], ["app"], "spec.initContainers[0].name"),  # one name space: the init one is the repeat
        (["app"], ["setup", "setup"], "spec.initContainers[1].name"),
    ],
)
def test_duplicate_container_name_is_refused_naming_it(containers, init, field):
    pod = _pod(containers, init)
    with pytest.raises(PodSpecError) as info:
        pod_demand(pod, RESOURCES)
    assert info.value.field == field and "Duplicate value" in info.value.reason
    assert str(info.value).startswith(f"pod shop/web: {field}: Duplicate value:")
    with pytest.raises(PodSpecError, match=re.escape(f"pod shop/web: {field}: Duplicate value")):
        workload_doc(pod, RESOURCES, [], {})
    with pytest.raises(PodSpecError, match="Duplicate value"):
        build_snapshot([make_node("n0")], [], [pod])


def test_distinct_container_names_are_read():
    pod = _pod(["app", "log"], ["setup"])
    assert pod_demand(pod, RESOURCES).requests == {"cpu": 1000.0, "memory": 1024.0}
    assert len(build_snapshot([make_node("n0")], [], [pod]).problem.workloads) == 1
