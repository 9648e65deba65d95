"""Library-API input checks (task h1).

* ``replay_problem`` / ``replay_trace`` cap ``batch_window`` at ``MAX_ARRIVALS`` as ``iro replay
  --batch-window`` does (one rule, :func:`iro_fed.replay.batch_window_error`), and refuse a window
  that is no integer (2.5 never filled: every pod waited for the last one), before any work;
* a multi-seed replay document says its ``batch_window`` at the top level;
* ``objective.marginal`` refuses a ``w`` that is no workload index, naming ``w`` as
  ``ClusterState.place`` does (-1 scored the last workload, 3 an IndexError without a name);
* ``Problem.with_workloads`` refuses negative, out-of-range and non-integer ``indices`` (numpy took
  -1 as the last workload and 1.5 as workload 1);
* writer and reader of problem files agree: every problem the constructor accepts is either
  written to a file that loads back equal, or refused by ``write_problem`` with the loader's field
  path and nothing written; a pod without GPUs given a GPU share or GPU models (which no file can
  say, and which were dropped on the way) is refused by the constructor.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

import solvers
from iro_fed.model import ClusterState, Problem
from iro_fed.objective import marginal
from iro_fed.problem_io import MAX_NUMBER, ProblemValidationError, load_problem, problem_from_dict, write_problem
from iro_fed.replay import replay_problem, replay_trace, summary
from iro_fed.traces.openb import MAX_ARRIVALS, OpenbNode, OpenbPod, build_problem

# --- replay: batch_window ---------------------------------------------------------------------


def _trace() -> tuple[list[OpenbNode], list[OpenbPod]]:
    nodes = [OpenbNode("n0", 32000, 65536, 2, "T4")]
    pods = [OpenbPod("a", 1000, 1000, 1, 600), OpenbPod("b", 1000, 1000, 1, 600), OpenbPod("c", 1000, 1000, 1, 400)]
    return nodes, pods


class _NoWork:
    """A solver that fails the test if the replay asks it anything."""

    name = "no-work"

    def solve(self, problem: Problem) -> Any:
        raise AssertionError("solve() called: the window should have been refused first")

    def decide(self, state: ClusterState, w: int) -> Any:
        raise AssertionError("decide() called")

    def reset(self, problem: Problem) -> None:
        raise AssertionError("reset() called")


@pytest.mark.parametrize(
    ("window", "message"),
    [
        (MAX_ARRIVALS + 1, "batch_window: must be at most 1,000,000 (the most arrivals a replay has), got 1000001"),
        (10**20, "batch_window: must be at most 1,000,000"),
        (0, "batch_window: must be >= 1, got 0"),
        (2.5, "batch_window: expected an integer, got float 2.5"),
        (True, "batch_window: expected an integer, got bool True"),
    ],
)
def test_replay_problem_refuses_a_window_before_any_work(window, message):
    problem = build_problem(*_trace())
    with pytest.raises(ValueError) as err:
        replay_problem(problem, _NoWork(), seed=0, batch_window=window)
    assert str(err.value).startswith(message)


def test_replay_trace_refuses_a_huge_window_too():
    nodes, pods = _trace()
    with pytest.raises(ValueError, match=r"^batch_window: must be at most 1,000,000"):
        replay_trace(nodes, pods, "greedy-objective", 0, batch_window=MAX_ARRIVALS + 1)


def test_the_largest_window_and_a_numpy_int_still_replay():
    problem = build_problem(*_trace())
    result = replay_problem(problem, solvers.make("greedy-objective"), seed=0, batch_window=MAX_ARRIVALS)
    assert result.arrived_pods == 3 and result.batch_window == MAX_ARRIVALS
    result = replay_problem(problem, solvers.make("greedy-objective"), seed=0, batch_window=np.int64(2))
    assert type(result.to_dict()["batch_window"]) is int and result.batch_window == 2


def test_a_multi_seed_document_names_its_batch_window():
    nodes, pods = _trace()
    runs = [replay_trace(nodes, pods, "greedy-objective", seed, batch_window=2) for seed in (1, 2)]
    doc = summary(runs, "pods.csv", "nodes.csv")
    assert doc["batch_window"] == 2 and [r["batch_window"] for r in doc["runs"]] == [2, 2]
    one = summary(runs[:1], "pods.csv", "nodes.csv")
    assert one["batch_window"] == 2  # (a single run's document had it already)


# --- a small problem with GPUs ----------------------------------------------------------------


def _doc() -> dict[str, Any]:
    return {
        "resources": ["cpu", "memory"],
        "domains": [{"name": "edge", "kind": "edge", "carbon_intensity": 300.0, "price_per_hour": {"cpu": 0.05}},
                    {"name": "az", "carbon_intensity": 200.0, "price_per_hour": {"cpu": 0.03, "gpu": 2.5}, "pue": 1.2}],
        "latency_ms": {"eu": {"edge": 3.0}},  # az: unknown latency (NaN)
        "nodes": [
            {"name": "e1", "domain": "edge", "capacity": {"cpu": 4000, "memory": 8192}, "labels": {"tier": "edge"}},
            {"name": "g1", "domain": "az", "capacity": {"cpu": 16000, "memory": 65536},
             "allocated": {"cpu": 2000.5, "memory": 4096}, "gpus": 2, "gpu_model": "T4", "gpu_free_milli": [1000, 500]},
            {"name": "b1", "domain": "az", "capacity": {"cpu": 8000, "memory": 32768}, "gpu_model": "A100",
             "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]},
        ],
        "workloads": [
            {"name": "web", "requests": {"cpu": 500, "memory": 512}, "user_region": "eu", "max_latency_ms": 20},
            {"name": "share", "requests": {"cpu": 1000, "memory": 2048}, "gpu": {"count": 1, "milli": 500}},
            {"name": "whole", "requests": {"cpu": 1000}, "gpu": {"count": 2, "models": ["T4", "V100"]}, "class": "batch",
             "tolerations": [{"key": "dedicated", "operator": "Exists"}], "priority": -7, "deadline_s": 60.5},
        ],
        "weights": {"cost": 2.0},
        "latency_ref_ms": 75.0,
    }


BASE = problem_from_dict(_doc())


def _no_cards(p: Problem) -> Problem:
    """``p`` on a node set without any GPU card (its GPU workloads kept)."""
    return p.replace(gpu_count=np.zeros(p.num_nodes, np.int32), gpu_free=np.zeros((p.num_nodes, 0), np.int32))


# --- objective.marginal: w ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("w", "error", "message"),
    [
        (-1, IndexError, "w: workload index -1 is out of range 0..2 (the problem has 3 workload(s))"),
        (3, IndexError, "w: workload index 3 is out of range 0..2 (the problem has 3 workload(s))"),
        (1.0, TypeError, "w: expected a workload index, got float 1.0"),
        (True, TypeError, "w: expected a workload index, got bool True"),
        ("1", TypeError, "w: expected a workload index, got str '1'"),
    ],
)
def test_marginal_refuses_what_place_refuses(w, error, message):
    state = ClusterState(BASE)
    with pytest.raises(error) as err:
        marginal(BASE, state, w)
    assert str(err.value) == message
    with pytest.raises(error) as err_place:  # the same wording as ClusterState.place
        state.place(w, 0)
    assert str(err_place.value) == message


def test_marginal_takes_numpy_ints():
    state = ClusterState(BASE)
    np.testing.assert_array_equal(marginal(BASE, state, np.int64(2)), marginal(BASE, state, 2))
    np.testing.assert_array_equal(marginal(BASE, state, 0, np.array([2, 0])), marginal(BASE, state, 0)[[2, 0]])


# --- Problem.with_workloads: indices -----------------------------------------------------------


@pytest.mark.parametrize(
    ("indices", "error", "message"),
    [
        ([-1], IndexError, "indices: workload index -1 is out of range 0..2 (the problem has 3 workload(s))"),
        ([0, 3], IndexError, "indices: workload index 3 is out of range 0..2 (the problem has 3 workload(s))"),
        (np.array([2, -3]), IndexError, "indices: workload index -3 is out of range 0..2"),
        ([1.5], TypeError, "indices: expected a list of workload indices, got an array of float64"),
        ([True, False], TypeError, "indices: expected a list of workload indices, got an array of bool"),
        ([[0, 1]], TypeError, "indices: expected a list of workload indices, got an array of int64 with shape (1, 2)"),
    ],
)
def test_with_workloads_refuses_bad_indices(indices, error, message):
    with pytest.raises(error) as err:
        BASE.with_workloads(indices)
    assert str(err.value).startswith(message)


def test_with_workloads_keeps_good_indices():
    assert [w.name for w in BASE.with_workloads(np.array([2, 0], dtype=np.uint8)).workloads] == ["whole", "web"]
    assert [w.name for w in BASE.with_workloads((1,)).workloads] == ["share"]
    empty = BASE.with_workloads([])
    assert empty.num_workloads == 0 and empty.demand.shape == (0, 2)


# --- problem files: writer and reader agree ----------------------------------------------------


def assert_same_problem(a: Problem, b: Problem) -> None:
    """Every constructor argument of ``a`` and ``b`` equal (NaN latency equal to NaN)."""
    for name in ("resources", "domains", "nodes", "workloads", "regions", "weights", "latency_ref_ms", "feasibility_only"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("latency_ms", "capacity", "allocated", "demand", "gpu_free", "gpu_count", "wl_gpu_count",
                 "wl_gpu_milli", "power_idle_w", "power_peak_w"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape and np.array_equal(x, y, equal_nan=True), name
    for name in ("nonzero_demand", "initial_nonzero"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None and y is None) or np.array_equal(x, y), name


def _accepted_problems() -> dict[str, Problem]:
    """Problems the constructor accepts, GPU workloads on node sets with and without cards."""
    w = BASE.workloads
    out = {
        "base": BASE,
        "gpu workloads on a node set without cards": _no_cards(BASE),
        "no cards, a node still naming a model": _no_cards(BASE).replace(
            nodes=[dataclasses.replace(n, gpu_model="T4") for n in BASE.nodes]),
        "no GPU anywhere": _no_cards(BASE).replace(
            workloads=[w[0], w[1], dataclasses.replace(w[2], gpu_models=())],
            wl_gpu_count=np.zeros(3, np.int32), wl_gpu_milli=np.zeros(3, np.int32)),
        "all cards used": BASE.replace(gpu_free=np.array([[-1, -1], [0, 0], [-1, -1]], np.int32)),
        "no workloads": BASE.with_workloads([]),
        "nonzero requests": BASE.replace(nonzero_demand=np.array([[500, 512], [1000, 2048], [1000, 200]], float),
                                         initial_nonzero=np.array([[0, 0], [2000.5, 4096], [100, 200]], float)),
        "feasibility-only resource": BASE.replace(
            resources=("cpu", "memory", "ephemeral-storage"), feasibility_only=("ephemeral-storage",),
            capacity=np.column_stack([BASE.capacity, [1e6, 2e6, 3e6]]),
            allocated=np.column_stack([BASE.allocated, [0, 5, 0]]),
            demand=np.column_stack([BASE.demand, [0, 1.25, 7]])),
        "fractional amounts": BASE.replace(demand=BASE.demand + 0.1, power_idle_w=BASE.power_idle_w / 3),
    }
    return out


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize("name", list(_accepted_problems()))
def test_every_accepted_problem_reads_back_equal(tmp_path, name, suffix):
    problem = _accepted_problems()[name]
    path = tmp_path / f"p{suffix}"
    write_problem(problem, path)
    assert_same_problem(load_problem(path), problem)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        # a snapshot's node without memory, an overcommitted node: the constructor takes them, a file may not
        ({"capacity": np.array([[4000, 0], [16000, 65536], [8000, 32768]], float)}, "nodes[0].capacity.memory"),
        ({"allocated": np.array([[5000, 0], [2000, 4096], [0, 0]], float)}, "nodes[0].allocated.cpu"),
        ({"allocated": np.array([[0, -1e-12], [2000, 4096], [0, 0]], float)}, "nodes[0].allocated.memory"),
        ({"demand": np.array([[10 * MAX_NUMBER, 0], [1, 1], [1, 1]], float)}, "workloads[0].requests.cpu"),
    ],
)
@pytest.mark.parametrize("suffix", [".json", ".yml"])
def test_a_problem_no_file_can_hold_is_refused_naming_the_field(tmp_path, change, field, suffix):
    problem = BASE.replace(**change)  # the constructor accepts it
    path = tmp_path / f"p{suffix}"
    with pytest.raises(ProblemValidationError) as err:
        write_problem(problem, path)
    assert str(err.value).startswith(f"{path} (not written: a problem file cannot hold this problem)")
    assert field in [p for p, _ in err.value.errors]
    assert not path.exists() and list(tmp_path.iterdir()) == []
    path.write_text("old")
    with pytest.raises(ProblemValidationError):
        write_problem(problem, path)
    assert path.read_text() == "old"  # the old file kept, nothing half-written


def test_a_pod_without_gpus_takes_no_share_and_names_no_models():
    """A file cannot say either (``gpu`` needs count >= 1), and the writer dropped them: the
    problem read back differed from the one written. The loaders refuse both, now the constructor too."""
    with pytest.raises(ValueError) as err:
        BASE.replace(wl_gpu_milli=np.array([500, 500, 1000], np.int32))
    assert str(err.value) == ("wl_gpu_milli[0] (workload 'web', wl_gpu_count 0): a pod without GPUs takes no GPU share "
                              "(0; give wl_gpu_count 1 for a share), got 500")
    with pytest.raises(ValueError) as err:
        BASE.replace(workloads=[dataclasses.replace(BASE.workloads[0], gpu_models=("T4",)), *BASE.workloads[1:]])
    assert str(err.value) == ("workloads[0].gpu_models (workload 'web', wl_gpu_count 0): a pod without GPUs names no "
                              "GPU models, got ['T4']")
    # Still fine: GPU workloads on a node set without cards (they fit nowhere) and models with count >= 1.
    assert _no_cards(BASE).wl_gpu_count.tolist() == [0, 1, 2]
    assert math.isnan(BASE.latency_ms[0, 1])


@pytest.mark.parametrize("text", ["1e3", "-.5", "0o17", "0x1F", "+.inf", ".NaN", "1_000", "yes", "12:30", "-"])
def test_yaml_keeps_strings_the_core_schema_reads_as_numbers(tmp_path, text):
    """PyYAML quotes what YAML 1.1 reads as another type; the loader's YAML 1.2 core schema also
    reads 1e3, -.5 and 0o17 as numbers: such a label was written plain and the file refused."""
    node = dataclasses.replace(BASE.nodes[0], labels={"k": text, text: "v"})
    workload = dataclasses.replace(BASE.workloads[0], node_selector={"k": text})
    problem = BASE.replace(nodes=[node, *BASE.nodes[1:]], workloads=[workload, *BASE.workloads[1:]])
    write_problem(problem, tmp_path / "p.yaml")
    assert_same_problem(load_problem(tmp_path / "p.yaml"), problem)
