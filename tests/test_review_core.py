"""Review of the core model: kube's FitError counts for nodes with too few GPU cards, YAML keys
that collide as text, and error messages for values whose repr would be huge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from iro_fed.feasibility import explain
from iro_fed.model import ClusterState
from iro_fed.problem_io import ProblemValidationError, load_problem, problem_from_dict


def _node(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "domain": "d", "capacity": {"cpu": 1000, "memory": 1000}, **extra}


def test_explain_counts_every_shortfall_of_a_node_with_too_few_gpu_cards() -> None:
    # kube-scheduler's NodeResourcesFit lists every insufficient resource of a node: a node with
    # one card for a 2-GPU pod that also lacks cpu is "Insufficient cpu" and "Insufficient nvidia.com/gpu".
    problem = problem_from_dict({
        "domains": [{"name": "d"}],
        "nodes": [_node("one-card", gpus=1), _node("no-gpu")],
        "workloads": [{"name": "w", "requests": {"cpu": 2000}, "gpu": {"count": 2}}],
    })
    assert explain(ClusterState(problem), 0) == "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient nvidia.com/gpu."


def test_explain_still_stops_at_a_failing_filter_before_resources() -> None:
    # A node that fails on its GPU model never reaches NodeResourcesFit: no cpu shortage counted.
    problem = problem_from_dict({
        "domains": [{"name": "d"}],
        "nodes": [_node("t4", gpus=1, gpu_model="T4"), _node("v100", gpus=2, gpu_model="V100")],
        "workloads": [{"name": "w", "requests": {"cpu": 2000}, "gpu": {"count": 2, "models": ["V100"]}}],
    })
    assert explain(ClusterState(problem), 0) == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't have an allowed GPU model."
    )


def test_yaml_keys_that_read_as_the_same_text_are_refused() -> None:
    # YAML's 1 and "1" are two keys that the loader reads as one name: which row or label is
    # meant is unknown (the last won silently, and the problem had two regions named '1').
    doc = yaml.safe_load("""
domains: [{name: d}]
latency_ms:
  1: {d: 5}
  "1": {d: 50}
nodes: [{name: a, domain: d, capacity: {cpu: 1000, memory: 1000}, labels: {7: x, "7": y}}]
workloads: [{name: w, requests: {cpu: 1}, user_region: "1", node_selector: {2: a, "2": b}}]
""")
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(doc)
    paths = [path for path, _ in exc.value.errors]
    assert paths == ["latency_ms.1", "nodes[0].labels.7", "workloads[0].node_selector.2"]
    assert "duplicate user region '1'" in str(exc.value)


class _Leaf:
    """A value whose repr counts how often it is taken (the loader must not walk a whole value)."""

    calls = 0

    def __repr__(self) -> str:
        _Leaf.calls += 1
        if _Leaf.calls > 10_000:
            raise AssertionError("the error message took the repr of the whole value")
        return "leaf"


def test_error_message_does_not_walk_a_huge_nested_value() -> None:
    value: Any = [_Leaf()] * 10
    for _ in range(8):
        value = [value] * 10  # 10**9 leaves, shared: cheap to hold, not to print
    _Leaf.calls = 0
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict({
            "resources": ["cpu", value],
            "domains": [{"name": "d"}],
            "nodes": [{"name": "n", "domain": "d", "capacity": {"cpu": value}}],
            "workloads": [{"name": "w", "gpu": {"models": value}}],
        })
    paths = [path for path, _ in exc.value.errors]
    assert paths == ["resources[1]", "nodes[0].capacity.cpu", "workloads[0].gpu.models"]
    assert all(len(msg) < 200 for _, msg in exc.value.errors)


def test_yaml_alias_bomb_is_refused_by_field(tmp_path: Path) -> None:
    # 500 bytes of YAML aliases that nest one list 10**9 times: the old message took its whole
    # repr (gigabytes; MemoryError after 40 s under a 3 GB limit).
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 10) + "]")
    lines += ["domains: [{name: d}]", "nodes: [{name: n, domain: d, capacity: {cpu: *i, memory: 1}}]"]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProblemValidationError) as exc:
        load_problem(path)
    assert [p for p, _ in exc.value.errors] == ["nodes[0].capacity.cpu"]
    assert exc.value.errors[0][1].startswith("expected a finite number, got list [[[[")


def test_the_extenders_reasons_list_every_shortfall_of_a_node_with_too_few_gpu_cards() -> None:
    # The extender's FailedNodes say the same as explain: the cpu shortage too, and the node stays
    # unresolvable (no preemption gives it a second card).
    import numpy as np

    from iro_fed.k8s.extender import node_reasons

    problem = problem_from_dict({
        "domains": [{"name": "d"}],
        "nodes": [_node("one-card", gpus=1), _node("no-gpu")],
        "workloads": [{"name": "w", "requests": {"cpu": 2000}, "gpu": {"count": 2}}],
    })
    reasons = node_reasons(ClusterState(problem), 0, np.arange(2))
    assert reasons == {0: ("Insufficient cpu, Insufficient nvidia.com/gpu", True),
                       1: ("Insufficient cpu, Insufficient nvidia.com/gpu", True)}
