"""The ``carbon_basis`` scenario setting (``lca`` by default, or ``direct``): every zone of a run,
shipped or the user's own Electricity Maps export, is read on it; ``direct`` where a shipped zone
has no direct values is an error naming the setting (exit 2 on the CLI, nothing written); the
report says which basis was read. Fails on the code before it (no such setting: every run mixed
life-cycle DE/GB/FR with direct ES/NO)."""

from __future__ import annotations

import csv
import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from iro_fed.cli import main
from iro_fed.sim import SimConfigError
from iro_fed.sim.scenarios import build_scenario, split_settings
from iro_fed.sim.signals import data_dir

from .helpers import needs_data

DIRECT = "Carbon Intensity gCO₂eq/kWh (direct)"
LCA = "Carbon Intensity gCO₂eq/kWh (LCA)"
#: The bank on the two zones that have both bases (a constant is read as given on either).
BANK_ES_NO = {"carbon_de": "ES", "carbon_fr": "NO", "carbon_gb": "const:100", "start": "2020-03-02 00:00:00"}


@cache
def _column(zone: str, column: str) -> dict[str, float]:
    with (data_dir() / "carbon" / f"{zone}_2022_hourly.csv").open(encoding="utf-8-sig", newline="") as handle:
        return {row["Datetime (UTC)"]: float(row[column]) for row in csv.DictReader(handle)}


@needs_data
def test_the_setting_picks_the_column_of_every_zone():
    lca = build_scenario("bank", seed=1, hours=2, **BANK_ES_NO)
    direct = build_scenario("bank", seed=1, hours=2, carbon_basis="Direct", **BANK_ES_NO)
    assert lca.params["carbon_basis"] == "lca" and direct.params["carbon_basis"] == "direct"
    h = lca.history
    assert lca.carbon["zone-a"][h] == _column("ES", LCA)["2022-03-02 00:00:00"]
    assert direct.carbon["zone-a"][h] == _column("ES", DIRECT)["2022-03-02 00:00:00"]
    assert direct.carbon["zone-b"][h] == _column("NO", DIRECT)["2022-03-02 00:00:00"]
    assert lca.carbon["burst-london"][h] == direct.carbon["burst-london"][h] == 100.0
    assert split_settings("edge-iot", {"carbon_basis": "direct", "deferral": "none"}) == (
        {"carbon_basis": "direct"}, {"deferral": "none"})


@needs_data
def test_direct_with_life_cycle_only_zones_names_the_setting():
    with pytest.raises(SimConfigError, match=r"scenario 'edge-iot': setting 'carbon_basis': no direct carbon intensity "
                                             r"for DE \(ger_ci.csv\), GB \(gb_ci.csv\), FR \(fr_ci.csv\)"):
        build_scenario("edge-iot", seed=1, hours=1, carbon_basis="direct")
    with pytest.raises(SimConfigError, match=r"scenario 'bank': setting 'carbon_basis': expected 'lca' or 'direct'"):
        build_scenario("bank", seed=1, hours=1, carbon_basis="gross")


def _export(path: Path, direct: float, lca: float) -> Path:
    """An Electricity Maps export (both columns) over the bank's run and its day of history."""
    t0 = np.datetime64("2020-03-01T00:00:00", "s")
    rows = [f"Datetime (UTC),Zone Id,{DIRECT},{LCA}"]
    rows += [f"{str(t0 + np.timedelta64(i, 'h')).replace('T', ' ')},DE,{direct},{lca}" for i in range(48)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@needs_data
def test_a_users_export_follows_the_setting_and_may_stand_in_for_a_zone(tmp_path):
    de = _export(tmp_path / "de.csv", 300.0, 400.0)
    lca = build_scenario("bank", seed=1, hours=2, **{**BANK_ES_NO, "carbon_de": "DE", "carbon.DE": str(de)})
    assert set(lca.carbon["zone-a"].tolist()) == {400.0}
    # With DE given on a direct column, a direct run is possible where the shipped DE is not.
    direct = build_scenario("bank", seed=1, hours=2, carbon_basis="direct",
                            **{**BANK_ES_NO, "carbon_de": "DE", "carbon.DE": str(de)})
    assert set(direct.carbon["zone-a"].tolist()) == {300.0}
    assert direct.carbon["zone-b"][direct.history] == _column("NO", DIRECT)["2022-03-02 00:00:00"]


@needs_data
def test_the_report_says_the_basis_and_a_refused_one_exits_2(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["scenario_params"]["carbon_basis"] == "lca"
    bad = tmp_path / "bad" / "report.json"
    assert main(["simulate", "--scenario", "edge-iot", "--solver", "best-fit", "--hours", "1",
                 "--set", "carbon_basis=direct", "--out", str(bad)]) == 2
    assert "--set carbon_basis: no direct carbon intensity for DE" in capsys.readouterr().err
    assert not bad.exists()
