"""The ``qubo`` solver: the BQM, calibration, decode and repair, determinism, settings, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("dimod")
pytest.importorskip("dwave.samplers")

import solvers
from iro_fed import problem_from_dict
from iro_fed.cli import main
from iro_fed.feasibility import check_placement
from iro_fed.model import ClusterState
from iro_fed.testing import brute_force, random_problem
from solvers import InvalidSettingError
from solvers.qubo import _BatchModel

REPO = Path(__file__).resolve().parents[2]
BANK = REPO / "examples" / "problems" / "bank-three-zone.json"


@pytest.mark.parametrize(("pods", "seed"), [(pods, seed) for pods in (1, 2) for seed in range(10)])
def test_reaches_the_brute_force_optimum_on_the_smallest_problems(pods, seed):
    problem = random_problem(500 + seed, nodes=3, pods=pods)
    placement = solvers.make("qubo", seed=1).solve(problem)
    assert placement.objective.score == pytest.approx(brute_force(problem).objective.score, abs=1e-9)


def test_mostly_optimal_and_always_feasible_on_tiny_problems():
    hits = total = 0
    for pods in (3, 4, 5, 6):
        for seed in range(6):
            problem = random_problem(700 + seed, nodes=3, pods=pods)
            placement = solvers.make("qubo", seed=1).solve(problem)
            assert check_placement(problem, placement.assignment, placement.gpu_cards) == []
            total += 1
            hits += abs(placement.objective.score - brute_force(problem).objective.score) <= 1e-9
    assert hits >= 0.75 * total  # not exact (capacity penalty bias, utilization surrogate), but close


@pytest.mark.parametrize("settings", [{}, {"capacity": "slack"}, {"sampler": "tabu", "tabu_restarts": 2}])
def test_always_feasible_after_repair_and_reports_the_sampling(settings):
    problem = random_problem(101, nodes=25, pods=60)
    placement = solvers.make("qubo", **settings).solve(problem)
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []
    info = placement.info
    for key in ("energy", "feasible_fraction", "penalty", "repairs"):
        assert key in info, key
    assert 0.0 <= info["feasible_fraction"] <= 1.0
    steps = info["batches"][0]["steps"]
    alphas = [s["alpha"] for s in steps]
    assert alphas == sorted(alphas) and alphas[0] == pytest.approx(0.5)
    # Calibration stops at the first penalty whose lowest-energy read is feasible.
    assert all(not s["lowest_energy_feasible"] for s in steps[:-1])


def test_a_tiny_penalty_gives_infeasible_reads_that_repair_fixes():
    problem = random_problem(101, nodes=25, pods=60)
    placement = solvers.make("qubo", penalty=0.01, num_reads=4).solve(problem)
    assert placement.info["feasible_fraction"] == 0.0
    assert placement.info["repairs"] > 0
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []


def test_bqm_energy_is_minus_the_objective_for_one_hot_samples():
    """Without binding capacity, the energy of a read that places each pod once is -(its
    per-pod objective terms) plus w5/W per unplaced pod."""
    doc = {
        "domains": [{"name": "a", "carbon_intensity": 100.0, "price_per_hour": {"cpu": 0.03}},
                    {"name": "b", "carbon_intensity": 400.0, "price_per_hour": {"cpu": 0.03}}],
        "latency_ms": {"u": {"a": 5.0, "b": 40.0}},
        "nodes": [{"name": "n-a", "domain": "a", "capacity": {"cpu": 8000, "memory": 8192}, "allocated": {"cpu": 1000}},
                  {"name": "n-b", "domain": "b", "capacity": {"cpu": 8000, "memory": 8192}, "allocated": {"cpu": 1000}}],
        "workloads": [{"name": "p", "requests": {"cpu": 1000, "memory": 512}, "user_region": "u"},
                      {"name": "q", "requests": {"cpu": 500, "memory": 256}}],
    }
    problem = problem_from_dict(doc)
    model = _BatchModel(problem, ClusterState(problem), np.arange(2), 8, "unbalanced")
    bqm = model.bqm(2.0)
    sample = np.zeros(model.num_variables, dtype=np.int8)
    first = {int(model.pw[k]): k for k in range(model.num_pairs)}  # any candidate of each pod
    for k in first.values():
        sample[k] = 1
    energy = bqm.energy({v: int(sample[v]) for v in range(model.num_variables)})
    assert energy == pytest.approx(-sum(model.cx[k] for k in first.values()), abs=1e-12)
    sample[list(first.values())[1]] = 0
    sample[model.u0 + 1] = 1  # pod q unplaced instead
    energy = bqm.energy({v: int(sample[v]) for v in range(model.num_variables)})
    assert energy == pytest.approx(-model.cx[first[0]] + model.unplaced_cost, abs=1e-12)
    sample[model.u0 + 0] = 1  # pod p placed and unplaced: the one-hot penalty applies
    assert bqm.energy({v: int(sample[v]) for v in range(model.num_variables)}) > energy + model.scale


def test_large_problems_are_solved_in_batches():
    problem = random_problem(55, nodes=10, pods=40)
    placement = solvers.make("qubo", batch_size=10, num_reads=4).solve(problem)
    assert len(placement.info["batches"]) == 4
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []


def test_same_seed_gives_the_same_placement():
    problem = random_problem(21, nodes=8, pods=16)
    for settings in ({"seed": 4}, {"seed": 4, "sampler": "tabu", "tabu_restarts": 2}):
        a = solvers.make("qubo", **settings).solve(problem)
        b = solvers.make("qubo", **settings).solve(problem)
        assert np.array_equal(a.assignment, b.assignment) and a.gpu_cards == b.gpu_cards


def test_beta_range_from_the_command_line_and_python():
    assert solvers.make("qubo", beta_range="0.1, 5").beta_range == (0.1, 5.0)
    assert solvers.make("qubo", beta_range=(0.1, 5)).get_params()["beta_range"] == (0.1, 5.0)
    problem = random_problem(3, nodes=3, pods=4)
    placement = solvers.make("qubo", beta_range=(0.1, 5.0)).solve(problem)
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []


@pytest.mark.parametrize(
    ("settings", "name"),
    [
        ({"num_reads": 0}, "num_reads"),
        ({"num_sweeps": 0}, "num_sweeps"),
        ({"beta_range": "5,1"}, "beta_range"),
        ({"beta_range": "x"}, "beta_range"),
        ({"beta_range": 3}, "beta_range"),
        ({"sampler": "neal"}, "sampler"),
        ({"capacity": "soft"}, "capacity"),
        ({"penalty": -1.0}, "penalty"),
        ({"penalty_growth": 1.0}, "penalty_growth"),
        ({"max_candidates": 0}, "max_candidates"),
        ({"batch_size": 0}, "batch_size"),
        ({"time_limit_s": 0}, "time_limit_s"),
    ],
)
def test_bad_settings_name_the_setting(settings, name):
    with pytest.raises(InvalidSettingError, match=f"'{name}'"):
        solvers.make("qubo", **settings)


def test_cli_solve_with_qubo(tmp_path, capsys):
    out = tmp_path / "placement.json"
    assert main(["solve", str(BANK), "--solver", "qubo", "--set", "beta_range=0.1,10", "--out", str(out)]) == 0
    assert "qubo" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["solver"] == "qubo" and doc["status"] == "feasible"
    assert "risk/stress-test-full-book" in doc["unplaced"]
    assert main(["solve", str(BANK), "--solver", "qubo", "--set", "beta_range=9,1"]) == 2


@pytest.mark.parametrize("seed", [101, 102, 103])
def test_refinement_improves_the_batch_qubo_and_stays_valid(seed):
    problem = random_problem(seed, nodes=25, pods=60)
    batch_only = solvers.make("qubo", refine_steps=0, polish=False).solve(problem)
    refined = solvers.make("qubo", polish=False, starts="none", widen_nodes=1).solve(problem)  # the refinement alone
    assert "refine" not in batch_only.info
    assert check_placement(problem, refined.assignment, refined.gpu_cards) == []
    info = refined.info["refine"]
    assert info["accepted"] > 0
    # The refinement's reported gain is the whole difference from its batch phase (whose
    # calibration may differ from a run without refinement: qubo.py, penalty_patience).
    (batch,) = refined.info["batches"]
    assert refined.objective.score == pytest.approx(batch["score"] + info["gain"], abs=1e-9)
    assert info["gain"] > 1e-3


def test_refinement_frees_the_node_an_unplaced_pod_needs():
    """Two small pods sit on the only node where the big pod fits; the other node has room for
    them. Single-pod moves cannot place the big pod (it needs both moved first); one
    refinement step around the unplaced pod does."""
    doc = {
        "domains": [{"name": "a", "carbon_intensity": 100.0, "price_per_hour": {"cpu": 0.03}}],
        "nodes": [{"name": "big", "domain": "a", "capacity": {"cpu": 8000, "memory": 8192}},
                  {"name": "small", "domain": "a", "capacity": {"cpu": 4000, "memory": 8192}}],
        "workloads": [{"name": "s1", "requests": {"cpu": 2000, "memory": 512}},
                      {"name": "s2", "requests": {"cpu": 2000, "memory": 512}},
                      {"name": "large", "requests": {"cpu": 7000, "memory": 512}}],
    }
    problem = problem_from_dict(doc)
    state = ClusterState(problem)
    state.place(0, 0)
    state.place(1, 0)
    solver = solvers.make("qubo", seed=3, refine_steps=4, refine_nodes=1)
    refined, info = solver._refine(problem, state, float("inf"))
    assert refined.assignment.tolist() == [1, 1, 0]
    assert info["accepted"] >= 1 and info["gain"] > 0


def test_default_beta_range_matches_dwave_samplers():
    dimod = pytest.importorskip("dimod")
    from dwave.samplers.sa.sampler import _default_ising_beta_range

    from solvers.qubo import default_beta_range

    problem = random_problem(101, nodes=25, pods=60)
    model = _BatchModel(problem, ClusterState(problem), np.arange(60), 8, "unbalanced")
    for alpha in (0.5, 2.0):
        bqm = model.bqm(alpha)
        spin = bqm.change_vartype(dimod.SPIN, inplace=False)
        assert default_beta_range(bqm) == pytest.approx(list(_default_ising_beta_range(spin.linear, spin.quadratic)), rel=1e-9)


def test_calibration_stops_when_a_higher_penalty_stops_paying():
    # Patience counts from the first step with a feasible read (here the fourth; on problem 101 the
    # first two had none and patience 1 stopped at the second, before any read was feasible).
    problem = random_problem(100, nodes=25, pods=60)
    runs = {
        p: solvers.make("qubo", seed=1, refine_steps=0, polish=False, penalty_patience=p).solve(problem) for p in (0, 1)
    }
    full, patient = runs[0].info["batches"][0]["steps"], runs[1].info["batches"][0]["steps"]
    assert len(patient) < len(full) and not patient[-1]["lowest_energy_feasible"]  # stopped early
    assert [s["feasible_fraction"] > 0 for s in patient] == [False, False, False, True]
    scores = [s["best_repaired_score"] for s in patient]
    assert scores[-1] < max(scores[:-1])
    # The steps both ran are the same samples: patience only stops earlier.
    assert [s["energy"] for s in patient] == [s["energy"] for s in full[: len(patient)]]


def test_the_polish_is_on_by_default_and_only_ever_gains():
    """The default QUBO is the refined sampler result plus the true-R local search (drains,
    swaps); with the same seed it is never below the sampler's own result and is valid."""
    problem = random_problem(104, nodes=25, pods=60)
    # Starts and widening off: with them the two runs take other paths (each polished or not).
    pure = solvers.make("qubo", seed=5, polish=False, starts="none", widen_nodes=1).solve(problem)
    hybrid = solvers.make("qubo", seed=5, starts="none", widen_nodes=1).solve(problem)
    assert "polish_moves" not in pure.info and hybrid.info["polish_moves"] >= 0
    assert check_placement(problem, hybrid.assignment, hybrid.gpu_cards) == []
    assert hybrid.objective.score >= pure.objective.score - 1e-12
