"""`iro feedback-sim`'s report carries the solver's settings as run (``solver_settings``), in the shape of
`iro simulate`'s report: its seed is --seed unless --solver-set seed=N gave another."""

from __future__ import annotations

import json


def test_feedback_report_has_the_solver_settings_as_run():
    from iro_fed.sim.feedback import run_feedback_sim

    run = run_feedback_sim("edge-iot", "random", seed=1, hours=1, solver_settings={"seed": 7})
    report = run.report()
    assert report["solver_settings"] == run.result.solver_settings
    assert report["solver_settings"]["seed"] == 7 and report["seed"] == 1
    assert list(report)[:4] == ["scenario", "solver", "seed", "solver_settings"]


def test_feedback_report_solver_settings_default_to_the_run_seed():
    from iro_fed.sim.feedback import run_feedback_sim

    report = run_feedback_sim("edge-iot", "random", seed=3, hours=1).report()
    assert report["solver_settings"]["seed"] == 3


def test_feedback_sim_command_takes_solver_set_and_writes_the_settings(tmp_path, capsys):
    from iro_fed.cli import main
    from iro_fed.sim.cli import FEEDBACK_KEYS

    out = tmp_path / "report.json"
    rc = main(["feedback-sim", "--solver", "random", "--solver-set", "seed=7", "--seed", "2", "--hours", "1",
               "--out", str(out)])
    assert rc == 0
    assert "seed 2 (solver seed 7)" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert list(doc) == [*FEEDBACK_KEYS, "series"]
    assert doc["seed"] == 2 and doc["solver_settings"]["seed"] == 7


def test_feedback_sim_command_refuses_an_unknown_solver_setting(tmp_path, capsys):
    from iro_fed.cli import main

    out = tmp_path / "report.json"
    rc = main(["feedback-sim", "--solver", "random", "--solver-set", "sede=7", "--hours", "1", "--out", str(out)])
    assert rc == 2
    assert "--solver-set" in capsys.readouterr().err and not out.exists()
