"""/recommend refuses a Pod whose comma-list annotation has an empty entry (400 naming the
annotation and the position), as the scheduler and extender refuse it: the agent dropped the entry,
and ``iro-fed.io/allowed-domains: ","`` ranked nodes of every domain for a pod that asked for a
domain restriction."""

from __future__ import annotations

from typing import Any

import pytest


def _pod(annotations: dict[str, str], gpu: bool = False) -> dict[str, Any]:
    requests = {"cpu": "500m", "memory": "1Gi", **({"nvidia.com/gpu": "1"} if gpu else {})}
    return {"kind": "Pod", "metadata": {"name": "infer", "namespace": "ml", "annotations": annotations},
            "spec": {"containers": [{"name": "app", "resources": {"requests": requests}}]}}


@pytest.mark.parametrize(
    ("annotations", "gpu", "field", "tail"),
    [
        # before: 200 ranking the site's nodes, the restriction gone
        ({"iro-fed.io/allowed-domains": ","}, False, "pod.metadata.annotations.iro-fed.io/allowed-domains",
         "empty entry at position 1 of 2 in ','"),
        ({"iro-fed.io/allowed-domains": "az-1,,edge-1"}, False, "pod.metadata.annotations.iro-fed.io/allowed-domains",
         "empty entry at position 2 of 3 in 'az-1,,edge-1'"),
        ({"iro-fed.io/gpu-models": "T4,"}, True, "pod.metadata.annotations.iro-fed.io/gpu-models",
         "empty entry at position 2 of 2 in 'T4,'"),
    ],
)
def test_an_empty_entry_is_400_naming_the_annotation(start_agent, http, annotations, gpu, field, tail):
    _, url = start_agent(store={"path": None})
    status, reply = http("POST", f"{url}/recommend", {"pod": _pod(annotations, gpu), "k": 3})
    assert status == 400, reply
    assert reply["field"] == field
    assert reply["error"].startswith(f"{field}: {tail}"), reply


def test_the_restriction_holds_when_the_list_is_well_formed(start_agent, http):
    _, url = start_agent(store={"path": None})
    status, reply = http("POST", f"{url}/recommend", {"pod": _pod({"iro-fed.io/allowed-domains": "az-1"}), "k": 3})
    assert status == 200 and reply["nodes"] == [], reply  # the site's nodes are all in edge-1
    status, reply = http("POST", f"{url}/recommend", {"pod": _pod({"iro-fed.io/allowed-domains": ""}), "k": 3})
    assert status == 200 and reply["nodes"], reply  # empty: absent, as documented
