"""A command's outputs never replace its inputs, a failed write leaves none of its outputs and names
its flag, and two input formats refuse what they took silently (an audit of the command line):

* ``iro solve p.json --out p.json`` (also through ``./p.json`` or a symlink), ``compare``'s
  ``--out``, ``replay``'s ``--out`` / ``--plot`` on ``--nodes`` / ``--pods``, ``simulate``'s on a
  ``--set`` file (a carbon trace) overwrote the input and exited 0;
* ``feedback-sim --dqn-registry X --out X`` ran the whole simulation, then failed on the folder;
* ``replay --out r.json --plot /dev/full`` left r.json, and a write error showed the temporary
  file's name, not the flag;
* an openb CSV with a quote left open was read as one node (the rest of the file one field);
* a problem file's top-level ``name`` of another type than a string passed validation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iro_fed.cli import main

ROOT = Path(__file__).resolve().parents[1]
BANK = ROOT / "examples" / "problems" / "bank-three-zone.json"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,2,T4\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\nb,1000,1024,1,1000\nc,2000,1024,2,1000\n"


@pytest.fixture
def problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "p.json"
    path.write_bytes(BANK.read_bytes())
    return path


@pytest.mark.parametrize("out", ["p.json", "./p.json", "link.json", "{tmp}/sub/../p.json"])
@pytest.mark.parametrize("command", [["solve", "p.json", "--solver", "best-fit"],
                                     ["compare", "p.json", "--solvers", "best-fit"]])
def test_out_that_is_the_problem_is_refused_and_the_problem_kept(problem, capsys, out, command):
    (problem.parent / "sub").mkdir()
    os.symlink(problem, problem.parent / "link.json")
    out = out.format(tmp=problem.parent)
    assert main([*command, "--out", out]) == 2
    assert f"--out: {out!r} is also the PROBLEM input; the result would replace it" in capsys.readouterr().err
    assert problem.read_bytes() == BANK.read_bytes()


def test_out_beside_the_problem_is_still_written(problem):
    assert main(["solve", "p.json", "--solver", "best-fit", "--out", "placement.json"]) == 0
    assert json.loads(Path("placement.json").read_text())["assignments"]
    assert problem.read_bytes() == BANK.read_bytes()


def _traces(tmp_path: Path, nodes: str = "nodes.csv") -> list[str]:
    (tmp_path / nodes).write_text(NODES, encoding="utf-8")
    (tmp_path / "pods.csv").write_text(PODS, encoding="utf-8")
    return ["replay", "--nodes", str(tmp_path / nodes), "--pods", str(tmp_path / "pods.csv"), "--policy", "best-fit"]


@pytest.mark.parametrize(("nodes", "flag", "out"), [("nodes.json", "--out", "nodes.json"),
                                                    ("nodes.png", "--plot", "nodes.png")])
def test_replay_outputs_that_are_its_traces_are_refused(tmp_path, capsys, nodes, flag, out):
    argv = _traces(tmp_path, nodes)
    assert main([*argv, flag, str(tmp_path / out)]) == 2
    assert "is also the --nodes input; the result would replace it" in capsys.readouterr().err
    assert (tmp_path / nodes).read_text() == NODES


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_plot_that_cannot_be_written_leaves_no_result_file(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.json"
    assert main([*_traces(tmp_path), "--out", str(out), "--plot", "/dev/full"]) == 2
    err = capsys.readouterr().err
    assert "--plot: cannot write '/dev/full': No space left on device" in err
    assert not out.exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_a_write_error_names_the_flag_and_the_file_not_a_temporary_one(tmp_path, capsys):
    # /proc is a folder (the checks before the run pass) where no file can be made.
    assert main([*_traces(tmp_path), "--out", "/proc/r.json"]) == 2
    err = capsys.readouterr().err
    assert "--out: cannot write '/proc/r.json': No such file or directory" in err and "/proc/." not in err


def test_simulate_output_that_is_a_set_file_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("de.csv").write_text("Time,Carbon Intensity\n2024-01-01T00:00:00Z,100\n", encoding="utf-8")
    argv = ["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1", "--set", "carbon.DE=de.csv"]
    assert main([*argv, "--out", "de.csv"]) == 2
    assert "--out: 'de.csv' is also the --set carbon.DE input" in capsys.readouterr().err
    assert Path("de.csv").read_text().startswith("Time,")


def test_feedback_sim_out_and_registry_on_one_path_are_refused_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["feedback-sim", "--hours", "1", "--dqn-registry", "reg", "--out", "reg"]) == 2
    assert "--dqn-registry: 'reg' is also the --out file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_quote_left_open_in_a_node_list_is_an_error_naming_its_line(tmp_path, capsys):
    argv = _traces(tmp_path)
    (tmp_path / "nodes.csv").write_text(NODES.replace("n0,32000,65536,2,T4", 'n0,32000,65536,2,"T4'), encoding="utf-8")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--nodes:" in err and "nodes.csv line 2: a quoted field is never closed" in err


@pytest.mark.parametrize(("key", "value", "message"), [("name", 5, "name: expected a string, got integer 5"),
                                                       ("description", ["x"], "description: expected a string")])
def test_a_problem_name_or_description_that_is_not_text_is_refused(tmp_path, capsys, key, value, message):
    doc = json.loads(BANK.read_text())
    doc[key] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    assert message in capsys.readouterr().err
