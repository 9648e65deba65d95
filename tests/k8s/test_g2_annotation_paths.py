"""The scheduler and the edge agent name a bad annotation the same way, by one helper
(:func:`iro_fed.k8s.snapshot.annotation_path`).

Before: for ``iro-fed.io/allowed-domains: z1,nope`` the scheduler said
``metadata.annotations.iro-fed.io/allowed-domains[1]: unknown domain 'nope'`` and the agent's
/recommend named the whole annotation (``pod.metadata.annotations.iro-fed.io/allowed-domains``),
and it said ``needs user_region`` where the scheduler says ``needs iro-fed.io/user-region``.
"""

from __future__ import annotations

from typing import Any

import pytest

from edge_agent.recommend import Recommender
from edge_agent.workload import BadRequest, pod_source
from iro_fed.k8s.snapshot import ClusterModel, PodSpecError
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.problem_io import problem_from_dict


def _pod(annotations: dict[str, str]) -> dict[str, Any]:
    return make_pod("api", annotations=annotations)


def _site() -> Any:
    return problem_from_dict(
        {
            "resources": ["cpu", "memory"],
            "domains": [{"name": "z1"}, {"name": "z2"}],
            "latency_ms": {"users-eu": {"z1": 3.0, "z2": 20.0}},
            "nodes": [{"name": "n0", "domain": "z1", "capacity": {"cpu": 8000, "memory": 16384}}],
            "workloads": [],
        }
    )


def _scheduler_error(pod: dict[str, Any]) -> str:
    with pytest.raises(PodSpecError) as err:
        ClusterModel([make_node("n0", zone="z1"), make_node("n1", zone="z2")], []).check_pod(pod)
    return str(err.value).removeprefix("pod default/api: ")


def _agent_error(pod: dict[str, Any]) -> tuple[str, str]:
    site = _site()
    rec = Recommender(site)
    wl, kind, _ = rec.parse({"pod": pod})
    with pytest.raises(BadRequest) as err:
        rec.join(wl, site, kind)
    return err.value.field, str(err.value)


@pytest.mark.parametrize(
    ("annotations", "said"),
    [
        (
            {"iro-fed.io/allowed-domains": "z1,nope"},
            "metadata.annotations.iro-fed.io/allowed-domains[1]: unknown domain 'nope'",
        ),
        (
            {"iro-fed.io/allowed-domains": "nope"},
            "metadata.annotations.iro-fed.io/allowed-domains[0]: unknown domain 'nope'",
        ),
        (
            {"iro-fed.io/max-latency-ms": "20"},
            "metadata.annotations.iro-fed.io/max-latency-ms: needs iro-fed.io/user-region",
        ),
    ],
)
def test_the_agent_names_a_bad_annotation_as_the_scheduler_does(annotations: dict[str, str], said: str):
    pod = _pod(annotations)
    assert _scheduler_error(pod).startswith(said)
    field, error = _agent_error(pod)
    assert field == "pod." + said.split(": ")[0]
    assert error.startswith("pod." + said)


def test_pod_source_names_an_item_of_a_list_annotation_by_position():
    assert pod_source("allowed_domains[1]") == "pod.metadata.annotations.iro-fed.io/allowed-domains[1]"
    assert pod_source("gpu.models[0]") == "pod.metadata.annotations.iro-fed.io/gpu-models[0]"
    assert pod_source("user_region") == "pod.metadata.annotations.iro-fed.io/user-region"
    # Other fields as before.
    assert pod_source("gpu.milli") == "pod.metadata.annotations.iro-fed.io/gpu-milli"
    assert pod_source("tolerations[1].operator") == "pod.spec.tolerations[1].operator"
    assert pod_source("gpu.count") == "pod.spec.containers[*].resources.limits.nvidia.com/gpu"
