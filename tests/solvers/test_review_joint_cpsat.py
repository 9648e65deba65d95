"""The ``cpsat`` solver, reviewed: amounts that are not integers in the model's units (memory
converted from bytes, fractional cpu) must neither lose placements nor back a false
"optimal". Each problem is tiny; the optimum is the brute-force one."""

from __future__ import annotations

import pytest

pytest.importorskip("ortools")

import solvers
from iro_fed import problem_from_dict
from iro_fed.feasibility import check_placement
from iro_fed.testing import brute_force

DOMAINS = [{"name": "az", "kind": "zone", "carbon_intensity": 100.0, "price_per_hour": {"cpu": 0.03, "memory": 0.004}}]
# Deterministic and short: the answers do not depend on the machine.
SETTINGS = {"time_limit_s": 5.0, "max_deterministic_time": 1.0, "seed": 0}


def _problem(nodes: list[dict], pods: list[dict]):
    return problem_from_dict({"domains": DOMAINS, "nodes": nodes, "workloads": pods})


def _check(problem, hint: str):
    optimum = brute_force(problem).objective.score
    placement = solvers.make("cpsat", hint=hint, **SETTINGS).solve(problem)
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []
    # "optimal" and the bound hold for the true R up to scale_error_bound (module docstring).
    error = placement.info["scale_error_bound"]
    assert error < 1e-5
    if placement.status == "optimal":
        assert placement.info["exact_model"] is True
        assert placement.objective.score >= optimum - error - 1e-12
    if placement.info["exact_model"]:
        assert placement.info["best_bound"] >= optimum - error - 1e-12
    return placement, optimum


@pytest.mark.parametrize("hint", ["none", "best-fit"])
def test_levels_let_every_set_of_nodes_power_on_when_capacities_are_rounded(hint):
    """Two empty nodes of 10^12 bytes of memory (953674.316 MiB: integral at the level
    encoding's tolerance, so rounded) and two pods that fit one per node. The levels were the
    rounded float sums (1907349 for both nodes on) while each node's capacity rounded to 953674,
    so no level matched both nodes on: the model placed one pod and called that optimal."""
    mem = 1e12 / 2**20
    problem = _problem(
        [{"name": f"n{j}", "domain": "az", "capacity": {"cpu": 4000, "memory": mem}} for j in range(2)],
        [{"name": f"p{i}", "requests": {"cpu": 3000, "memory": 511}} for i in range(2)],
    )
    placement, optimum = _check(problem, hint)
    assert placement.info["utilization_model"] == "levels"
    assert placement.num_placed == 2
    assert placement.objective.score == pytest.approx(optimum, abs=1e-9)


@pytest.mark.parametrize("hint", ["none", "best-fit"])
def test_levels_do_not_keep_out_pods_that_fill_a_node_exactly(hint):
    """One empty node with 953675.2 MiB and two pods of 476837.6 MiB: together exactly full.
    Rounded to nearest, usage 2 x 476838 passed capacity 953675 in ``A_r <= B_r``, so the
    model kept one pod out and called that optimal."""
    problem = _problem(
        [{"name": "n0", "domain": "az", "capacity": {"cpu": 4000, "memory": 953675.2}}],
        [{"name": f"p{i}", "requests": {"cpu": 1000, "memory": 476837.6}} for i in range(2)],
    )
    placement, optimum = _check(problem, hint)
    assert placement.info["utilization_model"] == "levels"
    assert placement.info["utilization_rounded"] is True
    assert placement.num_placed == 2
    assert placement.objective.score == pytest.approx(optimum, abs=1e-9)


