"""The ``qubo`` solver's ``starts``: with the time the batches' refinement and polish leave, the
same refinement (sub-QUBOs sampled by simulated annealing) and polish run again from online
solvers' placements, and the best by R is returned. The batches' own result is kept on a tie,
the clock's cuts are named, and bad names are refused with the setting named."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("dimod")
pytest.importorskip("dwave.samplers")

import solvers
from iro_fed.cli import main
from iro_fed.feasibility import check_placement, feasible_nodes
from iro_fed.model import ClusterState
from iro_fed.testing import random_problem, random_problem_doc
from solvers import InvalidSettingError
from solvers.base import reads_pod_scoring
from solvers.local_search import POLISH_TOL
from solvers.qubo import Qubo

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "problems"


def test_a_start_that_refines_better_is_returned_and_the_batches_result_is_what_starts_none_gives():
    # Problem 105 (30 pods, 10 nodes): from best-fit's placement the refinement reaches -1.7275,
    # from the batches' -1.7475 (measured; what is asserted is the rule, not the numbers). 5 s: the
    # calibration stops by its patience; at the default 30 s it goes on to a feasible read, and
    # the batches' own refinement reaches -1.7275 too.
    problem = random_problem(105, nodes=10, pods=30)
    alone = solvers.make("qubo", seed=0, starts="none", time_limit_s=5).solve(problem)
    both = solvers.make("qubo", seed=0, time_limit_s=5).solve(problem)
    assert "starts" not in alone.info
    report = both.info["starts"]
    # The batches' phase is the same with or without starts (they come after it).
    assert report["batches"] == pytest.approx(alone.objective.score, abs=1e-12)
    scores = {name: t["score"] for name, t in report["tried"].items()}
    assert set(scores) == {"iro-frag", "best-fit"}
    assert report["chosen"] == max(scores, key=scores.__getitem__) != "batches"
    assert both.objective.score == pytest.approx(scores[report["chosen"]], abs=1e-12)
    assert both.objective.score > alone.objective.score
    assert check_placement(problem, both.assignment, both.gpu_cards) == []
    for t in report["tried"].values():  # each start refined and polished, never below where it began
        assert t["score"] >= t["start"] - 1e-12 and t["refine"]["steps"] > 0


@pytest.mark.parametrize("seed", [100, 103, 106])
def test_the_batches_result_stays_when_no_start_beats_it(seed):
    problem = random_problem(seed, nodes=10, pods=30)
    alone = solvers.make("qubo", seed=0, starts="none").solve(problem)
    both = solvers.make("qubo", seed=0).solve(problem)
    report = both.info["starts"]
    best_start = max(t["score"] for t in report["tried"].values())
    if report["chosen"] == "batches":
        assert (both.assignment == alone.assignment).all()
        assert best_start <= alone.objective.score + POLISH_TOL
    else:  # a start won: by more than the polish's tolerance
        assert both.objective.score > alone.objective.score
    assert both.objective.score >= alone.objective.score - 1e-12


def test_the_same_seed_gives_the_same_placement_with_starts():
    problem = random_problem(111, nodes=10, pods=30)
    runs = [solvers.make("qubo", seed=4).solve(problem) for _ in range(2)]
    assert all(r.info["wall_clock_cut"] == [] for r in runs)
    assert (runs[0].assignment == runs[1].assignment).all()
    assert runs[0].info["starts"]["chosen"] == runs[1].info["starts"]["chosen"]


def test_no_starts_without_the_refinement():
    problem = random_problem(105, nodes=10, pods=30)
    info = solvers.make("qubo", seed=0, refine_steps=0).solve(problem).info
    assert "starts" not in info and "refine" not in info


def test_starts_take_the_typical_tasks_given(monkeypatch):
    """As cpsat's hints: the replay's typical tasks (of the original pod list) reach iro-frag."""
    given = []
    monkeypatch.setattr(solvers.registered()["iro-frag"], "use_typical_tasks", lambda self, t: given.append(t))
    solver = solvers.make("qubo", seed=0, starts="iro-frag")
    tasks = object()
    solver.use_typical_tasks(tasks)
    solver.solve(random_problem(105, nodes=10, pods=30))
    assert given == [tasks]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("cpsat", "setting 'starts': must be 'none' or online solvers"),
        ("qubo", "('qubo' is not one)"),
        ("best-fit,nope", "('nope' is not one)"),
        ("best-fit,best-fit", "setting 'starts': solver 'best-fit' given twice"),
    ],
)
def test_bad_starts_are_refused_naming_the_setting(value, message):
    with pytest.raises(InvalidSettingError) as err:
        Qubo(starts=value)
    assert message in str(err.value)


def test_bad_starts_on_the_command_line_exit_2(tmp_path, capsys):
    doc = tmp_path / "p.json"
    doc.write_text(json.dumps(random_problem_doc(1, nodes=3, pods=4)))
    assert main(["solve", str(doc), "--solver", "qubo", "--set", "starts=cpsat"]) == 2
    assert "'starts'" in capsys.readouterr().err


def test_the_widening_refines_with_larger_neighbourhoods_and_only_gains():
    # Problem 107: no 2-node sub-QUBO places the pod left out; a 4-node one does (measured).
    problem = random_problem(107, nodes=10, pods=30)
    narrow = solvers.make("qubo", seed=0, widen_nodes=1).solve(problem)
    wide = solvers.make("qubo", seed=0).solve(problem)
    assert "widen" not in narrow.info
    rounds = wide.info["widen"]
    assert [r["nodes"] for r in rounds] == [3, 4, 5]
    assert all(r["gain"] >= 0 for r in rounds)
    # The same batches and starts, then the rounds: their gains are the whole difference.
    assert wide.info["starts"]["chosen"] == narrow.info["starts"]["chosen"]
    assert wide.objective.score == pytest.approx(narrow.objective.score + sum(r["gain"] for r in rounds), abs=1e-9)
    assert wide.objective.score > narrow.objective.score + 0.01
    assert wide.objective.unplaced < narrow.objective.unplaced
    assert check_placement(problem, wide.assignment, wide.gpu_cards) == []


def test_a_widening_round_without_gain_ends_it_when_no_pod_left_out_could_fit():
    # The bank example leaves out one pod that fits no node even before any pod is placed: once
    # the 3-node round gains nothing, the 4- and 5-node rounds are skipped, saying why.
    from iro_fed.problem_io import load_problem

    problem = load_problem(EXAMPLES / "bank-three-zone.json")
    placement = solvers.make("qubo", seed=0).solve(problem)
    rounds = placement.info["widen"]
    assert rounds[0]["nodes"] == 3 and rounds[0]["gain"] <= 0 and not rounds[0]["refine"]["clock_cut"]
    assert [r.get("skipped") for r in rounds[1:]] == ["no gain over 3 nodes"] * 2
    assert check_placement(problem, placement.assignment, placement.gpu_cards) == []
    empty = ClusterState(problem)
    out = np.flatnonzero(placement.assignment < 0)
    assert out.size and not any(feasible_nodes(empty, int(w)).any() for w in out)


def test_room_could_be_made_for_a_pod_that_fits_the_cluster_before_the_batch():
    from solvers.qubo import _FitRules, _room_could_be_made

    problem = random_problem(107, nodes=10, pods=30)
    rules = _FitRules(problem)
    state = ClusterState(problem)
    assert not _room_could_be_made(problem, state, rules)  # nothing placed: each pod that fits, fits now
    for w in range(problem.num_workloads):  # place what fits, one by one: some end up left out
        fits = np.flatnonzero(feasible_nodes(state, w))
        if fits.size:
            state.place(w, int(fits[0]))
    out = np.flatnonzero(state.assignment < 0)
    needs_room = [w for w in out if feasible_nodes(ClusterState(problem), int(w)).any()
                  and not feasible_nodes(state, int(w)).any()]
    assert _room_could_be_made(problem, state, rules) == bool(needs_room)


def test_the_widening_stops_at_the_node_count_and_its_neighbourhood_count():
    problem = random_problem(3, nodes=3, pods=8)
    rounds = solvers.make("qubo", seed=0, widen_nodes=6).solve(problem).info["widen"]
    assert [r["nodes"] for r in rounds] == [3]  # refine_nodes + 1 = 3 = every node
    assert rounds[0]["refine"]["steps"] <= 1  # one neighbourhood of 3 nodes out of 3


def test_the_starts_share_the_time_left_equally(monkeypatch):
    """With the clock standing still (so the shares are exact): the first of two starts may run
    to half of what is left before the reserve, the second (and the widening after it) to the
    end; before, the first start's refinement could take it all."""
    import solvers.qubo as qubo

    now = time.perf_counter() + 3600.0
    monkeypatch.setattr(qubo, "time", SimpleNamespace(perf_counter=lambda: now))
    ends: list[float] = []
    original = Qubo._refine

    def recording(self, p, state, end, *args, **kwargs):
        ends.append(end)
        return original(self, p, state, end, *args, **kwargs)

    monkeypatch.setattr(Qubo, "_refine", recording)
    problem = random_problem(105, nodes=10, pods=30)
    solver = solvers.make("qubo", seed=0, time_limit_s=3.0, refine_steps=5, widen_nodes=3)
    solver.solve(problem)
    fill_end = now + 3.0 - max(qubo.MIN_FILL_RESERVE_S, qubo.FILL_RESERVE_SHARE * 3.0)
    left = fill_end - now
    # The batches' refinement (to the limit), iro-frag's, best-fit's, the one widening round.
    assert ends == pytest.approx([now + 3.0, now + left / 2, fill_end, fill_end])


