"""The ``cpsat`` solver with tiny amounts, its ``info`` keys on every path, and repeated hints.

* A listed resource a node has none of gets capacity 1e-6 (``MIN_CAPACITY``, what the k8s
  snapshot writes for allocatable 0). The level encoding's unit took its tolerance absolutely
  below 1, so 1e-6 rounded to 0: the resource read as absent (U's mean over two resources, not
  three), the error bound looked at positive levels only, and the wrong placement was called
  optimal (m3: R -0.1167 where leaving the pod out scores -0.1; case 1160: 0.2309, optimum 0.2412).
* Capacity rows tried units up to 10^6 only: pods of 1e-7 on 5e-7 free read 1 unit each on 0.
* ``info`` lacked keys on some paths (no pods: hint, scale_error_bound, ...; no model: gap,
  num_variables, ...), though the docs say the keys are the same.
* ``hint=best-fit,best-fit`` was accepted (run once), against the no-repeats rule of name lists.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("ortools")

import solvers
from iro_fed import problem_from_dict
from iro_fed.feasibility import check_placement
from iro_fed.testing import brute_force, random_problem
from solvers.base import InvalidSettingError
from solvers.cpsat import INFO_KEYS
from solvers.cpsat_model import scaled_demand

SETTINGS = {"time_limit_s": 5.0, "max_deterministic_time": 0.5, "seed": 0}

M3 = {
    "resources": ["cpu", "memory", "hugepages-2Mi"],
    "domains": [{"name": "e", "kind": "edge", "carbon_intensity": 0, "price_per_hour": {"cpu": 0.03, "memory": 0.004}}],
    "nodes": [{"name": "n0", "domain": "e", "capacity": {"cpu": 1000, "memory": 1000, "hugepages-2Mi": 1e-6}}],
    "workloads": [{"name": "a", "requests": {"cpu": 500, "memory": 500}}],
    "weights": {"utilization": 1, "latency": 0, "cost": 0.45, "carbon": 0, "unplaced": 0.1},
}

CASE1160 = {
    "resources": ["cpu", "memory", "ephemeral-storage"],
    "domains": [
        {"name": "e", "kind": "edge", "carbon_intensity": 0, "price_per_hour": {"cpu": 0.03, "memory": 0.004, "gpu": 2.5}},
        {"name": "c", "kind": "cloud", "carbon_intensity": 300, "price_per_hour": {"cpu": 0.01, "memory": 0.001, "gpu": 1.0}},
    ],
    "latency_ms": {"u": {"e": 5, "c": 40}},
    "nodes": [
        {"name": "n0", "domain": "c", "capacity": {"cpu": 2000, "memory": 4096, "ephemeral-storage": 1e-06},
         "allocated": {"cpu": 0, "memory": 0}, "gpus": 2, "gpu_free_milli": [1000, 1000]},
        {"name": "n1", "domain": "e", "capacity": {"cpu": 2000, "memory": 4096, "ephemeral-storage": 1e-06},
         "allocated": {"cpu": 500, "memory": 0}},
    ],
    "workloads": [
        {"name": "p0", "requests": {"cpu": 100, "memory": 2048, "ephemeral-storage": 0}, "class": "online"},
        {"name": "p1", "requests": {"cpu": 1000.7, "memory": 2048, "ephemeral-storage": 1e-09}, "class": "online"},
        {"name": "p2", "requests": {"cpu": 1000, "memory": 128, "ephemeral-storage": 1e-09}, "class": "online",
         "user_region": "u", "max_latency_ms": 10},
        {"name": "p3", "requests": {"cpu": 0.5, "memory": 512, "ephemeral-storage": 0}, "class": "online",
         "gpu": {"count": 2, "milli": 1000}, "user_region": "u", "max_latency_ms": 10,
         "tolerations": [{"key": "t", "operator": "Exists"}]},
        {"name": "p4", "requests": {"cpu": 500, "memory": 2048, "ephemeral-storage": 1e-09}, "class": "online",
         "gpu": {"count": 1, "milli": 250}, "user_region": "u"},
        {"name": "p5", "requests": {"cpu": 1000.7, "memory": 128, "ephemeral-storage": 0}, "class": "online",
         "gpu": {"count": 1, "milli": 500}, "user_region": "u"},
    ],
    "weights": {"utilization": 1, "latency": 1, "cost": 1, "carbon": 1, "unplaced": 0.5},
}

DOMAINS = [{"name": "e", "kind": "edge", "carbon_intensity": 0, "price_per_hour": {"cpu": 0.03, "memory": 0.004}}]


def _tiny_row_problem(caps: list[float], allocated: list[float], requests: list[float]):
    """Nodes with plenty of cpu and memory and ``caps`` of a resource x; pods asking ``requests`` of x."""
    return problem_from_dict({
        "resources": ["cpu", "memory", "x"], "domains": DOMAINS,
        "weights": {"utilization": 1, "latency": 0, "cost": 0.1, "carbon": 0, "unplaced": 1},
        "nodes": [{"name": f"n{i}", "domain": "e", "capacity": {"cpu": 1000, "memory": 1000, "x": c},
                   "allocated": {"x": a}} for i, (c, a) in enumerate(zip(caps, allocated, strict=True))],
        "workloads": [{"name": f"p{j}", "requests": {"cpu": 10, "memory": 10 + j, "x": r}}
                      for j, r in enumerate(requests)],
    })


def _check_against_brute_force(problem, hint: str):
    optimum = brute_force(problem).objective.score
    placement = solvers.make("cpsat", hint=hint, **SETTINGS).solve(problem)
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []
    error = placement.info["scale_error_bound"]
    assert error < 1e-5
    if placement.status == "optimal":
        assert placement.objective.score >= optimum - error - 1e-12
        # CP-SAT's objective and bound are the optimum's R too (m3 with the hint: 0.05, as if U
        # were the mean of cpu and memory alone, beside a placement scoring -0.1).
        assert placement.info["objective"] == pytest.approx(placement.objective.score, abs=error + 1e-9)
        assert placement.info["best_bound"] <= optimum + error + 1e-9
    if placement.info["exact_model"]:
        assert placement.info["best_bound"] >= optimum - error - 1e-12
        assert placement.info["objective"] >= optimum - error - 1e-12
    return placement, optimum


@pytest.mark.parametrize("hint", ["none", "best-fit"])
@pytest.mark.parametrize("doc", [M3, CASE1160], ids=["m3", "case1160"])
def test_a_tiny_capacity_is_not_read_as_none(doc, hint):
    placement, optimum = _check_against_brute_force(problem_from_dict(doc), hint)
    # Exact again with the finer unit (a 1e-6 capacity is 1 unit): the optimum, proved.
    assert placement.status == "optimal"
    assert placement.objective.score == pytest.approx(optimum, abs=1e-9)


def test_a_tiny_capacity_beside_a_large_one_makes_the_levels_inexact_not_wrong():
    """x: 1e-6 on n0, 2048 on n1, both off. The finer unit would make integers of 2e10: the coarse
    one rounds n0's capacity to 0, so the model is not exact (n0 on alone would read x as absent)."""
    problem = _tiny_row_problem([1e-6, 2048], [0, 0], [0, 1e-7, 1])
    placement, optimum = _check_against_brute_force(problem, "none")
    assert placement.info["utilization_model"] == "levels"
    assert placement.info["exact_model"] is False and placement.status == "feasible"
    assert placement.objective.score == pytest.approx(optimum, abs=1e-9)