@pytest.mark.parametrize("hint", ["none", "best-fit"])
def test_conservatively_rounded_capacity_rows_are_not_called_exact(hint):
    """Four pods of 1/3 cpu on one node with 1.0 cpu free: three fit (the feasibility module
    and brute force agree), but at 10^6 units the row reads 333334 x <= 10^6, two at most. The
    model is then not exact: "optimal" and its bound were about two pods (-6.45, the optimum is
    -3.98), and with the hint the placement returned as optimal kept the wrong pod out."""
    problem = _problem(
        [{"name": "n0", "domain": "az", "capacity": {"cpu": 1.0, "memory": 1000}, "allocated": {"memory": 1}}],
        [{"name": f"p{i}", "requests": {"cpu": 1 / 3, "memory": 10 + i}} for i in range(4)],
    )
    placement, _ = _check(problem, hint)
    assert placement.info["capacity_rounded"] is True
    assert placement.info["exact_model"] is False
    assert placement.status == "feasible"


def test_rounding_that_keeps_every_count_stays_exact():
    """Ten pods of 0.2000001 cpu on two nodes of 1.0: rounded up at 10^6 units the rows admit
    four per node, as the feasibility module does, so the model stays exact and proves it."""
    problem = _problem(
        [{"name": f"n{j}", "domain": "az", "capacity": {"cpu": 1.0, "memory": 1024}} for j in range(2)],
        [{"name": f"p{i}", "requests": {"cpu": 0.2000001, "memory": 64 + i}} for i in range(10)],
    )
    placement, optimum = _check(problem, "best-fit")
    assert placement.info["capacity_rounded"] is False
    assert placement.status == "optimal"
    assert placement.num_placed == 8


def test_a_node_used_past_its_capacity_does_not_crash_the_rounding_check():
    """A node whose usage is past its cpu capacity (a problem built in code: files refuse it)
    binds a cpu row in which no pod asks for cpu, while pods of 0.2000001 cpu elsewhere make
    the cpu amounts not integral. The check of that row indexed its first pod: IndexError. No
    pod in the row, rounding keeps none out."""
    problem = _problem(
        [{"name": "n0", "domain": "az", "capacity": {"cpu": 1000, "memory": 1000}},
         {"name": "n1", "domain": "az", "capacity": {"cpu": 1.0, "memory": 1000}}],
        [{"name": "a", "requests": {"cpu": 0, "memory": 10}}]
        + [{"name": f"p{i}", "requests": {"cpu": 0.2000001, "memory": 10 + i}} for i in range(6)],
    )
    allocated = problem.allocated.copy()
    allocated[0, problem.resource_index["cpu"]] = 1500.0
    problem = problem.with_cluster(allocated, problem.gpu_free)
    placement = solvers.make("cpsat", **SETTINGS).solve(problem)
    assert placement.info["capacity_rounded"] is False


@pytest.mark.parametrize("hint", ["none", "best-fit"])
def test_a_node_used_past_its_capacity_leaves_the_model_valid(hint: str):
    """An integral problem with a node past its cpu capacity (a cluster can be overcommitted: a
    problem built in code, files refuse it): its cpu row had no pod and was written as ``0 <=
    -500``, so CP-SAT answered MODEL_INVALID and the solve fell back to the hint. Now CP-SAT
    solves it, and its answer is the brute-force optimum (check_placement flags n0's own
    overcommit, so it is not asked here)."""
    problem = _problem(
        [{"name": "n0", "domain": "az", "capacity": {"cpu": 1000, "memory": 1000}},
         {"name": "n1", "domain": "az", "capacity": {"cpu": 2000, "memory": 1000}}],
        [{"name": "a", "requests": {"cpu": 0, "memory": 400}},
         {"name": "b", "requests": {"cpu": 1500, "memory": 300}},
         {"name": "c", "requests": {"cpu": 600, "memory": 300}}],
    )
    allocated = problem.allocated.copy()
    allocated[0, problem.resource_index["cpu"]] = 1500.0
    problem = problem.with_cluster(allocated, problem.gpu_free)
    placement = solvers.make("cpsat", hint=hint, **SETTINGS).solve(problem)
    assert placement.info["status"] == "optimal" and placement.status == "optimal"  # was: model_invalid, feasible
    assert placement.objective.unplaced == 1  # b or c: n1 holds one of them, n0 has no cpu left
    assert placement.objective.score == pytest.approx(brute_force(problem).objective.score, abs=1e-9)
