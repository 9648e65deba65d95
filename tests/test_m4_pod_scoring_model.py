"""Problem.pod_scoring: optional, checked, and absent means kube-default scores as before."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed.model import ClusterState, PodScoring, SoftPodTerm
from iro_fed.problem_io import problem_from_dict


def _problem():
    return problem_from_dict({
        "resources": ["cpu", "memory"], "domains": [{"name": "d"}],
        "nodes": [{"name": n, "domain": "d", "capacity": {"cpu": c, "memory": 8192}} for n, c in (("a", 4000), ("b", 8000))],
        "workloads": [{"name": f"p{i}", "requests": {"cpu": 100, "memory": 100}} for i in range(2)]})


def _scoring(**change):
    args = {"topology_keys": ("kubernetes.io/hostname",), "topology": np.array([[0, 1]]), "group_names": ("g",),
            "group_counts": np.array([[0, 1]]), "members": np.array([[True, True]]),
            "terms": ((SoftPodTerm("spread", 0, 0, 1),), ())}
    args.update(change)
    return PodScoring(**args)


def test_without_pod_scoring_kube_default_scores_the_four_plugins_as_before():
    p = _problem()
    assert p.pod_scoring is None
    s = solvers.make("kube-default", seed=1)
    s.reset(p)
    scores = s.plugin_scores(ClusterState(p), 0, np.array([0, 1]))
    assert list(scores) == ["TaintToleration", "NodeAffinity", "NodeResourcesFit", "NodeResourcesBalancedAllocation"]


def test_pod_scoring_counts_the_pods_placed_before():
    p = _problem().replace(pod_scoring=_scoring())
    s = solvers.make("kube-default", seed=1)
    s.reset(p)
    state = ClusterState(p)
    assert s.plugin_scores(state, 0, np.array([0, 1]))["PodTopologySpread"].tolist() == [100, 0]
    state.place(1, 0)  # p1 is in the group: a now has one pod too
    assert s.plugin_scores(state, 0, np.array([0, 1]))["PodTopologySpread"].tolist() == [100, 100]
    state.remove(1)
    assert s.plugin_scores(state, 0, np.array([0, 1]))["PodTopologySpread"].tolist() == [100, 0]


@pytest.mark.parametrize(("change", "text"), [
    ({"topology": np.array([[0, 1, 2]])}, "pod_scoring.topology: array has shape"),
    ({"topology": np.array([[0, -2]])}, "pod_scoring.topology: domain ids are >= 0"),
    ({"group_counts": np.array([[0, -1]])}, "pod_scoring.group_counts: must be >= 0"),
    ({"members": np.array([[True]])}, "pod_scoring.members: array has shape"),
    ({"terms": ((SoftPodTerm("spread", 1, 0, 1),), ())}, "pod_scoring.terms[0][0].group: 1 is out of range"),
    ({"terms": ((SoftPodTerm("affinity", 0, 0, 0),), ())}, "pod_scoring.terms[0][0].value: must be 1..100"),
    ({"terms": ((SoftPodTerm("near", 0, 0, 1),), ())}, "pod_scoring.terms[0][0].kind: must be one of"),
    ({"terms": ((),)}, "pod_scoring.terms: 1 rows for 2 workloads"),
])
def test_a_bad_pod_scoring_is_refused_naming_the_field(change, text):
    with pytest.raises(ValueError, match=None) as exc:
        _problem().replace(pod_scoring=_scoring(**change))
    assert text in str(exc.value)


def test_other_workloads_or_nodes_drop_it_and_a_subset_keeps_its_rows():
    p = _problem().replace(pod_scoring=_scoring())
    assert p.replace(workloads=p.workloads[:1], demand=p.demand[:1], wl_gpu_count=p.wl_gpu_count[:1],
                     wl_gpu_milli=p.wl_gpu_milli[:1]).pod_scoring is None
    sub = p.with_workloads([1])
    assert sub.pod_scoring.terms == ((),) and sub.pod_scoring.members.tolist() == [[True]]
