"""``Problem`` built directly (``replace``, the simulator, traces, library users) refuses the
numbers and names the loaders (``problem_io``) refuse, with a ValueError naming the field and
its node / workload / domain: negative or non-finite amounts, negative GPU counts and milli,
cards outside 0..1000, idle power above peak, negative or infinite latency (NaN stays: unknown),
negative carbon / prices / weights, PUE below 1, non-positive latency limits and deadlines,
unknown domains and user regions. Before, each of these was accepted as it stood."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from iro_fed import problem_from_dict
from iro_fed.model import ClusterState, Weights
from iro_fed.problem_io import ProblemValidationError


def doc() -> dict:
    return {
        "resources": ["cpu", "memory"],
        "domains": [
            {"name": "d", "carbon_intensity": 100, "price_per_hour": {"cpu": 0.02}},
            {"name": "e", "kind": "edge"},
        ],
        "latency_ms": {"users": {"d": 5, "e": 1}},
        "nodes": [
            {"name": "n0", "domain": "d", "capacity": {"cpu": 4000, "memory": 8192}},
            {"name": "g1", "domain": "e", "capacity": {"cpu": 8000, "memory": 16384}, "gpus": 2},
        ],
        "workloads": [
            {"name": "web", "requests": {"cpu": 500, "memory": 512}, "user_region": "users", "max_latency_ms": 20},
            {
                "name": "train",
                "requests": {"cpu": 1000, "memory": 1024},
                "gpu": {"count": 1, "milli": 500},
                "class": "batch",
                "deadline_s": 600,
            },
        ],
    }


BASE = problem_from_dict(doc())


def _with(array: np.ndarray, index: tuple, value: float) -> np.ndarray:
    out = np.array(array, copy=True)
    out[index] = value
    return out


ARRAY_CASES = [
    # (replace field, index, value, message start)
    ("capacity", (1, 0), -1.0, "capacity[1, 0] (node 'g1', cpu): must be finite and >= 0, got -1.0"),
    ("capacity", (0, 1), math.nan, "capacity[0, 1] (node 'n0', memory): must be finite and >= 0, got nan"),
    ("capacity", (0, 0), math.inf, "capacity[0, 0] (node 'n0', cpu): must be finite and >= 0, got inf"),
    ("allocated", (0, 0), -5.0, "allocated[0, 0] (node 'n0', cpu): must be finite and >= 0, got -5.0"),
    ("allocated", (1, 1), math.nan, "allocated[1, 1] (node 'g1', memory): must be finite and >= 0, got nan"),
    ("demand", (1, 0), -1.0, "demand[1, 0] (workload 'train', cpu): must be finite and >= 0, got -1.0"),
    ("demand", (0, 1), math.inf, "demand[0, 1] (workload 'web', memory): must be finite and >= 0, got inf"),
    ("power_peak_w", (0,), math.nan, "power_peak_w[0] (node 'n0'): must be finite and >= 0, got nan"),
    ("power_idle_w", (1,), -1.0, "power_idle_w[1] (node 'g1'): must be finite and >= 0, got -1.0"),
    ("power_idle_w", (0,), 1e6, "power_idle_w[0] (node 'n0'): must be at most power_peak_w"),
    ("latency_ms", (0, 1), -2.0, "latency_ms[0, 1] (user region 'users', domain 'e'): must be >= 0 and finite"),
    ("latency_ms", (0, 0), math.inf, "latency_ms[0, 0] (user region 'users', domain 'd'): must be >= 0 and finite"),
    ("wl_gpu_count", (0,), -1, "wl_gpu_count[0] (workload 'web'): must be >= 0, got -1"),
    (
        "wl_gpu_milli",
        (0,),
        -3,
        "wl_gpu_milli[0] (workload 'web', wl_gpu_count 0): a pod without GPUs has 0..1000, got -3",
    ),
    ("gpu_free", (1, 0), 1001, "gpu_free[1, 0] (node 'g1', gpu_count 2): a card of the node must have 0..1000"),
    ("gpu_free", (1, 1), -1, "gpu_free[1, 1] (node 'g1', gpu_count 2): a card of the node must have 0..1000"),
    ("gpu_free", (0, 0), 1000, "gpu_free[0, 0] (node 'n0', gpu_count 0): past the node's cards it must be -1"),
    ("gpu_count", (0,), -1, "gpu_count[0] (node 'n0'): must be >= 0, got -1"),
]


@pytest.mark.parametrize(
    ("field", "index", "value", "message"), ARRAY_CASES, ids=[c[0] + str(c[1]) for c in ARRAY_CASES]
)
def test_a_directly_built_problem_refuses_bad_numbers(field, index, value, message):
    changed = _with(getattr(BASE, field), index, value)
    if field == "gpu_count":  # keep gpu_free's width (the largest count) as it is
        changed = np.array([-1, 2], dtype=np.int32)
    with pytest.raises(ValueError) as err:
        BASE.replace(**{field: changed})
    assert str(err.value).startswith(message)


def _domain(**changes):
    return [dataclasses.replace(BASE.domains[0], **changes), BASE.domains[1]]


def _workload(i: int, **changes):
    wls = list(BASE.workloads)
    wls[i] = dataclasses.replace(wls[i], **changes)
    return wls


OBJECT_CASES = [
    ({"domains": _domain(carbon_intensity=-1.0)}, "domain 'd': carbon_intensity must be finite and >= 0, got -1.0"),
    ({"domains": _domain(carbon_intensity=math.nan)}, "domain 'd': carbon_intensity must be finite and >= 0, got nan"),
    ({"domains": _domain(pue=0.5)}, "domain 'd': pue must be finite and >= 1.0, got 0.5"),
    (
        {"domains": _domain(price_per_hour={"cpu": -0.1})},
        "domain 'd': price_per_hour.cpu must be finite and >= 0, got -0.1",
    ),
    ({"domains": _domain(kind="moon")}, "domain 'd': kind must be one of edge, zone, cloud, got 'moon'"),
    (
        {"workloads": _workload(0, max_latency_ms=-1.0)},
        "workload 'web': max_latency_ms must be finite and > 0, got -1.0",
    ),
    (
        {"workloads": _workload(0, max_latency_ms=math.nan)},
        "workload 'web': max_latency_ms must be finite and > 0, got nan",
    ),
    ({"workloads": _workload(0, max_latency_ms=0.0)}, "workload 'web': max_latency_ms must be finite and > 0, got 0.0"),
    ({"workloads": _workload(0, user_region="")}, "workload 'web': max_latency_ms needs user_region"),
    ({"workloads": _workload(0, user_region="mars")}, "workloads[0] (workload 'web'): unknown user_region 'mars'"),
    ({"workloads": _workload(1, deadline_s=0.0)}, "workload 'train': deadline_s must be finite and > 0, got 0.0"),
    ({"workloads": _workload(1, klass="daemon")}, "workload 'train': klass must be one of online, batch, burst"),
    ({"workloads": _workload(1, priority=2**31)}, "workload 'train': priority must be a 32-bit integer"),
    (
        {"workloads": _workload(1, allowed_domains=("x",))},
        "workloads[1] (workload 'train'): unknown allowed domain 'x'",
    ),
    (
        {"nodes": [BASE.nodes[0], dataclasses.replace(BASE.nodes[1], domain="x")]},
        "nodes[1] (node 'g1'): unknown domain 'x'",
    ),
    (
        {"nodes": [BASE.nodes[0], dataclasses.replace(BASE.nodes[1], name="n0")]},
        "nodes[1]: duplicate node name 'n0' (also nodes[0])",
    ),
    ({"weights": Weights(carbon=-1.0)}, "weights.carbon: must be finite and >= 0, got -1.0"),
    ({"weights": Weights(unplaced=math.inf)}, "weights.unplaced: must be finite and >= 0, got inf"),
    ({"latency_ref_ms": 0.0}, "latency_ref_ms: must be finite and > 0, got 0.0"),
]


@pytest.mark.parametrize(("changes", "message"), OBJECT_CASES, ids=[c[1][:40] for c in OBJECT_CASES])
def test_a_directly_built_problem_refuses_bad_fields(changes, message):
    with pytest.raises(ValueError) as err:
        BASE.replace(**changes)
    assert str(err.value).startswith(message)


def test_the_loader_refuses_the_same():
    """The loader's side of the rules above (one document per rule)."""
    bad = [
        ("nodes", 1, "capacity", {"cpu": -1, "memory": 1}),
        ("nodes", 0, "allocated", {"cpu": -5}),
        ("nodes", 0, "power_idle_w", 200.0, "power_peak_w", 100.0),
        ("workloads", 1, "requests", {"cpu": -1}),
        ("workloads", 0, "max_latency_ms", -1),
        ("workloads", 1, "deadline_s", 0),
        ("workloads", 1, "class", "daemon"),
        ("workloads", 0, "user_region", "mars"),
        ("domains", 0, "carbon_intensity", -1),
        ("domains", 0, "pue", 0.5),
        ("domains", 0, "price_per_hour", {"cpu": -0.1}),
    ]
    for section, i, *pairs in bad:
        d = doc()
        d[section][i].update(zip(pairs[::2], pairs[1::2], strict=True))
        with pytest.raises(ProblemValidationError):
            problem_from_dict(d)