@pytest.mark.parametrize("cost", [0.01, 0.2])
def test_a_tiny_capacity_of_a_node_already_on_is_not_lost(cost):
    """n0 is on (900 m of cpu in use) with 1e-6 of x; n1, off, has 2048 of x. At the coarse unit
    n0's x rounded to 0, so with n1 off the model read x as absent (U the mean of two resources)
    and called a placement optimal at R 0.178 where 0.323 is best (cost 0.01)."""
    problem = problem_from_dict({
        "resources": ["cpu", "memory", "x"], "domains": DOMAINS,
        "weights": {"utilization": 1, "latency": 0, "cost": cost, "carbon": 0, "unplaced": 0.3},
        "nodes": [
            {"name": "n0", "domain": "e", "capacity": {"cpu": 1000, "memory": 1000, "x": 1e-6}, "allocated": {"cpu": 900}},
            {"name": "n1", "domain": "e", "capacity": {"cpu": 1000, "memory": 1000, "x": 2048}},
        ],
        "workloads": [{"name": "a", "requests": {"cpu": 500, "memory": 500, "x": 1}},
                      {"name": "b", "requests": {"cpu": 50, "memory": 50}}],
    })
    placement, optimum = _check_against_brute_force(problem, "none")
    assert placement.info["utilization_model"] == "levels"
    assert placement.info["exact_model"] is False and placement.status == "feasible"


