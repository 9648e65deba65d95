"""Carbon series in Electricity Maps' current export format (columns ``Carbon intensity ...
(direct)`` and ``... (Life cycle)``), beside the 2022 files' ``Carbon Intensity ... (LCA)``."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.sim.signals import SignalFormatError, load_carbon_csv, parse_time

CURRENT = (
    "Datetime (UTC),Country,Zone name,Zone id,Carbon intensity gCO₂eq/kWh (direct),"
    "Carbon intensity gCO₂eq/kWh (Life cycle),Carbon-free energy percentage (CFE%),"
    "Renewable energy percentage (RE%),Data source,Data estimated,Data estimation method\n"
    "2024-01-01 00:00:00,France,France,FR,21.5,40.25,95.1,30.2,entsoe.eu,false,\n"
    "2024-01-01 01:00:00,France,France,FR,23,42,95.0,30.0,entsoe.eu,false,\n"
    "2024-01-01 02:00:00,France,France,FR,19.75,38.5,95.3,31.0,entsoe.eu,true,TIME_SLICER_AVERAGE\n"
)


def test_current_electricity_maps_export_reads_both_columns(tmp_path):
    path = tmp_path / "FR_2024_hourly.csv"
    path.write_text(CURRENT, encoding="utf-8")
    direct = load_carbon_csv(path)
    lca = load_carbon_csv(path, column="lca")
    assert direct.values.tolist() == [21.5, 23.0, 19.75]
    assert lca.values.tolist() == [40.25, 42.0, 38.5]
    assert direct.times[0] == parse_time("2024-01-01 00:00:00") and np.all(np.diff(direct.times) == 3600.0)
    assert direct.window(direct.start, 3, 3600.0).tolist() == [21.5, 23.0, 19.75]


def test_shipped_format_still_reads_and_a_missing_column_is_named(tmp_path):
    old = tmp_path / "old.csv"
    old.write_text("Datetime (UTC),Carbon Intensity gCO₂eq/kWh (direct),Carbon Intensity gCO₂eq/kWh (LCA)\n"
                   "2022-01-01 00:00:00,133.64,175.54\n", encoding="utf-8")
    assert load_carbon_csv(old).values.tolist() == [133.64]
    assert load_carbon_csv(old, column="lca").values.tolist() == [175.54]
    direct_only = tmp_path / "direct_only.csv"
    direct_only.write_text("Datetime (UTC),Carbon intensity gCO₂eq/kWh (direct)\n2024-01-01 00:00:00,5\n", encoding="utf-8")
    with pytest.raises(SignalFormatError, match=r"missing column .*\(LCA\)' or .*\(Life cycle\)'"):
        load_carbon_csv(direct_only, column="lca")
