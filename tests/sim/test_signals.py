"""Carbon and latency loaders on slices of the real files, malformed input, the forecast."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from iro_fed.sim.signals import (
    SignalFormatError,
    carbon_zone,
    codecarbon_country,
    constant,
    data_dir,
    load_carbon_csv,
    load_latency_matrix,
    parse_time,
    persistence_forecast,
)

FIXTURES = Path(__file__).parent / "fixtures"


def test_wait_awhile_format_slice():
    s = load_carbon_csv(FIXTURES / "ger_ci_slice.csv")
    assert s.values.size == 39
    assert s.times[0] == parse_time("2019-12-20 00:00:00")
    assert s.values[0] == pytest.approx(218.29003068829462)
    # 15-minute series: a time inside the second interval takes the second value.
    assert s.at(parse_time("2019-12-20 00:20:00")) == pytest.approx(217.8834341330206)


def test_electricity_maps_format_slice_direct_and_lca():
    direct = load_carbon_csv(FIXTURES / "ES_2022_hourly_slice.csv")
    lca = load_carbon_csv(FIXTURES / "ES_2022_hourly_slice.csv", column="lca")
    assert direct.values[:2].tolist() == [133.64, 139.1]
    assert lca.values[:2].tolist() == [175.54, 181.54]
    assert np.all(np.diff(direct.times) == 3600)


def test_window_resamples_to_the_step():
    s = load_carbon_csv(FIXTURES / "ES_2022_hourly_slice.csv")
    w = s.window(parse_time("2022-01-01 00:00:00"), 120, 60.0)
    assert w[:60].tolist() == [133.64] * 60 and w[60] == 139.1
    with pytest.raises(ValueError, match="covers"):
        s.at(parse_time("2023-01-01 00:00:00"))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("Time,Carbon Intensity\n2020-01-01 00:00:00,12\n2020-01-01 00:15:00,abc\n", r"line 3: Carbon Intensity: expected a number, got 'abc'"),
        ("Time,Carbon Intensity\n2020-01-01 00:00:00,12\n2020-01-01 00:15:00,\n", r"line 3: Carbon Intensity: expected a number"),
        ("Time,Carbon Intensity\n2020-01-01 00:00:00,-4\n", r"line 2: Carbon Intensity: must be finite and >= 0"),
        ("Time,Carbon Intensity\n2020-13-01 00:00:00,4\n", r"line 2: Time: expected a time"),
        ("Time,Carbon Intensity\n2020-01-01 01:00:00,4\n2020-01-01 00:00:00,5\n", r"line 3: Time: times must increase"),
        ("When,What\n2020-01-01 00:00:00,4\n", r"unknown header When, What"),
        ("Time,Carbon Intensity\n", r"no data rows"),
        ("", r"empty file"),
    ],
)
def test_malformed_carbon_rows_name_file_line_and_column(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(SignalFormatError, match=match) as info:
        load_carbon_csv(path)
    assert str(path) in str(info.value)


def test_malformed_electricity_maps_row(tmp_path):
    lines = (FIXTURES / "ES_2022_hourly_slice.csv").read_text().splitlines()
    cells = lines[3].split(",")
    cells[4] = "n/a"
    lines[3] = ",".join(cells)
    path = tmp_path / "es.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SignalFormatError, match=r"line 4: Carbon Intensity gCO₂eq/kWh \(direct\): expected a number, got 'n/a'"):
        load_carbon_csv(path)


def test_missing_file_is_a_format_error(tmp_path):
    with pytest.raises(SignalFormatError, match="cannot read file"):
        load_carbon_csv(tmp_path / "nope.csv")


def test_persistence_forecast_uses_only_the_past():
    day = 4
    actual = np.arange(12, dtype=float)  # steps 0..11, 4 steps a day
    fc = persistence_forecast(actual, now=5, horizon=6, steps_per_day=day)
    # step 5 observed; 6 -> 2, 7 -> 3, 8 -> 4, 9 -> 5, 10 -> 2 (two days back), ...
    assert fc.tolist() == [5.0, 2.0, 3.0, 4.0, 5.0, 2.0]
    assert (persistence_forecast(actual, now=1, horizon=3, steps_per_day=day) == 1.0).all()


def test_constant_and_codecarbon():
    assert constant(42.0).at(1e9) == 42.0
    with pytest.raises(ValueError):
        constant(-1.0)
    de, fr = codecarbon_country("DEU"), codecarbon_country("fra")
    assert de.mean() > 3 * fr.mean() > 0
    with pytest.raises(ValueError, match="no energy mix for country 'XXX'"):
        codecarbon_country("XXX")


@pytest.mark.skipif(not (data_dir() / "latency").exists(), reason="shared data not present")
def test_latency_matrix_real_file():
    m = load_latency_matrix()
    assert len(m.regions) == 34 and m.rtt_ms.shape == (34, 34)
    assert m.rtt("europe-west3", "europe-west3") == 5.0
    # us-east4 and us-east5 share a zone code: both rows exist, addressed by region name.
    assert m.rtt("us-east4", "us-east5") != m.rtt("us-east5", "us-east5")
    assert m.rtt("DE", "FR") == m.rtt("europe-west3", "europe-west9")
    with pytest.raises(KeyError, match="unknown region or zone 'mars-1'"):
        m.index("mars-1")


def test_latency_matrix_malformed(tmp_path):
    (tmp_path / "map.json").write_text('{"r1": "A", "r2": "B"}')
    (tmp_path / "m.csv").write_text("origin,A,B\nA,5,x\nB,7,5\n")
    with pytest.raises(SignalFormatError, match=r"line 2: column 'B': expected a number, got 'x'"):
        load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")
    (tmp_path / "m.csv").write_text("origin,A,C\nA,5,1\nB,7,5\n")
    with pytest.raises(SignalFormatError, match=r"line 1: column 3: unknown 'C'"):
        load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")
    (tmp_path / "map.json").write_text("{nope")
    with pytest.raises(SignalFormatError, match="invalid JSON"):
        load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")


@pytest.mark.skipif(not (data_dir() / "carbon").exists(), reason="shared data not present")
def test_named_zones_load_the_real_series():
    de, no = carbon_zone("DE"), carbon_zone("NO")
    assert 100 < de.mean() < 600 and no.mean() < 100
    with pytest.raises(ValueError, match="no carbon series for zone 'XX'"):
        carbon_zone("XX")
