"""Every registered solver on a fixed set of generated problems unlike the shipped ones.

The problems (tests/solvers/fuzz_problems.py) are a pure function of their case id, so a failure
names its case (``broad-17``) and the assertion message carries the problem document to replay:

    doc = fuzz_problems.broad(17); solvers.make("cpsat", seed=0).solve(problem_from_dict(doc))

Per problem and solver: no exception; ``check_placement`` finds nothing; a finite objective equal
to ``evaluate`` of the assignment; a known status; a reason for each unplaced pod and none for a
placed one; a pod that fits nowhere on the empty cluster left out. The seeded solvers give the
same placement twice (on a subset). cpsat's ``optimal`` is at least the best online heuristic's
R and, on small problems (amounts 1e-6 to 1e10 alike), brute force's. The online solvers' ``decide`` and
``rank`` agree with the filters for a few pods, after a what-if ``set_node_usage`` on a node.

The families reach defects fixed in eb011bb (each case listed fails with that commit's parent's
file): ``fill`` check_placement's absolute-only tolerance ("cpu over capacity (100000000 >
100000000)": fill-0, 1, 4, 5, 7, 10, 11); ``brim`` and ``tight`` the cpsat/qubo polish's
IndexError on a pod that no longer fits back on its own node (brim-2, 6, 25, 28, tight-27); the
what-if set_node_usage accepting free milli on cards a node lacks (40 broad cases).

Settings keep the solves fast and free of wall-clock effects: cpsat is bounded by CP-SAT's
deterministic time well inside its time limit (where the clock still cuts, ``wall_clock_cut``
says so and the determinism check is skipped), qubo's few reads end long before its limit.
"""

from __future__ import annotations

import json
import math
import traceback
from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed.feasibility import check_placement, feasible_nodes
from iro_fed.model import ClusterState, Problem
from iro_fed.objective import evaluate
from iro_fed.placement import STATUSES, Placement
from iro_fed.problem_io import problem_from_dict
from iro_fed.testing import brute_force
from tests.solvers import fuzz_problems

SOLVERS = solvers.available()
ONLINE = [n for n in SOLVERS if solvers.registered()[n].properties.mode == "online"]
PARAMS: dict[str, dict[str, Any]] = {
    "cpsat": {"deterministic": True, "time_limit_s": 2.0, "max_deterministic_time": 0.1},
    "qubo": {"num_reads": 2, "num_sweeps": 50, "refine_steps": 10, "time_limit_s": 30.0},
}
#: Solvers whose seed changes the placement, solved twice on every DETERMINISM_EVERY-th case.
SEEDED = ["random", "fgd-random", "kube-default", "iro-frag", "qubo", "cpsat", "dqn"]
DETERMINISM_EVERY = 4
#: Solvers whose decide() and rank() draw among feasible nodes anew on each call.
RANDOM_CHOICE = {"random", "fgd-random"}

CASES = ([f"broad-{s}" for s in range(240)] + [f"tight-{s}" for s in range(80)]
         + [f"tight-eps-{s}" for s in range(80)] + [f"brim-{s}" for s in range(60)] + [f"fill-{s}" for s in range(12)])


def case_doc(case: str) -> dict[str, Any]:
    """The problem document of a case id."""
    family, seed = case.rsplit("-", 1)
    if family == "broad":
        return fuzz_problems.broad(int(seed))
    if family == "tight":
        return fuzz_problems.tight(int(seed))
    if family == "tight-eps":
        return fuzz_problems.tight(int(seed), eps=True)
    if family == "brim":
        return fuzz_problems.brim(int(seed))
    if family == "fill":
        return fuzz_problems.fill(int(seed))
    raise ValueError(f"unknown case {case!r}")


def _report(case: str, doc: dict[str, Any], failures: list[str]) -> str:
    return (f"{case}: {len(failures)} failure(s)\n  " + "\n  ".join(failures)
            + f"\nproblem document ({case}):\n{json.dumps(doc, ensure_ascii=False)}")


def _finite(placement: Placement) -> bool:
    b = placement.objective
    values = [b.score, b.utilization_pct, b.cost_per_hour, b.carbon_g_per_hour, b.power_w,
              *b.terms.values(), *b.weighted.values()]
    return all(math.isfinite(v) for v in values) and (b.mean_latency_ms is None or math.isfinite(b.mean_latency_ms))