@pytest.mark.parametrize("hint", ["none", "best-fit"])
def test_tiny_demands_fill_a_tiny_capacity_exactly(hint):
    """Six pods of 1e-7 of x, 5e-7 free: five fit. At 10^6 units the row read 1 unit each on
    0 free (not integral, rounded conservatively): the model placed none, and the polish left
    out the pod the optimum keeps."""
    problem = _tiny_row_problem([1e-6], [5e-7], [1e-7] * 6)
    placement, optimum = _check_against_brute_force(problem, hint)
    assert placement.info["capacity_rounded"] is False
    assert placement.status == "optimal" and placement.num_placed == 5
    assert placement.objective.score == pytest.approx(optimum, abs=1e-9)


def test_a_positive_demand_never_scales_to_zero():
    # Float noise was allowed absolutely below 1: a demand of 1e-13 at unit 1 read 0, and any
    # number of such pods fitted a row.
    assert scaled_demand(np.array([1e-13, 0.0, 2.0, 0.1 * 10]), 1.0).tolist() == [1.0, 0.0, 2.0, 1.0]


def _info_keys(problem, **settings) -> set[str]:
    return set(solvers.make("cpsat", **settings).solve(problem).info)


def test_info_has_the_same_keys_on_every_path():
    doc = dict(M3)
    normal = problem_from_dict(doc)
    paths = {
        "normal": _info_keys(normal),
        "no hint, no polish": _info_keys(normal, hint="none", lns=False, polish=False),
        "no pods": _info_keys(problem_from_dict(dict(doc, workloads=[]))),
        "no nodes": _info_keys(problem_from_dict(dict(doc, nodes=[]))),
        "pruned": _info_keys(random_problem(77, nodes=20, pods=40), max_candidates=2, max_deterministic_time=0.5),
    }
    # No model built, CP-SAT not run: the deadline had passed before the solve began.
    late = solvers.make("cpsat").solve_until(random_problem(102, nodes=25, pods=60), deadline=time.perf_counter() - 1.0)
    assert late.info["status"] == "not_run"
    paths["not_run"] = set(late.info)
    for name, keys in paths.items():
        assert keys == set(INFO_KEYS), (name, sorted(set(INFO_KEYS) ^ keys))
    assert late.info["num_variables"] is None and late.info["gap"] is None and late.info["lns"] is None


def test_info_of_an_empty_problem_says_nothing_was_rounded_or_run():
    info = solvers.make("cpsat").solve(problem_from_dict(dict(M3, workloads=[]))).info
    assert info["status"] == "optimal" and info["scale_error_bound"] == 0.0
    assert info["utilization_rounded"] is False and info["capacity_rounded"] is False
    assert info["hint"] is None and info["deterministic_budget"] == 5.0
    assert info["cpsat_wall_time_s"] == 0.0 and info["deterministic_time"] == 0.0


@pytest.mark.parametrize("hint", ["best-fit,best-fit", "qubo,qubo", "best-fit, first-fit,best-fit"])
def test_a_hint_named_twice_is_refused(hint):
    with pytest.raises(InvalidSettingError, match="'hint'.*given twice"):
        solvers.make("cpsat", hint=hint)


def test_distinct_hints_are_still_accepted():
    assert solvers.make("cpsat", hint="best-fit,first-fit").hint_solvers == ["best-fit", "first-fit"]
