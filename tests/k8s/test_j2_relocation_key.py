"""``iro scheduler``'s batch check: the search for another node (``_relocate``) is skipped for a pod
alike (for placement) to one that found none, and "alike" ignores what decides nothing: the per-pod
labels, annotations, ``spec.hostname`` / ``spec.subdomain`` and volumes of a StatefulSet's or an
indexed Job's pods; a label that some selector in play reads still tells two pods apart."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import iro_fed.k8s.scheduler as scheduler
from iro_fed.k8s.snapshot import ClusterModel
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState
from tests.k8s.helpers import ZONE


def anti(app: str, key: str = ZONE) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}


def stateful_pod(i: int, labels: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    """Replica ``i`` of StatefulSet db as its controller makes it: per-pod labels, hostname,
    subdomain and claim; the revision hash and the rest of the template shared."""
    pod = make_pod(f"db-{i}", cpu="1", scheduler="iro", affinity=kw.pop("affinity", anti("db")), labels={
        "app": "db", "controller-revision-hash": "db-6d4f", "statefulset.kubernetes.io/pod-name": f"db-{i}",
        "apps.kubernetes.io/pod-index": str(i), **(labels or {})}, annotations={"apps.kubernetes.io/pod-index": str(i)}, **kw)
    pod["spec"].update(hostname=f"db-{i}", subdomain="db", volumes=[
        {"name": "data", "persistentVolumeClaim": {"claimName": f"data-db-{i}"}}])
    return pod


def indexed_job_pod(i: int) -> dict[str, Any]:
    pod = make_pod(f"train-{i}", cpu="1", scheduler="iro", affinity=anti("train"), labels={
        "app": "train", "batch.kubernetes.io/job-completion-index": str(i), "job-name": "train"},
        annotations={"batch.kubernetes.io/job-completion-index": str(i)})
    pod["spec"].update(hostname=f"train-{i}", subdomain="train")
    return pod


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pods _relocate searched a node for, in order."""
    calls: list[str] = []
    real = scheduler._relocate

    def spy(model, problem, state, w, pod, earlier, memo, *rules):
        calls.append(pod["metadata"]["name"])
        return real(model, problem, state, w, pod, earlier, memo, *rules)

    monkeypatch.setattr(scheduler, "_relocate", spy)
    return calls


def check(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], bound: list[dict[str, Any]] | None = None,
          solved: list[int] | None = None) -> tuple[dict[int, str], list[int]]:
    """The batch check of ``pods`` all placed by the solver on node 0 (or ``solved``)."""
    model = ClusterModel(nodes, bound or [], pending=pods)
    problem = model.with_pods(pods).problem
    assignment = np.array(solved if solved is not None else [0] * len(pods))
    state = ClusterState.with_assignment(problem, assignment, {})
    conflicts, _ = scheduler._batch_conflicts(model, problem, pods, assignment, state)
    return conflicts, state.assignment.tolist()


def zones(n: int, per_zone: int = 2) -> list[dict[str, Any]]:
    return [make_node(f"n{z}{k}", cpu="16", zone=f"z{z}") for z in range(n) for k in range(per_zone)]


@pytest.mark.parametrize("make", [stateful_pod, indexed_job_pod], ids=["statefulset", "indexed-job"])
def test_replicas_with_per_pod_labels_search_once_when_no_zone_is_left(searches, make):
    """Six zone-anti-affine replicas over three zones, all stacked on n00 by the solver: r0 stays,
    r1 and r2 move to the other zones, r3 finds no node; r4 and r5 are alike (their per-pod labels
    are read by no selector) and are not searched again. Before: searched for each (5 searches)."""
    pods = [make(i) for i in range(6)]
    conflicts, assignment = check(zones(3), pods)
    assert sorted(conflicts) == [3, 4, 5]
    assert set(conflicts.values()) == {"node(s) didn't match pod anti-affinity rules"}
    assert sorted(a // 2 for a in assignment[:3]) == [0, 1, 2]  # one replica per zone
    assert assignment[3:] == [-1, -1, -1]
    assert len(searches) == 3 and searches[-1] == pods[3]["metadata"]["name"]


def test_the_skip_is_exact_searched_again_without_a_skip_gives_the_same_answer(searches, monkeypatch):
    """The same batch with the skip defeated (every key unique) gives the same conflicts and
    placements: the key only skips searches that would fail."""
    pods = [stateful_pod(i) for i in range(6)]
    skipped = check(zones(3), pods)
    n = len(searches)
    counter = iter(range(10**6))
    monkeypatch.setattr(scheduler, "_template_key", lambda *a: next(counter))
    assert check(zones(3), pods) == skipped
    assert len(searches) - n == 5 > n


def test_a_label_a_bound_pods_anti_affinity_reads_tells_replicas_apart(searches):
    """A bound pod in z1 repels tier=gold: db-1 (gold) finds no zone (z0 has db-0), but db-2
    (silver, otherwise alike) still moves to z1; its search is not skipped."""
    bound = [make_pod("guard", cpu="1", node="n10", labels={"app": "guard"}, affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"tier": "gold"}}, "topologyKey": ZONE}]}})]
    pods = [stateful_pod(0, {"tier": "silver"}), stateful_pod(1, {"tier": "gold"}), stateful_pod(2, {"tier": "silver"})]
    conflicts, assignment = check(zones(2), pods, bound)
    assert list(conflicts) == [1]
    assert assignment[0] == 0 and assignment[1] == -1 and assignment[2] in (2, 3)
    assert searches == ["db-1", "db-2"]


def test_a_per_pod_label_a_batch_pods_selector_reads_tells_replicas_apart(searches):
    """db-1 and db-2 differ only in their pod-name label, which the batch's first pod reads: it repels
    pod-name db-1 from every node (topology key kubernetes.io/os, one value): db-1 finds no node,
    db-2 is searched and moves to the other zone."""
    first = stateful_pod(0, affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE},
        {"labelSelector": {"matchLabels": {"statefulset.kubernetes.io/pod-name": "db-1"}},
         "topologyKey": "kubernetes.io/os"}]}})
    for node in (nodes := zones(2)):
        node["metadata"]["labels"]["kubernetes.io/os"] = "linux"
    pods = [first, stateful_pod(1), stateful_pod(2)]
    conflicts, assignment = check(nodes, pods)
    assert list(conflicts) == [1]
    assert assignment[2] in (2, 3)
    assert searches == ["db-1", "db-2"]
