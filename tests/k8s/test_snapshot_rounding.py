"""A pod's request as kube computes it: summed exactly, rounded up once, pod-level resources.

Upstream (``component-helpers/resource/helpers.go`` ``PodRequests``; ``framework/types.go``
``calculateResource`` / ``Resource.Add``): container requests are ``resource.Quantity`` values
added exactly; the pod's total (overhead included) is converted once, cpu with ``MilliValue``
and memory with ``Value``, both rounding up. With PodLevelResources, ``spec.resources.requests``
replaces the containers' aggregate for cpu, memory (and hugepages), before the overhead is added,
for the non-zero request as well (so its 100m / 200 MiB default applies only when neither the
pod nor the container requests the resource).

Before: each container's quantity was rounded up on its own (two containers of 0.4m requested
2m, kube says 1m) and pod-level resources were not read (such a pod looked best-effort).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from iro_fed.k8s.snapshot import PodSpecError, build_snapshot, pod_demand, pod_requests
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.problem_io import problem_from_dict, problem_to_dict
from tests.k8s.helpers import fit_and_balance

R = ("cpu", "memory")
MIB = 2**20


def pod(containers: list[dict[str, Any]], *, node: str | None = None, name: str = "p", **spec: Any) -> dict[str, Any]:
    p = make_pod(name, node=node)
    p["spec"]["containers"] = [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)]
    p["spec"].update(spec)
    return p


# --- rounding ---------------------------------------------------------------------------------


def test_a_tenth_of_a_millicore_requests_one_millicore():
    d = pod_demand(pod([{"requests": {"cpu": "0.0001", "memory": "1.5"}}]), R)
    assert d.requests == {"cpu": 1.0, "memory": 2 / MIB}  # 0.1m -> 1m; 1.5 bytes -> 2 bytes
    assert d.nonzero == (1.0, 2 / MIB)


def test_the_pods_total_is_rounded_once_not_each_container():
    two = [{"requests": {"cpu": "0.0004", "memory": "1.5"}}] * 2
    d = pod_demand(pod(two), R)
    # 0.4m + 0.4m = 0.8m -> 1m (2m when each was rounded); 1.5 + 1.5 = 3 bytes (4 before).
    assert d.requests == {"cpu": 1.0, "memory": 3 / MIB}
    assert d.nonzero == (1.0, 3 / MIB)
    # Overhead joins the exact sum: 0.5m + 0.5m -> 1m.
    assert pod_requests(pod([{"requests": {"cpu": "0.0005"}}], overhead={"cpu": "0.0005"}), R)["cpu"] == 1.0
    # Init containers compare exactly too: max(0.3m + 0.3m, 0.5m) = 0.6m -> 1m.
    init = pod([{"requests": {"cpu": "0.0003"}}] * 2, initContainers=[{"name": "i", "resources": {"requests": {"cpu": "0.0005"}}}])
    assert pod_requests(init, R)["cpu"] == 1.0


def test_the_non_zero_request_is_rounded_once():
    # Memory missing in both: 2 x 200 MiB; cpu 0.8m -> 1m (2m before).
    assert pod_demand(pod([{"requests": {"cpu": "0.0004"}}] * 2), R).nonzero == (1.0, 400.0)


def test_bound_pods_round_per_pod_as_node_info_adds_them():
    bound = [pod([{"requests": {"cpu": "0.0004", "memory": "1Gi"}}] * 2, node="n1", name=f"b{i}") for i in range(3)]
    problem = build_snapshot([make_node("n1")], bound, []).problem
    # Each pod 1m (NodeInfo adds each pod's MilliValue): 3m, not 6m and not ceil(2.4m) = 3m by chance.
    assert problem.allocated[0].tolist() == [3.0, 6144.0]
    assert problem.initial_nonzero.tolist() == [[3.0, 6144.0]]


def test_rounding_changes_the_kube_default_score():
    # Node 100m / 4Gi; the pod 0.4m + 0.4m cpu, 512Mi + 512Mi memory. LeastAllocated:
    # cpu (100 - 1) * 100 // 100 = 99, memory (4096 - 1024) * 100 // 4096 = 75 -> (99 + 75) // 2 = 87
    # (cpu 2m before: 98 -> 86).
    pending = [pod([{"requests": {"cpu": "0.0004", "memory": "512Mi"}}] * 2)]
    problem = build_snapshot([make_node("n1", cpu="100m", memory="4Gi")], [], pending).problem
    assert problem.demand.tolist() == [[1.0, 1024.0]]
    assert fit_and_balance(problem)[0] == [87]


# --- pod-level resources (PodLevelResources) ----------------------------------------------------


def test_pod_level_requests_replace_the_containers_sum():
    d = pod_demand(pod([{"requests": {"cpu": "200m", "memory": "256Mi"}}, {}], resources={"requests": {"cpu": "1", "memory": "2Gi"}}), R)
    assert d.requests == {"cpu": 1000.0, "memory": 2048.0}
    assert d.nonzero == (1000.0, 2048.0)  # no 100m / 200 MiB for the second container: the pod names both


def test_a_resource_the_pod_level_does_not_name_comes_from_the_containers():
    d = pod_demand(pod([{}, {"requests": {"memory": "128Mi"}}], resources={"requests": {"cpu": "500m"}}), R)
    assert d.requests == {"cpu": 500.0, "memory": 128.0}
    # cpu from the pod; memory per container: 200 MiB default for the first, 128 MiB -> 328.
    assert d.nonzero == (500.0, 328.0)


def test_overhead_is_added_to_the_pod_level_request_before_rounding():
    p = pod([{}], resources={"requests": {"cpu": "0.0005"}}, overhead={"cpu": "0.0005", "memory": "10Mi"})
    assert pod_requests(p, R) == {"cpu": 1.0, "memory": 10.0, "nvidia.com/gpu": 0.0}
    assert pod_requests(pod([{}], resources={"requests": {"cpu": "500m"}}, overhead={"cpu": "50m"}), R)["cpu"] == 550.0


def test_a_pod_level_limit_without_a_request_is_defaulted_as_the_api_server_does():
    # defaultPodRequests: cpu, which a container requests, defaults to the containers' 300m;
    # memory, which none requests, to the pod-level limit 1Gi.
    d = pod_demand(pod([{"requests": {"cpu": "300m"}}, {}], resources={"limits": {"cpu": "2", "memory": "1Gi"}}), R)
    assert d.requests == {"cpu": 300.0, "memory": 1024.0}
    assert d.nonzero == (300.0, 1024.0)  # the defaulted pod-level cpu leaves no container missing


def test_pod_level_hugepages_and_unsupported_names():
    res = ("cpu", "memory", "hugepages-2Mi", "ephemeral-storage")
    p = pod([{"requests": {"hugepages-2Mi": "2Mi", "ephemeral-storage": "100Mi"}}],
            resources={"requests": {"hugepages-2Mi": "4Mi", "ephemeral-storage": "1Gi"}})
    got = pod_requests(p, res)
    assert got["hugepages-2Mi"] == 4.0  # pod-level
    assert got["ephemeral-storage"] == 100.0  # not a pod-level resource: the containers' sum


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"requests": {"cpu": "lots"}}, "spec.resources.requests.cpu"),
        ({"requests": {"memory": "-1Gi"}}, "spec.resources.requests.memory"),
        ({"limits": {"cpu": True}}, "spec.resources.limits.cpu"),
        ({"requests": ["cpu"]}, "spec.resources.requests"),
        ("1", "spec.resources"),
    ],
)
def test_bad_pod_level_resources_name_the_field(resources, field):
    with pytest.raises(PodSpecError) as info:
        pod_demand(pod([{}], resources=resources), R)
    assert info.value.field == field, info.value


def test_pod_level_requests_change_the_kube_default_score():
    # Node 2 cpu / 4Gi; the pod asks 1 cpu / 1Gi at pod level, its container nothing. Fit:
    # cpu (2000 - 1000) * 100 // 2000 = 50, memory (4096 - 1024) * 100 // 4096 = 75 -> 62.
    # Balance: |0.5 - 0.25| / 2 = 0.125 -> 87.5 -> 87. (Read as best-effort before: fit 95,
    # balance skipped.)
    pending = [pod([{}], resources={"requests": {"cpu": "1", "memory": "1Gi"}})]
    problem = build_snapshot([make_node("n1", cpu="2", memory="4Gi")], [], pending).problem
    assert fit_and_balance(problem) == ([62], [87])


def test_a_bound_pod_holds_its_pod_level_request():
    bound = [pod([{}], node="n1", resources={"requests": {"cpu": "1", "memory": "1Gi"}})]
    problem = build_snapshot([make_node("n1")], bound, []).problem
    assert problem.allocated.tolist() == [[1000.0, 1024.0]]
    assert problem.initial_nonzero.tolist() == [[1000.0, 1024.0]]


# --- a snapshot written as a problem file scores the same -----------------------------------------


def test_a_snapshot_problem_file_keeps_kube_defaults_scores():
    bound = [make_pod("old", cpu=None, memory=None, node="n1")]
    pending = [pod([{"requests": {"cpu": "200m", "memory": "256Mi"}}, {"requests": {"memory": "128Mi"}}])]
    problem = build_snapshot([make_node("n1", cpu="2", memory="4Gi"), make_node("n2", cpu="2", memory="4Gi")],
                             bound, pending).problem
    again = problem_from_dict(problem_to_dict(problem))
    np.testing.assert_array_equal(again.nonzero_demand, problem.nonzero_demand)
    np.testing.assert_array_equal(again.initial_nonzero, problem.initial_nonzero)
    # n1: cpu (2000 - 100 - 300) * 100 // 2000 = 80, memory (4096 - 200 - 384) * 100 // 4096 = 85 -> 82;
    # n2: cpu 1700 -> 85, memory 3712 -> 90 -> 87. (Read back without them, by kube-default's
    # fallback rule, both nodes scored 90: the bound best-effort pod and the missing cpu counted 0.)
    assert fit_and_balance(again)[0] == fit_and_balance(problem)[0] == [82, 87]
