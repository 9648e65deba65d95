"""The agent never crashes on input: /recommend fuzzed with hypothesis (any JSON, workload-shaped
and Pod-shaped documents with wrong types and odd quantities, raw bytes over HTTP)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("hypothesis", reason="hypothesis is not installed (the dev extra)")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from edge_agent.workload import BadRequest

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
quantities = st.one_of(st.sampled_from(["500m", "1Gi", "1.5", "-1", "1e400", "NaN", "", "12x", "1e3", "0.0001m"]),
                       st.integers(-5, 10**12), st.floats(), st.text(max_size=8), st.none())
field_values = st.one_of(json_values, quantities)
# Mostly-valid values, so the fuzz reaches deep fields instead of failing on the first one.
names = st.one_of(st.text(min_size=1, max_size=10), st.text(min_size=1, max_size=10), st.text(min_size=1, max_size=10),
                  json_values)
numbers = st.one_of(st.integers(0, 70000), st.integers(0, 70000), field_values)
workloads = st.fixed_dictionaries(
    {"name": names},
    optional={
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "cpu", "memory", "gpu", "disk"]), numbers, max_size=3),
        "gpu": st.one_of(st.fixed_dictionaries({}, optional={"count": field_values, "milli": field_values,
                                                             "models": field_values}), json_values),
        "class": field_values, "user_region": st.one_of(st.just("users-eu"), field_values),
        "max_latency_ms": field_values, "node_selector": field_values, "tolerations": field_values,
        "allowed_domains": st.one_of(st.just(["edge-1"]), field_values), "priority": field_values,
        "k": st.one_of(st.integers(1, 10), field_values),
        "preferred_node_affinity": field_values, "deadline_s": field_values,
    },
)
containers = st.lists(
    st.fixed_dictionaries({}, optional={"resources": st.fixed_dictionaries({}, optional={
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantities, max_size=3),
        "limits": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantities, max_size=3),
    })}),
    max_size=3,
)
metadata = st.fixed_dictionaries({"name": names}, optional={
    "namespace": st.one_of(st.just("shop"), field_values),
    "annotations": st.dictionaries(st.sampled_from(["iro-fed.io/gpu-milli", "iro-fed.io/user-region",
                                                     "iro-fed.io/max-latency-ms", "iro-fed.io/class",
                                                     "iro-fed.io/allowed-domains", "iro-fed.io/gpu-models"]),
                                   field_values, max_size=3)})
pods = st.fixed_dictionaries(
    {"kind": st.just("Pod"),
     "metadata": st.one_of(metadata, metadata, metadata, json_values),
     "spec": st.fixed_dictionaries({"containers": st.one_of(containers, containers, json_values)},
                                   optional={"initContainers": containers, "tolerations": field_values,
                                             "nodeSelector": field_values, "priority": field_values,
                                             "overhead": field_values})},
)


@pytest.fixture
def agent(start_agent):
    agent, _ = start_agent(store={"path": None})
    return agent


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=st.one_of(json_values, workloads, pods, st.fixed_dictionaries({"pod": pods}),
                      st.fixed_dictionaries({"workload": workloads})))
def test_recommend_never_crashes_on_input(agent, body):
    try:
        reply = agent.recommend(body)
    except BadRequest as exc:
        assert exc.field is not None and str(exc)
        return
    json.dumps(reply, allow_nan=False)  # a reply is always valid JSON
    assert reply["nodes"] or reply["unplaced_reason"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
def test_http_bodies_get_200_or_400(start_agent, http, raw):
    if not hasattr(test_http_bodies_get_200_or_400, "url"):
        test_http_bodies_get_200_or_400.url = start_agent(store={"path": None})[1]
    url = test_http_bodies_get_200_or_400.url
    status, reply = http("POST", f"{url}/recommend", raw=raw)
    assert status in (200, 400), (status, reply)
    if status == 400:
        assert "field" in reply and reply["error"]
