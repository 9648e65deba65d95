"""placement_from_dict refuses a malformed ``gpu_assignments`` card list by its path (v4).

A card index past the node's cards, -1, a card listed twice, too few or too many cards for the pod's
GPUs, cards for a pod without GPUs or no list for a placed GPU pod all loaded, and only
check_placement (if anyone ran it) said so; ClusterState.place refuses such cards. A well-formed
placement that overfills a card or a node still loads, for check_placement to report.
"""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed.feasibility import check_placement
from iro_fed.placement import placement_from_dict
from iro_fed.problem_io import problem_from_dict
from iro_fed.testing import random_problem

PRICE = {"cpu": 0.03, "memory": 0.004, "gpu": 2.5}


@pytest.fixture
def problem():
    """g2: two cards (1000 and 500 milli free); c0: no GPU. ``half`` takes 500 milli of one card,
    ``two`` two whole cards, ``cpu`` none."""
    return problem_from_dict({
        "domains": [{"name": "d", "kind": "zone", "carbon_intensity": 100, "price_per_hour": PRICE}],
        "nodes": [{"name": "g2", "domain": "d", "capacity": {"cpu": 8000, "memory": 8192}, "gpus": 2,
                   "gpu_model": "V100M32", "gpu_free_milli": [1000, 500]},
                  {"name": "c0", "domain": "d", "capacity": {"cpu": 8000, "memory": 8192}}],
        "workloads": [{"name": "half", "requests": {"cpu": 100, "memory": 100}, "gpu": {"count": 1, "milli": 500}},
                      {"name": "two", "requests": {"cpu": 100, "memory": 100}, "gpu": {"count": 2, "milli": 1000}},
                      {"name": "cpu", "requests": {"cpu": 100, "memory": 100}}],
    })


ON_G2 = {"half": "g2", "two": None, "cpu": "g2"}


@pytest.mark.parametrize(("assignments", "cards", "message"), [
    (ON_G2, {"half": [2]}, r"gpu_assignments\.half\[0\]: 2 is not a card of node 'g2' \(cards 0\.\.1\)"),
    (ON_G2, {"half": [-1]}, r"gpu_assignments\.half\[0\]: -1 is not a card of node 'g2'"),
    (ON_G2, {"half": [10**400]}, r"gpu_assignments\.half\[0\]: an integer of about 401 digits is not a card"),
    (ON_G2, {"half": [True]}, r"gpu_assignments\.half\[0\]: expected a card index \(an integer\), got True"),
    (ON_G2, {"half": [0, 1]}, r"gpu_assignments\.half: 2 card\(s\) listed, but the workload asks for 1 GPU"),
    (ON_G2, {"half": []}, r"gpu_assignments\.half: 0 card\(s\) listed, but the workload asks for 1 GPU"),
    (ON_G2, {}, r"gpu_assignments\.half: missing; the workload is placed on 'g2' and asks for 1 GPU"),
    (ON_G2, {"half": [0], "cpu": [1]}, r"gpu_assignments\.cpu: 1 card\(s\) listed, but the workload asks for no GPU"),
    (ON_G2, {"half": {"card": 0}}, r"gpu_assignments\.half: expected a list of card indices, got object"),
    ({"half": None, "two": "g2", "cpu": None}, {"two": [1, 1]},
     r"gpu_assignments\.two\[1\]: card 1 is listed twice \(also at \[0\]\)"),
    ({"half": None, "two": "g2", "cpu": None}, {"two": [0]},
     r"gpu_assignments\.two: 1 card\(s\) listed, but the workload asks for 2 GPU"),
    ({"half": "c0", "two": None, "cpu": None}, {"half": [0]},
     r"gpu_assignments\.half\[0\]: 0 is not a card of node 'c0' \(it has no GPU cards\)"),
    ({"half": None, "two": None, "cpu": None}, {"half": [0]}, r"gpu_assignments\.half: the workload is not placed"),
])
def test_a_malformed_card_list_is_refused_by_its_path(problem, assignments, cards, message) -> None:
    with pytest.raises(ValueError, match="invalid placement file: .*" + message):
        placement_from_dict(problem, {"assignments": assignments, "gpu_assignments": cards})


def test_a_well_formed_but_overfull_placement_loads_for_check_placement(problem) -> None:
    # half takes 500 of card 1 and two takes all of cards 0 and 1: card 1 has 500 free, 1500 asked
    doc = {"status": "infeasible", "assignments": {"half": "g2", "two": "g2", "cpu": "g2"},
           "gpu_assignments": {"half": [1], "two": [1, 0], "cpu": []}}
    back = placement_from_dict(problem, doc)
    assert back.status == "infeasible"
    assert back.gpu_cards == {0: (1,), 1: (1, 0)}  # an empty list for a pod without GPUs stores nothing
    assert check_placement(problem, back.assignment, back.gpu_cards) == [
        "node g2: GPU card 1 over capacity (1500 milli > 500 free)"]


@pytest.mark.parametrize("seed", range(8))
def test_solver_placements_with_gpus_still_read_back(seed: int) -> None:
    problem = random_problem(seed, nodes=6, pods=10)
    placement = solvers.make("greedy-objective").solve(problem)
    back = placement_from_dict(problem, placement.to_dict(problem))
    np.testing.assert_array_equal(back.assignment, placement.assignment)
    assert back.gpu_cards == placement.gpu_cards
