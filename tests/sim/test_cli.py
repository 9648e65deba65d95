"""``iro simulate``: report keys, exit status 2 on bad input, nothing written on errors."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from iro_fed.cli import main
from iro_fed.sim.cli import REPORT_KEYS, STEP_S

from .helpers import needs_data


@needs_data
def test_simulate_writes_the_report(tmp_path, capsys):
    out = tmp_path / "r" / "report.json"
    plot = tmp_path / "timeline.png"
    rc = main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--seed", "3", "--hours", "2",
               "--set", "promo_day=0", "--set", "start=2020-03-02 13:00:00", "--out", str(out), "--plot", str(plot)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "request success %" in printed and "carbon kg CO2" in printed
    doc = json.loads(out.read_text())
    for key in REPORT_KEYS:
        assert key in doc
    assert doc["scenario"] == "bank" and doc["solver"] == "best-fit" and doc["seed"] == 3
    assert len(doc["series"]["pending"]) == 120 and len(doc["series"]["carbon_intensity.zone-a"]) == 120
    assert 0.0 <= doc["success_rate_pct"] <= 100.0 and doc["carbon_kg"] > 0
    assert plot.stat().st_size > 10_000


@needs_data
def test_plain_flag_sets_the_baseline_settings(tmp_path):
    out = tmp_path / "report.json"
    assert main(["simulate", "--scenario", "bank", "--solver", "kube-default", "--hours", "1", "--plain", "--out", str(out)]) == 0
    config = json.loads(out.read_text())["config"]
    assert config["deferral"] == "none" and config["consolidate_every"] == 0 and config["make_room"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "atlantis", "--solver", "best-fit"], "unknown scenario 'atlantis'"),
        (["--scenario", "bank", "--solver", "magic"], "unknown solver 'magic'"),
        (["--scenario", "bank", "--solver", "best-fit", "--set", "nope=1"], "--set nope: unknown setting"),
        (["--scenario", "bank", "--solver", "best-fit", "--set", "promo_day=soon"], "--set promo_day: cannot read 'soon'"),
        (["--scenario", "bank", "--solver", "best-fit", "--set", "deferral=always"], "--set deferral: must be carbon or none"),
        (["--scenario", "bank", "--solver", "best-fit", "--hours", "0"], "--hours: must be > 0"),
        (["--scenario", "bank", "--solver", "best-fit", "--set", "carbon_de=XX"], "no carbon series for zone 'XX'"),
        (["--scenario", "bank", "--solver", "best-fit", "--solver-set", "bogus=1"], "unknown setting for solver 'best-fit'"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "report.json"
    assert main(["simulate", *args, "--hours", "1", "--out", str(out)] if "--hours" not in args else
                ["simulate", *args, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@needs_data
def test_start_outside_the_carbon_data_exits_2(tmp_path, capsys):
    out = tmp_path / "report.json"
    args = ["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1", "--set", "start=2031-01-01 00:00:00",
            "--out", str(out)]
    assert main(args) == 2
    assert "asked for a time outside it" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hours", "nan"], "--hours: must be > 0 and finite, at most 8784, got nan"),
        (["--hours", "inf"], "--hours: must be > 0 and finite, at most 8784, got inf"),  # was an OverflowError traceback
        (["--hours", "-2"], "--hours: must be > 0 and finite"),
        (["--seed", "-1"], "--seed: must be between 0 and 2147483647"),
        (["--seed", str(2**31)], "--seed: must be between 0 and 2147483647"),  # was named as the solver's setting
        (["--out", "afile/report.json"], "'afile' is a file"),
        (["--out", "."], "--out: '.' is a folder"),
        (["--plot", "afile/t.png"], "--plot: cannot make folder 'afile': 'afile' is a file"),  # was found after the run
        (["--plot", "."], "--plot: '.' is a folder"),  # was found after the run, leaving '..tmp.png'
        (["--plot", "t.json"], "--plot: cannot write a '.json' image"),
    ],
)
def test_bad_numbers_and_paths_exit_2_before_the_run(tmp_path, monkeypatch, capsys, args, message):
    if "--plot" in args:
        pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "0.5", *args]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_timeline_plot_leaves_no_temporary_file_when_it_cannot_rename(tmp_path):
    pytest.importorskip("matplotlib")
    from iro_fed.sim.cli import timeline_plot

    series = {"t_min": [0, 1], "requests_per_s": [1.0, 2.0], "success_rate_pct": [100.0, None], "running": [1, 2],
              "pending": [0, 0], "powered_nodes": [1, 1], "carbon_g_per_hour": [5.0, 6.0], "carbon_intensity.z": [100, 110]}
    folder = tmp_path / "timeline.png"
    folder.mkdir()  # a folder where the image should go: the rename fails
    with pytest.raises(OSError):
        timeline_plot(series, str(folder), "t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timeline.png"] and not any(folder.iterdir())
    image = tmp_path / "t.svg"  # the suffix picks the format
    timeline_plot(series, str(image), "t")
    assert image.read_text().lstrip().startswith("<?xml") and sorted(p.name for p in tmp_path.iterdir()) == ["t.svg", "timeline.png"]


# --- numbers that sized the run without a bound: exit 2 from the real `iro`, before any work ------


def _iro(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # A timeout only so that a regression fails instead of hanging; a passing run exits at once.
    return subprocess.run([str(Path(sys.executable).parent / "iro"), *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # every step is recorded: 1e9 hours was a MemoryError traceback (hundreds of GiB)
        (["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1e9"],
         "--hours: must be > 0 and finite, at most 8784, got 1e+09"),
        (["feedback-sim", "--hours", "1e9"], "--hours: must be > 0 and finite, at most 8784"),
        # a delay as long as the run: every decision's observation fell after its end (nothing observed)
        (["feedback-sim", "--delay-steps", "100000"], "--delay-steps: must be less than the run's 720 steps of 60 s"),
        (["feedback-sim", "--hours", "1", "--delay-steps", "60"], "--delay-steps: must be less than the run's 60 steps"),
        (["feedback-sim", "--dqn-steps", "1000000000000"], "--dqn-steps: must be between 66 and 100000000"),
    ],
)
def test_unbounded_run_sizes_exit_2_naming_the_flag(tmp_path, argv, message):
    proc = _iro([*argv, "--out", "r.json"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())


@needs_data
def test_feedback_sim_observes_with_no_delay_and_with_the_longest(tmp_path):
    # 0: a decision is observed at the end of its own step; 59 of a 60-step run: still observed
    for delay in ("0", "59"):
        out = tmp_path / f"r{delay}.json"
        assert main(["feedback-sim", "--hours", "1", "--delay-steps", delay, "--out", str(out)]) == 0
        doc = json.loads(out.read_text())
        assert doc["settings"]["delay_steps"] == int(delay) and doc["observations"] > 0


def test_the_commands_step_is_the_scenarios():
    from iro_fed.sim.scenarios import build_scenario

    assert STEP_S == inspect.signature(build_scenario).parameters["step_s"].default