def _close(a: float, b: float, tol: float = 0.0) -> bool:
    # Scores reach 1e20 with 1e10 weights: relative to them, plus an absolute floor near 0.
    return abs(a - b) <= tol + 1e-9 + 1e-12 * max(abs(a), abs(b))


def _solve(name: str, problem: Problem) -> Placement:
    return solvers.make(name, seed=0, **PARAMS.get(name, {})).solve(problem)


def _placement_failures(name: str, problem: Problem, placement: Placement, fits_nowhere: np.ndarray) -> list[str]:
    out: list[str] = []
    a = placement.assignment
    if a.shape != (problem.num_workloads,) or (a.size and (a.min() < -1 or a.max() >= problem.num_nodes)):
        return [f"{name}: assignment {a.tolist()} is not one node index or -1 per pod"]
    out += [f"{name}: {v}" for v in check_placement(problem, a, placement.gpu_cards)]
    if placement.status not in STATUSES:
        out.append(f"{name}: status {placement.status!r}")
    if placement.objective is None or not _finite(placement):
        out.append(f"{name}: objective not finite: {placement.objective}")
    else:
        ref = evaluate(problem, a).score
        if not _close(placement.objective.score, ref):
            out.append(f"{name}: objective {placement.objective.score!r} != evaluate {ref!r}")
    for w in range(problem.num_workloads):
        if a[w] < 0 and not placement.reasons.get(w):
            out.append(f"{name}: pod {w} unplaced without a reason")
        if a[w] >= 0 and w in placement.reasons:
            out.append(f"{name}: pod {w} placed on {a[w]} but has a reason {placement.reasons[w]!r}")
        if a[w] >= 0 and fits_nowhere[w]:
            out.append(f"{name}: pod {w} fits no node of the empty cluster but is on {a[w]}")
    return out


def _cpsat_failures(doc: dict[str, Any], problem: Problem, results: dict[str, Placement]) -> list[str]:
    cp = results.get("cpsat")
    if cp is None or cp.status != "optimal":
        return []
    out: list[str] = []
    # 'optimal' is proved on integer-scaled coefficients: true R up to scale_error_bound.
    bound = float(cp.info.get("scale_error_bound", 0.0))
    online = {n: p for n, p in results.items() if n in ONLINE and p.objective is not None}
    if online:
        best = max(online, key=lambda n: online[n].objective.score)
        if cp.objective.score < online[best].objective.score and not _close(
                cp.objective.score, online[best].objective.score, bound):
            out.append(f"cpsat: optimal R {cp.objective.score!r} < {best}'s {online[best].objective.score!r} "
                       f"(scale_error_bound {bound:.3g})")
    # At every scale: the oracle enumerates what check_placement accepts, and the filters the
    # solvers use accept nothing more (one relative tolerance, iro_fed.feasibility.fit_tolerance).
    if problem.num_workloads <= 5 and problem.num_nodes <= 3:
        bf = brute_force(problem).objective.score
        if not _close(cp.objective.score, bf, bound):
            out.append(f"cpsat: optimal R {cp.objective.score!r} != brute force {bf!r} (scale_error_bound {bound:.3g})")
    return out


@pytest.mark.parametrize("case", CASES)
def test_every_solver_on_a_generated_problem(case):
    doc = case_doc(case)
    problem = problem_from_dict(doc)
    empty = ClusterState(problem)
    fits_nowhere = np.array([not feasible_nodes(empty, w).any() for w in range(problem.num_workloads)], dtype=bool)
    failures: list[str] = []
    results: dict[str, Placement] = {}
    for name in SOLVERS:
        try:
            results[name] = placement = _solve(name, problem)
        except Exception:  # any exception is a finding, reported with its traceback
            failures.append(f"{name}: raised\n{traceback.format_exc(limit=-4)}")
            continue
        failures += _placement_failures(name, problem, placement, fits_nowhere)
        if name in SEEDED and CASES.index(case) % DETERMINISM_EVERY == 0:
            again = _solve(name, problem)
            cut = placement.info.get("wall_clock_cut") or again.info.get("wall_clock_cut")
            same = np.array_equal(placement.assignment, again.assignment) and placement.gpu_cards == again.gpu_cards
            if not same and not cut:
                failures.append(f"{name}: seed 0 gave {placement.assignment.tolist()} then {again.assignment.tolist()}")
    failures += _cpsat_failures(doc, problem, results)
    assert not failures, _report(case, doc, failures)


