"""``iro train --emissions-country``: the country whose grid mix codecarbon measures a training with (task n7).

Was: ``iro train`` always measured with codecarbon's tracker on Germany's mix (``DEU``, the default of
:func:`solvers.dqn.train.train`) and had no option for it (``--emissions-country FRA`` was argparse's
"unrecognized arguments"), while a federated site could already say where it is
(``federated.emissions_country``). Now the flag is checked as the site's setting is
(:func:`iro_fed.federated.emissions.check_country`) before anything is built or written, reaches the
tracker, and the checkpoint metadata records it next to ``emissions_kg``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from iro_fed.cli import main

from .sim.helpers import needs_data

pytestmark = needs_data

QUICK = ["train", "--scenario", "bank", "--steps", "1", "--envs", "1", "--eval-episodes", "0"]


class _Tracker:
    """Stands in for codecarbon's OfflineEmissionsTracker: records the country it was made with."""

    made: list[str] = []

    def __init__(self, country_iso_code: str, **kwargs: Any) -> None:
        self.made.append(country_iso_code)

    def start(self) -> None:
        pass

    def stop(self) -> float:
        return 2e-6  # kg


@pytest.fixture
def tracker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    codecarbon = pytest.importorskip("codecarbon")
    made: list[str] = []
    monkeypatch.setattr(_Tracker, "made", made)
    monkeypatch.setattr(codecarbon, "OfflineEmissionsTracker", _Tracker)
    return made


def _metadata(out) -> dict[str, Any]:
    from solvers import checkpoint_metadata_path

    return json.loads(checkpoint_metadata_path(out).read_text())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("XYZ", "--emissions-country: codecarbon has no grid mix for country 'XYZ'"),
        ("FR", "--emissions-country: expected an ISO 3166-1 alpha-3 country code such as DEU or FRA, got 'FR'"),
        ("France", "--emissions-country: expected an ISO 3166-1 alpha-3 country code"),
        ("12A", "--emissions-country: expected an ISO 3166-1 alpha-3 country code"),
        ("", "--emissions-country: expected an ISO 3166-1 alpha-3 country code"),
    ],
)
def test_a_bad_country_exits_2_naming_the_flag_and_makes_nothing(tmp_path, capsys, tracker, value, message) -> None:
    out = tmp_path / "new" / "policies" / "p.pt"
    assert main([*QUICK, "--out", str(out), "--emissions-country", value]) == 2
    assert f"iro train: error: {message}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no --out folder, checkpoint or metadata
    assert tracker == []  # refused before any training


def test_a_country_with_no_emissions_is_refused(tmp_path, capsys) -> None:
    assert main([*QUICK, "--out", str(tmp_path / "new" / "p.pt"), "--no-emissions", "--emissions-country", "FRA"]) == 2
    assert "iro train: error: --emissions-country: nothing is measured with --no-emissions" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_country_reaches_the_tracker_and_the_metadata(tmp_path, capsys, tracker) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "p.pt"
    assert main([*QUICK, "--out", str(out), "--emissions-country", "fra"]) == 0
    assert tracker == ["FRA"]  # was DEU whatever was asked
    meta = _metadata(out)
    assert meta["emissions_country"] == "FRA" and meta["emissions_kg"] == pytest.approx(2e-6)
    assert meta["command"].endswith("--emissions-country FRA")
    assert "(FRA grid mix)" in capsys.readouterr().out


def test_the_default_is_still_deu(tmp_path, tracker) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "p.pt"
    assert main([*QUICK, "--out", str(out)]) == 0
    assert tracker == ["DEU"]
    meta = _metadata(out)
    assert meta["emissions_country"] == "DEU"
    assert "--emissions-country" not in meta["command"]  # the command line as before


def test_no_emissions_records_no_country(tmp_path, tracker) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "p.pt"
    assert main([*QUICK, "--out", str(out), "--no-emissions"]) == 0
    assert tracker == []
    meta = _metadata(out)
    assert meta["emissions_country"] is None and meta["emissions_kg"] is None
