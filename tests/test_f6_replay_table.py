"""``iro replay``'s table over several seeds says how each column combines them (means, the
median unallocated share, the total time); one seed keeps the plain headings."""

from __future__ import annotations

import pytest

from iro_fed.cli import main

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,1,T4\n"
PODS_CSV = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1000,1,600\nb,1000,1000,1,500\nc,1000,1000,1,1000\n"


@pytest.fixture
def argv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    return ["replay", "--nodes", "nodes.csv", "--pods", "pods.csv", "--policy", "fgd-bestfit"]


def test_several_seeds_label_means_median_and_total(argv, capsys):
    assert main([*argv, "--seeds", "1-3"]) == 0
    out = capsys.readouterr().out
    for heading in (
        "mean arrived",
        "mean failed",
        "median unallocated GPU % @100",
        "mean frag GPU % @100",
        "total time s",
    ):
        assert heading in out, heading


def test_one_seed_keeps_the_plain_headings(argv, capsys):
    assert main([*argv, "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "unallocated GPU % @100" in out and "time s" in out
    assert "mean" not in out and "median" not in out and "total" not in out
