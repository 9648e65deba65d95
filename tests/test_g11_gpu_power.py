"""The power model counts a node's GPUs: ``P = idle + (peak - idle) * ((1 - g) * cpu_util + g *
gpu_util)``, g the node's ``power_gpu_share`` (default: the GPUs' share of the default model's
peak, 300 W x cards / (5 W x cores + 300 W x cards); 0 without GPUs).

Before, P followed CPU requests only: a GPU node whose pods used its cards but little CPU drew
(almost) idle power, and a CPU-busy GPU node was charged its cards' dynamic power. CPU-only
problems score bit for bit as before (compared with the objective module of commit 6cf25d9, the
last without the GPU term, when git has it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from iro_fed.model import ClusterState, Problem, default_gpu_share
from iro_fed.objective import coefficients, dynamic_utilization, evaluate, marginal
from iro_fed.problem_io import ProblemValidationError, problem_from_dict, problem_to_dict
from iro_fed.testing import brute_force, random_problem, random_problem_doc

#: The last commit whose objective module had the CPU-only power model.
BEFORE = "6cf25d9"
REPO = Path(__file__).resolve().parent.parent


def gpu_doc(share: float | None = None) -> dict:
    """One node, 8 cores and 2 cards, default power model: peak 5 * 8 + 300 * 2 = 640 W, idle
    256 W, dynamic 384 W; the default GPU share 600 / 640 = 0.9375."""
    node = {"name": "g0", "domain": "d", "capacity": {"cpu": 8000, "memory": 16384}, "gpus": 2}
    if share is not None:
        node["power_gpu_share"] = share
    return {
        "domains": [{"name": "d", "carbon_intensity": 100.0}],
        "nodes": [node],
        "workloads": [
            {"name": "train", "requests": {"cpu": 100, "memory": 1024}, "gpu": {"count": 2}},
            {"name": "cpu-job", "requests": {"cpu": 8000, "memory": 1024}},
        ],
    }


def test_busy_gpus_draw_their_dynamic_power_with_little_cpu():
    p = problem_from_dict(gpu_doc())
    assert p.power_gpu_share.tolist() == [0.9375]
    # Both cards full, 100 of 8000 millicores: 256 + 384 * (0.0625 * 0.0125 + 0.9375 * 1) = 616.3 W
    # (the CPU-only model: 256 + 384 * 0.0125 = 260.8 W, barely above idle).
    b = evaluate(p, np.array([0, -1]))
    assert b.power_w == pytest.approx(616.3, abs=1e-9)
    assert b.carbon_g_per_hour == pytest.approx(616.3 * 100 / 1000, abs=1e-9)


def test_a_cpu_busy_gpu_node_is_not_charged_its_idle_cards_dynamic_power():
    p = problem_from_dict(gpu_doc())
    # All 8 cores, cards idle: 256 + 384 * 0.0625 = 280 W (the CPU-only model: 640 W, full peak).
    assert evaluate(p, np.array([-1, 0])).power_w == pytest.approx(280.0, abs=1e-9)
    # Everything busy: peak.
    both = problem_from_dict({**gpu_doc(), "workloads": [
        {"name": "train", "requests": {"cpu": 0}, "gpu": {"count": 2}}, {"name": "cpu-job", "requests": {"cpu": 8000}}]})
    assert evaluate(both, np.array([0, 0])).power_w == pytest.approx(640.0, abs=1e-9)


def test_a_given_share_splits_the_dynamic_range():
    p = problem_from_dict(gpu_doc(share=0.5))
    # 256 + 384 * (0.5 * 0.0125 + 0.5 * 1) = 450.4 W.
    assert evaluate(p, np.array([0, -1])).power_w == pytest.approx(450.4, abs=1e-9)
    # g = 0: the node follows its CPU alone, as before.
    zero = problem_from_dict(gpu_doc(share=0.0))
    assert evaluate(zero, np.array([0, -1])).power_w == pytest.approx(256 + 384 * 0.0125, abs=1e-9)


def test_default_share_and_the_rule_the_simulator_reads():
    assert default_gpu_share(np.array([64000.0, 8000.0, 0.0, 4000.0]), np.array([8, 0, 1, 2])).tolist() == pytest.approx(
        [2400 / 2720, 0.0, 1.0, 600 / 620])
    p = problem_from_dict(gpu_doc())
    util = dynamic_utilization(p, np.array([4000.0]), np.array([500.0]))
    assert util.tolist() == pytest.approx([0.0625 * 0.5 + 0.9375 * 0.25])


@pytest.mark.parametrize("seed", range(8))
def test_evaluate_is_the_sum_of_marginals_with_gpu_pods(seed):
    doc = random_problem_doc(seed, nodes=6, pods=12)
    rng = np.random.default_rng(seed)
    for node in doc["nodes"]:  # some nodes give their share, others take the default
        if node.get("gpus") and rng.random() < 0.5:
            node["power_gpu_share"] = float(rng.uniform(0, 1))
    p = problem_from_dict(doc)
    assert p.has_gpus
    state = ClusterState(p)
    base = evaluate(p, state.assignment).score
    from iro_fed.feasibility import feasible_nodes

    for w in range(p.num_workloads):
        fits = np.flatnonzero(feasible_nodes(state, w))
        if not fits.size:
            continue
        n = int(fits[rng.integers(fits.size)])
        predicted = marginal(p, state, w)[n]
        state.place(w, n)
        after = evaluate(p, state.assignment).score
        assert after - base == pytest.approx(predicted, abs=1e-12), (w, n)
        base = after


def test_a_gpu_pods_marginal_charges_its_cards_power():
    # Two identical GPU nodes in domains of different intensity: a GPU-only pod is cheaper on the
    # cleaner one (the CPU-only model charged it nothing on either, beyond powering on).
    doc = {
        "domains": [{"name": "clean", "carbon_intensity": 50.0}, {"name": "dirty", "carbon_intensity": 500.0}],
        "nodes": [{"name": f"n{i}", "domain": d, "capacity": {"cpu": 8000, "memory": 16384}, "gpus": 2,
                   "allocated": {"cpu": 1000}} for i, d in enumerate(("clean", "dirty"))],
        "workloads": [{"name": "g", "requests": {"cpu": 0}, "gpu": {"count": 2}}],
        "weights": {"utilization": 0.0, "latency": 0.0, "cost": 0.0, "carbon": 1.0, "unplaced": 1.0},
    }
    p = problem_from_dict(doc)
    m = marginal(p, ClusterState(p), 0)
    coef = coefficients(p)
    dynamic = coef.carbon_dynamic * 0.9375 / coef.max_carbon  # both cards full: g * 1
    assert m.tolist() == pytest.approx((1.0 - dynamic).tolist(), abs=1e-12)
    assert m[0] > m[1]


@pytest.mark.parametrize("seed", range(6))
def test_cpsat_matches_brute_force_on_tiny_gpu_problems(seed):
    pytest.importorskip("ortools")
    import solvers

    doc = random_problem_doc(40 + seed, nodes=3, pods=4)
    for i, node in enumerate(doc["nodes"]):
        node["gpus"] = node.get("gpus") or 1 + i % 2  # every node has cards: the GPU term everywhere
        node.pop("gpu_free_milli", None)
        if seed % 2:
            node["power_gpu_share"] = 0.3 + 0.2 * i
    for j, wl in enumerate(doc["workloads"]):
        wl.setdefault("gpu", {"count": 1, "milli": 500 if j % 2 else 1000})
    doc["weights"]["carbon"] = 5.0  # carbon decides
    p = problem_from_dict(doc)
    placement = solvers.make("cpsat", seed=0).solve(p)
    assert placement.status == "optimal"
    assert placement.objective.score == pytest.approx(brute_force(p).objective.score, abs=1e-9)


# --- CPU-only problems: bit for bit as before -----------------------------------------------


def _objective_before() -> ModuleType:
    try:
        source = subprocess.run(["git", "show", f"{BEFORE}:iro_fed/objective.py"], cwd=REPO, capture_output=True,
                                text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip(f"git or commit {BEFORE} not available")
    assert "dynamic_utilization" not in source
    module = ModuleType("g11_objective_before")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    try:
        exec(compile(source, f"{BEFORE}:iro_fed/objective.py", "exec"), module.__dict__)
    finally:
        sys.modules.pop(module.__name__, None)
    return module


def _float_cpu_problem(seed: int) -> Problem:
    p = random_problem(seed, nodes=10, pods=25, gpus=False)
    rng = np.random.default_rng(seed + 500)
    capacity = p.capacity * rng.uniform(1.0, 1.7, p.capacity.shape)
    return p.replace(capacity=capacity, allocated=np.minimum(p.allocated * rng.uniform(0.5, 1.3, p.allocated.shape), capacity),
                     demand=p.demand * rng.uniform(0.1, 1.3, p.demand.shape))


@pytest.mark.parametrize("seed", range(5))
def test_cpu_only_scores_and_marginals_are_bit_identical_to_before(seed):
    old = _objective_before()
    p = _float_cpu_problem(seed)
    assert not p.has_gpus
    rng = np.random.default_rng(seed)
    state = ClusterState(p)
    for _ in range(40):
        w = int(rng.integers(p.num_workloads))
        if state.assignment[w] >= 0:
            state.remove(w)
        else:
            from iro_fed.feasibility import feasible_nodes

            fits = np.flatnonzero(feasible_nodes(state, w))
            if fits.size:
                state.place(w, int(fits[rng.integers(fits.size)]))
        new_b, old_b = evaluate(p, state.assignment), old.evaluate(p, state.assignment)
        assert new_b.to_dict() == old_b.to_dict()
        assert new_b.score.hex() == old_b.score.hex() and new_b.power_w.hex() == old_b.power_w.hex()
        assert new_b.carbon_g_per_hour.hex() == old_b.carbon_g_per_hour.hex()
        for v in range(p.num_workloads):
            assert marginal(p, state, v).tobytes() == old.marginal(p, state, v).tobytes()


def test_cpu_only_coefficients_are_the_former_expressions():
    """The carbon coefficients of a CPU-only problem, against the former expressions verbatim
    (this check needs no git)."""
    p = _float_cpu_problem(7)
    coef = coefficients(p)
    cpu_cap = p.capacity[:, p.cpu_index]
    former = p.weights.carbon * (coef.carbon_dynamic / np.where(cpu_cap > 0, cpu_cap, 1.0) / coef.max_carbon)
    assert coef.carbon_per_milli_weighted.tobytes() == former.tobytes()
    assert not coef.carbon_per_gpu_milli_weighted.any()
    used = p.util_columns(p.allocated)[:, 0] * 1.3
    assert dynamic_utilization(p, used, used).tobytes() == np.minimum(used / coef.cpu_divisor, 1.0).tobytes()


# --- the problem file field ---------------------------------------------------------------


def test_the_share_is_read_written_only_where_given_and_round_trips():
    p = problem_from_dict(gpu_doc(share=0.25))
    assert p.power_gpu_share.tolist() == [0.25]
    out = problem_to_dict(p)
    assert out["nodes"][0]["power_gpu_share"] == 0.25
    assert problem_from_dict(out).power_gpu_share.tolist() == [0.25]
    default = problem_to_dict(problem_from_dict(gpu_doc()))
    assert "power_gpu_share" not in default["nodes"][0]  # the default is not written


@pytest.mark.parametrize(
    ("value", "gpus", "message"),
    [
        (1.5, 2, "nodes[0].power_gpu_share: must be between 0 and 1, got 1.5"),
        (-0.1, 2, "nodes[0].power_gpu_share: must be between 0 and 1, got -0.1"),
        ("half", 2, "nodes[0].power_gpu_share: expected a number"),
        (0.5, 0, "nodes[0].power_gpu_share: must be 0 on a node without GPUs (gpus=0), got 0.5"),
    ],
)
def test_a_bad_share_is_refused_with_its_path(value, gpus, message):
    doc = gpu_doc()
    doc["nodes"][0]["power_gpu_share"] = value
    doc["nodes"][0]["gpus"] = gpus
    if not gpus:
        doc["workloads"] = [doc["workloads"][1]]
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(doc)
    assert message in str(exc.value)


def test_a_share_of_zero_is_allowed_without_gpus():
    doc = gpu_doc(share=0.0)
    doc["nodes"][0]["gpus"] = 0
    doc["workloads"] = [doc["workloads"][1]]
    assert problem_from_dict(doc).power_gpu_share.tolist() == [0.0]


def test_a_problem_built_directly_checks_the_share():
    p = problem_from_dict(gpu_doc())
    with pytest.raises(ValueError, match=r"power_gpu_share\[0\] \(node 'g0'\): must be in \[0, 1\]"):
        p.replace(power_gpu_share=np.array([2.0]))
    with pytest.raises(ValueError, match=r"power_gpu_share: array has shape \(2,\), expected \(1,\)"):
        p.replace(power_gpu_share=np.array([0.1, 0.2]))
    # NaN: the default; replace() keeps the given array, a new capacity gets its own default.
    assert p.replace(power_gpu_share=np.array([np.nan])).power_gpu_share.tolist() == [0.9375]
    bigger = p.replace(capacity=p.capacity * np.array([[2.0, 1.0]]))
    assert bigger.power_gpu_share.tolist() == [600 / 680]


# --- power follows the cpu column when a feasibility-only resource comes first --------------


def test_power_reads_cpu_when_a_feasibility_only_resource_comes_before_it():
    # evaluate read column cpu_index of the *utilization* columns, which leave feasibility_only
    # resources out: with 'ephemeral' first it read memory's share (1 %) instead of cpu's (100 %).
    doc = {
        "resources": ["ephemeral", "cpu", "memory"],
        "feasibility_only": ["ephemeral"],
        "domains": [{"name": "d", "carbon_intensity": 100.0}],
        "nodes": [{"name": "a", "domain": "d", "capacity": {"ephemeral": 100, "cpu": 4000, "memory": 8000},
                   "power_idle_w": 100, "power_peak_w": 300}],
        "workloads": [{"name": "w", "requests": {"ephemeral": 1, "cpu": 4000, "memory": 80}}],
    }
    p = problem_from_dict(doc)
    assert evaluate(p, np.array([0])).power_w == pytest.approx(300.0)


# --- the simulator's power series: the objective's rule -----------------------------------


def test_simulator_steps_cost_gpu_power_as_evaluate_does():
    """Every step's W and gCO2/h on a GPU cluster equal evaluate() of the step's placement plus
    the powered empty nodes' idle draw (the engine's one definition, now with the GPU term)."""
    import solvers
    from iro_fed.model import Domain
    from iro_fed.sim.engine import SimConfig, Simulator
    from iro_fed.sim.model import NodePool, PodSpec, Scenario

    steps = 40
    rng = np.random.default_rng(3)
    pods = []
    for i in range(40):
        arrival = int(rng.integers(steps - 5))
        count, milli = [(0, 0), (1, 250), (1, 1000), (2, 1000)][int(rng.integers(4))]
        pods.append(PodSpec(f"p{i}", "online", float(rng.choice([250, 1000, 4000])), 2048.0, arrival,
                            departure=arrival + int(rng.integers(1, 20)), gpu_count=count, gpu_milli=milli))
    sc = Scenario(
        name="gpu", description="test",
        domains=[Domain("zone", "zone", "", 0.0, {"cpu": 0.02, "gpu": 1.0}, 1.2)], regions=["users"],
        latency_ms=np.array([[5.0]]),
        pools=[NodePool("gpu", "zone", 3, 16000, 65536, gpus=4, gpu_model="A10", power_idle_w=300, power_peak_w=1400),
               NodePool("cpu", "zone", 2, 16000, 65536, power_idle_w=80, power_peak_w=200)],
        services=[], pods=pods, carbon={"zone": 200.0 + 100.0 * np.sin(np.arange(steps) / 5.0)}, history=0, steps=steps,
    )
    sim = Simulator(sc, solvers.make("greedy-objective"), SimConfig(power_down=False))
    want: list[tuple[float, float]] = []

    def step_by_evaluate(t: int) -> None:
        active = np.sort(np.flatnonzero((sim.status == 2) | (sim.status == 3)))
        sub = sim._score_problem(t, active)
        br = evaluate(sub, sim.state.assignment[active])
        empty_on = (sim.node_state != 0) & (sim.state.pods_on_node == 0)
        want.append((br.carbon_g_per_hour + float(coefficients(sub).carbon_idle[empty_on].sum()),
                     br.power_w + float(sim.power_idle[empty_on].sum())))

    r = sim.run(progress=lambda step, total: step_by_evaluate(step - 1))
    got = np.array(list(zip(r.series["carbon_g_per_hour"], r.series["power_w"], strict=True)))
    assert np.allclose(got, np.round(np.array(want), 4), atol=1e-4)
    # GPUs were in use with little CPU on the way: the GPU term mattered.
    assert max(r.series["power_w"]) > 3 * 300 + 2 * 80 + 100
