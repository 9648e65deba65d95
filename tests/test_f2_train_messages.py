"""``iro train``: every bad value exits 2 with a message naming its flag, and leaves nothing behind.

Was: ``--scenario-set promo_day=x`` said ``setting 'promo_day': cannot read 'x' as int`` (no flag:
the value was read only inside training), ``--hours 0.001`` said ``hours must cover at least one
step ...``, ``--set top_k=0`` said ``--set: top_k: ...``; and the --out folder was made before the
--set / --scenario-set / --resume checks, so a failed command left it behind.
"""

from __future__ import annotations

import pytest

from iro_fed.cli import main

from .sim.helpers import needs_data

pytestmark = needs_data

QUICK = ["train", "--scenario", "bank", "--steps", "1", "--envs", "1", "--eval-episodes", "0", "--no-emissions"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--scenario-set", "promo_day=x"], "--scenario-set promo_day: cannot read 'x' as int"),
        (["--scenario-set", "queue_cap=0"], "--scenario-set queue_cap: must be >= 1, got 0.0"),
        (["--scenario-set", "nope=1"], "--scenario-set nope: unknown setting for scenario 'bank'"),
        (
            ["--scenario-set", "carbon.DE=/nonexistent.csv"],
            "--scenario-set carbon.DE: /nonexistent.csv: cannot read file",
        ),
        (["--scenario-set", "carbon_de=XX"], "--scenario-set carbon_de: no carbon series for zone 'XX'"),
        (["--hours", "0.001"], "--hours: must cover at least one step of 60 s, got 0.001"),
        (["--set", "top_k=0"], "--set top_k: expected a positive integer, got 0"),
        (["--set", "gamma=nan"], "--set gamma: expected a number in [0, 1], got nan"),
        (["--set", "distributional=true", "--set", "atoms=1"], "--set: atoms/v_min/v_max: need atoms >= 2"),
        (["--set", "nosuch=1"], "--set nosuch: unknown DQN config field"),
        (["--set", "gamma=x"], "--set gamma: cannot read 'x' as float"),
        (["--steps", "0"], "--steps: must be between 1 and"),
        (["--envs", "0"], "--envs: must be between 1 and"),
        (["--hours", "0"], "--hours: must be > 0 and finite"),
        (["--eval-episodes", "-1"], "--eval-episodes: must be between 0 and"),
        (["--seed", "-1"], "--seed: must be between 0 and"),
        (["--resume", "/nonexistent/p.pt"], "--resume: no such file '/nonexistent/p.pt'"),
    ],
)
def test_a_bad_value_names_its_flag_and_makes_nothing(tmp_path, capsys, flags, message) -> None:
    out = tmp_path / "new" / "policies" / "p.pt"
    assert main([*QUICK, "--out", str(out), *flags]) == 2
    assert f"iro train: error: {message}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # the --out folder was made before the flags were read


def test_a_bad_scenario_names_its_flag(tmp_path, capsys) -> None:
    assert main(["train", "--scenario", "nosuch", "--out", str(tmp_path / "new" / "p.pt")]) == 2
    assert "iro train: error: --scenario: unknown scenario 'nosuch'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_out_path_under_a_file_names_out(tmp_path, capsys) -> None:
    (tmp_path / "afile").write_text("x")
    assert main([*QUICK, "--out", str(tmp_path / "afile" / "p.pt")]) == 2
    assert "iro train: error: --out: cannot make folder" in capsys.readouterr().err


def test_an_unreadable_resume_leaves_no_out_folder(tmp_path, capsys) -> None:
    # found only when training loads it, after the --out folder is made: the folder goes again
    pytest.importorskip("torch")
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint")
    out = tmp_path / "new" / "policies" / "p.pt"
    assert main([*QUICK, "--out", str(out), "--resume", str(junk)]) == 2
    assert "iro train: error: --resume: policy" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.pt"]


def test_the_out_folder_is_kept_when_it_was_there(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    (tmp_path / "keep").mkdir()
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint")
    assert main([*QUICK, "--out", str(tmp_path / "keep" / "new" / "p.pt"), "--resume", str(junk)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.pt", "keep"] and not any((tmp_path / "keep").iterdir())


def test_a_good_run_makes_the_out_folder(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "new" / "p.pt"
    # -1: no promotion (day 0's, 11:00-19:00 UTC, is past the 6-hour episodes: exit 2)
    assert main([*QUICK, "--out", str(out), "--scenario-set", "promo_day=-1"]) == 0
    assert out.is_file() and out.with_suffix(".json").is_file()
