"""Trace CSV input and ``iro replay --batch-window`` bounds: a column named twice, numbers that
are not ASCII decimal, and a window past the most arrivals are refused with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iro_fed.cli import main
from iro_fed.traces.openb import TraceFormatError, load_nodes, load_pods

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,2,T4\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\nb,1000,1024,1,1000\nc,2000,1024,2,1000\n"


def write(tmp_path: Path, nodes: str = NODES, pods: str = PODS) -> list[str]:
    (tmp_path / "nodes.csv").write_text(nodes, encoding="utf-8")
    (tmp_path / "pods.csv").write_text(pods, encoding="utf-8")
    return ["replay", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--policy", "best-fit"]


def test_a_column_given_twice_is_refused(tmp_path, capsys):
    pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_milli\na,1000,1024,1,500,0\n"
    assert main(write(tmp_path, pods=pods)) == 2
    err = capsys.readouterr().err
    assert "pods.csv line 1: column gpu_milli given twice" in err and "--pods" in err
    nodes = "sn,cpu_milli,memory_mib,gpu,model,gpu\nn0,32000,65536,2,T4,0\n"
    assert main(write(tmp_path, nodes=nodes)) == 2
    err = capsys.readouterr().err
    assert "nodes.csv line 1: column gpu given twice" in err and "--nodes" in err


def test_an_extra_column_of_another_name_is_still_fine(tmp_path):
    (tmp_path / "p.csv").write_text(PODS.replace("gpu_milli\n", "gpu_milli,note\n", 1).replace("500\n", "500,x\n"))
    assert [p.gpu_milli for p in load_pods(tmp_path / "p.csv")] == [500, 1000, 1000]


@pytest.mark.parametrize("value", ["1_000", "\uff15" + "00", "\u0661\u0660\u0660\u0660", "1_0.0"])
def test_numbers_must_be_ascii_decimal(tmp_path, capsys, value):
    pods = PODS.replace("a,1000,1024,1,500", f"a,{value},1024,1,500")
    assert main(write(tmp_path, pods=pods)) == 2
    err = capsys.readouterr().err
    assert "pods.csv line 2: cpu_milli: expected an integer in ASCII decimal digits" in err
    nodes = NODES.replace("n1,32000", f"n1,{value}")
    (tmp_path / "n.csv").write_text(nodes, encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"n\.csv line 3: cpu_milli: expected an integer in ASCII"):
        load_nodes(tmp_path / "n.csv")


def test_decimal_spellings_still_read(tmp_path):
    pods = PODS.replace("a,1000,1024,1,500", "a, 1000 ,1024.0,+1,5e2")
    (tmp_path / "p.csv").write_text(pods, encoding="utf-8")
    pod = load_pods(tmp_path / "p.csv")[0]
    assert (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli) == (1000, 1024, 1, 500)


@pytest.mark.parametrize("window", ["1000001", "99999999999999999999"])
def test_batch_window_is_capped_at_the_most_arrivals(tmp_path, capsys, window):
    out = tmp_path / "r.json"
    assert main([*write(tmp_path), "--batch-window", window, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--batch-window: must be at most 1,000,000" in err and window in err
    assert not out.exists()


def test_a_window_past_the_arrivals_is_one_solve(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main([*write(tmp_path), "--batch-window", "1000000", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["batch_window"] == 1000000 and doc["arrived_pods"] >= 3
