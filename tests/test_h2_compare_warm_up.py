"""``iro compare`` warms every solver up before its first timed solve, on a built-in one-node one-pod
problem when no given problem has both a node and a pod (it skipped the warm-up, and the first timed
dqn solve counted torch's import: 6 s instead of 0.1 ms)."""

from __future__ import annotations

import json

import solvers
from iro_fed import cli
from iro_fed.cli import main

DOMAINS = [{"name": "edge-1", "kind": "edge"}]
NODES = [{"name": "n1", "domain": "edge-1", "capacity": {"cpu": 2000, "memory": 4096}}]
PODS = [{"name": "p1", "demand": {"cpu": 100, "memory": 128}}]


def _write(tmp_path, name: str, nodes: list, pods: list) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"domains": DOMAINS, "nodes": nodes, "workloads": pods}))
    return str(path)


def _record(monkeypatch) -> list[tuple[str, str, int, int]]:
    """(event, solver, nodes, pods) of each warm-up and each timed solve, in order."""
    events: list[tuple[str, str, int, int]] = []
    monkeypatch.setattr(cli, "warm_up", lambda name, settings, problem: events.append(
        ("warm-up", name, problem.num_nodes, problem.num_workloads)))
    make = solvers.make

    def recording_make(name: str, **settings):
        solver = make(name, **settings)
        solve = solver.solve

        def timed(problem):
            events.append(("solve", name, problem.num_nodes, problem.num_workloads))
            return solve(problem)

        solver.solve = timed
        return solver

    monkeypatch.setattr(solvers, "make", recording_make)
    return events


def test_compare_without_a_problem_with_a_node_and_a_pod_warms_up_on_a_built_in_one(tmp_path, monkeypatch) -> None:
    no_pods = _write(tmp_path, "no-pods.json", NODES, [])
    no_nodes = _write(tmp_path, "no-nodes.json", [], PODS)
    events = _record(monkeypatch)
    assert main(["compare", no_pods, no_nodes, "--solvers", "best-fit,kube-default", "--out", "-"]) == 0
    warm = [e for e in events if e[0] == "warm-up"]
    assert warm == [("warm-up", "best-fit", 1, 1), ("warm-up", "kube-default", 1, 1)]  # was: none


def test_compare_warms_each_solver_up_before_its_first_timed_solve(tmp_path, monkeypatch) -> None:
    # the first problem has no pod, the second both: the warm-up comes first, on the second's copy
    no_pods = _write(tmp_path, "no-pods.json", NODES, [])
    both = _write(tmp_path, "both.json", NODES, PODS)
    events = _record(monkeypatch)
    assert main(["compare", no_pods, both, "--solvers", "best-fit,kube-default", "--out", "-"]) == 0
    assert events == [
        ("warm-up", "best-fit", 1, 1), ("solve", "best-fit", 1, 0),
        ("warm-up", "kube-default", 1, 1), ("solve", "kube-default", 1, 0),
        ("solve", "best-fit", 1, 1), ("solve", "kube-default", 1, 1),
    ]
