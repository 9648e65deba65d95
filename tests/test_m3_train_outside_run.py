"""``iro train`` refuses a --scenario-set value that no episode reaches, as ``iro simulate`` does.

Was: ``iro train --scenario bank --scenario-set promo_day=9`` (6-hour episodes from the scenario's
start: day 0 only) trained with no promotion and said nothing. A default past the episodes (the
bank's promo_day 1 in every 6-hour episode) says nothing: short episodes miss it by design.
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
        (["--scenario-set", "promo_day=9"], "--scenario-set promo_day: day 9 is outside this run"),
        # day 0 is in the 6-hour episodes, its 11:00-19:00 UTC promotion is not
        (["--scenario-set", "promo_day=0"], "--scenario-set promo_day: the promotion of day 0"),
        (["--scenario-set", "promo_day=1", "--hours", "30"], "--scenario-set promo_day: the promotion of day 1"),
    ],
)
def test_a_given_setting_outside_every_episode_exits_2_before_training(tmp_path, capsys, flags, message) -> None:
    out = tmp_path / "new" / "p.pt"
    assert main([*QUICK, "--out", str(out), *flags]) == 2
    assert f"iro train: error: {message}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_promotion_day_the_episodes_reach_is_accepted(capsys) -> None:
    from iro_fed.learning import _check_scenario_settings

    _check_scenario_settings("bank", 0, 16.0, {"promo_day": "0"})
    assert capsys.readouterr().err == ""


def test_a_default_outside_the_episodes_says_nothing(capsys) -> None:
    from iro_fed.learning import _check_scenario_settings

    _check_scenario_settings("bank", 0, 6.0, {})
    assert capsys.readouterr().err == ""
