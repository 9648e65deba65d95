"""Several seeds on a small cluster: a seed whose arrivals jump past 99..101 % has no value at
100 %, and the median over the seeds must not quietly become the median of the others."""

from __future__ import annotations

import json

from iro_fed.cli import main
from iro_fed.replay import median_unallocated, replay_trace, summary
from iro_fed.traces.openb import OpenbNode, OpenbPod

# One node of 2 cards: a whole-card pod moves the arrived percent by 50 points.
NODES = [OpenbNode("n0", 64000, 262144, 2, "T4")]
PODS = [
    OpenbPod("a", 1000, 1000, 1, 1000),
    OpenbPod("b", 1000, 1000, 1, 500),
    OpenbPod("c", 1000, 1000, 1, 300),
    OpenbPod("d", 1000, 1000, 2, 1000),
]
WITHOUT, WITH = 0, 2  # seeds whose sequences miss 99..101 % and hit it


def test_median_over_seeds_is_undefined_when_a_seed_has_no_value():
    missing = replay_trace(NODES, PODS, "fgd-bestfit", WITHOUT)
    present = replay_trace(NODES, PODS, "fgd-bestfit", WITH)
    assert missing.unallocated_gpu_pct_at_100 is None and present.unallocated_gpu_pct_at_100 is not None
    assert median_unallocated([missing, present]) is None  # was the seed-2 value alone
    assert median_unallocated([present, present]) == present.unallocated_gpu_pct_at_100
    doc = summary([missing, present], "pods.csv", "nodes.csv")
    assert doc["unallocated_gpu_pct_at_100"] is None
    assert doc["unallocated_gpu_pct_at_100_per_seed"] == [None, present.unallocated_gpu_pct_at_100]
    # The mean curves (the table's fragmentation at 100 %, the plot) follow the same rule.
    assert doc["frag_gpu_pct"]["100"] is None and doc["alloc_gpu_pct"]["100"] is None
    both = summary([present, present], "pods.csv", "nodes.csv")
    assert both["alloc_gpu_pct"]["100"] == present.alloc_gpu_pct["100"]


def test_replay_command_reports_no_median_for_such_seeds(tmp_path):
    nodes_csv, pods_csv, out = tmp_path / "nodes.csv", tmp_path / "pods.csv", tmp_path / "out.json"
    nodes_csv.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"{n.name},{n.cpu_milli},{n.memory_mib},{n.gpus},{n.model}\n" for n in NODES))
    pods_csv.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
        f"{p.name},{p.cpu_milli},{p.memory_mib},{p.num_gpu},{p.gpu_milli}\n" for p in PODS))
    argv = ["replay", "--nodes", str(nodes_csv), "--pods", str(pods_csv), "--policy", "fgd-bestfit"]
    assert main([*argv, "--seeds", f"{WITHOUT},{WITH}", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["unallocated_gpu_pct_at_100_per_seed"][0] is None
    assert doc["unallocated_gpu_pct_at_100"] is None
