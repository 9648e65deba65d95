"""The edge agent reads ``iro-fed.io/max-latency-ms`` as the scheduler does (JSON number syntax)."""

from __future__ import annotations

import pytest

from edge_agent.workload import BadRequest, pod_to_workload

FIELD = "pod.metadata.annotations.iro-fed.io/max-latency-ms"


def _pod(value: str) -> dict:
    return {
        "metadata": {
            "name": "p",
            "annotations": {
                "iro-fed.io/user-region": "users-eu",
                "iro-fed.io/max-latency-ms": value,
            },
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }


@pytest.mark.parametrize(("text", "value"), [("25", 25.0), ("12.5", 12.5), ("1e3", 1000.0), (" 12 ", 12.0)])
def test_a_plain_number_is_read(text: str, value: float) -> None:
    assert pod_to_workload(_pod(text), ("cpu",))["max_latency_ms"] == value


@pytest.mark.parametrize("text", ["1_0", "+5", "nan", "inf", "\u0665", ".5", "5.", "05", "1e999"])
def test_anything_else_is_refused_naming_the_annotation(text: str) -> None:
    # float() read "1_0" as 10 and "\u0665" as 5 where the scheduler refuses the pod.
    with pytest.raises(BadRequest) as exc:
        pod_to_workload(_pod(text), ("cpu",))
    assert exc.value.field == FIELD
    assert f"expected a number, got {text!r}" in str(exc.value), str(exc.value)
