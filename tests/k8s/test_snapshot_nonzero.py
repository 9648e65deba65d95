"""The snapshot's non-zero requests (kube-scheduler's NonZeroRequested) and the Problem fields
that carry them (``nonzero_demand``, ``initial_nonzero``).

Upstream (``framework/types.go`` ``calculateResource``, ``resourcehelper.PodRequests`` with
``NonMissingContainerRequests``): each container (app, init, sidecar) that has no cpu / memory
request gets 100m / 200 MiB for it, then the usual PodRequests formula, plus overhead.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from iro_fed.k8s.snapshot import ClusterConfig, ClusterModel, build_snapshot, pod_demand
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.problem_io import problem_from_dict
from tests.k8s.helpers import fit_and_balance
from tests.k8s.helpers import pod_with as _pod


def test_missing_request_gets_the_default_and_an_explicit_zero_stays_zero():
    d = pod_demand(_pod([{"requests": {"cpu": "0"}}]), ("cpu", "memory"))
    assert d.requests == {"cpu": 0.0, "memory": 0.0}
    assert d.nonzero == (0.0, 200.0)
    assert pod_demand(_pod([{}]), ("cpu", "memory")).nonzero == (100.0, 200.0)
    # A limit without a request is a request (API defaulting), so not missing.
    assert pod_demand(_pod([{"limits": {"cpu": "1"}}]), ("cpu", "memory")).nonzero == (1000.0, 200.0)


def test_defaults_are_per_container():
    d = pod_demand(_pod([{"requests": {"cpu": "200m", "memory": "256Mi"}}, {"requests": {"memory": "128Mi"}}, {}]),
                   ("cpu", "memory"))
    assert d.requests == {"cpu": 200.0, "memory": 384.0}
    assert d.nonzero == (200.0 + 100 + 100, 256.0 + 128 + 200)


def test_init_containers_sidecars_and_overhead_follow_pod_requests():
    # App {} -> (100, 200). Sidecar 50m -> (50, 200). Init 1Gi -> (100, 1024) + sidecar (50, 200).
    # max(app + sidecar (150, 400), init max (150, 1224)) + overhead 10m = (160, 1224).
    pod = _pod(
        [{}],
        init=[{"restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
              {"resources": {"requests": {"memory": "1Gi"}}}],
        overhead={"cpu": "10m"},
    )
    d = pod_demand(pod, ("cpu", "memory"))
    assert d.nonzero == (160.0, 1224.0)
    # The actual request of the same pod: max((50, 0), (50, 1024)) + 10m.
    assert d.requests == {"cpu": 60.0, "memory": 1024.0}


def test_a_resource_the_problem_lacks_has_a_zero_column():
    assert pod_demand(_pod([{}]), ("cpu",)).nonzero == (100.0, 0.0)
    snap = build_snapshot([make_node("n1")], [_pod([{}], node="n1")], [_pod([{}])], ClusterConfig(resources=("cpu",)))
    assert snap.problem.initial_nonzero.tolist() == [[100.0, 0.0]]
    assert snap.problem.nonzero_demand.tolist() == [[100.0, 0.0]]


def test_initial_nonzero_sums_the_bound_pods_and_skips_finished_and_malformed_ones():
    done = make_pod("done", cpu=None, memory=None, node="n1")
    done["status"] = {"phase": "Succeeded"}
    bad = make_pod("bad", node="n1")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    bound = [make_pod("be", cpu=None, memory=None, node="n1"), make_pod("half", cpu="1", memory=None, node="n1"),
             make_pod("full", cpu="250m", memory="1Gi", node="n2"), done, bad]
    model = ClusterModel([make_node("n1"), make_node("n2"), make_node("n3")], bound)
    assert model.problem.initial_nonzero.tolist() == [[1100.0, 400.0], [250.0, 1024.0], [0.0, 0.0]]
    assert model.problem.allocated.tolist() == [[1000.0, 0.0], [250.0, 1024.0], [0.0, 0.0]]
    assert any("bad" in w for w in model.warnings)
    # Not clamped to allocatable (kube's NonZeroRequested is not): 30 best-effort pods on 2 cpus.
    many = [make_pod(f"be{i}", cpu=None, memory=None, node="n1") for i in range(30)]
    assert ClusterModel([make_node("n1", cpu="2")], many).problem.initial_nonzero.tolist() == [[3000.0, 6000.0]]


def test_with_pods_carries_the_pending_pods_nonzero_and_keeps_the_nodes():
    model = ClusterModel([make_node("n1")], [make_pod("be", cpu=None, memory=None, node="n1")])
    snap = model.with_pods([_pod([{"requests": {"memory": "1Gi"}}]), make_pod("q", cpu="0", memory="0")])
    assert snap.problem.nonzero_demand.tolist() == [[100.0, 1024.0], [0.0, 0.0]]
    assert snap.problem.initial_nonzero.tolist() == [[100.0, 200.0]]
    assert model.with_pods([]).problem.nonzero_demand.shape == (0, 2)


def test_nodelist_mode_has_no_initial_nonzero():
    node = make_node("n1", annotations={"iro-fed.io/allocated": json.dumps({"cpu": "1"})})
    snap = build_snapshot([node], None, [make_pod("p")])
    assert snap.problem.initial_nonzero is None
    assert snap.problem.nonzero_demand.tolist() == [[500.0, 512.0]]


def _snap():
    return build_snapshot([make_node("n1"), make_node("n2")], [make_pod("be", cpu=None, memory=None, node="n1")],
                          [make_pod("a", cpu=None), make_pod("b")])


def test_replace_keeps_the_data_only_while_it_describes_the_problems_pods():
    p = _snap().problem
    assert p.replace(nodes=p.nodes).initial_nonzero.tolist() == [[100.0, 200.0], [0.0, 0.0]]
    assert p.replace(nodes=p.nodes).nonzero_demand.tolist() == [[100.0, 512.0], [500.0, 512.0]]
    # Another usage or other workloads without new data: none (kube-default falls back).
    assert p.replace(allocated=p.allocated * 2).initial_nonzero is None
    assert p.with_cluster(p.allocated, p.gpu_free).initial_nonzero is None
    assert p.replace(demand=p.demand).nonzero_demand is None
    assert p.replace(workloads=p.workloads[:1], demand=p.demand[:1], wl_gpu_count=p.wl_gpu_count[:1],
                     wl_gpu_milli=p.wl_gpu_milli[:1]).nonzero_demand is None
    # A subset of the workloads takes its rows.
    assert p.with_workloads([1]).nonzero_demand.tolist() == [[500.0, 512.0]]
    assert p.with_workloads([1]).initial_nonzero.tolist() == [[100.0, 200.0], [0.0, 0.0]]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("nonzero_demand", np.zeros((2, 3)), r"nonzero_demand: array has shape \(2, 3\), expected \(2, 2\)"),
        ("nonzero_demand", np.zeros(2), r"nonzero_demand: array has shape \(2,\), expected \(2, 2\)"),
        ("initial_nonzero", np.zeros((3, 2)), r"initial_nonzero: array has shape \(3, 2\), expected \(2, 2\)"),
        ("initial_nonzero", [[0.0, 0.0], [-1.0, 0.0]], r"initial_nonzero\[1, 0\] \(cpu\): must be finite and >= 0, got -1.0"),
        ("nonzero_demand", [[0.0, float("nan")], [0.0, 0.0]], r"nonzero_demand\[0, 1\] \(memory\): must be finite and >= 0"),
        ("nonzero_demand", [[0.0, float("inf")], [0.0, 0.0]], r"nonzero_demand\[0, 1\] \(memory\)"),
        ("initial_nonzero", [["x", 0], [0, 0]], r"initial_nonzero: expected numbers"),
    ],
)
def test_bad_nonzero_arrays_name_the_field(field, value, message):
    p = _snap().problem
    with pytest.raises(ValueError, match=message):
        p.replace(**{field: value})


def test_the_arrays_are_read_only():
    p = _snap().problem
    with pytest.raises(ValueError):
        p.nonzero_demand[0, 0] = 1.0
    with pytest.raises(ValueError):
        p.initial_nonzero[0, 0] = 1.0


# --- the cluster problem is built once, from node docs that carry nonzero_allocated ------------
# Before, ClusterModel built its problem from docs without it and then replaced initial_nonzero:
# the documents (``skeleton``, ``node_docs``) did not say what the problem held, so a problem
# rebuilt from them, or a node doc written as a problem file, lost the nodes' NonZeroRequested.


def test_the_cluster_documents_carry_the_nodes_nonzero_allocated():
    bound = [make_pod("be", cpu=None, memory=None, node="n1"), make_pod("half", cpu="1", memory=None, node="n2")]
    model = ClusterModel([make_node("n1"), make_node("n2"), make_node("n3")], bound)
    assert [d["nonzero_allocated"] for d in model.node_docs] == [
        {"cpu": 100.0, "memory": 200.0}, {"cpu": 1000.0, "memory": 200.0}, {"cpu": 0.0, "memory": 0.0}]
    again = problem_from_dict(model.skeleton)
    np.testing.assert_array_equal(again.initial_nonzero, model.problem.initial_nonzero)
    assert model.problem.initial_nonzero.tolist() == [[100.0, 200.0], [1000.0, 200.0], [0.0, 0.0]]
    # Only the scored resources the problem has; NodeList mode (no pods) has none.
    cpu_only = ClusterModel([make_node("n1")], bound[:1], ClusterConfig(resources=("cpu",)))
    assert cpu_only.node_docs[0]["nonzero_allocated"] == {"cpu": 100.0}
    assert "nonzero_allocated" not in ClusterModel([make_node("n1")], None).node_docs[0]


def test_a_bound_pod_asking_more_than_a_problem_number_still_builds_the_model():
    # 1Ei of memory is 1.1e12 MiB, past the problem file's largest number (1e10). The node's
    # NonZeroRequested is kept at 1e10: above any allocatable, so memory scores 0 as upstream.
    model = ClusterModel([make_node("n1", cpu="2", memory="4Gi")], [make_pod("huge", cpu="1", memory="1Ei", node="n1")])
    assert model.problem.initial_nonzero.tolist() == [[1000.0, 1e10]]
    assert any("exceeds allocatable" in w for w in model.warnings)
    # The pending pod (500m / 512Mi): cpu (2000 - 1500) * 100 // 2000 = 25, memory 0 -> 12.
    assert fit_and_balance(model.with_pods([make_pod("p")]).problem)[0] == [12]
