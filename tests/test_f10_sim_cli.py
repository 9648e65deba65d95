"""Feedback-sim and simulate inputs (f10): steps too few to learn, empty paths, a usage shift that
shifts nothing. Each exits 2 naming the flag (or --set key) and leaves nothing behind."""

from __future__ import annotations

import pytest

from iro_fed.cli import main
from iro_fed.sim.engine import SimConfigError

from .sim.helpers import needs_data

pytestmark = needs_data


def _run(tmp_path, monkeypatch, argv: list[str]) -> int:
    monkeypatch.chdir(tmp_path)
    return main(argv)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # 65 decisions made 0 gradient updates and published the starting policy as "fine-tuned"
        (["--dqn-registry", "reg", "--dqn-steps", "65"], "--dqn-steps: must be at least 66"),
        (["--dqn-registry", "reg", "--dqn-steps", "1"], "--dqn-steps: must be at least 66"),
        # "" was falsy: the run went on, exited 0 and wrote nothing
        (["--out", ""], "--out: expected a path, got ''"),
        (["--round-request", ""], "--round-request: expected a path, got ''"),
        (["--dqn-registry", ""], "--dqn-registry: expected a path, got ''"),
        (["--dqn-registry", "reg", "--dqn-policy", ""], "--dqn-policy: expected a path, got ''"),
        # a glob in the wrong case matched nothing, and the report claimed the shift
        (
            ["--set", "usage_shift_at_h=0.5", "--set", "usage_shift_class=Ingest-*", "--set", "usage_shift_factor=1.6"],
            "--set usage_shift_class: 'Ingest-*' matches no usage class (known: batch, control-edge-frankfurt",
        ),
        # a shift at or past the end of the run shifts no step
        (
            ["--set", "usage_shift_at_h=1", "--set", "usage_shift_class=ingest-*", "--set", "usage_shift_factor=1.6"],
            "--set usage_shift_at_h: 1 is at or past the run's end (1 h)",
        ),
        (
            ["--set", "usage_shift_at_h=5", "--set", "usage_shift_class=ingest-*", "--set", "usage_shift_factor=1.6"],
            "--set usage_shift_at_h: 5 is at or past the run's end (1 h)",
        ),
    ],
)
def test_feedback_sim_refuses_and_writes_nothing(tmp_path, monkeypatch, capsys, args, message):
    assert _run(tmp_path, monkeypatch, ["feedback-sim", "--hours", "1", "--round-request", "rr", *args]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_feedback_sim_accepts_the_least_steps_that_learn(tmp_path, monkeypatch, capsys):
    """66 passes the check (the run then fails on a later flag, before anything is made)."""
    argv = ["feedback-sim", "--hours", "1", "--dqn-registry", "reg", "--dqn-steps", "66", "--dqn-policy", "nope.pt"]
    assert _run(tmp_path, monkeypatch, argv) == 2
    assert "--dqn-policy: no such file 'nope.pt'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", ""], "--out: expected a path, got ''"),
        (["--plot", ""], "--plot: expected a path, got ''"),
        (["--out", "  "], "--out: expected a path, got '  '"),
    ],
)
def test_simulate_refuses_an_empty_output_path(tmp_path, monkeypatch, capsys, args, message):
    argv = ["simulate", "--scenario", "bank", "--solver", "first-fit", "--hours", "0.5", *args]
    assert _run(tmp_path, monkeypatch, argv) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_simulator_refuses_a_shift_that_shifts_nothing():
    from iro_fed.sim import build_simulator

    shift = {"usage_shift_at_h": "0.5", "usage_shift_factor": "1.6"}
    with pytest.raises(SimConfigError, match=r"setting 'usage_shift_class': 'Ingest-\*' matches no usage class"):
        build_simulator("edge-iot", "first-fit", 0, 1, {**shift, "usage_shift_class": "Ingest-*"})
    with pytest.raises(SimConfigError, match="setting 'usage_shift_at_h': 1 is at or past the run's end"):
        build_simulator(
            "edge-iot", "first-fit", 0, 1, {**shift, "usage_shift_class": "ingest-*", "usage_shift_at_h": "1"}
        )
    build_simulator("edge-iot", "first-fit", 0, 1, {**shift, "usage_shift_class": "ingest-*"})  # accepted
