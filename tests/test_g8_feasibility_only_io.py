"""``feasibility_only`` in the problem file (g8).

Before: ``problem_to_dict`` dropped ``Problem.feasibility_only`` and ``problem_from_dict`` had no
field to read it from, so a problem built from a Kubernetes snapshot (resources a batch requests
beyond the configured ones: fit only) and written to a file came back with those resources
counted in utilization, cost and power: the same assignment scored differently (utilization
18.75 % before, 45.8 % after the round trip in the problem below).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed.cli import main
from iro_fed.k8s.snapshot import ClusterConfig, ClusterModel
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import Problem
from iro_fed.objective import evaluate
from iro_fed.problem_io import (
    ProblemValidationError,
    load_problem,
    problem_from_dict,
    problem_to_dict,
    unknown_fields,
    write_problem,
)

FPGA = "example.com/fpga"


def _doc(**extra: Any) -> dict[str, Any]:
    return {
        "resources": ["cpu", "memory", FPGA],
        "domains": [{"name": "a", "price_per_hour": {"cpu": 0.05, "memory": 0.01}}],
        "nodes": [
            {"name": "n0", "domain": "a", "capacity": {"cpu": 4000, "memory": 8192, FPGA: 1}},
            {"name": "n1", "domain": "a", "capacity": {"cpu": 4000, "memory": 8192, FPGA: 8}},
        ],
        "workloads": [
            {"name": "w0", "requests": {"cpu": 1000, "memory": 1024, FPGA: 1}},
            {"name": "w1", "requests": {"cpu": 500, "memory": 512}},
        ],
        **extra,
    }


@pytest.fixture
def problem() -> Problem:
    return problem_from_dict(_doc()).replace(feasibility_only=(FPGA,))


ASSIGNMENTS = [[0, 0], [1, 1], [0, 1], [1, -1]]


def _same_scores(a: Problem, b: Problem) -> None:
    for x in ASSIGNMENTS:
        assert evaluate(a, np.array(x)).to_dict() == evaluate(b, np.array(x)).to_dict(), x


def test_dict_round_trip_keeps_feasibility_only_and_the_score(problem: Problem) -> None:
    doc = problem_to_dict(problem)
    assert doc["feasibility_only"] == [FPGA]
    back = problem_from_dict(doc)
    assert back.feasibility_only == (FPGA,)
    assert back.util_resources == ("cpu", "memory")
    _same_scores(problem, back)
    assert problem_to_dict(back) == doc


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_file_round_trip_keeps_feasibility_only(problem: Problem, tmp_path, suffix: str) -> None:
    path = tmp_path / f"p{suffix}"
    write_problem(problem, path)
    back = load_problem(path)
    assert back.feasibility_only == (FPGA,)
    _same_scores(problem, back)
    for name in ("best-fit", "greedy-objective"):
        assert solvers.make(name).solve(back).assignment.tolist() == solvers.make(name).solve(problem).assignment.tolist()


def test_written_only_when_set() -> None:
    plain = problem_from_dict(_doc())
    assert "feasibility_only" not in problem_to_dict(plain)
    assert problem_from_dict(_doc(feasibility_only=[])).feasibility_only == ()
    assert problem_from_dict(_doc(feasibility_only=None)).feasibility_only == ()


def test_read_from_a_file_and_not_noted_as_unknown(tmp_path, capsys) -> None:
    doc = _doc(feasibility_only=[FPGA])
    assert unknown_fields(doc) == []
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    assert load_problem(path).feasibility_only == (FPGA,)
    assert main(["validate", str(path)]) == 0
    assert "unknown field" not in capsys.readouterr().err


def test_yaml_block_list(tmp_path) -> None:
    import yaml

    doc = _doc()
    path = tmp_path / "p.yml"
    path.write_text(yaml.safe_dump({"feasibility_only": [FPGA], **doc}, sort_keys=False))
    assert "feasibility_only:\n- example.com/fpga\n" in path.read_text()
    assert load_problem(path).feasibility_only == (FPGA,)


def test_validation_reports_every_bad_name_with_its_path() -> None:
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(_doc(feasibility_only=[FPGA, "gpu", "cpu", FPGA, 3, "", "disk"]))
    res = ["cpu", "memory", FPGA]
    assert exc.value.errors == [
        ("feasibility_only[1]", f"'gpu' is not one of the resources {res}"),
        ("feasibility_only[2]", "'cpu' counts in the objective (the power model uses CPU utilization)"),
        ("feasibility_only[3]", f"'{FPGA}' is repeated"),
        ("feasibility_only[4]", "expected a resource name, got 3"),
        ("feasibility_only[5]", "expected a resource name, got ''"),
        ("feasibility_only[6]", f"'disk' is not one of the resources {res}"),
    ]


def test_not_a_list_is_refused() -> None:
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(_doc(feasibility_only=FPGA))
    assert exc.value.errors == [("feasibility_only", f"expected a list, got string '{FPGA}'")]


@pytest.mark.parametrize("names", [["gpu"], ["cpu"], [FPGA, FPGA], ["memory", "disk"]])
def test_messages_are_the_models(names: list[str]) -> None:
    """A file refuses what ``Problem(feasibility_only=...)`` refuses, in the same words."""
    with pytest.raises(ValueError) as built:
        problem_from_dict(_doc()).replace(feasibility_only=tuple(names))
    with pytest.raises(ProblemValidationError) as loaded:
        problem_from_dict(_doc(feasibility_only=names))
    path, msg = loaded.value.errors[0]
    assert str(built.value) == f"{path}: {msg}"


def test_validate_command_exits_2_naming_the_entry(tmp_path, capsys) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_doc(feasibility_only=["memory", "gpu"])))
    assert main(["validate", str(path)]) == 2
    assert "feasibility_only[1]: 'gpu' is not one of the resources" in capsys.readouterr().err


def test_a_mistyped_resources_list_gives_no_follow_up_errors() -> None:
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(_doc(resources="cpu", feasibility_only=[FPGA]))
    assert [p for p, _ in exc.value.errors if p.startswith("feasibility_only")] == []


def _eph_node(name: str, cpu: str) -> dict[str, Any]:
    node = make_node(name, cpu=cpu, memory="32Gi", zone="z1")
    for key in ("allocatable", "capacity"):
        node["status"][key]["ephemeral-storage"] = "100Gi"
    return node


def test_a_snapshot_problem_written_and_read_back_scores_and_places_the_same(tmp_path) -> None:
    """The scheduler's batch problem (a pod requests ephemeral-storage, which the config does not
    list) through a file: ``iro solve`` on it sees what the scheduler saw."""
    nodes = [_eph_node(f"n{i}", cpu=str(4 + i)) for i in range(4)]
    bound = [make_pod(f"b{i}", cpu="500m", memory="1Gi", node=f"n{i % 2}") for i in range(3)]
    pending = [make_pod(f"p{k}", cpu="300m", memory="512Mi", scheduler="iro") for k in range(5)]
    eph = make_pod("e", cpu="1", memory="1Gi", scheduler="iro")
    eph["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "10Gi"
    pending.append(eph)
    config = ClusterConfig(resources=("cpu", "memory"))
    problem = ClusterModel(nodes, bound, config, pending=pending).with_pods(pending).problem
    assert problem.feasibility_only == ("ephemeral-storage",)
    path = tmp_path / "batch.json"
    write_problem(problem, path)
    back = load_problem(path)
    assert back.feasibility_only == ("ephemeral-storage",)
    for k in range(4):
        a = np.arange(len(pending)) % (k + 1)
        assert evaluate(back, a).score == evaluate(problem, a).score
    for name in ("best-fit", "greedy-objective", "dot-product"):
        assert solvers.make(name).solve(back).assignment.tolist() == solvers.make(name).solve(problem).assignment.tolist()


def test_the_edge_agent_site_keeps_it(tmp_path) -> None:
    from edge_agent.recommend import load_site

    path = tmp_path / "site.json"
    path.write_text(json.dumps(_doc(feasibility_only=[FPGA])))
    site = load_site(path, "a")
    assert site.feasibility_only == (FPGA,)
    assert site.util_resources == ("cpu", "memory")
