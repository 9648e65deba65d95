"""``iro simulate`` / ``iro feedback-sim``: an error about one ``--set`` setting names it as
``--set KEY: why``, like the other ``--set KEY`` errors.

Was: ``setting 'promo_day': cannot read 'x' as int`` (the simulator's own wording, with no flag),
next to ``--set nope: unknown setting ...`` for an unknown key.
"""

from __future__ import annotations

import pytest

from iro_fed.cli import main


@pytest.mark.parametrize("command", ["simulate", "feedback-sim"])
@pytest.mark.parametrize("pair, message", [
    ("promo_day=x", "--set promo_day: cannot read 'x' as int"),
    ("peak_rps=nan", "--set peak_rps: must be a finite number, got nan"),
    ("deferral=bogus", "--set deferral: must be carbon or none, got 'bogus'"),
    ("start=xx", "--set start: expected a UTC time like"),  # was "scenario 'bank': setting 'start': ..."
    ("nope=1", "--set nope: unknown setting for scenario 'bank'"),  # as it was
])
def test_bad_setting_is_named_with_its_flag(tmp_path, capsys, command, pair, message) -> None:
    out = tmp_path / "report.json"
    assert main([command, "--scenario", "bank", "--solver", "best-fit", "--hours", "1", "--set", pair,
                 "--out", str(out)]) == 2
    assert f"iro {command}: error: {message}" in capsys.readouterr().err
    assert not out.exists()


def test_setting_error_names_only_keys_given_on_its_flag() -> None:
    from iro_fed.sim.cli import setting_error
    from iro_fed.sim.engine import SimConfigError

    given = {"promo_day": "x", "carbon.DE": "de.csv"}
    assert str(setting_error(SimConfigError("setting 'promo_day': cannot read 'x' as int"), given)) == (
        "--set promo_day: cannot read 'x' as int")
    assert str(setting_error(SimConfigError("scenario 'bank': setting 'carbon.DE': de.csv: no such file"), given)) == (
        "--set carbon.DE: de.csv: no such file")
    # iro train's --scenario-set: the library's own "--set KEY" names the flag it came from
    assert str(setting_error(SimConfigError("--set nope: unknown setting for scenario 'bank'"), {"nope": "1"},
                             "--scenario-set")) == "--scenario-set nope: unknown setting for scenario 'bank'"
    # a key nobody gave, or a message about no single setting, stays as it is
    assert str(setting_error(SimConfigError("setting 'queue_cap': must be >= 1, got 0"), given)) == (
        "setting 'queue_cap': must be >= 1, got 0")
    assert str(setting_error(SimConfigError("hours must be > 0, got 0"), given)) == "hours must be > 0, got 0"