def _what_if(problem: Problem, state: ClusterState, n: int) -> list[str]:
    """Give node n half its capacity as base usage and 500 milli free per card; first a row that
    claims cards past the node's count, which must be refused with the state untouched."""
    out: list[str] = []
    cards = int(problem.gpu_count[n])
    row = problem.gpu_free[n]
    if row.size > cards:  # padded row: the node has fewer cards than the widest node
        before = state.gpu_free[n].copy()
        try:
            state.set_node_usage(n, problem.capacity[n] * 0.5, np.full(row.size, 1000))
            out.append(f"set_node_usage gave node {n} ({cards} card(s)) free milli on cards it lacks: "
                       f"{state.gpu_free[n].tolist()}")
        except ValueError as exc:
            if problem.nodes[n].name not in str(exc):
                out.append(f"set_node_usage's refusal does not name node {problem.nodes[n].name!r}: {exc}")
            if state.journal or not np.array_equal(state.gpu_free[n], before):
                out.append("set_node_usage changed the state it refused to change")
    state.set_node_usage(n, problem.capacity[n] * 0.5, np.where(np.arange(row.size) < cards, 500, -1))
    return out


def _decide_rank_failures(name: str, problem: Problem, what_if_node: int) -> list[str]:
    solver = solvers.make(name, seed=0, **PARAMS.get(name, {}))
    state = ClusterState(problem)
    out = _what_if(problem, state, what_if_node)
    if out:  # the state may now hold phantom cards: deciding on it would only repeat the finding
        return [f"{name}: {f}" for f in out]
    for w in range(min(problem.num_workloads, 4)):
        feasible = feasible_nodes(state, w)
        decision = solver.decide(state, w)
        ranked = solver.rank(state, w, k=problem.num_nodes + 1)
        if sorted(n for n, _ in ranked) != np.flatnonzero(feasible).tolist():
            out.append(f"{name}: pod {w} ranked {[n for n, _ in ranked]}, feasible {np.flatnonzero(feasible).tolist()}")
        if not all(math.isfinite(s) for _, s in ranked):
            out.append(f"{name}: pod {w} ranked with scores {ranked}")
        if name not in RANDOM_CHOICE and solver.rank(state, w, k=1) != ranked[:1]:
            out.append(f"{name}: pod {w}: rank(k=1) {solver.rank(state, w, k=1)} is not the first of {ranked}")
        if decision.node < 0:
            if feasible.any():
                out.append(f"{name}: pod {w} decided nowhere but fits {np.flatnonzero(feasible).tolist()}")
            if not decision.reason:
                out.append(f"{name}: pod {w} decided nowhere without a reason")
            continue
        if not feasible[decision.node]:
            out.append(f"{name}: pod {w} decided on node {decision.node}, which it does not fit")
            continue
        scores = dict(ranked)
        if name not in RANDOM_CHOICE and ranked and scores.get(decision.node) != ranked[0][1]:
            out.append(f"{name}: pod {w} decided on {decision.node} (score {scores.get(decision.node)}), "
                       f"rank's first is {ranked[0]}")
        try:
            cards = state.place(w, decision.node, decision.cards)
        except ValueError as exc:
            out.append(f"{name}: pod {w}: place() refused decide's node {decision.node} cards {decision.cards}: {exc}")
            break
        if any(state.gpu_free[decision.node, c] < 0 for c in cards):
            out.append(f"{name}: pod {w} on cards {cards} left {state.gpu_free[decision.node].tolist()} free")
    return out


DECIDE_CASES = [c for c in CASES if c.startswith("broad-")]


@pytest.mark.parametrize("case", DECIDE_CASES)
def test_online_decide_and_rank_after_a_what_if(case):
    doc = case_doc(case)
    problem = problem_from_dict(doc)
    if problem.num_nodes == 0 or problem.num_workloads == 0:
        return  # no node for a what-if, no pod to decide: the solve test covers these
    # the node with the fewest cards: the one a padded row can give phantom cards
    node = int(np.argmin(problem.gpu_count))
    failures: list[str] = []
    for name in ONLINE:
        try:
            failures += _decide_rank_failures(name, problem, node)
        except Exception:  # any exception is a finding, reported with its traceback
            failures.append(f"{name}: raised\n{traceback.format_exc(limit=-4)}")
    assert not failures, _report(case, doc, failures)


