"""Problem file and placement file: round trips, validation with field paths, defaults.

Formats: shared/spec/interfaces.md.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed.model import (
    DEFAULT_IDLE_SHARE,
    DEFAULT_LATENCY_REF_MS,
    GPU_MILLI,
    Domain,
    Node,
    PreferredTerm,
    Problem,
    Taint,
    Toleration,
    Weights,
    Workload,
    default_power,
)
from iro_fed.placement import STATUSES, Placement, placement_from_dict, write_placement
from iro_fed.problem_io import (
    MAX_GPUS,
    MAX_NUMBER,
    MIN_CAPACITY,
    ProblemValidationError,
    load_document,
    load_problem,
    problem_from_dict,
    problem_to_dict,
    unknown_fields,
    write_problem,
)

# --------------------------------------------------------------------------------------------
# A rich problem: every field the format has, with non-default values.
# --------------------------------------------------------------------------------------------


def rich_doc() -> dict[str, Any]:
    return {
        "name": "rich",
        "description": "every field the problem format has",
        "resources": ["cpu", "memory", "ephemeral-storage"],
        "domains": [
            {"name": "edge-1", "kind": "edge", "carbon_zone": "DE-BY", "carbon_intensity": 350.5,
             "price_per_hour": {"cpu": 0.05, "memory": 0.006}, "pue": 1.6},
            {"name": "az-1", "kind": "zone", "carbon_zone": "DE", "carbon_intensity": 313.0,
             "price_per_hour": {"cpu": 0.031, "memory": 0.004, "gpu": 2.5, "ephemeral-storage": 0.0001}, "pue": 1.2},
            {"name": "cloud-eu", "kind": "cloud", "carbon_zone": "FR", "carbon_intensity": 56.0,
             "price_per_hour": {"cpu": 0.08, "memory": 0.01, "gpu": 3.1}, "pue": 1.1},
        ],
        "latency_ms": {
            "users-eu": {"edge-1": 3.0, "az-1": 12.0, "cloud-eu": 35.5},
            # no entry for edge-1: unknown latency (NaN) must survive the round trip
            "users-us": {"az-1": 90.0, "cloud-eu": 80.25},
        },
        "nodes": [
            {"name": "edge-a", "domain": "edge-1",
             "capacity": {"cpu": 4000, "memory": 8192, "ephemeral-storage": 100000},
             "allocated": {"cpu": 500, "memory": 1024},
             "labels": {"topology.kubernetes.io/zone": "edge-1", "tier": "edge"},
             "taints": [{"key": "edge", "effect": "PreferNoSchedule"}]},
            {"name": "az-gpu-1", "domain": "az-1",
             "capacity": {"cpu": 32000, "memory": 131072, "ephemeral-storage": 500000},
             "allocated": {"cpu": 4000, "memory": 8192, "ephemeral-storage": 1000},
             "gpus": 4, "gpu_model": "V100M32", "gpu_free_milli": [1000, 250, 0, 1000],
             "labels": {"topology.kubernetes.io/zone": "az-1", "accelerator": "v100"},
             "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
             "power_idle_w": 120, "power_peak_w": 400.5},
            {"name": "az-gpu-2", "domain": "az-1",
             "capacity": {"cpu": 16000, "memory": 65536, "ephemeral-storage": 200000},
             "gpus": 2, "gpu_model": "T4",
             "labels": {"topology.kubernetes.io/zone": "az-1", "accelerator": "t4"}},
            {"name": "az-batch", "domain": "az-1",
             "capacity": {"cpu": 8000, "memory": 32768, "ephemeral-storage": 100000},
             "labels": {"pool": "batch"},
             "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
                        {"key": "maintenance", "effect": "NoExecute"}],
             "power_peak_w": 250},
            {"name": "cloud-1", "domain": "cloud-eu",
             "capacity": {"cpu": 64000, "memory": 262144, "ephemeral-storage": 1000000},
             "gpus": 1, "gpu_model": "A100", "gpu_free_milli": [750],
             "labels": {"topology.kubernetes.io/zone": "cloud-eu"}},
        ],
        "workloads": [
            {"name": "shop/checkout-7f9", "requests": {"cpu": 2000, "memory": 4096, "ephemeral-storage": 1000},
             "class": "online", "user_region": "users-eu", "max_latency_ms": 50,
             "node_selector": {"topology.kubernetes.io/zone": "az-1"},
             "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
             "gpu": {"count": 1, "milli": 500, "models": ["V100M16", "V100M32"]},
             "priority": 10},
            {"name": "shop/frontend", "requests": {"cpu": 500, "memory": 512},
             "class": "online", "user_region": "users-eu", "max_latency_ms": 15.5,
             "allowed_domains": ["edge-1", "az-1"],
             "tolerations": [{"key": "edge", "operator": "Exists"}],
             "preferred_node_affinity": [{"weight": 80, "match_labels": {"tier": "edge"}},
                                         {"weight": 5, "match_labels": {"topology.kubernetes.io/zone": "az-1"}}],
             "priority": 5},
            {"name": "ml/train-2gpu", "requests": {"cpu": 4000, "memory": 16384},
             "class": "batch", "gpu": {"count": 2, "milli": 1000},
             "deadline_s": 3600.0, "priority": -1},
            {"name": "batch/etl", "requests": {"cpu": 2000, "memory": 8192, "ephemeral-storage": 50000},
             "class": "batch", "deadline_s": 7200,
             "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
                             {"operator": "Exists", "effect": "NoExecute"}],
             "node_selector": {"pool": "batch"}},
            {"name": "burst/render", "requests": {"cpu": 8000, "memory": 32768},
             "class": "burst", "user_region": "users-us",
             "allowed_domains": ["cloud-eu"],
             "gpu": {"count": 1, "milli": 250}},
            {"name": "ml/huge", "requests": {"cpu": 1000, "memory": 1024},
             "class": "batch", "gpu": {"count": 8}},
        ],
        "weights": {"utilization": 2.0, "latency": 0.5, "cost": 1.5, "carbon": 0.25, "unplaced": 20.0},
        "latency_ref_ms": 20.0,
    }


ARRAYS = (
    "latency_ms", "capacity", "allocated", "demand", "gpu_free", "gpu_count", "wl_gpu_count",
    "wl_gpu_milli", "power_idle_w", "power_peak_w", "node_domain", "node_gpu_model", "wl_region",
    "wl_gpu_total", "domain_carbon", "domain_pue", "domain_unit_price",
)


def assert_same_problem(a: Problem, b: Problem) -> None:
    assert a.resources == b.resources
    assert a.domains == b.domains
    assert a.nodes == b.nodes
    assert a.workloads == b.workloads
    assert a.regions == b.regions
    assert a.weights == b.weights
    assert a.latency_ref_ms == b.latency_ref_ms
    assert a.gpu_models == b.gpu_models
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)  # NaN == NaN here


@pytest.fixture
def rich() -> Problem:
    return problem_from_dict(rich_doc())


# --------------------------------------------------------------------------------------------
# 1. Round trips
# --------------------------------------------------------------------------------------------


def test_rich_problem_is_parsed_as_written(rich: Problem) -> None:
    p = rich
    assert p.resources == ("cpu", "memory", "ephemeral-storage")
    assert [d.name for d in p.domains] == ["edge-1", "az-1", "cloud-eu"]
    assert p.domains[0] == Domain("edge-1", "edge", "DE-BY", 350.5, {"cpu": 0.05, "memory": 0.006}, 1.6)
    assert p.domains[2].kind == "cloud"
    assert p.regions == ("users-eu", "users-us")
    assert p.latency_ms[0].tolist() == [3.0, 12.0, 35.5]
    assert math.isnan(p.latency_ms[1, 0]) and p.latency_ms[1, 1:].tolist() == [90.0, 80.25]

    assert p.capacity[0].tolist() == [4000, 8192, 100000]
    assert p.allocated[0].tolist() == [500, 1024, 0]  # missing allocated entries are 0
    assert p.allocated[1].tolist() == [4000, 8192, 1000]
    assert p.allocated[2].tolist() == [0, 0, 0]  # no allocated at all
    assert p.gpu_count.tolist() == [0, 4, 2, 0, 1]
    # cards a node does not have are -1; absent gpu_free_milli means all cards free
    assert p.gpu_free.tolist() == [
        [-1, -1, -1, -1],
        [1000, 250, 0, 1000],
        [1000, 1000, -1, -1],
        [-1, -1, -1, -1],
        [750, -1, -1, -1],
    ]
    assert p.nodes[1] == Node(
        "az-gpu-1", "az-1", {"topology.kubernetes.io/zone": "az-1", "accelerator": "v100"},
        (Taint("nvidia.com/gpu", "present", "NoSchedule"),), "V100M32",
    )
    assert p.nodes[0].taints == (Taint("edge", "", "PreferNoSchedule"),)
    assert p.nodes[3].taints == (Taint("dedicated", "batch", "NoSchedule"), Taint("maintenance", "", "NoExecute"))
    assert p.power_idle_w[1] == 120.0 and p.power_peak_w[1] == 400.5
    # only peak given: idle is the default share of it
    assert p.power_peak_w[3] == 250.0 and p.power_idle_w[3] == pytest.approx(DEFAULT_IDLE_SHARE * 250.0)
    # nothing given: the default power model from CPU and cards
    assert (p.power_idle_w[2], p.power_peak_w[2]) == pytest.approx(default_power(16000, 2))

    w = {wl.name: wl for wl in p.workloads}
    assert w["shop/checkout-7f9"].tolerations == (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    assert w["shop/checkout-7f9"].gpu_models == ("V100M16", "V100M32")
    assert w["shop/checkout-7f9"].max_latency_ms == 50.0 and w["shop/checkout-7f9"].priority == 10
    assert w["shop/frontend"].allowed_domains == ("edge-1", "az-1")
    assert w["shop/frontend"].preferred == (
        PreferredTerm(80, {"tier": "edge"}), PreferredTerm(5, {"topology.kubernetes.io/zone": "az-1"}),
    )
    assert w["batch/etl"].tolerations == (
        Toleration("dedicated", "Equal", "batch", "NoSchedule"), Toleration("", "Exists", "", "NoExecute"),
    )
    assert w["batch/etl"].deadline_s == 7200.0 and w["batch/etl"].node_selector == {"pool": "batch"}
    assert w["ml/train-2gpu"].priority == -1 and w["ml/train-2gpu"].klass == "batch"
    assert w["burst/render"].klass == "burst"
    assert p.demand[3].tolist() == [2000, 8192, 50000]
    assert p.wl_gpu_count.tolist() == [1, 0, 2, 0, 1, 8]
    assert p.wl_gpu_milli.tolist() == [500, 0, 1000, 0, 250, 1000]
    assert p.wl_gpu_total.tolist() == [500, 0, 2000, 0, 250, 8000]
    assert p.wl_region.tolist() == [0, 0, -1, -1, 1, -1]
    assert p.weights == Weights(2.0, 0.5, 1.5, 0.25, 20.0)
    assert p.latency_ref_ms == 20.0


def test_dict_round_trip_is_identical(rich: Problem) -> None:
    doc = problem_to_dict(rich)
    again = problem_from_dict(doc)
    assert_same_problem(rich, again)
    # the document is plain JSON (no numpy scalars, no NaN) and a fixed point
    text = json.dumps(doc, allow_nan=False)
    assert problem_to_dict(again) == doc == json.loads(text)


def test_dict_round_trip_does_not_share_state(rich: Problem) -> None:
    doc = problem_to_dict(rich)
    doc["nodes"][0]["labels"]["tier"] = "changed"
    doc["domains"][0]["price_per_hour"]["cpu"] = 99.0
    assert rich.nodes[0].labels["tier"] == "edge"
    assert rich.domains[0].price_per_hour["cpu"] == 0.05


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_file_round_trip(rich: Problem, tmp_path, suffix: str) -> None:
    path = tmp_path / "sub" / "dir" / f"problem{suffix}"  # parents are created
    write_problem(rich, path)
    loaded = load_problem(path)
    assert_same_problem(rich, loaded)
    assert problem_to_dict(loaded) == problem_to_dict(rich)
    assert [f.name for f in path.parent.iterdir()] == [path.name]  # no temp file left behind
    if suffix == ".json":
        assert json.loads(path.read_text())["nodes"][1]["gpu_free_milli"] == [1000, 250, 0, 1000]


def test_written_files_get_the_mode_of_a_plain_file(small_doc, tmp_path) -> None:
    # The atomic writers rename a 0600 temp file; the result must be as readable as open(..., "w").
    plain = tmp_path / "plain"
    plain.write_text("")
    problem = problem_from_dict(small_doc)
    write_problem(problem, tmp_path / "p.json")
    write_problem(problem, tmp_path / "p.yaml")
    write_placement(solvers.make("best-fit").solve(problem), problem, tmp_path / "placement.json")
    for name in ("p.json", "p.yaml", "placement.json"):
        assert (tmp_path / name).stat().st_mode == plain.stat().st_mode, name


def test_small_doc_round_trips_through_yaml_and_json(small_doc, tmp_path) -> None:
    p = problem_from_dict(small_doc)
    for name in ("p.json", "p.yaml"):
        write_problem(p, tmp_path / name)
        assert_same_problem(p, load_problem(tmp_path / name))


def test_hand_written_yaml_loads(tmp_path) -> None:
    text = """
