"""problem_io's unique-name checks and int32 bound, each written once (u2): the messages are the
loader's as before, byte for byte."""

from __future__ import annotations

import pytest

from iro_fed.problem_io import INT32_MAX, INT32_MIN, ProblemValidationError, problem_from_dict

HOST = "kubernetes.io/hostname"


def _doc(nodes=("a", "b")) -> dict:
    return {"resources": ["cpu", "memory"], "domains": [{"name": "d"}],
            "nodes": [{"name": n, "domain": "d", "capacity": {"cpu": 8000, "memory": 8192}} for n in nodes],
            "workloads": [{"name": "p", "requests": {"cpu": 100, "memory": 100}}]}


def _errors(doc: dict) -> list[tuple[str, str]]:
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(doc)
    return list(exc.value.errors)


def test_repeated_names_name_the_earlier_position_as_before() -> None:
    # The loader's sections name the latest earlier position, pod_scoring's name lists the first
    # (their name -> index map keeps it).
    doc = _doc(nodes=("a", "a", "b", "a"))
    doc["domains"] *= 3
    doc["workloads"] *= 3
    doc["pod_scoring"] = {"topologies": [{"name": "t", "key": HOST, "domains": {"a": 0, "b": 1}}] * 3,
                          "groups": [{"name": "g", "counts": {"a": 2}}] * 3}
    assert _errors(doc) == [
        ("domains[1].name", "duplicate domain name 'd' (also domains[0])"),
        ("domains[2].name", "duplicate domain name 'd' (also domains[1])"),
        ("nodes[1].name", "duplicate node name 'a' (also nodes[0])"),
        ("nodes[3].name", "duplicate node name 'a' (also nodes[1])"),
        ("workloads[1].name", "duplicate workload name 'p' (also workloads[0])"),
        ("workloads[2].name", "duplicate workload name 'p' (also workloads[1])"),
        ("pod_scoring.topologies[1].name", "duplicate name 't' (also pod_scoring.topologies[0])"),
        ("pod_scoring.topologies[2].name", "duplicate name 't' (also pod_scoring.topologies[0])"),
        ("pod_scoring.groups[1].name", "duplicate name 'g' (also pod_scoring.groups[0])"),
        ("pod_scoring.groups[2].name", "duplicate name 'g' (also pod_scoring.groups[0])"),
    ]


def test_a_missing_name_is_one_error_and_no_duplicate() -> None:
    doc = _doc()
    doc["nodes"].append({"domain": "d", "capacity": {"cpu": 1, "memory": 1}})
    doc["nodes"].append({"domain": "d", "capacity": {"cpu": 1, "memory": 1}})
    assert [p for p, _ in _errors(doc)] == ["nodes[2].name", "nodes[3].name"]


def test_priorities_and_pod_scoring_counts_share_the_int32_bounds() -> None:
    assert (INT32_MIN, INT32_MAX) == (-(2**31), 2**31 - 1)
    doc = _doc()
    doc["workloads"][0]["priority"] = INT32_MAX
    assert problem_from_dict(doc).workloads[0].priority == INT32_MAX
    doc["workloads"][0]["priority"] = INT32_MIN - 1
    assert _errors(doc) == [("workloads[0].priority", "must be -2147483648..2147483647, got -2147483649")]
    doc = _doc()
    doc["pod_scoring"] = {"topologies": [{"name": "t", "key": HOST, "domains": {"a": 0, "b": 1}}],
                          "groups": [{"name": "g", "counts": {"a": INT32_MAX + 1}}]}
    assert _errors(doc) == [("pod_scoring.groups[0].counts.a",
                             "expected an integer 0..2147483647, got integer 2147483648")]