def test_the_problem_set_keeps_its_breadth():
    """The fixed seeds still reach every kind of input the stress test is for (a change to the
    generator that lost one would quietly stop testing it)."""
    docs = [case_doc(c) for c in CASES]
    nodes = [nd for d in docs for nd in d["nodes"]]
    pods = [wl for d in docs for wl in d["workloads"]]
    amounts = [v for nd in nodes for v in nd["capacity"].values()] + [v for wl in pods for v in wl["requests"].values()]
    names = [nd["name"] for nd in nodes] + [wl["name"] for wl in pods] + [dm["name"] for d in docs for dm in d["domains"]]
    weights = [v for d in docs for v in d.get("weights", {}).values()]
    tolerations = [t for wl in pods for t in wl.get("tolerations", [])]
    covered = {
        "extra resources": any(set(d.get("resources", [])) - {"cpu", "memory", "gpu"} for d in docs),
        "cpu only": any(d.get("resources") == ["cpu"] for d in docs),
        "no GPU anywhere": any(d["nodes"] and not any(nd.get("gpus") for nd in d["nodes"]) for d in docs),
        "GPU nodes only": any(d["nodes"] and all(nd.get("gpus") for nd in d["nodes"]) for d in docs),
        "0 nodes": any(not d["nodes"] for d in docs),
        "1 node": any(len(d["nodes"]) == 1 for d in docs),
        "0 workloads": any(not d["workloads"] for d in docs),
        "allocated == capacity": any(nd.get("allocated", {}).get(r) == c for nd in nodes for r, c in nd["capacity"].items()),
        "amounts 1e-6": min(a for a in amounts if a > 0) <= 1e-6,
        "amounts 1e10": max(amounts) >= 1e10,
        "50 domains": any(len(d["domains"]) >= 50 for d in docs),
        "unknown latencies": any(len(row) < len(d["domains"]) for d in docs for row in d.get("latency_ms", {}).values()),
        "all nodes tainted": any(len(d["nodes"]) > 1 and all(nd.get("taints") for nd in d["nodes"]) for d in docs),
        "tolerations Exists/Equal/Lt/Gt": {t.get("operator", "Equal") for t in tolerations} >= {"Exists", "Equal", "Lt", "Gt"},
        "toleration effects": {t["effect"] for t in tolerations if "effect" in t}
        >= {"NoSchedule", "NoExecute", "PreferNoSchedule"},
        "node_selector": any(wl.get("node_selector") for wl in pods),
        "preferred_node_affinity": any(wl.get("preferred_node_affinity") for wl in pods),
        "allowed_domains": any(wl.get("allowed_domains") for wl in pods),
        "max_latency_ms": any("max_latency_ms" in wl for wl in pods),
        "GPU models": any(wl.get("gpu", {}).get("models") for wl in pods),
        "whole and shared GPUs": {wl["gpu"]["count"] > 1 for wl in pods if "gpu" in wl} == {True, False},
        "batch/burst deadline_s": {wl["class"] for wl in pods if "deadline_s" in wl} == {"batch", "burst"},
        "priorities at int32 limits": {2**31 - 1, -(2**31)} <= {wl.get("priority", 0) for wl in pods},
        "non-zero defaults": any("nonzero_requests" in wl for wl in pods),
        "weights 0 and 1e10": {0.0, 1e10} <= set(weights),
        "idle == peak power": any(nd.get("power_idle_w", -1) == nd.get("power_peak_w") for nd in nodes),
        "zero price and carbon": any(dm.get("carbon_intensity") == 0 and 0.0 in dm.get("price_per_hour", {}).values()
                                     for d in docs for dm in d["domains"]),
        "unicode names": any(not n.isascii() for n in names),
        "identical nodes": any(len(d["nodes"]) > 2 and all(
            {**nd, "name": ""} == {**d["nodes"][0], "name": ""} for nd in d["nodes"]) for d in docs),
        "latency_ref_ms": any("latency_ref_ms" in d for d in docs),
        "pods <= 5 x nodes <= 3, moderate amounts": sum(
            len(d["workloads"]) <= 5 and len(d["nodes"]) <= 3 and fuzz_problems.moderate(d) for d in docs) >= 30,
    }
    assert [k for k, v in covered.items() if not v] == []
