"""The replay against the FGD paper's simulator (hkust-adsl/kubernetes-scheduler-simulator) and its
input converter (alibaba/clusterdata ``pod_csv_to_yaml.py``): how typical tasks are grouped by
the GPU model string, and how the analysis script rounds a curve point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import solvers
from iro_fed.fragmentation import typical_tasks
from iro_fed.replay import curve, replay_problem
from iro_fed.traces.openb import OpenbNode, OpenbPod, build_problem, load_nodes, load_pods

OPENB = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-openb-2023"


def test_curve_point_is_rounded_as_the_analysis_script_rounds_a_numpy_mean() -> None:
    # merge_alloc_discrete: round(dfv.alloc_ratio.mean(), 2) on a numpy float64. 4.09 and 4.10
    # average to 4.095 (4.094999... in binary): numpy's rounding gives 4.1, Python's round() 4.09.
    got = curve(np.array([5, 5]), np.array([4.09, 4.10]))
    assert got["5"] == 4.1


def test_replay_reports_the_simulators_value_at_an_arrival_level() -> None:
    # One node with 8 cards of model A; capacity 100 GPUs so one milli-GPU step is 0.001 %.
    # Arrived % after each pod: 4.00, 4.09, 4.49 (fails: model B), 4.51 (fails), 4.52;
    # allocated %: 4.00, 4.09, 4.09, 4.09, 4.10. The events at a rounded 5 % are 4.09 and 4.10:
    # the simulator's analysis reports 4.1 there (see the test above), not 4.09.
    nodes = [OpenbNode("n0", 64000, 262144, 8, "A")]
    pods = [
        OpenbPod("w0", 1000, 1024, 4, 1000),
        OpenbPod("w1", 1000, 1024, 1, 90),
        OpenbPod("w2", 1000, 1024, 1, 400, ("B",)),
        OpenbPod("w3", 1000, 1024, 1, 20, ("B",)),
        OpenbPod("w4", 1000, 1024, 1, 10),
    ]
    result = replay_problem(build_problem(nodes, pods), solvers.make("fgd-bestfit", seed=0), 0, capacity_milli=100_000)
    assert result.failed_pods == 2
    assert result.alloc_gpu_pct["4"] == pytest.approx(4.06)  # (4.00 + 4.09 + 4.09) / 3 = 4.0600
    assert result.alloc_gpu_pct["5"] == 4.1


def spec_pods(tmp_path: Path) -> list[OpenbPod]:
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,1000,1024,1,1000,A|B\n"
        "b,1000,1024,1,1000,A|B\n"
        "c,1000,1024,1,1000,A|B|B\n"
    )
    return load_pods(path)


def test_a_repeated_gpu_model_makes_another_typical_task_as_in_the_simulator(tmp_path: Path) -> None:
    # pod_csv_to_yaml writes gpu_spec as given ("A|B|B"); GetTypicalPods keys typical pods by
    # (MilliCpu, MilliGpu, GpuNumber, GpuType string), so "A|B" (2 pods) and "A|B|B" (1 pod) are two
    # typical tasks with popularity 2/3 and 1/3, not one with 3 pods.
    pods = spec_pods(tmp_path)
    nodes = [OpenbNode("n0", 8000, 65536, 1, "B"), OpenbNode("n1", 8000, 65536, 1, "C")]
    tasks = typical_tasks(build_problem(nodes, pods), coverage=1.0)
    assert tasks.mass.tolist() == [2, 1]
    assert tasks.popularity.tolist() == pytest.approx([2 / 3, 1 / 3])
    # Both accept the B node only: the repeat changes the grouping, not what the pod may use.
    assert tasks.access.tolist() == [[True, False], [True, False]]


def test_the_repeated_model_pod_still_runs_on_a_listed_model(tmp_path: Path) -> None:
    pods = spec_pods(tmp_path)
    nodes = [OpenbNode("n0", 8000, 65536, 1, "C"), OpenbNode("n1", 8000, 65536, 1, "B")]
    result = replay_problem(build_problem(nodes, pods[2:]), solvers.make("fgd", seed=0), 0)
    assert result.failed_pods == 0 and result.alloc_gpu_pct["50"] == 50.0


def test_gpuspec10_typical_tasks_match_the_simulators_grouping() -> None:
    # In gpuspec10 one pod of (11300 cpu, 1 GPU) asks "V100M16|V100M32|V100M32". The simulator keeps
    # it apart from the 13 pods asking "V100M16|V100M32"; the 95 % cut then keeps 74 groups, 7747 pods.
    if not OPENB.exists():
        pytest.skip("shared/data not present")
    nodes = load_nodes(OPENB / "openb_node_list_gpu_node.csv")
    pods = load_pods(OPENB / "openb_pod_list_gpuspec10.csv")
    tasks = typical_tasks(build_problem(nodes, sorted(pods, key=lambda p: p.name)))
    assert (len(tasks.mass), int(tasks.mass.sum())) == (74, 7747)
    problem = build_problem(nodes, pods)
    groups = {}
    for w, wl in enumerate(problem.workloads):
        key = (float(problem.demand[w, problem.cpu_index]), int(problem.wl_gpu_milli[w]), "|".join(wl.gpu_models))
        groups[key] = groups.get(key, 0) + 1
    assert groups[(11300.0, 1000, "V100M16|V100M32")] == 13
    assert groups[(8000.0, 1000, "V100M16|V100M32|V100M32")] == 1
