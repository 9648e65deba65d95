"""Cluster snapshot: Kubernetes objects -> iro_fed.model.Problem."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.feasibility import explain, feasible_nodes
from iro_fed.k8s.snapshot import ClusterConfig, ClusterModel, PodSpecError, build_snapshot, pod_demand
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState
from iro_fed.objective import evaluate
from iro_fed.problem_io import ProblemValidationError
from tests.k8s.helpers import pod_with as _pod_with


def test_requests_sum_containers_and_take_the_largest_init_container():
    pod = _pod_with(
        [{"requests": {"cpu": "250m", "memory": "256Mi"}}, {"requests": {"cpu": "0.5", "memory": "1Gi"}}],
        init=[{"resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}, {"resources": {"requests": {"cpu": "100m", "memory": "2Gi"}}}],
    )
    d = pod_demand(pod, ("cpu", "memory"))
    assert d.requests == {"cpu": 2000.0, "memory": 2048.0}  # init max wins per resource


def test_sidecars_add_to_the_app_and_to_later_init_containers():
    pod = _pod_with(
        [{"requests": {"cpu": "1"}}],
        init=[{"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
              {"resources": {"requests": {"cpu": "1200m"}}}],
        overhead={"cpu": "100m"},
    )
    # max(app 1000 + sidecar 500, init 1200 + sidecar 500) + overhead 100
    assert pod_demand(pod, ("cpu", "memory")).requests["cpu"] == 1800.0


def test_limit_without_request_requests_the_limit_and_gpus_are_whole_cards():
    pod = _pod_with([{"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "2"}}])
    d = pod_demand(pod, ("cpu", "memory"))
    assert d.requests == {"cpu": 2000.0, "memory": 1024.0}
    assert (d.gpu_count, d.gpu_milli) == (2, 1000)


def test_gpu_share_annotation_asks_for_part_of_one_card():
    pod = make_pod("p", annotations={"iro-fed.io/gpu-milli": "250"})
    d = pod_demand(pod, ("cpu", "memory"))
    assert (d.gpu_count, d.gpu_milli) == (1, 250)
    pod = make_pod("p", gpus=2, annotations={"iro-fed.io/gpu-milli": "250"})
    with pytest.raises(PodSpecError, match="share of one card"):
        pod_demand(pod, ("cpu", "memory"))
    with pytest.raises(PodSpecError, match="1..1000"):
        pod_demand(make_pod("p", annotations={"iro-fed.io/gpu-milli": "1500"}), ("cpu", "memory"))


def test_invalid_quantity_names_pod_and_field():
    pod = make_pod("web", cpu="1.2.3", namespace="shop")
    with pytest.raises(ValueError, match=r"pod shop/web: spec.containers\[0\].resources.requests.cpu: invalid quantity '1.2.3'"):
        build_snapshot([make_node("n1")], [], [pod])


def test_nodes_map_to_domains_gpus_taints_and_usage():
    nodes = [
        make_node("a1", cpu="16", memory="64Gi", zone="eu-1a", region="eu", gpus=4, gpu_model="A100",
                  labels={"iro-fed.io/domain-kind": "edge"}),
        make_node("b1", cpu="8", memory="32Gi", region="us", taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]),
        make_node("c1", cpu="4", memory="8Gi"),
    ]
    nodes[2]["spec"]["unschedulable"] = True
    bound = [
        make_pod("x", cpu="1500m", memory="1Gi", node="a1", gpus=2),
        make_pod("y", cpu="500m", memory="512Mi", node="a1", annotations={"iro-fed.io/gpu-milli": "300"}),
        make_pod("z", cpu="1", memory="1Gi", node="a1", annotations={"iro-fed.io/gpu-milli": "400", "iro-fed.io/gpu-cards": "3"}),
        dict(make_pod("done", cpu="8", node="a1"), status={"phase": "Succeeded"}),
    ]
    snap = build_snapshot(nodes, bound, [make_pod("p", cpu="1")])
    p = snap.problem
    assert [n.name for n in p.nodes] == ["a1", "b1", "c1"]
    assert [n.domain for n in p.nodes] == ["eu-1a", "us", "default"]
    assert p.domains[p.domain_index["eu-1a"]].kind == "edge"
    assert p.capacity[0].tolist() == [16000.0, 65536.0]
    assert p.allocated[0].tolist() == [3000.0, 2560.0]  # the Succeeded pod does not count
    assert p.gpu_count.tolist() == [4, 0, 0]
    assert p.nodes[0].gpu_model == "A100"
    # two whole cards (0, 1), a 300 share best-fit on card 2, the annotated 400 on card 3
    assert p.gpu_free[0].tolist() == [0, 0, 700, 600]
    state = ClusterState(p)
    assert feasible_nodes(state, 0).tolist() == [True, False, False]
    assert "untolerated taint {dedicated: batch}" in explain(state, 0)
    assert "node(s) were unschedulable" in explain(state, 0)  # NodeUnschedulable, ahead of TaintToleration
    assert "untolerated taint {node.kubernetes.io/unschedulable" not in explain(state, 0)


def test_node_selector_tolerations_and_required_affinity_operators():
    nodes = [
        make_node("n1", labels={"disk": "ssd", "gen": "5"}, taints=[{"key": "gpu", "value": "", "effect": "NoSchedule"}]),
        make_node("n2", labels={"disk": "hdd", "gen": "3"}),
        make_node("n3", labels={"disk": "ssd", "gen": "2"}),
        make_node("n4", labels={"gen": "9"}),
    ]
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["2"]}, {"key": "disk", "operator": "Exists"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n4"]}]},
    ]}}}
    pods = [
        make_pod("a", affinity=aff),
        make_pod("b", affinity=aff, tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        make_pod("c", node_selector={"disk": "ssd"}, tolerations=[{"operator": "Exists"}]),
        make_pod("d", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "NotIn", "values": ["ssd"]}, {"key": "gen", "operator": "Lt", "values": ["5"]}]}]}}}),
        make_pod("e", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "DoesNotExist"}]}]}}}),
    ]
    snap = build_snapshot(nodes, [], pods)
    state = ClusterState(snap.problem)
    got = {w.name: [snap.problem.nodes[i].name for i in np.flatnonzero(feasible_nodes(state, k))]
           for k, w in enumerate(snap.problem.workloads)}
    assert got == {
        "default/a": ["n2", "n4"],        # n1 matches the term but its taint is not tolerated
        "default/b": ["n1", "n2", "n4"],
        "default/c": ["n1", "n3"],
        "default/d": ["n2"],              # NotIn ssd and gen < 5
        "default/e": ["n4"],
    }
    assert "didn't match Pod's node affinity/selector" in explain(state, 0)


def test_preferred_affinity_becomes_preferred_terms_on_the_matching_nodes():
    nodes = [make_node("n1", labels={"disk": "ssd"}), make_node("n2")]
    pod = make_pod("p", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 40, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd", "nvme"]}]}}]}})
    p = build_snapshot(nodes, [], [pod]).problem
    (term,) = p.workloads[0].preferred
    assert term.weight == 40
    (label,) = term.match_labels
    assert [label in n.labels for n in p.nodes] == [True, False]


def test_pod_annotations_carry_the_models_constraints_and_bad_ones_name_the_pod():
    cfg = ClusterConfig.from_dict({
        "domains": {"edge-1": {"kind": "edge", "carbon_intensity": 100}, "az-1": {"kind": "zone", "carbon_intensity": 400}},
        "latency_ms": {"users-eu": {"edge-1": 3, "az-1": 30}},
        "weights": {"carbon": 2.0},
    })
    nodes = [make_node("e1", zone="edge-1"), make_node("z1", zone="az-1")]
    pod = make_pod("api", annotations={"iro-fed.io/user-region": "users-eu", "iro-fed.io/max-latency-ms": "10",
                                       "iro-fed.io/class": "online"})
    snap = build_snapshot(nodes, [], [pod], cfg)
    state = ClusterState(snap.problem)
    assert feasible_nodes(state, 0).tolist() == [True, False]
    assert snap.problem.weights.carbon == 2.0
    bad = make_pod("api", annotations={"iro-fed.io/user-region": "users-mars"})
    with pytest.raises(PodSpecError, match=r"pod default/api: metadata.annotations.iro-fed.io/user-region: "
                                           r"unknown user region 'users-mars'"):
        build_snapshot(nodes, [], [bad], cfg)


def test_cluster_config_errors_name_the_field():
    with pytest.raises(ProblemValidationError, match=r"domains\[0\].kind"):
        ClusterConfig.from_dict({"domains": {"x": {"kind": "moon"}}})
    with pytest.raises(ProblemValidationError, match="unknown field"):
        ClusterConfig.from_dict({"nodes": []})


def test_snapshot_is_scored_by_the_objective_and_with_pods_reuses_the_cluster():
    nodes = [make_node(f"n{i}", cpu="4", memory="8Gi", zone=f"z{i % 2}") for i in range(4)]
    model = ClusterModel(nodes, [make_pod("b", cpu="1", node="n0")])
    s1 = model.with_pods([make_pod("p1", cpu="1")])
    s2 = model.with_pods([make_pod("p2", cpu="2"), make_pod("p3", cpu="3")])
    assert np.array_equal(s1.problem.allocated, model.problem.allocated)
    assert s1.problem.allocated[0].tolist() == [1000.0, 512.0]
    assert s2.problem.num_workloads == 2
    b = evaluate(s2.problem, np.array([0, 1]))
    assert b.placed == 2 and b.powered_on_nodes == 2


def test_usage_over_allocatable_is_clamped_with_a_warning():
    model = ClusterModel([make_node("n1", cpu="1")], [make_pod("a", cpu="2", node="n1")])
    assert model.problem.allocated[0, 0] == 1000.0
    assert any("exceeds allocatable" in w for w in model.warnings)


def test_nodelist_mode_reads_usage_from_the_node_annotation():
    node = make_node("n1", cpu="4", annotations={"iro-fed.io/allocated": '{"cpu": "1500m", "memory": "1Gi"}'})
    model = ClusterModel([node], None)
    assert model.problem.allocated[0].tolist() == [1500.0, 1024.0]
    bad = make_node("n2", annotations={"iro-fed.io/allocated": "{not json"})
    with pytest.raises(PodSpecError, match="node n2: metadata.annotations.iro-fed.io/allocated: not JSON"):
        ClusterModel([bad], None)


def _bad_pod(change):
    pod = make_pod("p")
    change(pod)
    return pod


def _set(path, value):
    """A change that sets ``pod[path[0]][path[1]]... = value``."""
    def change(pod):
        obj = pod
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value
    return change


_REQ = ("spec", "containers", 0, "resources", "requests")
_TERM = {"matchExpressions": [{"key": "disk", "operator": "In", "values": "ssd"}]}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_set(("spec", "containers"), {"name": "app"}), "spec.containers"),
        (_set(("spec", "containers"), ["app"]), "spec.containers[0]"),
        (_set(("spec", "containers", 0, "resources"), "lots"), "spec.containers[0].resources"),
        (_set(_REQ, ["cpu"]), "spec.containers[0].resources.requests"),
        (_set((*_REQ, "cpu"), [1]), "spec.containers[0].resources.requests.cpu"),
        (_set((*_REQ, "memory"), "-1Gi"), "spec.containers[0].resources.requests.memory"),
        (_set((*_REQ, "cpu"), float("inf")), "spec.containers[0].resources.requests.cpu"),
        (_set(("spec", "initContainers"), {"init": {}}), "spec.initContainers"),
        (_set(("spec", "initContainers"), [{"restartPolicy": ["Always"]}]), "spec.initContainers[0].restartPolicy"),
        (_set(("spec", "overhead"), ["100m"]), "spec.overhead"),
        (_set(("spec", "priority"), "high"), "spec.priority"),
        (_set(("spec", "priority"), [1]), "spec.priority"),
        (_set(("spec", "priority"), 1.5), "spec.priority"),
        (_set(("spec", "tolerations"), {"key": "gpu"}), "spec.tolerations"),
        (_set(("spec", "tolerations"), [{"key": 1}]), "spec.tolerations[0].key"),
        (_set(("spec", "nodeSelector"), ["ssd"]), "spec.nodeSelector"),
        (_set(("spec", "nodeSelector"), {"disk": 1}), "spec.nodeSelector.disk"),
        (_set(("spec", "affinity"), ["x"]), "spec.affinity"),
        (_set(("spec", "affinity"), {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [_TERM]}}}),
         "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values"),
        (_set(("spec", "affinity"), {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": [1], "preference": {}}]}}),
         "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
        (_set(("metadata", "annotations"), {"iro-fed.io/gpu-milli": 250}), "metadata.annotations.iro-fed.io/gpu-milli"),
        (_set(("spec",), "x"), "spec"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_malformed_pod_fields_raise_pod_spec_error_naming_the_json_path(change, field):
    # Before: TypeError / AttributeError (a container "app", priority [1], affinity ["x"]), a bare
    # QuantityError or a PodSpecError without .field, or a silently wrong read (resources "lots"
    # and overhead ["100m"] ignored, priority 1.5 read as 1, values "ssd" read as ["s", "s", "d"]).
    with pytest.raises(PodSpecError) as info:
        build_snapshot([make_node("n1", labels={"disk": "ssd"})], [], [_bad_pod(change)])
    assert info.value.field == field
    assert str(info.value).startswith(f"pod default/p: {field}: ")


def test_malformed_bound_pods_are_skipped_with_a_warning():
    bad_node_name = _bad_pod(_set(("spec", "nodeName"), ["n1"]))
    bad_request = _bad_pod(_set((*_REQ, "cpu"), [1]))
    bad_request["spec"]["nodeName"] = "n1"
    model = ClusterModel([make_node("n1")], [bad_node_name, bad_request, ["not a pod"], make_pod("ok", cpu="1", node="n1")])
    assert model.problem.allocated[0, 0] == 1000.0
    assert any("spec.nodeName: expected a string" in w for w in model.warnings)
    assert any("spec.containers[0].resources.requests.cpu" in w for w in model.warnings)


def _versioned_node(name, version, cpu="4", uid="u1"):
    node = make_node(name, cpu=cpu)
    node["metadata"].update(uid=uid, resourceVersion=version)
    return node


def test_node_cache_keys_on_string_metadata_only():
    cache: dict = {}
    assert ClusterModel([_versioned_node("n1", "7")], None, doc_cache=cache).problem.capacity[0, 0] == 4000.0
    # The same uid, name and resourceVersion: the cached parse is used (even if the body differs).
    assert ClusterModel([_versioned_node("n1", "7", cpu="8")], None, doc_cache=cache).problem.capacity[0, 0] == 4000.0
    # A new resourceVersion: parsed again.
    assert ClusterModel([_versioned_node("n1", "8", cpu="8")], None, doc_cache=cache).problem.capacity[0, 0] == 8000.0
    # Before: a resourceVersion 1 was cached, and True (== 1, same hash) hit that entry with the
    # other node's capacity; a list crashed with TypeError (unhashable).
    for field, value in (("resourceVersion", 1), ("resourceVersion", True), ("resourceVersion", ["8"]),
                         ("uid", {"u": 1}), ("name", 5)):
        node = _versioned_node("n1", "8", cpu="16")
        node["metadata"][field] = value
        with pytest.raises(PodSpecError) as info:
            ClusterModel([node], None, doc_cache=cache)
        assert info.value.field == f"metadata.{field}"
        assert f"metadata.{field}: expected a string" in str(info.value)
    with pytest.raises(PodSpecError, match=r"node: expected a v1.Node object, got list"):
        ClusterModel([["n1"]], None, doc_cache=cache)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_set(("status",), ["x"]), "status"),
        (_set(("status", "allocatable"), "8"), "status.allocatable"),
        (_set(("status", "allocatable", "cpu"), [8]), "status.allocatable.cpu"),
        (_set(("spec", "taints"), {"key": "gpu"}), "spec.taints"),
        (_set(("spec", "taints"), [{"key": "gpu", "effect": 1}]), "spec.taints[0].effect"),
        (_set(("spec", "unschedulable"), "false"), "spec.unschedulable"),
        (_set(("metadata", "labels"), {"zone": 1}), "metadata.labels.zone"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_malformed_node_fields_name_the_json_path(change, field):
    node = make_node("n1")
    change(node)
    with pytest.raises(PodSpecError) as info:
        ClusterModel([node], [])
    assert info.value.field == field
    assert str(info.value).startswith(f"node n1: {field}: ")


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"resources": 5}, "resources"),
        ({"resources": "cpu"}, "resources"),
        ({"weights": 5}, "weights"),
        ({"latency_ms": ["users"]}, "latency_ms"),
        ({"latency_ms": {"users": 5}}, "latency_ms.users"),
        ({"domains": [5]}, "domains[0]"),
        ({"domains": [{"kind": "zone"}]}, "domains[0].name"),
        ({"domains": [{"name": ["az"]}]}, "domains[0].name"),
    ],
)
def test_cluster_config_of_the_wrong_shape_names_the_field(doc, field):
    # Each raised a TypeError (or built a nonsense config) before: tuple(5), dict(5), dict(["users"]).
    with pytest.raises(ProblemValidationError) as info:
        ClusterConfig.from_dict(doc, source="cluster.yaml")
    assert any(path == field for path, _ in info.value.errors), info.value.errors


def test_gt_and_lt_read_label_values_as_kube_does():
    """kube reads Gt/Lt values with Go's strconv.ParseInt(v, 10, 64): '1_000', ' 7', '٣' (an
    Arabic-Indic three) and 2**63 are not integers there, so such a node never matches; Python's
    int() accepted the first three. A sign is fine."""
    labels = {"a": "1_000", "b": " 7", "c": "\u0663", "d": str(2**63), "e": "+9", "f": "-1"}
    nodes = [make_node(f"n-{k}", labels={"gen": v}) for k, v in labels.items()]
    gt = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["-5"]}]}]}}}
    snap = build_snapshot(nodes, [], [make_pod("p", affinity=gt)])
    state = ClusterState(snap.problem)
    assert [snap.problem.nodes[i].name for i in np.flatnonzero(feasible_nodes(state, 0))] == ["n-e", "n-f"]
    bad = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["1_0"]}]}]}}}
    with pytest.raises(PodSpecError, match=r"values\[0\].*needs an integer value, got '1_0'"):
        build_snapshot(nodes, [], [make_pod("q", affinity=bad)])
