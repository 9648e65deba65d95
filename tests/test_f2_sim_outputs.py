"""``iro simulate`` / ``iro feedback-sim``: every flag is checked before any output folder is made.

Was: ``iro feedback-sim --set bad=1 --dqn-registry DIR`` made DIR (and --round-request's and --out's
folders), then failed on --set; ``iro simulate --set bad=1 --out a/r.json --plot b/p.png`` made a/
and b/, and ``--plot b/p.xyz`` made b/ before refusing the suffix.
"""

from __future__ import annotations

import pytest

from iro_fed.cli import main

from .sim.helpers import needs_data

pytestmark = needs_data

RUN = ["--scenario", "bank", "--hours", "1"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "bad=1"], "--set bad: unknown setting for scenario 'bank'"),
        (["--set", "promo_day=x"], "--set promo_day: cannot read 'x' as int"),
        (["--set", "carbon.DE=/nonexistent.csv"], "--set carbon.DE: /nonexistent.csv: cannot read file"),
        (["--feedback-set", "bad=1"], "--feedback-set bad: unknown setting"),
        (["--delay-steps", "9999"], "--delay-steps: must be less than the run's 60 steps"),
        (["--dqn-steps", "0"], "--dqn-steps: must be at least 66"),
        (["--dqn-policy", "/nonexistent/p.pt"], "--dqn-policy: no such file"),
        (["--seed", "-1"], "--seed: must be between 0 and"),
    ],
)
def test_feedback_sim_makes_no_folder_before_its_flags_are_read(tmp_path, capsys, flags, message) -> None:
    assert (
        main(
            [
                "feedback-sim",
                *RUN,
                "--dqn-registry",
                str(tmp_path / "a" / "registry"),
                "--round-request",
                str(tmp_path / "b" / "requests"),
                "--out",
                str(tmp_path / "c" / "r.json"),
                *flags,
            ]
        )
        == 2
    )
    assert f"iro feedback-sim: error: {message}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["--dqn-registry", "--round-request"])
def test_feedback_sim_folder_under_a_file_names_its_flag(tmp_path, capsys, flag) -> None:
    (tmp_path / "afile").write_text("x")
    assert (
        main(["feedback-sim", *RUN, flag, str(tmp_path / "afile" / "dir"), "--out", str(tmp_path / "c" / "r.json")])
        == 2
    )
    assert f"iro feedback-sim: error: {flag}: cannot make folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_feedback_sim_makes_its_folders_before_the_run(tmp_path, capsys) -> None:
    # the actions write only when drift fires, hours into a run: their folders are there from the start
    assert (
        main(
            [
                "feedback-sim",
                *RUN,
                "--round-request",
                str(tmp_path / "b" / "requests"),
                "--out",
                str(tmp_path / "c" / "r.json"),
            ]
        )
        == 0
    )
    assert (tmp_path / "b" / "requests").is_dir() and (tmp_path / "c" / "r.json").is_file()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "bad=1"], "--set bad: unknown setting for scenario 'bank'"),
        (["--set", "promo_day=x"], "--set promo_day: cannot read 'x' as int"),
        (["--set", "carbon.DE=/nonexistent.csv"], "--set carbon.DE: /nonexistent.csv: cannot read file"),
        (["--solver-set", "bad=1"], "--solver-set bad: unknown setting for solver 'best-fit'"),
    ],
)
def test_simulate_makes_no_folder_before_its_flags_are_read(tmp_path, capsys, flags, message) -> None:
    pytest.importorskip("matplotlib")
    assert (
        main(
            [
                "simulate",
                *RUN,
                "--solver",
                "best-fit",
                "--out",
                str(tmp_path / "a" / "r.json"),
                "--plot",
                str(tmp_path / "b" / "p.png"),
                *flags,
            ]
        )
        == 2
    )
    assert f"iro simulate: error: {message}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_simulate_bad_plot_suffix_makes_no_folder(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    assert main(["simulate", *RUN, "--solver", "best-fit", "--plot", str(tmp_path / "b" / "p.xyz")]) == 2
    assert "iro simulate: error: --plot: cannot write a '.xyz' image" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_simulate_writes_into_new_folders(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    assert (
        main(
            [
                "simulate",
                *RUN,
                "--solver",
                "best-fit",
                "--out",
                str(tmp_path / "a" / "r.json"),
                "--plot",
                str(tmp_path / "b" / "p.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "a" / "r.json").is_file() and (tmp_path / "b" / "p.png").stat().st_size > 0
