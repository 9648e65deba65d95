"""Review of the scoring core and the plots: marginal() against evaluate() over many random
problems and states, assignments that are not node indices, and plot files and curves that the
plotting step could not draw."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from iro_fed import ClusterState, evaluate, marginal, problem_from_dict
from iro_fed.cli import UsageError
from iro_fed.feasibility import feasible_nodes
from iro_fed.testing import random_problem, random_problem_doc

IRO = str(Path(sys.executable).parent / "iro")


def _hostile_doc(seed: int) -> dict:
    """A random problem with the edge cases of the normalisers: pods asking for nothing or for
    memory only, idle nodes, nodes without power, zero weights, no prices, no carbon."""
    rng = np.random.default_rng(seed)
    doc = random_problem_doc(seed, nodes=int(rng.integers(1, 7)), pods=int(rng.integers(1, 9)),
                             gpus=seed % 4 != 0, constraints=seed % 3 == 0)
    for wl in doc["workloads"]:
        r = rng.random()
        if r < 0.15:
            wl["requests"] = {}
        elif r < 0.3:
            wl["requests"] = {"memory": wl["requests"]["memory"]}
        elif r < 0.4:
            wl["requests"] = {"cpu": 0, "memory": 0}
    for node in doc["nodes"]:
        if rng.random() < 0.3:
            node["allocated"] = {}
        if rng.random() < 0.2:
            node.update(power_idle_w=0, power_peak_w=0)
    if rng.random() < 0.5:
        doc["weights"] = {k: float(rng.choice([0.0, 0.5, 1.0, 3.0])) for k in doc["weights"]}
    if rng.random() < 0.2:
        for d in doc["domains"]:
            d["price_per_hour"] = {}
    if rng.random() < 0.2:
        for d in doc["domains"]:
            d["carbon_intensity"] = 0.0
    return doc


@pytest.mark.parametrize("block", range(4))
def test_marginal_is_the_change_of_evaluate_on_hostile_random_problems(block):
    """Every term at once (power-on cost and idle carbon, utilization over the nodes on, dynamic
    carbon at the node's own domain intensity, latency with and without a user region, GPU
    totals, the unplaced share) over random walks of placements and removals: 50 problems per
    block, each unplaced pod against each feasible node, and against all nodes at once."""
    checked = 0
    for seed in range(50 * block, 50 * (block + 1)):
        rng = np.random.default_rng(10_000 + seed)
        problem = problem_from_dict(_hostile_doc(seed))
        state = ClusterState(problem)
        for _ in range(30):
            w = int(rng.integers(problem.num_workloads))
            if state.assignment[w] >= 0:
                state.remove(w)
                continue
            nodes = np.flatnonzero(feasible_nodes(state, w))
            if nodes.size == 0:
                continue
            before = evaluate(problem, state.assignment).score
            deltas = marginal(problem, state, w, nodes)
            assert deltas == pytest.approx(marginal(problem, state, w)[nodes], abs=1e-12)
            for n, delta in zip(nodes, deltas, strict=True):
                after = state.assignment.copy()
                after[w] = n
                assert evaluate(problem, after).score - before == pytest.approx(delta, abs=1e-9), (seed, w, n)
                checked += 1
            state.place(w, int(rng.choice(nodes)))
    assert checked > 500


@pytest.mark.parametrize("seed", range(60))
def test_marginal_after_a_what_if_usage_is_the_change_of_evaluate(seed):
    """The extender's preemption what-if (set_node_usage): marginal on that state equals the
    change of evaluate on a problem whose cluster has that usage."""
    rng = np.random.default_rng(seed)
    problem = random_problem(seed, nodes=5, pods=6, constraints=False)
    state = ClusterState(problem)
    alloc = problem.capacity[0] * rng.choice([0.0, 0.25, 0.5], size=len(problem.resources))
    cards = np.array([c if c < 0 else int(rng.choice([0, 500, 1000])) for c in problem.gpu_free[0]], dtype=np.int64)
    state.set_node_usage(0, alloc, cards)
    allocated, gpu_free = problem.allocated.copy(), problem.gpu_free.copy()
    allocated[0], gpu_free[0] = alloc, cards
    what_if = problem.with_cluster(allocated, gpu_free)
    for w in range(problem.num_workloads):
        nodes = np.flatnonzero(feasible_nodes(state, w))
        if nodes.size == 0:
            continue
        before = evaluate(what_if, state.assignment).score
        for n, delta in zip(nodes, marginal(problem, state, w, nodes), strict=True):
            after = state.assignment.copy()
            after[w] = n
            assert evaluate(what_if, after).score - before == pytest.approx(delta, abs=1e-9), (w, n)
        if rng.random() < 0.7:
            state.place(w, int(rng.choice(nodes)))


# Before: evaluate() cast the assignment to int64, so [0.9, -0.5] scored both pods as placed on
# node 0 (the -0.5 meant to be "unplaced" truncated to node 0) and a bool mask scored pods on
# nodes 0 and 1, where the docstring promises a ValueError naming the entry.
def test_evaluate_refuses_values_that_are_not_node_indices():
    problem = random_problem(0, nodes=3, pods=2)
    with pytest.raises(ValueError, match=r"assignment\[0\] \(p0\): 0.9 is not a node index \(-1 for unplaced, or 0..2\)"):
        evaluate(problem, np.array([0.9, -0.5]))
    with pytest.raises(ValueError, match=r"assignment\[1\] \(p1\): -0.5 is not a node index"):
        evaluate(problem, np.array([0.0, -0.5]))
    with pytest.raises(ValueError, match=r"assignment\[0\] \(p0\): nan is not a node index"):
        evaluate(problem, np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match=r"assignment\[0\] \(p0\): True is not a node index"):
        evaluate(problem, np.array([True, False]))
    with pytest.raises(ValueError, match=r"assignment\[1\] \(p1\): None is not a node index"):
        evaluate(problem, np.array([0, None]))
    # Whole numbers in a float vector are node indices: the same score as the int vector.
    assert evaluate(problem, np.array([1.0, -1.0])).score == evaluate(problem, np.array([1, -1])).score


# Before: check_plot_file accepted a .pgf path (matplotlib lists the format), and the run failed
# at its last step with RuntimeError "'xelatex' not found" (exit 1, a traceback, no plot).
def test_pgf_plot_without_tex_is_a_usage_error(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from iro_fed.plots import check_plot_file

    monkeypatch.setenv("PATH", str(tmp_path))  # no TeX system on it
    with pytest.raises(UsageError, match=r"--plot: a \.pgf image needs xelatex"):
        check_plot_file("--plot", tmp_path / "t.pgf")
    assert check_plot_file("--plot", tmp_path / "t.svg") == tmp_path / "t.svg"


def test_simulate_with_a_pgf_plot_and_no_tex_exits_2_before_the_run(tmp_path):
    pytest.importorskip("matplotlib")
    out, plot = tmp_path / "r.json", tmp_path / "t.pgf"
    run = subprocess.run(
        [IRO, "simulate", "--scenario", "bank", "--solver", "first-fit", "--hours", "0.05", "--out", str(out), "--plot", str(plot)],
        capture_output=True, text=True, env={"PATH": str(tmp_path), "FLWR_TELEMETRY_ENABLED": "0"}, timeout=300,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert "--plot: a .pgf image needs xelatex" in run.stderr and "Traceback" not in run.stderr
    assert not out.exists() and not plot.exists()


# Before: a policy whose curve had one point got a line of zero length, so the image was the
# same as with no point at all (only its legend entry showed).
def test_allocation_plot_draws_a_single_point_curve(tmp_path):
    image = pytest.importorskip("matplotlib.image")

    from iro_fed.plots import allocation_plot

    allocation_plot({"p": {}}, tmp_path / "empty.png")
    allocation_plot({"p": {"50": 40.0}}, tmp_path / "one.png")
    allocation_plot({"p": {"40": None, "50": 40.0, "60": None}}, tmp_path / "one_of_three.png")
    empty = image.imread(tmp_path / "empty.png")
    one = image.imread(tmp_path / "one.png")
    assert one.shape == empty.shape
    assert (np.abs(one - empty).max(axis=-1) > 0.1).sum() > 10  # the point's marker
    assert np.array_equal(image.imread(tmp_path / "one_of_three.png"), one)
