"""``iro replay --out`` and ``--batch-window`` (task h1).

* ``--out x.csv`` wrote the JSON document into a .csv file: a suffix of another format (.csv,
  .tsv, .yaml, .yml, or an image, which is ``--plot``'s) is refused with exit status 2 naming
  ``--out``, before the traces are read, and nothing is written;
* a multi-seed document says its ``batch_window`` at the top level (each run had it);
* ``--batch-window`` keeps its messages, now from the library's one rule;
* the document records the policy's settings as it ran (``--set`` and defaults, not the seed):
  two result files of ``cpsat`` with and without ``--set gpu_guard=true`` were the same JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iro_fed.cli import main

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,2,T4\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\nb,1000,1024,1,1000\nc,2000,1024,2,1000\n"


def argv(tmp_path: Path, policy: str = "best-fit") -> list[str]:
    (tmp_path / "nodes.csv").write_text(NODES, encoding="utf-8")
    (tmp_path / "pods.csv").write_text(PODS, encoding="utf-8")
    return ["replay", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--policy", policy]


@pytest.mark.parametrize("name", ["r.csv", "r.CSV", "r.tsv", "r.yaml", "r.yml", "sub/r.csv"])
def test_out_with_another_formats_suffix_is_refused(tmp_path, capsys, name):
    out = tmp_path / name
    assert main([*argv(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out: {str(out)!r} has suffix {out.suffix.lower()!r}, but the replay result is JSON; give a .json file" in err
    assert not out.exists() and not (tmp_path / "sub").exists()


def test_out_with_an_image_suffix_points_at_plot(tmp_path, capsys):
    out = tmp_path / "r.png"
    assert main([*argv(tmp_path), "--out", str(out)]) == 2
    assert "give a .json file; --plot writes the allocation curve as an image" in capsys.readouterr().err
    assert not out.exists()


def test_the_suffix_is_refused_before_the_traces_are_read(tmp_path, capsys):
    args = ["replay", "--nodes", str(tmp_path / "missing.csv"), "--pods", str(tmp_path / "missing.csv"),
            "--policy", "best-fit", "--out", str(tmp_path / "r.csv")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--out:" in err and "--nodes" not in err


@pytest.mark.parametrize("name", ["r.json", "r", "r.out"])
def test_json_and_other_names_still_write_json(tmp_path, name):
    out = tmp_path / name
    assert main([*argv(tmp_path), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["arrived_pods"] >= 3


def test_a_multi_seed_file_names_its_batch_window(tmp_path):
    out = tmp_path / "r.json"
    assert main([*argv(tmp_path, "greedy-objective"), "--seeds", "1-2", "--batch-window", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["seeds"] == [1, 2] and doc["batch_window"] == 2
    assert [run["batch_window"] for run in doc["runs"]] == [2, 2]
    assert list(doc)[:3] == ["policy", "seeds", "batch_window"]


@pytest.mark.parametrize(
    ("window", "message"),
    [("0", "--batch-window: must be >= 1, got 0"),
     ("1000001", "--batch-window: must be at most 1,000,000 (the most arrivals a replay has), got 1000001")],
)
def test_batch_window_messages(tmp_path, capsys, window, message):
    assert main([*argv(tmp_path), "--batch-window", window]) == 2
    assert message in capsys.readouterr().err


def test_the_document_records_the_policys_settings(tmp_path):
    import solvers

    plain, guarded = tmp_path / "plain.json", tmp_path / "guarded.json"
    window = ["--batch-window", "3", "--set", "time_limit_s=2"]
    assert main([*argv(tmp_path, "cpsat"), *window, "--out", str(plain)]) == 0
    assert main([*argv(tmp_path, "cpsat"), *window, "--set", "gpu_guard=true", "--seeds", "1-2",
                 "--out", str(guarded)]) == 0
    one, several = json.loads(plain.read_text()), json.loads(guarded.read_text())
    defaults = {k: v for k, v in solvers.make("cpsat").get_params().items() if k != "seed"}
    assert one["settings"] == {**defaults, "time_limit_s": 2.0}
    assert several["settings"] == {**defaults, "time_limit_s": 2.0, "gpu_guard": True}
    assert [run["settings"] for run in several["runs"]] == [several["settings"]] * 2
    assert "seed" not in one["settings"]
