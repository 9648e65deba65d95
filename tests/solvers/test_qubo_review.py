"""The ``qubo`` solver, reviewed: the BQM against the objective and the cited penalty, the
repair of reads whose GPU cards pack, and settings at the edge of their ranges."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dimod")
pytest.importorskip("dwave.samplers")

import solvers
from iro_fed import problem_from_dict
from iro_fed.feasibility import check_placement
from iro_fed.model import ClusterState, Weights
from iro_fed.objective import evaluate
from iro_fed.testing import all_placements, random_problem
from solvers import InvalidSettingError
from solvers.qubo import _BatchModel


def _sample(model: _BatchModel, assignment: np.ndarray) -> dict[int, int]:
    """The BQM read of a placement: its pairs, unplaced bits and the on bit of each node it
    powers on (slack bits 0)."""
    pair = {(int(model.pods[model.pw[k]]), int(model.pn[k])): k for k in range(model.num_pairs)}
    s = np.zeros(model.num_variables, dtype=np.int64)
    for i, w in enumerate(model.pods):
        n = int(assignment[w])
        if n < 0:
            s[model.u0 + i] = 1
        else:
            s[pair[(int(w), n)]] = 1
            if n in model.on_index:
                s[model.on_index[n]] = 1
    return {v: int(s[v]) for v in range(model.num_variables)}


@pytest.mark.parametrize("seed", range(8))
def test_objective_part_of_the_energy_is_minus_r_plus_a_constant(seed):
    """Every feasible placement of a tiny problem (GPU shares and k-GPU pods, taints, latency
    limits, nodes that start empty and power on): with the utilization weight 0 (the only term
    the QUBO linearizes) the penalty-free energy is exactly -R plus one constant."""
    problem = random_problem(seed, nodes=3, pods=4)
    w = problem.weights
    problem = problem.replace(weights=Weights(0.0, w.latency, w.cost, w.carbon, w.unplaced))
    model = _BatchModel(problem, ClusterState(problem), np.arange(4), 100, "slack")
    bqm = model.bqm(0.0)
    sums = [bqm.energy(_sample(model, a)) + evaluate(problem, a).score for a, _ in all_placements(problem)]
    assert len(sums) > 1
    assert max(sums) - min(sums) == pytest.approx(0.0, abs=1e-9)


def test_unbalanced_penalty_is_the_papers_formula_with_h_the_room_left():
    """Montanez-Barrera et al.: ``-l1 h + l2 h^2`` with ``h = capacity - load`` (here in units of
    the mean demand), so room left is rewarded linearly and an overflow (h < 0) costs both
    terms. One node with 2000 cpu free, three 1000-cpu pods: h = 2 - (pods placed)."""
    doc = {
        "domains": [{"name": "a", "carbon_intensity": 100.0, "price_per_hour": {"cpu": 0.03}}],
        "nodes": [{"name": "n", "domain": "a", "capacity": {"cpu": 3000, "memory": 8192}, "allocated": {"cpu": 1000}}],
        "workloads": [{"name": f"p{i}", "requests": {"cpu": 1000, "memory": 64}} for i in range(3)],
    }
    problem = problem_from_dict(doc)
    model = _BatchModel(problem, ClusterState(problem), np.arange(3), 8, "unbalanced")
    for alpha, l1 in ((1.0, 1.0), (2.0, 3.0)):
        bqm, base = model.bqm(alpha, l1), model.bqm(0.0)
        for placed in range(4):
            assignment = np.array([0] * placed + [-1] * (3 - placed))
            read = _sample(model, assignment)
            h = 2.0 - placed
            assert bqm.energy(read) - base.energy(read) == pytest.approx(alpha * model.scale * (-l1 * h + h * h), abs=1e-9)


def test_whole_card_capacity_is_penalized_once():
    """Whole-card pods on a node with two fully free cards: the card count constraint. At
    1000 milli the milli-sum constraint is the same constraint (times 1000), which used to add
    the same penalty a second time."""
    doc = {
        "domains": [{"name": "a", "carbon_intensity": 100.0, "price_per_hour": {"cpu": 0.03}}],
        "nodes": [{"name": "g", "domain": "a", "capacity": {"cpu": 8000, "memory": 8192}, "gpus": 2}],
        "workloads": [{"name": f"w{i}", "requests": {"cpu": 100, "memory": 64}, "gpu": {"count": 1, "milli": 1000}}
                      for i in range(3)],
    }
    problem = problem_from_dict(doc)
    model = _BatchModel(problem, ClusterState(problem), np.arange(3), 8, "unbalanced")
    bqm, base = model.bqm(1.0, 1.0), model.bqm(0.0)
    for placed in range(4):
        read = _sample(model, np.array([0] * placed + [-1] * (3 - placed)))
        h = 2.0 - placed
        assert bqm.energy(read) - base.energy(read) == pytest.approx(model.scale * (-h + h * h), abs=1e-9)


def _shares_doc() -> dict:
    """Two cards with 750 milli free each; shares 250, 250, 500, 500 fit only as 250 + 500
    per card. The 250s carry a latency reward, so their objective bias ranks them first."""
    share = {"cpu": 100, "memory": 64}
    return {
        "domains": [{"name": "a", "carbon_intensity": 100.0, "price_per_hour": {"cpu": 0.03}}],
        "latency_ms": {"u": {"a": 1.0}},
        "nodes": [{"name": "g", "domain": "a", "capacity": {"cpu": 8000, "memory": 8192}, "gpus": 2,
                   "gpu_free_milli": [750, 750]}],
        "workloads": [
            {"name": "s1", "requests": share, "gpu": {"count": 1, "milli": 250}, "user_region": "u"},
            {"name": "s2", "requests": share, "gpu": {"count": 1, "milli": 250}, "user_region": "u"},
            {"name": "b1", "requests": share, "gpu": {"count": 1, "milli": 500}},
            {"name": "b2", "requests": share, "gpu": {"count": 1, "milli": 500}},
        ],
    }


def test_repair_keeps_every_pod_of_a_read_whose_gpu_cards_pack():
    """Decode calls the read feasible (the cards pack best-fit decreasing); the repair used to
    place the pods one by one on their default card in bias order (both 250s on card 0), which
    left no card with 500 free and dropped b2 from a feasible read."""
    problem = problem_from_dict(_shares_doc())
    model = _BatchModel(problem, ClusterState(problem), np.arange(4), 8, "unbalanced")
    assert model.cx[0] > model.cx[2]  # the 250s come first in the repair's order
    read = np.zeros(model.num_variables, dtype=np.int8)
    read[: model.num_pairs] = 1  # every pod on the one node
    chosen, feasible = model.decode(read)
    assert feasible
    state, changes = model.repair(chosen)
    assert state.assignment.tolist() == [0, 0, 0, 0]
    assert changes == 0
    assert check_placement(problem, state.assignment, state.gpu_cards) == []


def test_repair_still_drops_pods_that_do_not_fit():
    """The card re-packing only applies where the additive resources fit: a pod over the node's
    cpu is still dropped (and the result stays valid)."""
    doc = _shares_doc()
    doc["nodes"][0]["capacity"]["cpu"] = 350  # room for three of the four 100-cpu pods
    problem = problem_from_dict(doc)
    model = _BatchModel(problem, ClusterState(problem), np.arange(4), 8, "unbalanced")
    read = np.zeros(model.num_variables, dtype=np.int8)
    read[: model.num_pairs] = 1
    chosen, feasible = model.decode(read)
    assert not feasible
    state, changes = model.repair(chosen)
    assert int((state.assignment >= 0).sum()) == 3 and changes >= 1
    assert check_placement(problem, state.assignment, state.gpu_cards) == []


@pytest.mark.parametrize(
    "settings",
    [{"max_penalty_steps": 2000}, {"penalty_growth": 1e300, "max_penalty_steps": 3, "penalty_patience": 0}],
)
def test_calibration_steps_past_float_range_do_not_crash(settings):
    """``penalty_start * penalty_growth**k`` raised OverflowError while the list of the
    calibration's penalties was built (1.6**1510), before the first sample."""
    problem = random_problem(3, nodes=4, pods=8)
    placement = solvers.make("qubo", refine_steps=0, **settings).solve(problem)
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []
    for batch in placement.info["batches"]:
        assert all(np.isfinite(step["penalty"]) for step in batch["steps"])


@pytest.mark.parametrize("value", [(True, 2.0), [0.5, False], (1, True)])
def test_beta_range_rejects_booleans(value):
    with pytest.raises(InvalidSettingError, match="'beta_range'"):
        solvers.make("qubo", beta_range=value)


@pytest.mark.parametrize("key, value", [("num_sweeps", 2**40), ("num_reads", 10**9)])
def test_sampler_sizes_past_what_can_be_allocated_are_refused_by_name(key, value) -> None:
    # Before: accepted, then a MemoryError inside the solve (8 TiB of temperatures for 2**40 sweeps).
    with pytest.raises(InvalidSettingError, match=key):
        solvers.make("qubo", **{key: value})


def test_info_keys_are_there_when_nothing_was_sampled() -> None:
    # Before: energy, feasible_fraction, penalty and repairs were missing when no batch was sampled.
    problem = problem_from_dict({"domains": [{"name": "d"}], "workloads": [],
                                 "nodes": [{"name": "n", "domain": "d", "capacity": {"cpu": 1000, "memory": 1024}}]})
    placement = solvers.make("qubo").solve(problem)
    assert {"energy", "feasible_fraction", "penalty", "repairs"} <= set(placement.info)
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []
