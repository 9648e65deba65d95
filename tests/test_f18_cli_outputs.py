"""``iro`` output paths and small CLI defects.

- ``--out ""`` (and ``--plot ""``) ran, exited 0 and wrote nothing in solve, compare and replay;
- ``--out newres/`` wrote a file named ``newres``;
- an invalid input still made the ``--out`` folders;
- ``iro compare --out -`` wrote a file named ``-`` (``iro solve --out -`` prints to stdout);
  ``-`` is refused, naming the flag, where a command has no stdout output (replay, simulate);
- a reader closing stdout early was reported as bad input ("error: [Errno 32] Broken pipe", 2),
  or a flush error at exit (120), or rich's exit 1: now a quiet 141, as a Unix tool;
- compare warmed each solver up on the first problem with workloads, even one with no nodes,
  which imports nothing, so the next problem's timed solve counted the imports;
- ``_console()`` read markup by default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import iro_fed.cli as cli
from iro_fed.cli import UsageError, check_output_file, main
from iro_fed.testing import random_problem_doc

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,1,T4\n"
PODS_CSV = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1000,1,600\nb,1000,1000,1,500\n"
NO_NODES = {
    "domains": [{"name": "az", "price_per_hour": {"cpu": 0.03}}],
    "nodes": [],
    "workloads": [{"name": "w", "requests": {"cpu": 100, "memory": 10}}],
}


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with a problem, a trace and an invalid problem and trace."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.json").write_text(json.dumps(random_problem_doc(7, nodes=5, pods=6)))
    (tmp_path / "bad.json").write_text(json.dumps({"nodes": "not a list"}))
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    (tmp_path / "badpods.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,lots,1000,1,600\n")
    return tmp_path


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


SOLVE = ["solve", "p.json", "--solver", "best-fit"]
COMPARE = ["compare", "p.json", "--solvers", "best-fit"]
REPLAY = ["replay", "--nodes", "nodes.csv", "--pods", "pods.csv", "--policy", "fgd-bestfit"]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(SOLVE, "--out"), (COMPARE, "--out"), (REPLAY, "--out"), (REPLAY, "--plot")],
)
@pytest.mark.parametrize("blank", ["", " "])
def test_an_empty_output_path_exits_2_naming_the_flag(work, capsys, argv, flag, blank):
    before = _listing(work)
    assert main([*argv, flag, blank]) == 2  # was 0, nothing written
    assert f"{flag}: expected a path, got {blank!r}" in capsys.readouterr().err
    assert _listing(work) == before


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(SOLVE, "--out"), (COMPARE, "--out"), (REPLAY, "--out"), (REPLAY, "--plot")],
)
@pytest.mark.parametrize(("target", "end"), [("newres/", "'/'"), ("newres/.", "'.'"), ("a/newres/..", "'..'")])
def test_an_output_path_ending_in_a_folder_exits_2_naming_the_flag(work, capsys, argv, flag, target, end):
    before = _listing(work)
    assert main([*argv, flag, target]) == 2  # was 0 with a file named 'newres' written
    assert f"{flag}: {target!r} ends with {end}, a folder; give a file name" in capsys.readouterr().err
    assert _listing(work) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["solve", "bad.json", "--solver", "best-fit", "--out", "nd1/nd2/out.json"], "nodes"),
        (["compare", "p.json", "bad.json", "--solvers", "best-fit", "--out", "nd1/nd2/out.json"], "nodes"),
        (
            [
                "replay",
                "--nodes",
                "nodes.csv",
                "--pods",
                "badpods.csv",
                "--policy",
                "fgd-bestfit",
                "--out",
                "nd1/nd2/r.json",
            ],
            "--pods: badpods.csv line 2",
        ),
    ],
)
def test_an_invalid_input_makes_no_output_folder(work, capsys, argv, message):
    before = _listing(work)
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert _listing(work) == before  # 'nd1' was made before the input was read


def test_replay_plot_folder_is_not_made_for_an_invalid_trace(work, capsys):
    pytest.importorskip("matplotlib")
    argv = ["replay", "--nodes", "nodes.csv", "--pods", "badpods.csv", "--policy", "fgd-bestfit", "--plot", "pd/r.png"]
    before = _listing(work)
    assert main(argv) == 2
    assert "--pods: badpods.csv line 2" in capsys.readouterr().err
    assert _listing(work) == before


def test_good_runs_still_make_the_output_folders(work):
    assert main([*SOLVE, "--out", "s1/s2/p.json"]) == 0
    assert json.loads((work / "s1" / "s2" / "p.json").read_text())["solver"] == "best-fit"
    assert main([*COMPARE, "--out", "c1/c2/c.json"]) == 0
    assert json.loads((work / "c1" / "c2" / "c.json").read_text())["results"]
    assert main([*REPLAY, "--out", "r1/r2/r.json"]) == 0
    assert json.loads((work / "r1" / "r2" / "r.json").read_text())["seed"] == 42


def test_compare_out_dash_prints_the_json_to_stdout(work, capsys):
    assert main(["compare", "p.json", "--solvers", "best-fit,first-fit", "--out", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)  # the JSON alone: no table before it
    assert doc["seed"] == 0
    assert sorted(r["solver"] for r in doc["results"]) == ["best-fit", "first-fit"]
    assert not (work / "-").exists()  # was a file named '-'


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (REPLAY, "--out"),
        (REPLAY, "--plot"),
        (["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1"], "--out"),
    ],
)
def test_dash_is_refused_where_a_command_cannot_print_its_output(work, capsys, argv, flag):
    before = _listing(work)
    assert main([*argv, flag, "-"]) == 2
    assert f"{flag}: '-' (standard output) is not supported here" in capsys.readouterr().err
    assert _listing(work) == before


def test_check_output_file_accepts_a_file_named_dash_by_its_path(tmp_path):
    assert check_output_file("--out", str(tmp_path / "-"), make=False) == tmp_path / "-"
    for bad in ("-", "", "x/", "x/.", "x/.."):
        with pytest.raises(UsageError, match="^--out: "):
            check_output_file("--out", bad, make=False)


def _closed_reader(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``iro argv`` with stdout a pipe whose reader has already gone (``... | head -0``):
    every write to it fails with EPIPE, whatever its size and timing."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "iro_fed.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            cwd=cwd,
            env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"},
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "argv",
    [
        ["solve", "p.json", "--solver", "first-fit", "--out", "-"],  # print(): was exit 120 (flush at exit) or 2
        ["compare", "p.json", "--solvers", "first-fit", "--out", "-"],
        ["compare", "p.json", "--solvers", "first-fit"],  # a rich table: rich exited 1
    ],
)
def test_a_closed_stdout_exits_141_quietly(work, argv):
    done = _closed_reader(argv, work)
    assert done.returncode == 141, done.stderr
    assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr and "error" not in done.stderr


def test_compare_warms_up_on_a_problem_with_nodes(work, monkeypatch):
    (work / "none.json").write_text(json.dumps(NO_NODES))
    warmed: list[tuple[str, int]] = []
    monkeypatch.setattr(cli, "warm_up", lambda name, settings, problem: warmed.append((name, problem.num_nodes)))
    assert main(["compare", "none.json", "p.json", "--solvers", "best-fit,first-fit"]) == 0
    assert warmed == [("best-fit", 5), ("first-fit", 5)]  # was on none.json's 0 nodes


def test_solve_warms_up_on_a_built_in_problem_when_the_problem_has_no_nodes(work, monkeypatch):
    # dqn loads its policy (torch) even when no node fits a pod: the time column counted 5 s of it.
    (work / "none.json").write_text(json.dumps(NO_NODES))
    warmed: list[tuple[str, int, int]] = []
    monkeypatch.setattr(cli, "warm_up",
                        lambda name, settings, problem: warmed.append((name, problem.num_nodes, problem.num_workloads)))
    assert main(["solve", "none.json", "--solver", "best-fit"]) == 0
    assert warmed == [("best-fit", 1, 1)]


def test_console_prints_markup_literally_by_default():
    console = cli._console()
    with console.capture() as captured:
        console.print("batch[/gpu] and [bold]x[/bold]")  # '[/gpu]' raised MarkupError
    assert captured.get().strip() == "batch[/gpu] and [bold]x[/bold]"
