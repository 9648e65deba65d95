"""/recommend's problem-loader errors: every one is listed (not only counted), and for a Pod each
names the annotation or Pod field that set the workload field."""

from __future__ import annotations

import pytest

from edge_agent.recommend import Recommender
from edge_agent.workload import BadRequest


@pytest.fixture
def recommender(site_doc) -> Recommender:
    from iro_fed.problem_io import problem_from_dict

    doc = site_doc()
    doc["nodes"] = [n for n in doc["nodes"] if n["domain"] == "edge-1"]
    return Recommender(problem_from_dict(doc))


def _refusal(rec: Recommender, body: dict) -> BadRequest:
    wl, kind, _ = rec.parse(body)
    with pytest.raises(BadRequest) as info:
        rec.join(wl, rec.site_problem, kind)
    return info.value


def test_a_workloads_errors_are_all_listed(recommender) -> None:
    """Old code: '... (and 2 more error(s))' without saying which."""
    exc = _refusal(recommender, {"name": "w", "requests": {"cpu": -1, "memory": -5}, "priority": 1.5})
    assert exc.field == "workload.requests.cpu"
    assert "(and 2 more: workload.requests.memory: must be >= 0, got -5; workload.priority: " in str(exc), str(exc)


def test_a_pods_errors_name_the_annotation_or_pod_field_that_set_them(recommender) -> None:
    """Old code: field 'pod (as workload).max_latency_ms', the others only counted."""
    pod = {
        "metadata": {
            "name": "p",
            "annotations": {"iro-fed.io/max-latency-ms": "-5", "iro-fed.io/user-region": "users-eu"},
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
            "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Bogus"}],
            "nodeSelector": {"disk": 5},
        },
    }
    exc = _refusal(recommender, {"pod": pod})
    assert exc.field == "pod.metadata.annotations.iro-fed.io/max-latency-ms", str(exc)
    text = str(exc)
    assert "pod.spec.nodeSelector.disk: expected a string" in text, text
    assert "pod.spec.tolerations[1].operator: must be Equal or Exists" in text, text
    assert "as workload" not in text and "more error(s)" not in text


def test_one_error_has_no_list(recommender) -> None:
    exc = _refusal(
        recommender,
        {
            "pod": {
                "metadata": {"name": "p", "annotations": {"iro-fed.io/class": "x"}},
                "spec": {"containers": [{"name": "c"}]},
            }
        },
    )
    assert exc.field == "pod.metadata.annotations.iro-fed.io/class"
    assert "more" not in str(exc)
