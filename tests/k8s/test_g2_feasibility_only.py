"""The resources a batch adds for fit (f17) are checked, not scored, and cost one model build.

Before: a batch asking for anything beyond the configured resources (a pod requesting
ephemeral-storage; a node with fewer free pod slots than the batch has pods) built the whole
ClusterModel twice (three times when a pod was invalid), and the added columns entered
utilization, cost and power: the same placement scored differently once an unrelated pod of the
batch requested ephemeral-storage.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed.k8s import scheduler as scheduler_mod
from iro_fed.k8s.snapshot import ClusterConfig, ClusterModel, build_snapshot
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from iro_fed.objective import evaluate
from tests.k8s.helpers import Clock, make_scheduler

CONFIG = ClusterConfig(resources=("cpu", "memory"))


def _node(name: str, cpu: str = "8") -> dict[str, Any]:
    node = make_node(name, cpu=cpu, memory="32Gi", zone="z1")
    for key in ("allocatable", "capacity"):
        node["status"][key]["ephemeral-storage"] = "100Gi"
    return node


def _eph(name: str, amount: str = "10Gi") -> dict[str, Any]:
    pod = make_pod(name, cpu="1", memory="1Gi", scheduler="iro")
    pod["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = amount
    return pod


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, np.ndarray]]:
    """The (problem, assignment) of each batch the scheduler scores."""
    seen: list[tuple[Any, np.ndarray]] = []
    real = scheduler_mod.evaluate

    def spy(problem: Any, assignment: np.ndarray, *a: Any, **kw: Any) -> Any:
        seen.append((problem, np.array(assignment)))
        return real(problem, assignment, *a, **kw)

    monkeypatch.setattr(scheduler_mod, "evaluate", spy)
    return seen


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per ClusterModel built."""
    count: list[int] = []
    real = ClusterModel.__init__

    def counting(self: ClusterModel, *a: Any, **kw: Any) -> None:
        count.append(1)
        real(self, *a, **kw)

    monkeypatch.setattr(ClusterModel, "__init__", counting)
    return count


def test_a_batch_is_scored_as_on_the_configured_resources(
    api: FakeApiServer, kubeconfig: str, clock: Clock, captured: list
):
    nodes = [_node("n0"), _node("n1", cpu="4")]
    bound = [make_pod("old", cpu="2", memory="2Gi", node="n0")]
    for obj in nodes:
        api.add_node(obj)
    api.add_pod(bound[0])
    batch = [make_pod("a", cpu="1", memory="1Gi", scheduler="iro"), _eph("e")]
    for pod in batch:
        api.add_pod(pod)
    s = make_scheduler(kubeconfig, clock, config=CONFIG)
    result = s.schedule_batch(s.ready_pods())
    assert {o.status for o in result.pods} == {"bound"}
    ((problem, assignment),) = captured
    assert "ephemeral-storage" in problem.resources  # checked for fit...
    assert problem.util_resources == ("cpu", "memory")  # ...not scored
    # The same placement scores the same as on the configured resources alone.
    names = [w.name for w in problem.workloads]
    # (build_snapshot widens the resources for its pods, as the scheduler: the configured ones alone here)
    plain = ClusterModel(nodes, bound, CONFIG).with_pods(
        sorted(batch, key=lambda p: names.index(f"default/{p['metadata']['name']}"))
    ).problem
    assert plain.resources == ("cpu", "memory")
    assert evaluate(problem, assignment).score == evaluate(plain, assignment).score
    # Pod a's placement alone scores as it would beside a pod that asks for nothing more.
    a = names.index("default/a")
    only_a = np.full(2, -1)
    only_a[a] = assignment[a]
    assert evaluate(problem, only_a).score == evaluate(plain, only_a).score
    assert result.score == evaluate(plain, assignment).score


def test_the_added_columns_bound_fit_and_leave_the_objective_and_placements_as_they_were():
    nodes = [_node(f"n{i}", cpu=str(4 + i)) for i in range(6)]
    bound = [make_pod(f"b{i}", cpu="500m", memory="1Gi", node=f"n{i % 3}") for i in range(5)]
    pending = [make_pod(f"p{k}", cpu="300m", memory="512Mi", scheduler="iro") for k in range(7)] + [_eph("e", "1Gi")]
    wide = ClusterModel(nodes, bound, CONFIG, pending=pending).with_pods(pending).problem
    plain = ClusterModel(nodes, bound, CONFIG).with_pods(pending).problem
    assert wide.resources == ("cpu", "memory", "ephemeral-storage")
    assert wide.feasibility_only == ("ephemeral-storage",)
    for k in range(5):
        a = np.arange(len(pending)) % (k + 2)
        assert evaluate(wide, a).score == evaluate(plain, a).score
    for name in ("best-fit", "greedy-objective", "dot-product"):
        assert solvers.make(name).solve(wide).assignment.tolist() == solvers.make(name).solve(plain).assignment.tolist()
    # And it bounds fit: ephemeral-storage past every node's is placed nowhere.
    huge = [_eph("huge", "200Gi")]
    problem = ClusterModel(nodes, bound, CONFIG, pending=huge).with_pods(huge).problem
    assert solvers.make("best-fit").solve(problem).assignment.tolist() == [-1]


def test_one_model_is_built_per_batch(api: FakeApiServer, kubeconfig: str, clock: Clock, builds: list):
    for i in range(2):
        api.add_node(_node(f"n{i}"))
    api.add_pod(_eph("e"))
    api.add_pod(make_pod("p", cpu="100m", scheduler="iro"))
    s = make_scheduler(kubeconfig, clock, config=CONFIG)
    builds.clear()
    result = s.schedule_batch(s.ready_pods())
    assert {o.status for o in result.pods} == {"bound"}
    assert len(builds) == 1
    # The error path (a pod the model cannot read) builds no other one either.
    api.add_pod(_eph("e2"))
    api.add_pod(_eph("bad", "lots"))
    s.pending._list()
    builds.clear()
    out = {o.key: o.status for o in s.schedule_batch(s.ready_pods()).pods}
    assert out == {"default/e2": "bound", "default/bad": "invalid"}
    assert len(builds) == 1


def test_feasibility_only_names_must_be_resources_of_the_problem():
    problem = build_snapshot(
        [_node("n0")], [], [_eph("e")], ClusterConfig(resources=("cpu", "memory", "ephemeral-storage"))
    ).problem
    assert problem.replace(feasibility_only=("ephemeral-storage",)).util_resources == ("cpu", "memory")
    with pytest.raises(ValueError, match=r"feasibility_only\[0\]: 'gpu' is not one of the resources"):
        problem.replace(feasibility_only=("gpu",))
    with pytest.raises(ValueError, match=r"feasibility_only\[0\]: 'cpu' counts in the objective"):
        problem.replace(feasibility_only=("cpu",))
    with pytest.raises(ValueError, match=r"feasibility_only\[1\]: 'memory' is repeated"):
        problem.replace(feasibility_only=("memory", "memory"))