def test_what_the_loader_accepts_a_direct_build_accepts():
    """Zero amounts, unknown latency (NaN), usage past capacity (an overcommitted snapshot node),
    a node without capacity of a resource and idle power equal to peak build as before."""
    p = BASE.replace(
        latency_ms=_with(BASE.latency_ms, (0, 1), math.nan),
        allocated=BASE.capacity * 1.5,
        capacity=_with(BASE.capacity, (0, 1), 0.0),
        demand=np.zeros_like(BASE.demand),
        power_idle_w=BASE.power_peak_w,
    )
    assert math.isnan(p.latency_ms[0, 1])
    assert p.capacity[0, 1] == 0.0
    assert (p.allocated[1] > p.capacity[1]).all()


def test_usage_rounded_just_below_zero_builds():
    """A state's usage after pods left (1.4 + 2.8 - 1.4 - 2.8 = -4.4e-16 while a pod without
    memory stays) builds (the simulator's snapshots, replay windows); beyond the filters'
    tolerance (1e-12 of capacity) it is refused."""
    p = BASE.replace(
        workloads=[*BASE.workloads, dataclasses.replace(BASE.workloads[0], name="cpu-only")],
        demand=np.array([[100.0, 1.4], [100.0, 2.8], [100.0, 0.0]]),
        wl_gpu_count=np.zeros(3),
        wl_gpu_milli=np.zeros(3),
    )
    state = ClusterState(p)
    for w in range(3):
        state.place(w, 0)
    state.remove(0)
    state.remove(1)
    assert -1e-15 < state.allocated[0, 1] < 0
    window = p.with_cluster(state.allocated, state.gpu_free)
    assert window.allocated[0, 1] == state.allocated[0, 1]
    with pytest.raises(ValueError, match=r"allocated\[0, 1\] \(node 'n0', memory\): must be finite and >= 0"):
        p.with_cluster(_with(state.allocated, (0, 1), -1e-6), state.gpu_free)
