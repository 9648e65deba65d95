"""One carbon accounting basis per run: the Let's Wait Awhile series (DE, GB, FR) are life-cycle
values (IPCC SRREN medians per source), so the Electricity Maps series (ES, NO) are read on their
life-cycle column too by default; ``direct`` only where a zone has it. Each test fails on the code
that read ES and NO on the direct column (and had no basis argument)."""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from iro_fed.sim.scenarios.common import CarbonInputs, carbon_window, check_basis, series_for, user_series
from iro_fed.sim.signals import CARBON_BASES, DEFAULT_CARBON_BASIS, ZONE_BASES, carbon_basis, carbon_zone, data_dir

from .helpers import needs_data

DIRECT = "Carbon Intensity gCO₂eq/kWh (direct)"
LCA = "Carbon Intensity gCO₂eq/kWh (LCA)"


@cache
def _column(zone: str, column: str) -> dict[str, float]:
    with (data_dir() / "carbon" / f"{zone}_2022_hourly.csv").open(encoding="utf-8-sig", newline="") as handle:
        return {row["Datetime (UTC)"]: float(row[column]) for row in csv.DictReader(handle)}


def test_the_default_basis_is_life_cycle_and_only_es_no_have_direct():
    assert DEFAULT_CARBON_BASIS == "lca" and set(CARBON_BASES) == {"lca", "direct"}
    assert {z for z, bases in ZONE_BASES.items() if "direct" in bases} == {"ES", "NO"}
    assert all("lca" in bases for bases in ZONE_BASES.values())
    assert carbon_basis(" LCA ") == "lca" and carbon_basis("Direct") == "direct"
    with pytest.raises(ValueError, match=r"expected 'lca' or 'direct' .*got 'gross'"):
        carbon_basis("gross")


@needs_data
@pytest.mark.parametrize("zone", ["ES", "NO"])
def test_named_2022_zones_read_the_life_cycle_column_by_default(zone):
    lca, direct = _column(zone, LCA), _column(zone, DIRECT)
    s = carbon_zone(zone)
    assert s.values.tolist() == list(lca.values())
    assert carbon_zone(zone, basis="direct").values.tolist() == list(direct.values())
    # NO's 2022 mean is 38.1 g/kWh life-cycle against 12.8 direct: ~3x greener on the wrong basis.
    assert s.mean() == pytest.approx(np.mean(list(lca.values())))
    assert s.mean() > carbon_zone(zone, basis="direct").mean() * 1.3


@needs_data
@pytest.mark.parametrize("zone", ["DE", "GB", "FR"])
def test_lets_wait_awhile_zones_have_no_direct_values(zone):
    assert carbon_zone(zone).mean() > 0  # their one column, life-cycle
    with pytest.raises(ValueError, match=rf"no direct carbon intensity for {zone} \(.*\): the Let's Wait Awhile "
                                         r"series are life-cycle values .*direct exists for ES, NO only"):
        carbon_zone(zone, basis="direct")
    with pytest.raises(ValueError, match=rf"setting 'carbon_basis': no direct carbon intensity for {zone}"):
        series_for(zone, "direct")


@needs_data
def test_edge_iot_reads_every_zone_on_one_basis():
    """edge-madrid and edge-oslo (ES, NO) sat next to life-cycle DE/GB/FR on direct values."""
    from iro_fed.sim.scenarios.edge_iot import build

    sc = build(1, 2.0, 60.0, start="2020-03-02 00:00:00")
    h = sc.history
    assert sc.carbon["edge-madrid"][h + 75] == _column("ES", LCA)["2022-03-02 01:00:00"]
    assert sc.carbon["edge-oslo"][h + 59] == _column("NO", LCA)["2022-03-02 00:00:00"]


@needs_data
def test_a_direct_run_reads_the_direct_column_and_refuses_life_cycle_only_zones():
    direct = CarbonInputs({}, "direct")
    w = carbon_window("ES", "2021-03-01 05:00:00", 60, 60, 60.0, direct)
    assert w[60] == _column("ES", DIRECT)["2022-03-01 05:00:00"]
    w = carbon_window("NO", "2021-03-01 05:00:00", 60, 60, 60.0)  # no CarbonInputs: the default basis
    assert w[60] == _column("NO", LCA)["2022-03-01 05:00:00"]
    with pytest.raises(ValueError, match=r"setting 'carbon_basis': no direct carbon intensity for DE"):
        carbon_window("DE", "2020-03-02 00:00:00", 60, 60, 60.0, direct)
    # A constant is read as given on either basis.
    assert carbon_window("const:50", "2020-03-02 00:00:00", 0, 3, 60.0, direct).tolist() == [50.0] * 3


def test_check_basis_names_the_setting_and_lets_user_files_replace_a_zone():
    check_basis(["ES", "NO", "const:10"], "direct")
    check_basis(["DE", "GB", "FR", "ES"], "lca")
    with pytest.raises(ValueError, match=r"^setting 'carbon_basis': no direct carbon intensity for DE \(ger_ci.csv\), "
                                         r"FR \(fr_ci.csv\).*give carbon.DE=FILE, carbon.FR=FILE"):
        check_basis(["ES", "de", "FR"], "direct")
    fake = (Path("de.csv"), None)
    check_basis(["ES", "DE"], "direct", {"DE": fake})  # the user's own DE series replaces the shipped one


def _export(path: Path, start: str, hours: int, direct: float, lca: float, both: bool = True) -> Path:
    t0 = np.datetime64(start.replace(" ", "T"), "s")
    header = "Datetime (UTC),Country,Zone Id," + (f"{DIRECT},{LCA}" if both else DIRECT)
    rows = [header]
    for i in range(hours):
        t = str(t0 + np.timedelta64(i, "h")).replace("T", " ")
        rows.append(f"{t},Spain,ES,{direct}" + (f",{lca}" if both else ""))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_a_users_electricity_maps_export_is_read_on_the_runs_basis(tmp_path):
    both = _export(tmp_path / "es.csv", "2020-03-01 00:00:00", 48, 100.0, 150.0)
    assert set(user_series("ES", both).values.tolist()) == {150.0}  # the default basis
    assert set(user_series("ES", both, "lca").values.tolist()) == {150.0}
    assert set(user_series("ES", both, "direct").values.tolist()) == {100.0}
    direct_only = _export(tmp_path / "es_direct.csv", "2020-03-01 00:00:00", 48, 100.0, 0.0, both=False)
    assert set(user_series("ES", direct_only, "direct").values.tolist()) == {100.0}
    with pytest.raises(ValueError, match=r"missing column .*\(LCA\)'.*\(the lca carbon intensity\)"):
        user_series("ES", direct_only)
    # A one-column file is read as given on either basis (its basis is its maker's).
    one = tmp_path / "one.csv"
    one.write_text("Time,Carbon Intensity\n2020-03-01 00:00:00,42\n2020-03-01 01:00:00,43\n", encoding="utf-8")
    assert user_series("DE", one, "direct").values.tolist() == [42.0, 43.0]
