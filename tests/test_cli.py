"""The `iro` command: outputs, the placement file and exit status 2 on bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from iro_fed.cli import main
from iro_fed.testing import random_problem_doc


@pytest.fixture
def problem_file(tmp_path):
    path = tmp_path / "problem.json"
    doc = random_problem_doc(7, nodes=6, pods=8)
    doc["workloads"].append({"name": "too-big", "requests": {"cpu": 10**7, "memory": 1}})
    path.write_text(json.dumps(doc))
    return path


def test_solvers_json(capsys):
    assert main(["solvers", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in rows}
    assert by_name["kube-default"]["installed"] is True
    assert by_name["kube-default"]["properties"]["mode"] == "online"
    assert "percentage_of_nodes_to_score" in by_name["kube-default"]["parameters"]


def test_solve_writes_the_placement_file(problem_file, tmp_path, capsys):
    out = tmp_path / "sub" / "deeper" / "placement.json"  # missing folders are made, like mkdir -p
    assert main(["solve", str(problem_file), "--solver", "best-fit", "--set", "seed=4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "best-fit" in printed and "too-big" in printed
    doc = json.loads(out.read_text())
    assert set(doc) >= {"solver", "params", "status", "assignments", "gpu_assignments", "unplaced", "objective", "timing"}
    assert doc["solver"] == "best-fit" and doc["params"]["seed"] == 4 and doc["status"] == "feasible"
    assert doc["assignments"]["too-big"] is None
    assert doc["unplaced"]["too-big"].startswith("0/6 nodes are available: ")
    assert set(doc["objective"]["terms"]) == {"utilization", "latency", "cost", "carbon", "unplaced"}
    for key in ("score", "utilization_pct", "mean_latency_ms", "cost_per_hour", "carbon_g_per_hour", "unplaced"):
        assert key in doc["objective"]
    assert doc["timing"]["solve_s"] >= 0


def test_solve_to_stdout(problem_file, capsys):
    assert main(["solve", str(problem_file), "--solver", "kube-default", "--out", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["solver"] == "kube-default"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--solver", "nope"], "unknown solver 'nope'"),
        (["--solver", "best-fit", "--set", "bogus=1"], "--set bogus: unknown setting"),
        (["--solver", "best-fit", "--set", "seed"], "expected KEY=VALUE"),
        (["--solver", "best-fit", "--set", "seed=abc"], "cannot read 'abc' as int"),
        (["--solver", "kube-default", "--set", "order=up"], "must be one of"),
    ],
)
def test_bad_settings_exit_2(problem_file, capsys, argv, message):
    assert main(["solve", str(problem_file), *argv]) == 2
    assert message in capsys.readouterr().err


def test_invalid_problem_exits_2_and_names_the_field(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    doc = random_problem_doc(1)
    doc["nodes"][2]["capacity"]["cpu"] = "lots"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "never.json"
    assert main(["solve", str(bad), "--solver", "best-fit", "--out", str(out)]) == 2
    assert "nodes[2].capacity.cpu" in capsys.readouterr().err
    assert not out.exists()
    assert main(["validate", str(bad)]) == 2


def test_validate_notes_unknown_fields_but_accepts_them(tmp_path, capsys):
    doc = random_problem_doc(1)
    doc["nodes"][0]["gpu_modle"] = "A100"  # a typo: ignored (the format may gain fields), noted
    doc["planner"] = {"v": 2}
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(doc))
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert "nodes[0].gpu_modle: unknown field, ignored" in err and "planner: unknown field" in err
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(random_problem_doc(1)))
    assert main(["validate", str(clean)]) == 0
    assert "unknown field" not in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["solve", str(tmp_path / "nope.json"), "--solver", "best-fit"]) == 2
    assert "cannot read file" in capsys.readouterr().err


def test_compare_prints_every_solver_and_writes_json(problem_file, tmp_path, capsys):
    out = tmp_path / "cmp.json"
    assert main(["compare", str(problem_file), "--solvers", "best-fit,kube-default,greedy-objective", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("best-fit", "kube-default", "greedy-objective"):
        assert name in printed
    results = json.loads(out.read_text())["results"]
    assert {r["solver"] for r in results} == {"best-fit", "kube-default", "greedy-objective"}
    assert main(["compare", str(problem_file), "--solvers", "best-fit,nope"]) == 2


def test_console_script_exit_codes(problem_file):
    iro = shutil.which("iro") or str(__import__("pathlib").Path(sys.executable).parent / "iro")
    ok = subprocess.run([iro, "solve", str(problem_file), "--solver", "first-fit"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([iro, "solve", str(problem_file)], capture_output=True, text=True)
    assert bad.returncode == 2 and "--solver" in bad.stderr
    help_run = subprocess.run([iro, "solve", "--help"], capture_output=True, text=True)
    assert help_run.returncode == 0 and "KEY=VALUE" in help_run.stdout


# --- hostile arguments: exit 2 naming the flag, before any work, nothing written --------------


def _listing(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("command", ["solve", "compare"])
@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("afile/out.json", "--out: cannot make folder 'afile': 'afile' is a file"),
        ("afile/deeper/out.json", "'afile' is a file"),
        (".", "is a folder"),
    ],
)
def test_output_paths_are_checked_before_any_work(problem_file, tmp_path, monkeypatch, capsys, command, target, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    before = _listing(tmp_path)
    extra = ["--solver", "best-fit"] if command == "solve" else ["--solvers", "best-fit"]
    assert main([command, str(problem_file), *extra, "--out", target]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and message in err
    assert _listing(tmp_path) == before  # no folder made, no temporary file left


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--solvers", ""], "--solvers: give at least one solver name"),  # was: silently every solver
        (["--solvers", ",,"], "--solvers: give at least one solver name"),
        (["--solvers", "best-fit,best-fit"], "--solvers: solver 'best-fit' given twice"),
        (["--solvers", "best-fit", "--seed", "-1"], "--seed: must be between 0 and 2147483647"),
        (["--solvers", "best-fit", "--seed", str(2**31)], "--seed: must be between 0 and 2147483647"),
    ],
)
def test_compare_refuses_bad_lists_and_seeds(problem_file, capsys, argv, message):
    assert main(["compare", str(problem_file), *argv]) == 2
    assert message in capsys.readouterr().err


def test_solve_refuses_a_negative_show_unplaced(problem_file, capsys):
    assert main(["solve", str(problem_file), "--solver", "best-fit", "--show-unplaced", "-1"]) == 2
    assert "--show-unplaced: must be >= 0" in capsys.readouterr().err


def test_write_output_leaves_the_old_file_and_no_temporary_on_error(tmp_path):
    from iro_fed.problem_io import write_file_atomic as write_output

    target = tmp_path / "report.json"
    target.write_text("old")

    def half(tmp: str) -> None:
        with open(tmp, "w") as fh:
            fh.write("{half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_output(target, half)
    assert target.read_text() == "old" and _listing(tmp_path) == ["report.json"]
    write_output(target, lambda tmp: open(tmp, "w").write("new"))
    assert target.read_text() == "new" and _listing(tmp_path) == ["report.json"]
    assert target.stat().st_mode & 0o777 == 0o644


def test_allocation_plot_leaves_no_temporary_file_when_it_cannot_rename(tmp_path):
    pytest.importorskip("matplotlib")
    from iro_fed.plots import allocation_plot

    folder = tmp_path / "plot.png"
    folder.mkdir()  # a folder where the image should go: the rename fails
    with pytest.raises(OSError):
        allocation_plot({"fgd": {"0": 0.0, "100": 90.0}}, folder)
    assert _listing(tmp_path) == ["plot.png"] and _listing(folder) == []


def test_parse_seeds_checks_range_duplicates_and_count():
    from iro_fed.cli import MAX_SEEDS, UsageError, parse_seeds

    assert parse_seeds("42-44,50") == [42, 43, 44, 50]
    for text, message in [
        ("", "expected N, N-M"),
        ("5-3", "ends before it starts"),
        ("-1", "must be between 0 and 2147483647"),
        ("2147483646-2147483648", "must be between 0 and 2147483647"),
        (f"0-{MAX_SEEDS}", f"at most {MAX_SEEDS} seeds"),
        ("1,2,1", "seed 1 given twice"),
        ("1-3,2", "seed 2 given twice"),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_seeds(text)


def test_check_number_checks_finiteness_then_bounds_with_one_message():
    from iro_fed.cli import UsageError, check_hours, check_int, check_number

    assert check_number("--x", 0.0, 0.0, 1.0) == 0.0 and check_number("--x", 1.0, 0.0, 1.0) == 1.0
    assert check_number("--x", -1e300) == -1e300  # no bounds: only finiteness
    for value, kwargs, message in [
        (float("nan"), {}, "--x: must be finite, got nan"),
        (float("inf"), {"high": 5.0}, "--x: must be finite, at most 5, got inf"),
        (float("-inf"), {"low": 0.0}, "--x: must be >= 0 and finite, got -inf"),
        (0.0, {"low": 0.0, "low_open": True}, "--x: must be > 0 and finite, got 0"),
        (-0.5, {"low": 0.0, "high": 1.0}, "--x: must be >= 0 and finite, at most 1, got -0.5"),
        (2.0, {"low": 0.0, "high": 1.0}, "--x: must be >= 0 and finite, at most 1, got 2"),
    ]:
        with pytest.raises(UsageError) as info:
            check_number("--x", value, **kwargs)
        assert str(info.value) == message
    with pytest.raises(UsageError, match=r"^--hours: must be > 0 and finite, at most 8784, got 1e\+09$"):
        check_hours("--hours", 1e9)
    assert check_int("--n", 5, 1, 5) == 5
    with pytest.raises(UsageError, match=r"^--n: must be between 1 and 5, got 6$"):
        check_int("--n", 6, 1, 5)


# --- iro replay ---------------------------------------------------------------------------------


NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,1,T4\n"
PODS_CSV = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1000,1,600\nb,1000,1000,1,500\nc,1000,1000,1,1000\n"


@pytest.fixture
def trace(tmp_path, monkeypatch):
    """A three-pod trace on two nodes, in a working folder that also holds a plain file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    (tmp_path / "nogpu.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,0,\n")
    (tmp_path / "badpods.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,lots,1000,1,600\n")
    (tmp_path / "afile").write_text("x")
    return ["replay", "--nodes", "nodes.csv", "--pods", "pods.csv", "--policy", "fgd-bestfit"]


