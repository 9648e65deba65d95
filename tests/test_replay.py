"""The replay metric on hand-made traces, a fixed-seed replay of a real slice, and `iro replay`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import solvers
from iro_fed.cli import main
from iro_fed.replay import curve, replay_problem, replay_trace
from iro_fed.traces.openb import OpenbNode, OpenbPod, build_problem

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-openb-2023"


def test_curve_means_and_neighbour_rule():
    arrived = np.array([0, 1, 1, 3, 5])
    values = np.array([0.0, 10.0, 20.0, 30.0, 50.0])
    c = curve(arrived, values)
    assert c["1"] == 15.0  # mean of the two events at 1
    assert c["2"] == 20.0  # no event at 2: events at 1..3
    assert c["4"] == 40.0  # no event at 4: events at 3..5
    assert c["7"] is None and len(c) == 131


def hand_trace():
    nodes = [OpenbNode("n0", 32000, 65536, 2, "T4")]
    pods = [
        OpenbPod("a", 1000, 1000, 1, 600),  # arrived 30 %, allocated 30 %
        OpenbPod("b", 1000, 1000, 1, 600),  # 60 %, 60 % (second card)
        OpenbPod("c", 1000, 1000, 1, 500),  # 85 %: no card has 500 left -> fails, still 60 %
        OpenbPod("d", 1000, 1000, 1, 400),  # 105 %: fits a 400 leftover -> 80 %
    ]
    return nodes, pods


def test_metric_on_a_hand_made_trace():
    nodes, pods = hand_trace()
    result = replay_problem(build_problem(nodes, pods), solvers.make("fgd-bestfit"), seed=0)
    assert result.failed_pods == 1 and result.failed_gpu_milli == 500
    assert result.alloc_gpu_pct["30"] == 30.0
    assert result.alloc_gpu_pct["60"] == 60.0
    assert result.alloc_gpu_pct["85"] == 60.0
    assert result.alloc_gpu_pct["105"] == 80.0
    assert result.alloc_gpu_pct["100"] is None and result.unallocated_gpu_pct_at_100 is None
    # After b both cards hold 400 free: the typical tasks (600, 500, 400 milli shares, popularity
    # 1/2, 1/4, 1/4) cannot use them except the 400 one: fragmentation 0.75 * 800 of 2000 milli.
    assert result.frag_gpu_pct["60"] == pytest.approx(30.0)


def test_fixed_seed_replay_of_a_real_slice(real_slice):
    nodes, pods = real_slice
    first = replay_trace(nodes, pods, "fgd", seed=42)
    again = replay_trace(nodes, pods, "fgd", seed=42)
    assert first.to_dict()["alloc_gpu_pct"] == again.to_dict()["alloc_gpu_pct"]
    values = [v for v in first.alloc_gpu_pct.values() if v is not None]
    assert all(b >= a - 1e-9 for a, b in zip(values, values[1:], strict=False))  # allocation never drops
    assert 80.0 < first.alloc_gpu_pct["100"] <= 100.0
    random = replay_trace(nodes, pods, "fgd-random", seed=42)
    assert first.unallocated_gpu_pct_at_100 < random.unallocated_gpu_pct_at_100  # FGD beats random


def test_iro_replay_command(real_slice, tmp_path, capsys):
    if not DATA.exists():
        pytest.skip("shared/data not present")
    nodes_csv, pods_csv = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    node_lines = (DATA / "openb_node_list_gpu_node.csv").read_text().splitlines()
    pod_lines = (DATA / "openb_pod_list_default.csv").read_text().splitlines()
    nodes_csv.write_text("\n".join([node_lines[0], *node_lines[1::20]]) + "\n")
    pods_csv.write_text("\n".join([pod_lines[0], *pod_lines[1::20]]) + "\n")
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    argv = ["replay", "--nodes", str(nodes_csv), "--pods", str(pods_csv), "--policy", "fgd-bestfit"]
    assert main([*argv, "--seeds", "1-2", "--out", str(out), "--plot", str(plot)]) == 0
    doc = json.loads(out.read_text())
    for key in ("policy", "seeds", "pods_csv", "arrived_pods", "failed_pods", "alloc_gpu_pct", "unallocated_gpu_pct_at_100",
                "frag_gpu_pct", "timing"):
        assert key in doc
    assert doc["seeds"] == [1, 2] and set(doc["alloc_gpu_pct"]) == {str(x) for x in range(131)}
    assert plot.stat().st_size > 10_000
    assert main([*argv, "--seed", "3", "--out", str(out)]) == 0
    single = json.loads(out.read_text())
    assert single["seed"] == 3 and single["policy"] == "fgd-bestfit"
    capsys.readouterr()
    assert main(["replay", "--nodes", str(nodes_csv), "--pods", str(pods_csv), "--policy", "nope"]) == 2
    assert "unknown solver 'nope'" in capsys.readouterr().err
    assert main(["replay", "--nodes", str(pods_csv), "--pods", str(pods_csv), "--policy", "fgd"]) == 2
    assert "missing column(s)" in capsys.readouterr().err
    assert main([*argv, "--seeds", "5-2"]) == 2


def test_batch_window_places_queued_pods_jointly():
    nodes, pods = hand_trace()
    problem = build_problem(nodes, pods)
    online = replay_problem(problem, solvers.make("fgd-bestfit"), seed=0)
    batched = replay_problem(problem, solvers.make("greedy-objective"), seed=0, batch_window=2)
    assert batched.batch_window == 2 and batched.arrived_pods == 4
    # After the first window (a, b) both 600-milli shares are placed: 60 % allocated at 60 % arrival.
    assert batched.alloc_gpu_pct["60"] == 60.0
    assert batched.alloc_gpu_pct["30"] == 30.0  # a waited in the queue; its point is taken at the flush
    # Second window (c, d): c (500) fits no 400-milli leftover and is dropped, d (400) is placed.
    assert batched.failed_pods == 1 and batched.alloc_gpu_pct["105"] == 80.0
    assert online.batch_window == 1
    with pytest.raises(ValueError, match="batch_window"):
        replay_problem(problem, solvers.make("greedy-objective"), seed=0, batch_window=0)