resources: [cpu, memory]
domains:
  - {name: az-1, kind: zone, carbon_intensity: 313, pue: 1.2, price_per_hour: {cpu: 0.031, memory: 0.004}}
latency_ms:
  users-eu: {az-1: 12}
nodes:
  - name: n-1
    domain: az-1
    capacity: {cpu: 32000, memory: 131072}
    gpus: 2
    gpu_free_milli: [1000, 500]
    labels: {"topology.kubernetes.io/zone": az-1}
workloads:
  - name: shop/checkout
    requests: {cpu: 2000, memory: 4096}
    gpu: {count: 1, milli: 500}
    user_region: users-eu
    max_latency_ms: 50
"""
    path = tmp_path / "p.yaml"
    path.write_text(text)
    p = load_problem(path)
    assert p.gpu_free.tolist() == [[1000, 500]]
    assert p.latency_ms.tolist() == [[12.0]]
    assert p.workloads[0].max_latency_ms == 50.0


# --- placement file ---------------------------------------------------------------------------

PLACEMENT_KEYS = {"solver", "params", "status", "assignments", "gpu_assignments", "unplaced", "objective", "timing"}
OBJECTIVE_KEYS = {"score", "utilization_pct", "mean_latency_ms", "cost_per_hour", "carbon_g_per_hour", "unplaced", "terms"}
TERMS = {"utilization", "latency", "cost", "carbon", "unplaced"}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_placement_file_shape_and_round_trip(rich: Problem, tmp_path) -> None:
    placement = solvers.make("best-fit").solve(rich)
    assert isinstance(placement, Placement)
    path = tmp_path / "out" / "placement.json"
    write_placement(placement, rich, path)
    doc = json.loads(path.read_text())

    # the shape of interfaces.md ("info" is the one optional extra a solver may add)
    assert set(doc) - {"info"} == PLACEMENT_KEYS
    assert doc["solver"] == "best-fit"
    assert isinstance(doc["params"], dict)
    assert doc["status"] in STATUSES
    names = [w.name for w in rich.workloads]
    node_names = {n.name for n in rich.nodes}
    assert list(doc["assignments"]) == names
    for name, node in doc["assignments"].items():
        assert node is None or node in node_names, name
    placed = {n for n, v in doc["assignments"].items() if v is not None}
    unplaced = {n for n, v in doc["assignments"].items() if v is None}
    assert "ml/huge" in unplaced  # 8 GPUs: no node has that many
    assert set(doc["unplaced"]) == unplaced
    assert all(isinstance(r, str) and r for r in doc["unplaced"].values())
    gpu_wl = {w.name for i, w in enumerate(rich.workloads) if rich.wl_gpu_count[i] > 0}
    assert set(doc["gpu_assignments"]) == placed & gpu_wl
    for name, cards in doc["gpu_assignments"].items():
        k = int(rich.wl_gpu_count[names.index(name)])
        assert len(cards) == k and all(isinstance(c, int) for c in cards), name

    obj = doc["objective"]
    assert set(obj) >= OBJECTIVE_KEYS  # names may gain fields
    for key in OBJECTIVE_KEYS - {"terms", "unplaced"}:
        assert _is_number(obj[key]), key
    assert obj["unplaced"] == len(unplaced) and isinstance(obj["unplaced"], int)
    assert set(obj["terms"]) == TERMS
    assert all(_is_number(v) for v in obj["terms"].values())
    assert set(doc["timing"]) >= {"solve_s"} and _is_number(doc["timing"]["solve_s"]) and doc["timing"]["solve_s"] >= 0

    back = placement_from_dict(rich, doc)
    np.testing.assert_array_equal(back.assignment, placement.assignment)
    assert back.gpu_cards == placement.gpu_cards
    assert back.reasons == placement.reasons
    assert back.solver == "best-fit" and back.status == doc["status"]
    assert back.objective is not None and placement.objective is not None
    assert back.objective.score == pytest.approx(obj["score"], abs=1e-9)
    assert back.objective.score == pytest.approx(placement.objective.score, abs=1e-12)
    assert back.to_dict(rich)["assignments"] == doc["assignments"]


def test_placement_from_dict_rejects_unknown_names(small_doc) -> None:
    p = problem_from_dict(small_doc)
    with pytest.raises(ValueError, match="unknown workload"):
        placement_from_dict(p, {"assignments": {"nope": "edge-n1"}})
    with pytest.raises(ValueError, match="unknown node"):
        placement_from_dict(p, {"assignments": {"web-1": "nope"}})
    empty = placement_from_dict(p, {})
    assert empty.assignment.tolist() == [-1, -1, -1]
    assert empty.objective is not None and empty.objective.unplaced == 3


# --------------------------------------------------------------------------------------------
# 2. Validation
# --------------------------------------------------------------------------------------------


def errors_of(doc: Any) -> list[tuple[str, str]]:
    with pytest.raises(ProblemValidationError) as info:
        problem_from_dict(doc)
    assert info.value.errors, "an error without entries"
    return info.value.errors


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """A mutator setting ``a.b[1].c`` (dots split keys; digits are list indices)."""

    def mutate(doc: dict) -> None:
        parts = [int(x) if x.isdigit() else x for x in path.split("/")]
        obj = doc
        for key in parts[:-1]:
            obj = obj[key]
        obj[parts[-1]] = value

    return mutate


def _both(first: Callable[[dict], None], second: Callable[[dict], None]) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        first(doc)
        second(doc)

    return mutate


def _del(path: str) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        parts = [int(x) if x.isdigit() else x for x in path.split("/")]
        obj = doc
        for key in parts[:-1]:
            obj = obj[key]
        del obj[parts[-1]]

    return mutate


def _append(path: str, value: Any) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        obj = doc
        for key in [int(x) if x.isdigit() else x for x in path.split("/")]:
            obj = obj[key]
        obj.append(copy.deepcopy(value))

    return mutate


# (mutation of small_doc, the field path of the error, a fragment of its message).
# Mutation paths use "/" to separate keys so that keys with dots stay intact.
SINGLE_ERRORS = [
    # missing required fields
    ("missing capacity.cpu", _del("nodes/1/capacity/cpu"), "nodes[1].capacity.cpu", "missing"),
    ("missing node domain", _del("nodes/0/domain"), "nodes[0].domain", "missing"),
    ("missing node name", _del("nodes/2/name"), "nodes[2].name", "missing"),
    ("missing capacity", _del("nodes/0/capacity"), "nodes[0].capacity", "missing"),
    ("null capacity", _set("nodes/0/capacity", None), "nodes[0].capacity", "missing"),
    ("missing workload name", _del("workloads/1/name"), "workloads[1].name", "missing"),
    ("missing nodes", _del("nodes"), "nodes", "missing"),
    ("missing taint key", _set("nodes/2/taints/0", {"value": "x"}), "nodes[2].taints[0].key", "missing"),
    ("missing preference weight", _set("workloads/0/preferred_node_affinity", [{"match_labels": {"a": "b"}}]),
     "workloads[0].preferred_node_affinity[0].weight", "missing"),
    # wrong types
    ("string memory", _set("nodes/0/capacity/memory", "8Gi"), "nodes[0].capacity.memory", "number"),
    ("bool cpu", _set("nodes/0/capacity/cpu", True), "nodes[0].capacity.cpu", "number"),
    ("null cpu", _set("nodes/0/capacity/cpu", None), "nodes[0].capacity.cpu", "number"),
    ("list capacity", _set("nodes/0/capacity", [4000, 8192]), "nodes[0].capacity", "object"),
    ("list requests", _set("workloads/0/requests", [500, 512]), "workloads[0].requests", "object"),
    ("list gpu", _set("workloads/1/gpu", [1, 500]), "workloads[1].gpu", "object"),
    ("list prices", _set("domains/0/price_per_hour", [0.05]), "domains[0].price_per_hour", "object"),
    ("list weights", _set("weights", [1, 2]), "weights", "object"),
    ("list latency", _set("latency_ms", ["users-eu"]), "latency_ms", "object"),
    ("list latency row", _set("latency_ms/users-eu", [3.0]), "latency_ms.users-eu", "object"),
    ("object nodes", _set("nodes", {"edge-n1": {}}), "nodes", "list"),
    ("string node", _set("nodes/0", "edge-n1"), "nodes[0]", "object"),
    ("string workload", _set("workloads/0", "web-1"), "workloads[0]", "object"),
    ("string resources", _set("resources", "cpu"), "resources", "list"),
    ("string gpus", _set("nodes/1/gpus", "2"), "nodes[1].gpus", "integer"),
    ("fractional gpus", _set("nodes/1/gpus", 1.5), "nodes[1].gpus", "integer"),
    ("string gpu_free_milli", _set("nodes/1/gpu_free_milli", "1000,500"), "nodes[1].gpu_free_milli", "list"),
    ("number name", _set("nodes/0/name", 7), "nodes[0].name", "string"),
    ("string priority", _set("workloads/0/priority", "high"), "workloads[0].priority", "integer"),
    ("bool priority", _set("workloads/0/priority", True), "workloads[0].priority", "integer"),
    ("string max latency", _set("workloads/0/max_latency_ms", "20ms"), "workloads[0].max_latency_ms", "number"),
    ("int label value", _set("nodes/0/labels/tier", 1), "nodes[0].labels.tier", "string"),
    ("int selector value", _set("workloads/0/node_selector", {"tier": 3}), "workloads[0].node_selector.tier", "string"),
    ("string tolerations", _set("workloads/2/tolerations", "dedicated"), "workloads[2].tolerations", "list"),
    ("string toleration", _set("workloads/2/tolerations/0", "dedicated"), "workloads[2].tolerations[0]", "object"),
    ("string taint", _set("nodes/2/taints/0", "dedicated=batch"), "nodes[2].taints[0]", "object"),
    ("int gpu model", _set("workloads/1/gpu/models", ["T4", 4]), "workloads[1].gpu.models", "model"),
    ("nan latency", _set("latency_ms/users-eu/az-1", math.nan), "latency_ms.users-eu.az-1", "finite"),
    ("inf capacity", _set("nodes/0/capacity/cpu", math.inf), "nodes[0].capacity.cpu", "finite"),
    ("inf pue", _set("domains/0/pue", math.inf), "domains[0].pue", "finite"),
    ("huge int capacity", _set("nodes/0/capacity/cpu", 10**400), "nodes[0].capacity.cpu", "finite"),
    ("huge int peak", _set("nodes/0/power_peak_w", 10**400), "nodes[0].power_peak_w", "finite"),
    # ranges
    ("zero capacity", _set("nodes/0/capacity/cpu", 0), "nodes[0].capacity.cpu", "> 0"),
    ("negative capacity", _set("nodes/1/capacity/memory", -1), "nodes[1].capacity.memory", "> 0"),
    ("negative allocated", _set("nodes/1/allocated/memory", -1), "nodes[1].allocated.memory", ">= 0"),
    ("allocated over capacity", _set("nodes/1/allocated/cpu", 20000), "nodes[1].allocated.cpu", "exceeds"),
    ("negative request", _set("workloads/0/requests/cpu", -5), "workloads[0].requests.cpu", ">= 0"),
    ("negative gpus", _set("nodes/1/gpus", -1), "nodes[1].gpus", ">= 0"),
    ("negative carbon", _set("domains/1/carbon_intensity", -1), "domains[1].carbon_intensity", ">= 0"),
    ("pue below 1", _set("domains/0/pue", 0.9), "domains[0].pue", ">= 1"),
    ("negative price", _set("domains/1/price_per_hour/cpu", -0.1), "domains[1].price_per_hour.cpu", ">= 0"),
    ("negative peak", _set("nodes/0/power_peak_w", -1), "nodes[0].power_peak_w", ">= 0"),
    ("idle above peak", _both(_set("nodes/0/power_peak_w", 400), _set("nodes/0/power_idle_w", 500)), "nodes[0].power_idle_w", "between"),
    ("zero max latency", _set("workloads/0/max_latency_ms", 0), "workloads[0].max_latency_ms", "> 0"),
    ("zero deadline", _set("workloads/2/deadline_s", 0), "workloads[2].deadline_s", "> 0"),
    ("preference weight 0", _set("workloads/0/preferred_node_affinity", [{"weight": 0, "match_labels": {}}]),
     "workloads[0].preferred_node_affinity[0].weight", "1..100"),
    ("preference weight 101", _set("workloads/0/preferred_node_affinity", [{"weight": 101, "match_labels": {}}]),
     "workloads[0].preferred_node_affinity[0].weight", "1..100"),
    ("zero latency ref", _set("latency_ref_ms", 0), "latency_ref_ms", "> 0"),
    ("negative latency", _set("latency_ms/users-eu/az-1", -1), "latency_ms.users-eu.az-1", ">= 0"),
    # unknown references
    ("unknown node domain", _set("nodes/0/domain", "mars"), "nodes[0].domain", "unknown domain"),
    ("unknown latency domain", _set("latency_ms/users-eu/mars", 5.0), "latency_ms.users-eu.mars", "unknown domain"),
    ("unknown user region", _set("workloads/0/user_region", "users-us"), "workloads[0].user_region", "unknown user region"),
    ("unknown allowed domain", _set("workloads/0/allowed_domains", ["az-1", "mars"]),
     "workloads[0].allowed_domains[1]", "unknown domain"),
    ("unhashable allowed domain", _set("workloads/0/allowed_domains", [["az-1"]]),
     "workloads[0].allowed_domains[0]", "unknown domain"),
    ("unknown capacity resource", _set("nodes/0/capacity/gpu", 1), "nodes[0].capacity.gpu", "unknown resource"),
    ("unknown allocated resource", _set("nodes/1/allocated/disk", 1), "nodes[1].allocated.disk", "unknown resource"),
    ("unknown price resource", _set("domains/0/price_per_hour/disk", 1.0), "domains[0].price_per_hour.disk", "unknown resource"),
    ("unknown request", _set("workloads/0/requests/disk", 10), "workloads[0].requests.disk", "unknown resource"),
    ("nvidia.com/gpu request", lambda d: d["workloads"][0]["requests"].update({"nvidia.com/gpu": 1}), "workloads[0].requests.nvidia.com/gpu",
     "GPUs go in 'gpu'"),
    ("gpu request", _set("workloads/0/requests/gpu", 1), "workloads[0].requests.gpu", "GPUs go in 'gpu'"),
    # duplicates
    ("duplicate node", _set("nodes/2/name", "edge-n1"), "nodes[2].name", "duplicate node"),
    ("duplicate workload", _set("workloads/2/name", "web-1"), "workloads[2].name", "duplicate workload"),
    ("duplicate domain", _append("domains", {"name": "az-1"}), "domains[2].name", "duplicate domain"),
    ("duplicate resource", _set("resources", ["cpu", "memory", "cpu"]), "resources[2]", "duplicate"),
    # GPUs
    ("share above 1000", _set("workloads/1/gpu/milli", 1500), "workloads[1].gpu.milli", "1..1000"),
    ("share zero", _set("workloads/1/gpu/milli", 0), "workloads[1].gpu.milli", "1..1000"),
    ("multi-gpu share", _set("workloads/1/gpu", {"count": 2, "milli": 500}), "workloads[1].gpu.milli", "whole cards"),
    ("negative gpu count", _set("workloads/1/gpu/count", -1), "workloads[1].gpu.count", ">= 1"),
    ("zero gpu count", _set("workloads/1/gpu/count", 0), "workloads[1].gpu.count", "leave out 'gpu'"),
    ("gpu_free_milli too long", _set("nodes/1/gpu_free_milli", [1000, 1000, 1000]), "nodes[1].gpu_free_milli", "3 entries"),
    ("gpu_free_milli too short", _set("nodes/1/gpu_free_milli", [1000]), "nodes[1].gpu_free_milli", "1 entries"),
    ("gpu_free_milli without gpus", _set("nodes/0/gpu_free_milli", [1000]), "nodes[0].gpu_free_milli", "gpus=0"),
    ("gpu_free_milli above 1000", _set("nodes/1/gpu_free_milli/1", 1001), "nodes[1].gpu_free_milli[1]", "0..1000"),
    ("gpu_free_milli negative", _set("nodes/1/gpu_free_milli/0", -5), "nodes[1].gpu_free_milli[0]", "0..1000"),
    ("gpu_free_milli string", _set("nodes/1/gpu_free_milli/0", "1000"), "nodes[1].gpu_free_milli[0]", "0..1000"),
    ("gpu_free_milli fraction", _set("nodes/1/gpu_free_milli/0", 999.5), "nodes[1].gpu_free_milli[0]", "integer"),
    ("gpu in resources", _set("resources", ["cpu", "memory", "gpu"]), "resources[2]", "not an additive resource"),
    # enumerations and Kubernetes rules
    ("taint effect", _set("nodes/2/taints/0/effect", "NoRun"), "nodes[2].taints[0].effect", "must be one of"),
    ("toleration operator", _set("workloads/2/tolerations/0/operator", "In"), "workloads[2].tolerations[0].operator",
     "Equal or Exists"),
    ("toleration effect", _set("workloads/2/tolerations/0/effect", "Never"), "workloads[2].tolerations[0].effect",
     "must be empty or one of"),
    ("exists with value", _set("workloads/2/tolerations/0/operator", "Exists"), "workloads[2].tolerations[0].value",
     "must be empty"),
    ("equal without key", _set("workloads/2/tolerations", [{"operator": "Equal", "value": "batch"}]),
     "workloads[2].tolerations[0].key", "required"),
    ("domain kind", _set("domains/0/kind", "region"), "domains[0].kind", "edge, zone, cloud"),
    ("workload class", _set("workloads/0/class", "realtime"), "workloads[0].class", "online, batch, burst"),
    ("max latency without region", _set("workloads/1/max_latency_ms", 10), "workloads[1].max_latency_ms", "user_region"),
    # weights and top level
    ("negative weight", _set("weights", {"cost": -1.0}), "weights.cost", ">= 0"),
    ("string weight", _set("weights", {"cost": "high"}), "weights.cost", "number"),
    # bounds: every number at most MAX_NUMBER (1e10), capacities at least MIN_CAPACITY, GPU
    # counts at most MAX_GPUS, priority an int32 (beyond them sums and ratios overflow to inf/NaN)
    ("capacity above the bound", _set("nodes/0/capacity/cpu", 1e11), "nodes[0].capacity.cpu", "at most 1e+10"),
    ("huge int capacity below float overflow", _set("nodes/0/capacity/memory", 10**300), "nodes[0].capacity.memory",
     "at most 1e+10"),
    ("subnormal capacity", _set("nodes/0/capacity/cpu", 1e-300), "nodes[0].capacity.cpu", "> 0"),
    ("huge allocated", _set("nodes/1/allocated/cpu", 1e300), "nodes[1].allocated.cpu", "at most 1e+10"),
    ("huge request", _set("workloads/0/requests/cpu", 1e300), "workloads[0].requests.cpu", "at most 1e+10"),
    ("huge price", _set("domains/0/price_per_hour/cpu", 1e300), "domains[0].price_per_hour.cpu", "at most 1e+10"),
    ("huge pue", _set("domains/0/pue", 1e300), "domains[0].pue", "at most 1e+10"),
    ("huge carbon", _set("domains/1/carbon_intensity", 1e11), "domains[1].carbon_intensity", "at most 1e+10"),
    ("huge latency", _set("latency_ms/users-eu/az-1", 1e300), "latency_ms.users-eu.az-1", "at most 1e+10"),
    ("huge peak power", _set("nodes/0/power_peak_w", 1e300), "nodes[0].power_peak_w", "at most 1e+10"),
    ("huge max latency", _set("workloads/0/max_latency_ms", 1e300), "workloads[0].max_latency_ms", "at most 1e+10"),
    ("huge deadline", _set("workloads/2/deadline_s", 1e300), "workloads[2].deadline_s", "at most 1e+10"),
    ("huge weight", _set("weights", {"cost": 1e300}), "weights.cost", "at most 1e+10"),
    ("huge latency ref", _set("latency_ref_ms", 1e300), "latency_ref_ms", "at most 1e+10"),
    ("gpus above 1024", _set("nodes/1/gpus", 1025), "nodes[1].gpus", "0..1024"),
    ("gpus beyond int64", _set("nodes/1/gpus", 10**20), "nodes[1].gpus", "0..1024"),
    ("gpus as a huge float", _set("nodes/1/gpus", 1e300), "nodes[1].gpus", "0..1024"),
    ("gpu count above 1024", _set("workloads/1/gpu", {"count": 1025}), "workloads[1].gpu.count", "1..1024"),
    ("gpu count beyond int64", _set("workloads/1/gpu", {"count": 10**20}), "workloads[1].gpu.count", "1..1024"),
    ("priority above int32", _set("workloads/0/priority", 2**31), "workloads[0].priority", "-2147483648..2147483647"),
    ("priority below int32", _set("workloads/0/priority", -(2**31) - 1), "workloads[0].priority", "-2147483648..2147483647"),
    ("priority as a huge float", _set("workloads/0/priority", 1e30), "workloads[0].priority", "2147483647"),
    # booleans are not numbers
    ("bool capacity", _set("nodes/0/capacity/cpu", True), "nodes[0].capacity.cpu", "boolean"),
    ("bool gpus", _set("nodes/1/gpus", True), "nodes[1].gpus", "boolean"),
    ("bool gpu count", _set("workloads/1/gpu/count", True), "workloads[1].gpu.count", "boolean"),
    ("bool gpu milli", _set("workloads/1/gpu/milli", True), "workloads[1].gpu.milli", "boolean"),
    ("bool carbon", _set("domains/0/carbon_intensity", False), "domains[0].carbon_intensity", "boolean"),
    ("bool latency", _set("latency_ms/users-eu/az-1", True), "latency_ms.users-eu.az-1", "boolean"),
    ("bool weight", _set("weights", {"cost": True}), "weights.cost", "boolean"),
    # empty names and keys
    ("empty node name", _set("nodes/0/name", ""), "nodes[0].name", "must not be empty"),
    ("blank workload name", _set("workloads/0/name", "  "), "workloads[0].name", "must not be empty"),
    ("empty domain name", _append("domains", {"name": ""}), "domains[2].name", "must not be empty"),
    ("empty taint key", _set("nodes/2/taints/0/key", ""), "nodes[2].taints[0].key", "must not be empty"),
    ("empty label key", _set("nodes/0/labels", {"": "edge"}), "nodes[0].labels", "must not be empty"),
    ("empty selector key", _set("workloads/0/node_selector", {"": "gold"}), "workloads[0].node_selector", "must not be empty"),
    ("empty user region", _set("latency_ms/", {"az-1": 5.0}), "latency_ms", "must not be empty"),
    # a mistyped field gives one error, not a follow-up as well
    ("number toleration key", _set("workloads/2/tolerations/0/key", 5), "workloads[2].tolerations[0].key", "string"),
    ("null field in a list", _set("nodes/1/gpu_free_milli/0", None), "nodes[1].gpu_free_milli[0]", "None"),
]


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"), [c[1:] for c in SINGLE_ERRORS], ids=[c[0] for c in SINGLE_ERRORS]
)
def test_invalid_field_is_reported_with_its_path(small_doc, mutate, path, fragment) -> None:
    problem_from_dict(copy.deepcopy(small_doc))  # the base document is valid
    mutate(small_doc)
    errors = errors_of(small_doc)
    assert [p for p, _ in errors] == [path], errors  # exactly this error, no follow-up noise
    assert fragment in errors[0][1]


def test_unknown_fields_are_ignored_as_the_format_may_gain_fields(small_doc) -> None:
    # shared/spec/interfaces.md: "Names may gain fields" - a reader ignores what it does not know.
    base = problem_from_dict(copy.deepcopy(small_doc))
    small_doc["placement"] = {}
    small_doc["weights"] = {"cost": 2.0, "energy": 3.0}
    small_doc["nodes"][0]["rack"] = "r1"
    small_doc["workloads"][1]["gpu"]["vendor"] = "nvidia"
    small_doc["nodes"][2]["taints"][0]["timeAdded"] = "now"
    small_doc["workloads"][2]["tolerations"][0]["tolerationSeconds"] = 30
    problem = problem_from_dict(small_doc)
    assert problem.weights == Weights(cost=2.0)
    assert [n.name for n in problem.nodes] == [n.name for n in base.nodes]
    assert problem.nodes[2].taints == base.nodes[2].taints
    assert unknown_fields(small_doc) == [
        "placement", "nodes[0].rack", "nodes[2].taints[0].timeAdded", "workloads[1].gpu.vendor",
        "workloads[2].tolerations[0].tolerationSeconds", "weights.energy",
    ]


def test_unknown_fields_of_valid_documents_and_of_junk() -> None:
    assert unknown_fields(problem_to_dict(problem_from_dict(rich_doc()))) == []
    assert unknown_fields(rich_doc()) == []
    for junk in ([1], "x", None, {"nodes": "n", "weights": [1], "workloads": [3, {"gpu": 1}]}):
        assert unknown_fields(junk) == []


def test_numbers_at_the_bounds_are_accepted_and_solve_to_finite_objectives() -> None:
    # Every number at its extreme at once: sums, products and ratios must stay finite.
    big, tiny = MAX_NUMBER, MIN_CAPACITY
    doc = {
        "resources": ["cpu", "memory", "x"],
        "domains": [{"name": "d", "carbon_intensity": big, "pue": big,
                     "price_per_hour": {"cpu": big, "memory": big, "gpu": big, "x": big}},
                    {"name": "e", "price_per_hour": {"cpu": tiny}}],
        "latency_ms": {"u": {"d": big, "e": 0}},
        "nodes": [
            {"name": "big", "domain": "d", "capacity": {"cpu": big, "memory": big, "x": big}, "gpus": MAX_GPUS,
             "power_peak_w": big, "power_idle_w": big},
            {"name": "tiny", "domain": "e", "capacity": {"cpu": tiny, "memory": tiny, "x": tiny}, "power_peak_w": big},
            {"name": "mid", "domain": "d", "capacity": {"cpu": 1000, "memory": 1000, "x": 1.5}, "gpus": 2},
        ],
        "workloads": [
            {"name": f"w{i}", "requests": {"cpu": big / (i + 1), "memory": tiny * i, "x": 0.1234567 * i},
             "user_region": "u", "max_latency_ms": big, "deadline_s": big, "class": "batch",
             "priority": 2**31 - 1 if i % 2 else -(2**31)}
            for i in range(6)
        ] + [{"name": "all-cards", "gpu": {"count": MAX_GPUS}}, {"name": "sliver", "gpu": {"count": 1, "milli": 1}}],
        "weights": {k: big for k in ("utilization", "latency", "cost", "carbon", "unplaced")},
        "latency_ref_ms": big,
    }
    problem = problem_from_dict(doc)
    names = ["best-fit", "greedy-objective", "kube-default", "fgd", "iro-frag"]
    names += ["cpsat"] if "cpsat" in solvers.available() else []
    with np.errstate(all="raise"):  # an overflow or NaN anywhere fails the test
        for name in names:
            placement = solvers.make(name, **({"time_limit_s": 5} if name == "cpsat" else {})).solve(problem)
            objective = placement.to_dict(problem)["objective"]
            values = [v for v in objective.values() if isinstance(v, float)] + list(objective["terms"].values())
            assert values and all(math.isfinite(v) for v in values), (name, objective)


def test_error_messages_stay_short_whatever_the_input_holds(small_doc) -> None:
    small_doc["nodes"][0]["taints"] = {"key": "x" * 100_000}
    small_doc["workloads"][0]["priority"] = 10**5000  # repr of this int fails (sys.int_info)
    errors = errors_of(small_doc)
    assert [p for p, _ in errors] == ["nodes[0].taints", "workloads[0].priority"]
    assert all(len(msg) < 200 for _, msg in errors), errors


def test_missing_domain_name_is_reported(small_doc) -> None:
    # The nodes and latencies that name the domain also fail; the first error is the cause.
    del small_doc["domains"][0]["name"]
    errors = errors_of(small_doc)
    assert errors[0] == ("domains[0].name", "required field is missing")
    paths = [p for p, _ in errors]
    assert "nodes[0].domain" in paths and "latency_ms.users-eu.edge-1" in paths


def test_resources_without_cpu_is_reported_first(small_doc) -> None:
    # cpu is then an unknown resource in every capacity and request as well
    small_doc["resources"] = ["memory"]
    errors = errors_of(small_doc)
    assert errors[0][0] == "resources" and "must include 'cpu'" in errors[0][1]
    assert ("nodes[0].capacity.cpu" in [p for p, _ in errors])


def test_missing_domains_is_reported(small_doc) -> None:
    del small_doc["domains"]
    errors = errors_of(small_doc)
    assert errors[0] == ("domains", "required field is missing")


def test_error_message_names_source_and_every_path(small_doc) -> None:
    small_doc["nodes"][0]["capacity"]["memory"] = "8Gi"
    with pytest.raises(ProblemValidationError) as info:
        problem_from_dict(small_doc, source="cluster.json")
    text = str(info.value)
    assert text.startswith("cluster.json: 1 error(s) in problem")
    assert "nodes[0].capacity.memory: expected a finite number, got string '8Gi'" in text
    assert info.value.source == "cluster.json"
    assert isinstance(info.value, ValueError)


def test_all_errors_are_reported_together(small_doc) -> None:
    small_doc["nodes"][0]["capacity"]["memory"] = "8Gi"
    small_doc["workloads"][0]["user_region"] = "users-us"
    small_doc["weights"] = {"cost": "high"}
    errors = errors_of(small_doc)
    assert [p for p, _ in errors] == ["nodes[0].capacity.memory", "workloads[0].user_region", "weights.cost"]
    assert len(str(ProblemValidationError(errors)).splitlines()) == 4


def test_every_broken_field_of_one_node_is_reported(small_doc) -> None:
    small_doc["nodes"][1].update(
        capacity={"cpu": 0, "memory": "64Gi"}, allocated={"cpu": -1}, gpu_free_milli=[1000, 2000],
        taints=[{"key": "k", "effect": "Bad"}],
    )
    paths = [p for p, _ in errors_of(small_doc)]
    assert paths == [
        "nodes[1].capacity.cpu", "nodes[1].capacity.memory", "nodes[1].allocated.cpu",
        "nodes[1].gpu_free_milli[1]", "nodes[1].taints[0].effect",
    ]


def test_non_object_document() -> None:
    for doc in ([1, 2], "problem", 3, None):
        errors = errors_of(doc)
        assert errors[0][0] == "" and "must be an object" in errors[0][1]


# --- files ------------------------------------------------------------------------------------


def _load_errors(path) -> ProblemValidationError:
    with pytest.raises(ProblemValidationError) as info:
        load_problem(path)
    assert info.value.source == str(path)
    assert str(path) in str(info.value)
    return info.value


def test_invalid_json_text(tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"domains": [}')
    err = _load_errors(path)
    assert err.errors[0][0] == "" and "not valid JSON" in err.errors[0][1]


def test_invalid_yaml_text(tmp_path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("domains: [a, b\nnodes: {")
    err = _load_errors(path)
    assert err.errors[0][0] == "" and "not valid YAML" in err.errors[0][1]


@pytest.mark.parametrize(("name", "text"), [("p.json", "[1, 2]"), ("p.yaml", "- a\n- b\n"), ("p.yml", "just text\n"),
                                            ("p.json", "null"), ("p.yaml", "")])
def test_non_object_file(tmp_path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    err = _load_errors(path)
    assert err.errors[0][0] == "" and "must be an object" in err.errors[0][1]


def test_missing_file(tmp_path) -> None:
    path = tmp_path / "nope.json"
    err = _load_errors(path)
    assert err.errors[0][0] == "" and "cannot read file" in err.errors[0][1]
    with pytest.raises(ProblemValidationError, match="cannot read file"):
        load_document(tmp_path)  # a directory is not a file either


@pytest.mark.parametrize("name", ["p.json", "p.yaml"])
def test_file_that_is_not_utf8(tmp_path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b'{"domains": [],\n "nodes": [{"name": "caf\xe9"}]}')  # Latin-1, not UTF-8
    err = _load_errors(path)
    assert err.errors == [("", "not UTF-8 text: byte 0xe9 at offset 40 (line 2)")]


@pytest.mark.parametrize(("name", "data"), [("p.json", b""), ("p.json", b" \n\t\n"), ("p.yaml", b"\n")])
def test_empty_file(tmp_path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    err = _load_errors(path)
    assert err.errors[0][0] == "" and "the file is empty" in err.errors[0][1]


def test_file_with_a_byte_order_mark_loads(small_doc, tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(small_doc).encode())
    assert load_problem(path).num_nodes == 3
    path.write_bytes(b"\xef\xbb\xbf{\n\xff}")
    assert _load_errors(path).errors[0][1] == "not UTF-8 text: byte 0xff at offset 5 (line 2)"


def test_utf8_error_says_where_the_bad_byte_is_in_the_whole_file() -> None:
    from iro_fed.problem_io import utf8_error

    def error(data: bytes, encoding: str = "utf-8") -> UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError) as info:
            data.decode(encoding)
        return info.value

    data = b"ok\nok\n\xc3("  # a truncated two-byte sequence: the error is at its first byte
    assert utf8_error(data, error(data)) == "not UTF-8 text: byte 0xc3 at offset 6 (line 3)"
    bom = b"\xef\xbb\xbfa\n\xff"  # utf-8-sig's error counts from after the byte-order mark
    assert utf8_error(bom, error(bom, "utf-8-sig")) == "not UTF-8 text: byte 0xff at offset 5 (line 2)"
    # a part of a file (one line of a CSV read line by line): offset and line of where it starts
    part = b"caf\xe9\n"
    assert utf8_error(part, error(part), offset=100, line=7) == "not UTF-8 text: byte 0xe9 at offset 103 (line 7)"


def test_invalid_field_in_file_names_the_path(small_doc, tmp_path) -> None:
    small_doc["nodes"][1]["capacity"].pop("cpu")
    path = tmp_path / "p.yaml"
    import yaml

    path.write_text(yaml.safe_dump(small_doc))
    err = _load_errors(path)
    assert err.errors == [("nodes[1].capacity.cpu", "required field is missing")]


# --------------------------------------------------------------------------------------------
# 3. Valid but unplaceable
# --------------------------------------------------------------------------------------------


def test_pod_needing_more_gpus_than_any_node_loads_and_is_unplaced(small_doc) -> None:
    small_doc["workloads"].append({"name": "train-4gpu", "requests": {"cpu": 1000, "memory": 1024},
                                   "gpu": {"count": 4}})
    problem = problem_from_dict(small_doc)  # valid input: no error at load time
    w = [x.name for x in problem.workloads].index("train-4gpu")
    placement = solvers.make("best-fit").solve(problem)
    assert placement.assignment[w] == -1
    reason = placement.reasons[w]
    assert reason.startswith("0/3 ") and "gpu" in reason.lower(), reason
    # the others still fit
    assert placement.num_placed == 3
    assert "train-4gpu" in placement.to_dict(problem)["unplaced"]


def test_pod_with_unknown_gpu_model_and_huge_request_load_and_are_unplaced(small_doc) -> None:
    small_doc["workloads"] += [
        {"name": "a100-only", "gpu": {"count": 1, "milli": 100, "models": ["A100"]}},
        {"name": "too-big", "requests": {"cpu": 10**6, "memory": 1}},
    ]
    problem = problem_from_dict(small_doc)
    placement = solvers.make("best-fit").solve(problem)
    assert placement.assignment[3] == placement.assignment[4] == -1
    assert placement.reasons[3].startswith("0/") and "gpu" in placement.reasons[3].lower()
    assert placement.reasons[4].startswith("0/") and "cpu" in placement.reasons[4]


# --------------------------------------------------------------------------------------------
# 4. Defaults
# --------------------------------------------------------------------------------------------


def minimal_doc() -> dict[str, Any]:
    return {
        "domains": [{"name": "d"}],
        "nodes": [
            {"name": "plain", "domain": "d", "capacity": {"cpu": 8000, "memory": 16384}},
            {"name": "gpu", "domain": "d", "capacity": {"cpu": 16000, "memory": 65536}, "gpus": 3},
        ],
        "workloads": [{"name": "w"}, {"name": "g", "gpu": {}}, {"name": "gg", "gpu": {"count": 2}}],
    }


def test_minimal_problem_gets_documented_defaults() -> None:
    p = problem_from_dict(minimal_doc())
    assert p.resources == ("cpu", "memory")
    assert p.weights == Weights() == Weights(utilization=1.0, latency=1.0, cost=1.0, carbon=1.0, unplaced=10.0)
    assert p.latency_ref_ms == DEFAULT_LATENCY_REF_MS
    assert p.domains == (Domain("d", kind="zone", carbon_zone="", carbon_intensity=0.0, price_per_hour={}, pue=1.0),)
    assert p.regions == () and p.latency_ms.shape == (0, 1)

    assert p.nodes[0] == Node("plain", "d", {}, (), "")
    assert p.allocated.tolist() == [[0, 0], [0, 0]]
    assert p.gpu_count.tolist() == [0, 3]
    assert p.gpu_free.tolist() == [[-1, -1, -1], [GPU_MILLI] * 3]  # all cards free
    for i, (cpu, gpus) in enumerate([(8000, 0), (16000, 3)]):
        idle, peak = default_power(cpu, gpus)
        assert p.power_idle_w[i] == pytest.approx(idle)
        assert p.power_peak_w[i] == pytest.approx(peak)
    assert p.power_peak_w[1] == pytest.approx(5.0 * 16 + 300.0 * 3)
    assert p.power_idle_w[1] == pytest.approx(DEFAULT_IDLE_SHARE * p.power_peak_w[1])

    assert p.workloads[0] == Workload("w")
    w = p.workloads[0]
    assert (w.klass, w.user_region, w.max_latency_ms, w.priority, w.deadline_s) == ("online", "", None, 0, None)
    assert (w.node_selector, w.tolerations, w.allowed_domains, w.gpu_models, w.preferred) == ({}, (), (), (), ())
    assert p.demand.tolist() == [[0, 0]] * 3
    # gpu {} is one whole card; count > 1 takes whole cards
    assert p.wl_gpu_count.tolist() == [0, 1, 2]
    assert p.wl_gpu_milli.tolist() == [0, GPU_MILLI, GPU_MILLI]
    assert p.wl_gpu_total.tolist() == [0, 1000, 2000]


def test_workloads_may_be_absent_and_nulls_mean_default() -> None:
    doc = minimal_doc()
    del doc["workloads"]
    doc["nodes"][1].update(gpu_free_milli=None, labels=None, taints=None, allocated=None, power_peak_w=None)
    doc["domains"][0].update(kind=None, pue=None)
    doc["weights"] = {"cost": 2.0}
    p = problem_from_dict(doc)
    assert p.num_workloads == 0 and p.demand.shape == (0, 2)
    assert p.gpu_free[1].tolist() == [1000, 1000, 1000]
    assert p.domains[0].kind == "zone" and p.domains[0].pue == 1.0
    assert p.weights == Weights(cost=2.0)  # unnamed weights keep their default
    assert p.power_peak_w[1] == pytest.approx(default_power(16000, 3)[1])


def test_optional_sub_field_defaults() -> None:
    doc = minimal_doc()
    doc["nodes"][0]["taints"] = [{"key": "k"}]
    doc["workloads"][0]["tolerations"] = [{"key": "k"}, {"operator": "Exists"}]
    doc["nodes"][1]["power_peak_w"] = 1000
    p = problem_from_dict(doc)
    assert p.nodes[0].taints == (Taint("k", "", "NoSchedule"),)
    assert p.workloads[0].tolerations == (Toleration("k", "Equal", "", ""), Toleration("", "Exists", "", ""))
    assert p.power_peak_w[1] == 1000.0 and p.power_idle_w[1] == pytest.approx(DEFAULT_IDLE_SHARE * 1000.0)


def test_integer_valued_floats_are_accepted_where_integers_are_expected() -> None:
    doc = minimal_doc()
    doc["nodes"][1].update(gpus=3.0, gpu_free_milli=[1000.0, 500.0, 0.0])
    doc["workloads"][1]["gpu"] = {"count": 1.0, "milli": 250.0}
    doc["workloads"][0]["priority"] = 2.0
    p = problem_from_dict(doc)
    assert p.gpu_free[1].tolist() == [1000, 500, 0]
    assert p.wl_gpu_milli[1] == 250 and p.workloads[0].priority == 2
    assert isinstance(p.workloads[0].priority, int)


def test_only_idle_power_given_derives_peak(small_doc) -> None:
    small_doc["nodes"][0]["power_idle_w"] = 500.0
    small_doc["nodes"][0].pop("power_peak_w", None)
    problem = problem_from_dict(small_doc)
    assert problem.power_idle_w[0] == 500.0
    assert problem.power_peak_w[0] >= 500.0 / 0.4


def test_placement_file_errors_name_the_field(small_doc) -> None:
    from iro_fed.placement import placement_from_dict

    problem = problem_from_dict(small_doc)
    name = problem.workloads[0].name
    with pytest.raises(ValueError, match="must be an object"):
        placement_from_dict(problem, [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"gpu_assignments\.ghost: unknown workload"):
        placement_from_dict(problem, {"assignments": {}, "gpu_assignments": {"ghost": [0]}})
    with pytest.raises(ValueError, match=r"unplaced\.ghost: unknown workload"):
        placement_from_dict(problem, {"assignments": {}, "unplaced": {"ghost": "x"}})
    with pytest.raises(ValueError, match="status: must be one of"):
        placement_from_dict(problem, {"assignments": {name: None}, "status": "great"})


# --------------------------------------------------------------------------------------------
# kube-scheduler's non-zero requests: optional per workload `nonzero_requests` and per node
# `nonzero_allocated` (Problem.nonzero_demand / initial_nonzero). Before, a problem file lost
# them: written from a Kubernetes snapshot and read back, kube-default scored by its fallback.
# --------------------------------------------------------------------------------------------


def with_nonzero(problem: Problem) -> Problem:
    w, n = problem.num_workloads, problem.num_nodes
    cols = [problem.resources.index(r) for r in ("cpu", "memory")]
    # Fractions too: 3 bytes of memory is 3 / 2**20 MiB, which must come back bit for bit. On top of
    # the requests / allocated: the loader refuses a non-zero amount below them.
    demand = problem.demand[:, cols] + np.column_stack([np.arange(w) * 100.0 + 100.0, np.full(w, 3 / 2**20) + np.arange(w) * 200.0])
    initial = problem.allocated[:, cols] + np.column_stack([np.arange(n) * 250.0, np.arange(n) * 512.5])
    return problem.replace(nonzero_demand=demand, initial_nonzero=initial)


def test_nonzero_arrays_round_trip_through_the_dict(rich: Problem) -> None:
    p = with_nonzero(rich)
    doc = problem_to_dict(p)
    # Beside `requests` / `allocated`, in their units, for cpu and memory only.
    cpu, mem = p.resources.index("cpu"), p.resources.index("memory")
    assert doc["workloads"][1]["nonzero_requests"] == {"cpu": p.demand[1, cpu] + 200, "memory": p.demand[1, mem] + (200 + 3 / 2**20)}
    assert doc["nodes"][1]["nonzero_allocated"] == {"cpu": p.allocated[1, cpu] + 250, "memory": p.allocated[1, mem] + 512.5}
    again = problem_from_dict(json.loads(json.dumps(doc, allow_nan=False)))
    assert again.nonzero_demand.dtype == again.initial_nonzero.dtype == np.float64
    np.testing.assert_array_equal(again.nonzero_demand, p.nonzero_demand)
    np.testing.assert_array_equal(again.initial_nonzero, p.initial_nonzero)
    assert_same_problem(p, again)
    assert problem_to_dict(again) == doc


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_nonzero_arrays_round_trip_through_a_file(rich: Problem, tmp_path, suffix: str) -> None:
    p = with_nonzero(rich)
    path = tmp_path / f"problem{suffix}"
    write_problem(p, path)
    loaded = load_problem(path)
    np.testing.assert_array_equal(loaded.nonzero_demand, p.nonzero_demand)
    np.testing.assert_array_equal(loaded.initial_nonzero, p.initial_nonzero)


def test_a_problem_without_memory_writes_and_reads_only_cpu(small_doc) -> None:
    small_doc["resources"] = ["cpu"]
    for obj in small_doc["nodes"] + small_doc["workloads"]:
        for key in ("capacity", "allocated", "requests"):
            if key in obj:
                obj[key] = {"cpu": obj[key]["cpu"]}
        # (at least what the objects request / hold: the loader refuses less)
        obj.update({"nonzero_allocated": {"cpu": 5000}} if "capacity" in obj else {"nonzero_requests": {"cpu": 3000}})
    for d in small_doc["domains"]:
        d["price_per_hour"].pop("memory")
    p = problem_from_dict(small_doc)
    assert p.nonzero_demand.tolist() == [[3000.0, 0.0]] * 3  # the memory column is 0: nothing scores it
    assert p.initial_nonzero.tolist() == [[5000.0, 0.0]] * 3
    assert problem_to_dict(p)["workloads"][0]["nonzero_requests"] == {"cpu": 3000}


def test_a_file_without_nonzero_fields_loads_with_none(small_doc) -> None:
    p = problem_from_dict(small_doc)
    assert p.nonzero_demand is None and p.initial_nonzero is None
    doc = problem_to_dict(p)
    assert not any("nonzero_requests" in w for w in doc["workloads"])
    assert not any("nonzero_allocated" in n for n in doc["nodes"])
    assert unknown_fields(problem_to_dict(with_nonzero(p))) == []  # fields the loader reads


def _nonzero_doc(doc: dict[str, Any]) -> dict[str, Any]:
    # Above every request / allocation of small_doc: the loader refuses a non-zero amount below them.
    for n in doc["nodes"]:
        n["nonzero_allocated"] = {"cpu": 5000, "memory": 8192}
    for w in doc["workloads"]:
        w["nonzero_requests"] = {"cpu": 5000, "memory": 8192}
    return doc


NONZERO_ERRORS = [
    ("negative", _set("workloads/1/nonzero_requests/cpu", -1), "workloads[1].nonzero_requests.cpu", "must be >= 0"),
    ("string", _set("nodes/0/nonzero_allocated/memory", "200Mi"), "nodes[0].nonzero_allocated.memory", "string"),
    ("bool", _set("nodes/2/nonzero_allocated/cpu", True), "nodes[2].nonzero_allocated.cpu", "boolean"),
    ("nan", _set("workloads/0/nonzero_requests/memory", float("nan")), "workloads[0].nonzero_requests.memory", "finite"),
    ("too large", _set("workloads/0/nonzero_requests/cpu", 1e11), "workloads[0].nonzero_requests.cpu", "at most 1e+10"),
    ("missing memory", _set("workloads/2/nonzero_requests", {"cpu": 5000}), "workloads[2].nonzero_requests.memory",
     "required field is missing"),
    ("unknown resource", _set("nodes/1/nonzero_allocated/gpu", 1), "nodes[1].nonzero_allocated.gpu", "unknown resource 'gpu'"),
    ("not an object", _set("workloads/0/nonzero_requests", [100, 200]), "workloads[0].nonzero_requests", "expected an object"),
    ("one workload lacks it", lambda d: d["workloads"][2].pop("nonzero_requests"), "workloads[2].nonzero_requests",
     "required, since workloads[0] gives it: give it for all 3 workloads or for none"),
    ("one node lacks it", lambda d: d["nodes"][0].pop("nonzero_allocated"), "nodes[0].nonzero_allocated",
     "required, since nodes[1] gives it"),
]


@pytest.mark.parametrize(("mutate", "path", "fragment"), [c[1:] for c in NONZERO_ERRORS], ids=[c[0] for c in NONZERO_ERRORS])
def test_bad_nonzero_values_name_the_field(small_doc, mutate, path, fragment) -> None:
    doc = _nonzero_doc(small_doc)
    problem_from_dict(copy.deepcopy(doc))  # the base document is valid
    mutate(doc)
    errors = errors_of(doc)
    assert [p for p, _ in errors] == [path], errors
    assert fragment in errors[0][1], errors
