"""``--out`` naming the command's own input, and two outputs naming one file.

Every output is written after the inputs were read whole, through a temporary file renamed over
the target, so a run that fails leaves the files as they were (no half-written result, no
temporary file). ``iro solve p.json --out p.json`` replaced the problem with the placement (exit
0): an output naming an input is now refused before the run, exit 2 naming both, the input kept.
Two outputs naming one file were both written, the later one replacing the earlier result: now
exit 2 naming the flag, before the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iro_fed.testing import random_problem_doc

ROOT = Path(__file__).resolve().parents[1]


def _iro(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iro_fed.cli", *argv], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"})


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(random_problem_doc(7, nodes=5, pods=6), indent=2))
    return path


def test_solve_out_naming_its_problem_is_refused_and_the_problem_kept(tmp_path, problem):
    before = problem.read_bytes()
    done = _iro("solve", "p.json", "--solver", "greedy-objective", "--out", "p.json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--out: 'p.json' is also the PROBLEM input; the result would replace it" in done.stderr, done.stderr
    assert problem.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary file left


def test_a_solve_that_fails_after_reading_the_problem_leaves_no_output(tmp_path, problem):
    pytest.importorskip("torch")
    before = problem.read_bytes()
    # The dqn solver loads its policy on first use, inside the solve, once the problem was read;
    # the problem file is no torch checkpoint, so the solve fails there.
    done = _iro("solve", "p.json", "--solver", "dqn", "--set", "policy=p.json", "--out", "placement.json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "setting 'policy'" in done.stderr and "not a readable torch checkpoint" in done.stderr, done.stderr
    assert problem.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_compare_out_naming_one_of_its_problems_is_refused(tmp_path, problem):
    other = tmp_path / "q.json"
    other.write_text(json.dumps(random_problem_doc(8, nodes=4, pods=5)))
    before = problem.read_bytes()
    done = _iro("compare", "p.json", "q.json", "--solvers", "best-fit,first-fit", "--out", "p.json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--out: 'p.json' is also the PROBLEM input" in done.stderr, done.stderr
    assert problem.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "q.json"]


@pytest.mark.parametrize("plot", ["report.png", "./report.png"])
def test_simulate_out_and_plot_naming_one_file_is_refused_before_the_run(tmp_path, plot):
    pytest.importorskip("matplotlib")
    # Was: the JSON report written, then replaced by the plot, exit 0.
    done = _iro("simulate", "--scenario", "edge-iot", "--solver", "best-fit", "--hours", "1",
                "--out", "report.png", "--plot", plot, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"--plot: '{plot}' is also the --out file; give each output its own file" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_replay_out_and_plot_naming_one_file_is_refused_before_the_run(tmp_path):
    pytest.importorskip("matplotlib")
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,32000,65536,2,V100M16\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                    "deletion_time,scheduled_time\np1,1000,1024,1,500,,LS,Running,0,10,1\n")
    # --out refuses an image suffix, so only a link makes both name one file
    (tmp_path / "r.json").symlink_to("r.png")
    done = _iro("replay", "--nodes", "nodes.csv", "--pods", "pods.csv", "--policy", "best-fit",
                "--out", "r.json", "--plot", "r.png", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--plot: 'r.png' is also the --out file" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nodes.csv", "pods.csv", "r.json"]


def test_an_output_path_in_a_symlink_loop_is_a_usage_error_naming_it(tmp_path):
    pytest.importorskip("matplotlib")
    # Was: RuntimeError("Symlink loop ...") from Path.resolve, a traceback and exit 1.
    (tmp_path / "a.json").symlink_to("b.json")
    (tmp_path / "b.json").symlink_to("a.json")
    done = _iro("simulate", "--scenario", "edge-iot", "--solver", "best-fit", "--hours", "1",
                "--out", "a.json", "--plot", "r.png", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--out: 'a.json' cannot be resolved" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


def test_solve_out_in_a_symlink_loop_is_refused_before_the_solve(tmp_path, problem):
    # Was: the solve ran and printed its table, then "[Errno 40] cannot resolve ..." naming no flag.
    (tmp_path / "a.json").symlink_to("b.json")
    (tmp_path / "b.json").symlink_to("a.json")
    done = _iro("solve", "p.json", "--solver", "best-fit", "--out", "a.json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--out: 'a.json' cannot be resolved" in done.stderr, done.stderr
    assert "R " not in done.stdout and "objective" not in done.stdout.lower(), done.stdout
