"""kube-scheduler's wording for unplaced pods, and the checks on the inputs that feed it.

* a cordoned node (the ``node.kubernetes.io/unschedulable:NoSchedule`` taint) is "node(s) were
  unschedulable" (NodeUnschedulable runs before TaintToleration), unless the pod tolerates that
  taint; it was reported as an untolerated taint;
* the pod count is "Too many pods" (noderesources fit.go), the GPU cards "Insufficient
  nvidia.com/gpu" (the extender's word); they were "Insufficient pods" / "Insufficient gpu";
* nodes outside a NodeAffinity PreFilter node-name set (``iro-fed.io/node-names-*`` selector
  labels) are "node(s) didn't satisfy plugin(s) [NodeAffinity]", ahead of every other filter;
* ``nonzero_requests`` / ``nonzero_allocated`` below the requests / allocation are refused;
* a bad ``primary_params`` / ``fallback_params`` / ``solver_params`` is named as such.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed import ClusterState, problem_from_dict
from iro_fed.feasibility import (
    NODE_NAMES_FILTER,
    UNSCHEDULABLE_FILTER,
    explain,
    feasible_nodes,
    insufficient,
    static_filter,
    static_reasons,
)
from iro_fed.problem_io import ProblemValidationError

CORDON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
BATCH = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}


def node(name: str, cpu: float = 4000, **extra: Any) -> dict[str, Any]:
    return {"name": name, "domain": "d", "capacity": {"cpu": cpu, "memory": 8192}, **extra}


def problem(nodes: list[dict[str, Any]], **workload: Any):
    wl = {"name": "p", "requests": {"cpu": 500}, **workload}
    return problem_from_dict({"domains": [{"name": "d"}], "nodes": nodes, "workloads": [wl]})


# --- cordoned nodes ----------------------------------------------------------------------------


def test_a_cordoned_node_is_unschedulable_before_its_other_taints() -> None:
    p = problem(
        [
            node("cordoned", taints=[CORDON]),
            node("cordoned-and-tainted", taints=[BATCH, CORDON]),  # the other taint comes first in its list
            node("tainted", taints=[BATCH]),
            node("small", cpu=100),
        ]
    )
    assert explain(ClusterState(p), 0) == (
        "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: batch}, "
        "2 node(s) were unschedulable."
    )
    assert static_filter(p, 0).first_fail.tolist()[:2] == [UNSCHEDULABLE_FILTER] * 2


@pytest.mark.parametrize(
    "tolerations",
    [
        [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
        [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}],
        [{"operator": "Exists"}],
    ],
)
def test_a_pod_that_tolerates_the_cordon_passes_it_and_meets_the_other_taints(tolerations) -> None:
    p = problem(
        [node("cordoned", taints=[CORDON]), node("cordoned-and-tainted", taints=[CORDON, BATCH])],
        tolerations=tolerations,
    )
    fits = feasible_nodes(ClusterState(p), 0).tolist()
    if tolerations == [{"operator": "Exists"}]:  # tolerates everything
        assert fits == [True, True]
    else:
        assert fits == [True, False]
        assert (
            explain(ClusterState(p), 0)
            == "1/2 nodes are available: 1 node(s) had untolerated taint {dedicated: batch}."
        )


def test_the_cordon_changes_the_reason_only_not_which_nodes_fit() -> None:
    p = problem([node("cordoned", taints=[CORDON]), node("free")])
    assert feasible_nodes(ClusterState(p), 0).tolist() == [False, True]
    assert static_filter(p, 0).mask.tolist() == [False, True]


def test_the_unschedulable_key_with_a_value_is_an_ordinary_taint() -> None:
    # Not what cordoning writes (no value): read as the taint it is.
    p = problem([node("n", taints=[dict(CORDON, value="x")])])
    assert explain(ClusterState(p), 0) == (
        "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unschedulable: x}."
    )


# --- Too many pods, Insufficient nvidia.com/gpu ------------------------------------------------


def test_the_pod_count_is_too_many_pods() -> None:
    doc = {
        "resources": ["cpu", "memory", "pods"],
        "domains": [{"name": "d"}],
        "nodes": [
            {
                "name": "full",
                "domain": "d",
                "capacity": {"cpu": 4000, "memory": 8192, "pods": 1},
                "allocated": {"pods": 1},
            },
            {"name": "small", "domain": "d", "capacity": {"cpu": 100, "memory": 8192, "pods": 110}},
        ],
        "workloads": [{"name": "p", "requests": {"cpu": 500, "pods": 1}}],
    }
    assert (
        explain(ClusterState(problem_from_dict(doc)), 0)
        == "0/2 nodes are available: 1 Insufficient cpu, 1 Too many pods."
    )


def test_gpu_shortages_use_the_kubernetes_resource_name() -> None:
    p = problem(
        [node("no-gpu"), node("one-card", gpus=1), node("busy", gpus=2, gpu_free_milli=[0, 1000])],
        gpu={"count": 2},
    )
    # too few cards (static) and cards taken (now) alike
    assert explain(ClusterState(p), 0) == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    share = problem([node("busy", gpus=1, gpu_free_milli=[200])], gpu={"count": 1, "milli": 500})
    assert explain(ClusterState(share), 0) == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_insufficient_names_resources_as_kubernetes_does() -> None:
    assert insufficient("pods") == "Too many pods"
    assert insufficient("gpu") == "Insufficient nvidia.com/gpu"
    assert insufficient("cpu") == "Insufficient cpu"
    assert insufficient("example.com/fpga") == "Insufficient example.com/fpga"


# --- NodeAffinity PreFilter (matchFields metadata.name, a DaemonSet pod) -----------------------

NAMES = "iro-fed.io/node-names-0123456789ab"
AFFINITY = "iro-fed.io/affinity-0123456789ab"


def test_nodes_outside_the_prefilter_node_names_come_before_every_other_filter() -> None:
    p = problem(
        [
            node("pinned", cpu=100, labels={NAMES: "true", AFFINITY: "true"}),
            node("other", labels={AFFINITY: "true"}),
            node("other-cordoned-tainted", taints=[CORDON, BATCH]),
            node("other-no-affinity"),
        ],
        node_selector={NAMES: "true", AFFINITY: "true"},
    )
    assert explain(ClusterState(p), 0) == (
        "0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )
    assert static_filter(p, 0).first_fail.tolist() == [-1, NODE_NAMES_FILTER, NODE_NAMES_FILTER, NODE_NAMES_FILTER]


def test_inside_the_prefilter_set_the_rest_of_the_affinity_is_the_selector_reason() -> None:
    p = problem(
        [node("pinned", labels={NAMES: "true"}), node("pinned-cordoned", labels={NAMES: "true"}, taints=[CORDON])],
        node_selector={NAMES: "true", AFFINITY: "true"},
    )
    assert explain(ClusterState(p), 0) == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable."
    )


def test_static_reasons_cover_every_static_filter_but_the_taints() -> None:
    p = problem_from_dict(
        {
            "domains": [{"name": "d"}],
            "latency_ms": {"eu": {"d": 5}},
            "nodes": [node("far")],
            "workloads": [{"name": "p", "user_region": "eu", "max_latency_ms": 2.5}],
        }
    )
    reasons = static_reasons(p, 0)
    assert reasons[NODE_NAMES_FILTER] == "node(s) didn't satisfy plugin(s) [NodeAffinity]"
    assert reasons[UNSCHEDULABLE_FILTER] == "node(s) were unschedulable"
    assert explain(ClusterState(p), 0) == "0/1 nodes are available: 1 node(s) exceeded max latency 2.5 ms from eu."


# --- nonzero_requests / nonzero_allocated below the requests -----------------------------------


def nonzero_doc() -> dict[str, Any]:
    return {
        "domains": [{"name": "d"}],
        "nodes": [
            node("n0", allocated={"cpu": 300, "memory": 64}, nonzero_allocated={"cpu": 300, "memory": 264}),
            node("n1", nonzero_allocated={"cpu": 0, "memory": 0}),
        ],
        "workloads": [
            {"name": "p", "requests": {"cpu": 100}, "nonzero_requests": {"cpu": 100, "memory": 200}},
            {"name": "q", "requests": {"cpu": 250, "memory": 512}, "nonzero_requests": {"cpu": 250, "memory": 512}},
        ],
    }


def errors_of(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ProblemValidationError) as info:
        problem_from_dict(doc)
    return info.value.errors


def test_nonzero_amounts_equal_to_the_requests_load() -> None:
    p = problem_from_dict(nonzero_doc())
    np.testing.assert_array_equal(p.nonzero_demand, [[100, 200], [250, 512]])
    np.testing.assert_array_equal(p.initial_nonzero, [[300, 264], [0, 0]])


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("workloads/0/nonzero_requests/cpu", 10, "must be >= requests.cpu (100), got 10"),
        ("workloads/1/nonzero_requests/memory", 511.5, "must be >= requests.memory (512), got 511.5"),
        ("nodes/0/nonzero_allocated/cpu", 299, "must be >= allocated.cpu (300), got 299"),
        ("nodes/0/nonzero_allocated/memory", 0, "must be >= allocated.memory (64), got 0"),
    ],
)
def test_a_nonzero_amount_below_the_request_is_refused(path: str, value: float, message: str) -> None:
    doc = nonzero_doc()
    *parents, key = path.split("/")
    target: Any = doc
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[key] = value
    section, index, field, resource = parents[0], parents[1], parents[2], key
    assert errors_of(doc) == [(f"{section}[{index}].{field}.{resource}", message)]


def test_a_bad_request_gives_its_own_error_only() -> None:
    doc = nonzero_doc()
    doc["workloads"][0]["requests"]["cpu"] = "100m"  # reported; its floor is not checked against a guess
    assert [p for p, _ in errors_of(copy.deepcopy(doc))] == ["workloads[0].requests.cpu"]


# --- composite solvers name the *_params setting -----------------------------------------------


@pytest.mark.parametrize(
    ("name", "settings", "prefix"),
    [
        (
            "fallback",
            {"primary": "kube-default", "primary_params": {"seed": -1}},
            "solver 'fallback' setting 'primary_params': solver 'kube-default' setting 'seed': must be >= 0",
        ),
        (
            "fallback",
            {"primary": "kube-default", "primary_params": {"sede": 1}},
            "solver 'fallback' setting 'primary_params': solver 'kube-default': unknown setting(s) sede",
        ),
        (
            "fallback",
            {"fallback": "kube-default", "fallback_params": {"order": "x"}},
            "solver 'fallback' setting 'fallback_params': solver 'kube-default' setting 'order'",
        ),
        (
            "time-budget",
            {"solver": "kube-default", "solver_params": {"percentage_of_nodes_to_score": 500}},
            "solver 'time-budget' setting 'solver_params': solver 'kube-default' setting 'percentage_of_nodes_to_score'",
        ),
    ],
)
def test_a_bad_wrapped_setting_names_the_params_setting(name: str, settings: dict, prefix: str) -> None:
    with pytest.raises(solvers.InvalidSettingError) as info:
        solvers.make(name, **settings)
    assert str(info.value).startswith(prefix), str(info.value)


def test_an_unknown_wrapped_solver_still_names_the_solver_setting() -> None:
    with pytest.raises(
        solvers.InvalidSettingError, match="^solver 'fallback' setting 'primary': unknown solver 'nope'"
    ):
        solvers.make("fallback", primary="nope")
    with pytest.raises(solvers.InvalidSettingError, match="^solver 'time-budget' setting 'solver': unknown solver"):
        solvers.make("time-budget", solver="kube-defualt", solver_params={"seed": 1})