def test_the_start_and_hint_solvers_are_built_once_and_seen_by_reads_pod_scoring():
    problem = random_problem(105, nodes=10, pods=30)
    qubo = solvers.make("qubo", seed=0, refine_steps=5, widen_nodes=1)
    built = list(qubo.start_instances)
    assert [s.name for s in built] == ["iro-frag", "best-fit"]
    qubo.preload()
    qubo.solve(problem)
    qubo.solve(problem)
    assert all(a is b for a, b in zip(qubo.start_instances, built, strict=True))
    cpsat = solvers.make("cpsat", time_limit_s=1.0)
    hints = list(cpsat.hint_instances)
    assert [s.name for s in hints] == ["best-fit", "iro-frag"]
    cpsat.solve(problem)
    assert all(a is b for a, b in zip(cpsat.hint_instances, hints, strict=True))
    # kube-default reads the pods' scoring data: a caller builds it when a start or hint is one.
    assert not reads_pod_scoring(qubo) and not reads_pod_scoring(cpsat)
    assert reads_pod_scoring(solvers.make("qubo", starts="best-fit,kube-default"))
    assert reads_pod_scoring(solvers.make("cpsat", hint="kube-default"))


def test_typical_tasks_given_reach_the_starts_and_hints(monkeypatch):
    given = []
    monkeypatch.setattr(solvers.registered()["iro-frag"], "use_typical_tasks", lambda self, t: given.append(t))
    tasks = object()
    solvers.make("qubo", seed=0, starts="iro-frag").use_typical_tasks(tasks)
    solvers.make("cpsat", hint="best-fit,iro-frag").use_typical_tasks(tasks)
    assert given == [tasks, tasks]


def test_none_with_spaces_is_none():
    assert Qubo(starts=" none ").start_solvers == []


def test_the_refinement_stops_when_repeats_of_failed_neighbourhoods_keep_failing():
    """Three nodes give three two-node neighbourhoods: once all have failed, steps repeat them
    with other seeds, and those repeats count toward the stall (they ran to refine_steps)."""
    import solvers.qubo as qubo

    problem = random_problem(12, nodes=3, pods=12)
    info = solvers.make("qubo", seed=0, refine_steps=500, starts="none", widen_nodes=1).solve(problem).info
    refine = info["refine"]
    assert refine["steps"] <= qubo.REFINE_MAX_STALL * (refine["accepted"] + 1) < 500