def test_replay_runs_on_the_small_trace(trace, tmp_path):
    assert main([*trace, "--seeds", "1,3", "--out", "r.json"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["seeds"] == [1, 3]


def test_replay_seed_defaults_to_42_and_is_used_when_given(trace, tmp_path):
    assert main([*trace, "--out", "r.json"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["seed"] == 42
    assert main([*trace, "--seed", "7", "--out", "r.json"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["seed"] == 7


def test_replay_help_keeps_the_default_seed(capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert "arrival-sequence seed (default 42)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pods", "badpods.csv"], "--pods: badpods.csv line 2: cpu_milli"),
        (["--pods", "missing.csv"], "--pods: no such file 'missing.csv'"),
        (["--pods", "."], "--pods: '.' is a folder"),
        (["--nodes", "."], "--nodes: '.' is a folder"),
        (["--nodes", "nogpu.csv"], "--nodes: 'nogpu.csv' lists no GPUs"),  # was a ValueError traceback
        (["--seed", "-1"], "--seed: must be between 0 and 2147483647, got -1"),  # was a numpy traceback
        (["--seed", str(2**31)], "--seed: must be between 0 and 2147483647"),
        (["--seeds", ""], "--seeds: expected N, N-M"),  # was: silently --seed
        (["--seeds", "5-3"], "--seeds: range '5-3' ends before it starts"),
        (["--seeds", "1,1"], "--seeds: seed 1 given twice"),
        (["--seed", "7", "--seeds", "1-2"], "--seed and --seeds: give one"),  # was: --seed silently ignored
        (["--seed", "42", "--seeds", "1-2"], "--seed and --seeds: give one"),  # given, even if it is the default
        (["--policy", "fgd,fgd"], "--policy: solver 'fgd' given twice"),
        (["--policy", ","], "--policy: give at least one solver name"),
        (["--policy", "fgd,nope"], "--policy: unknown solver 'nope'"),
        (["--batch-window", "0"], "--batch-window: must be >= 1, got 0"),
        (["--out", "afile/r.json"], "'afile' is a file"),
        (["--out", "."], "--out: '.' is a folder"),
        (["--plot", "afile/r.png"], "--plot: cannot make folder 'afile': 'afile' is a file"),
        (["--plot", "r.txt"], "--plot: cannot write a '.txt' image"),  # was: a PNG named r.txt
        (["--plot", "."], "--plot: '.' is a folder"),
    ],
)
def test_replay_bad_arguments_exit_2_naming_the_flag_and_write_nothing(trace, tmp_path, capsys, argv, message):
    if "--plot" in argv:
        pytest.importorskip("matplotlib")
    before = _listing(tmp_path)
    out = [] if "--out" in argv else ["--out", "r.json"]  # a good --out must stay unwritten too
    assert main([*trace, *argv, *out]) == 2
    assert message in capsys.readouterr().err
    assert _listing(tmp_path) == before


def test_compare_prints_cpsat_describe_line_and_keeps_it_in_json(tmp_path, capsys):
    """iro compare prints under its table the line iro solve prints for cpsat (was: none), and
    the JSON keeps it as ``note`` (None for a solver without one)."""
    pytest.importorskip("ortools")
    out = tmp_path / "cmp.json"
    problem = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "bank-three-zone.json")
    assert main(["compare", problem, "--solvers", "cpsat,best-fit", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    results = {r["solver"]: r for r in json.loads(out.read_text())["results"]}
    assert results["best-fit"]["note"] is None
    note = results["cpsat"]["note"]
    assert note.startswith("cpsat: CP-SAT optimal") and note in printed.replace("\n", "")
