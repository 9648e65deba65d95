"""Carbon-intensity and latency readers on inputs unlike the shipped files: ISO 8601 times with
offsets, fractions and dates alone; latency rows in any order; empty latency cells as unknown."""

from __future__ import annotations

import csv
import random
import shutil

import numpy as np
import pytest

from iro_fed.objective import evaluate
from iro_fed.problem_io import problem_to_dict
from iro_fed.sim.signals import (
    SignalFormatError,
    data_dir,
    load_carbon_csv,
    load_latency_matrix,
    parse_time,
)

LATENCY = data_dir() / "latency"
MATRIX, MAPPER = LATENCY / "gcp_latency_matrix.csv", LATENCY / "gcp_dc_zonecode_mapper.json"
needs_latency = pytest.mark.skipif(not MATRIX.exists(), reason="shared data not present")

MARCH_2 = 1583107200.0  # 2020-03-02 00:00:00 UTC


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2020-03-02", MARCH_2),  # a daily series
        ("2020-03-02T00:00:00Z", MARCH_2),
        ("2020-03-02T00:00:00.000Z", MARCH_2),
        ("2020-03-02T00:00:00+01:00", MARCH_2 - 3600.0),  # 23:00 UTC the day before
        ("2020-03-02T00:00:00.250-05:30", MARCH_2 + 5.5 * 3600 + 0.25),
        ("2020-03-02 00:00:00", MARCH_2),  # the shipped form, unchanged
        ("2020-3-2 0:00", MARCH_2),  # unpadded, as spreadsheets write it
    ],
)
def test_parse_time_reads_iso_8601_forms(text, epoch):
    assert parse_time(text) == epoch


def test_carbon_csv_reads_dates_offsets_and_fractions(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text(
        "Time,Carbon Intensity\n"
        "2020-03-01,100\n"  # a daily export's date alone
        "2020-03-02T00:00:00Z,110\n"
        "2020-03-02T00:30:00.000Z,120\n"
        "2020-03-02T02:00:00+01:00,130\n"  # 01:00 UTC
    )
    s = load_carbon_csv(path)
    assert s.times.tolist() == [MARCH_2 - 86400.0, MARCH_2, MARCH_2 + 1800.0, MARCH_2 + 3600.0]
    assert s.values.tolist() == [100.0, 110.0, 120.0, 130.0]


def test_daily_electricity_maps_series(tmp_path):
    path = tmp_path / "daily.csv"
    path.write_text("Datetime (UTC),Carbon Intensity gCO₂eq/kWh (direct)\n2022-01-01,200\n2022-01-02,210\n2022-01-03,190\n")
    s = load_carbon_csv(path)
    assert s.times.tolist() == [1640995200.0, 1641081600.0, 1641168000.0]
    assert s.at(1641081600.0 + 3600.0) == 210.0


def test_times_are_checked_for_increase_after_conversion(tmp_path):
    path = tmp_path / "offsets.csv"
    # 01:00+01:00 is 00:00 UTC: before 00:30 UTC though its clock reads later.
    path.write_text("Time,Carbon Intensity\n2020-03-02T00:30:00Z,100\n2020-03-02T01:00:00+01:00,110\n")
    with pytest.raises(SignalFormatError, match=r"line 3: Time: times must increase, '2020-03-02T01:00:00\+01:00'") as info:
        load_carbon_csv(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("number", ["1583107200", "1583107200000", "1583107200.5"])
def test_epoch_numbers_are_refused_with_the_accepted_forms(tmp_path, number):
    path = tmp_path / "epoch.csv"
    path.write_text(f"Time,Carbon Intensity\n2020-03-01 23:00:00,90\n{number},100\n")
    with pytest.raises(SignalFormatError) as info:
        load_carbon_csv(path)
    msg = str(info.value)
    assert msg.startswith(f"{path} line 3: Time: expected a time like 2020-03-02 00:00:00")
    assert "2020-03-02T00:00:00Z" in msg and "+01:00" in msg and "2020-03-02 (midnight UTC)" in msg
    assert f"got {number!r}" in msg and "epoch seconds and milliseconds cannot be told apart" in msg
    with pytest.raises(ValueError, match=r"expected a UTC time like 2020-03-02 00:00:00, or ISO 8601 .*cannot be told apart"):
        parse_time(number)


def test_bad_time_names_file_line_column_and_forms(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("Datetime (UTC),Carbon Intensity gCO₂eq/kWh (direct)\n2022-01-01 00:00:00,1\n02/01/2022 01:00,2\n")
    with pytest.raises(SignalFormatError) as info:
        load_carbon_csv(path)
    msg = str(info.value)
    assert msg.startswith(f"{path} line 3: Datetime (UTC): expected a time like 2020-03-02 00:00:00, or ISO 8601")
    assert msg.endswith("got '02/01/2022 01:00'")


def test_non_utf8_file_is_a_format_error_naming_it(tmp_path):
    path = tmp_path / "cp1252.csv"
    path.write_bytes("Time,Carbon Intensity\n2020-03-02 00:00:00,100\n# März\n".encode("cp1252"))
    with pytest.raises(SignalFormatError, match=r"not UTF-8 text: byte 0xe4") as info:
        load_carbon_csv(path)
    assert str(path) in str(info.value)
    bad = tmp_path / "m.csv"
    bad.write_bytes("origin,A\nA,5\n# é\n".encode("cp1252"))
    (tmp_path / "map.json").write_text('{"r1": "A"}')
    with pytest.raises(SignalFormatError, match=r"m.csv: not UTF-8 text: byte 0xe9"):
        load_latency_matrix(bad, tmp_path / "map.json")


# --- latency matrix ---------------------------------------------------------------------------


def _rows() -> list[list[str]]:
    with MATRIX.open(newline="", encoding="utf-8-sig") as f:
        return list(csv.reader(f))


def _write(path, rows) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)


def _use_matrix(tmp_path, monkeypatch, rows) -> None:
    """A data folder whose latency matrix is ``rows`` (the shipped carbon and mapper beside it)."""
    data = tmp_path / "data"
    (data / "latency").mkdir(parents=True)
    (data / "carbon").symlink_to(data_dir() / "carbon")
    _write(data / "latency" / MATRIX.name, rows)
    shutil.copy(MAPPER, data / "latency" / MAPPER.name)
    monkeypatch.setenv("IRO_DATA_DIR", str(data))


@needs_latency
def test_shuffled_rows_give_the_shipped_matrix(tmp_path):
    shipped = load_latency_matrix()
    header, *body = _rows()
    order = list(range(len(body)))
    random.Random(7).shuffle(order)
    # The two US-MIDA-PJM rows (us-east4, us-east5) fill their regions in the order they come.
    shared = [k for k in order if body[k][0] == "US-MIDA-PJM"]
    assert len(shared) == 2 and order != sorted(order)
    if shared != sorted(shared):
        order[order.index(shared[0])], order[order.index(shared[1])] = shared[1], shared[0]
    _write(tmp_path / "shuffled.csv", [header] + [body[k] for k in order])
    m = load_latency_matrix(tmp_path / "shuffled.csv", MAPPER)
    assert m.regions == shipped.regions and m.zones == shipped.zones
    assert np.array_equal(m.rtt_ms, shipped.rtt_ms)


@needs_latency
def test_rows_named_by_region_in_reverse_order(tmp_path):
    shipped = load_latency_matrix()
    header, *body = _rows()
    # By region name, the shared code's rows may come in either order.
    named = [[region] + row[1:] for region, row in zip(shipped.regions, body, strict=True)]
    _write(tmp_path / "by_region.csv", [header] + named[::-1])
    m = load_latency_matrix(tmp_path / "by_region.csv", MAPPER)
    assert np.array_equal(m.rtt_ms, shipped.rtt_ms)
    assert m.rtt("us-east4", "us-east5") == shipped.rtt("us-east4", "us-east5") == 18.0


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("B,7,5\nA,5,1\nB,7,6\n", r"line 4: origin: duplicate row for 'B' \(already on line 2\)"),
        ("A,5,1\nX,7,5\n", r"line 3: origin: unknown 'X' \(not a zone code or region name of map.json\)"),
        ("B,7,5\n\n", r"line 2: the rows end with no row for origin 'A' \(r1\)"),
        ("B,7,5\nA,5\n", r"line 3: expected 3 columns, got 2"),
        ("B,7,5\nA,,-1\n", r"line 3: column 'B': must be finite and >= 0, got '-1'"),
    ],
)
def test_latency_row_errors_name_the_line(tmp_path, body, match):
    (tmp_path / "map.json").write_text('{"r1": "A", "r2": "B"}')
    (tmp_path / "m.csv").write_text("origin,A,B\n" + body)
    with pytest.raises(SignalFormatError, match=match) as info:
        load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")
    assert str(tmp_path / "m.csv") in str(info.value)


def test_shared_code_rows_beyond_its_regions_are_duplicates(tmp_path):
    (tmp_path / "map.json").write_text('{"r1": "A", "r2": "S", "r3": "S"}')
    (tmp_path / "m.csv").write_text("origin,A,S,S\nS,1,2,3\nA,4,5,6\nS,7,8,9\nS,1,1,1\n")
    with pytest.raises(SignalFormatError, match=r"line 5: origin: duplicate row for 'S' \(already on line 2, 4\)"):
        load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")


def test_empty_cell_reads_as_unknown(tmp_path):
    (tmp_path / "map.json").write_text('{"r1": "A", "r2": "B"}')
    (tmp_path / "m.csv").write_text("origin,A,B\nA,5, \nB,7,5\n")
    m = load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")
    assert np.isnan(m.rtt("r1", "B")) and m.rtt("B", "A") == 7.0
    sub = m.submatrix(["A", "B"], ["B"])
    assert np.isnan(sub[0, 0]) and sub[1, 0] == 5.0


@needs_latency
@pytest.mark.skipif(not (data_dir() / "carbon").exists(), reason="shared data not present")
def test_empty_cell_reaches_the_scenario_problem_as_unknown(tmp_path, monkeypatch):
    """promo-surge's shoppers-de -> zone-fr is europe-west3 -> europe-west9 (DE -> FR): left
    empty, the built problem has no latency for it (not 0 ms), and placing a German shopper's
    pod in France counts as an unknown latency in the objective."""
    from iro_fed.sim.engine import Simulator
    from iro_fed.sim.scenarios import build_scenario

    header, *body = _rows()
    de = next(k for k, r in enumerate(body) if r[0] == "DE")
    body[de][header.index("FR")] = ""
    _use_matrix(tmp_path, monkeypatch, [header] + body)

    sc = build_scenario("promo-surge", seed=0)  # the default hours reach the surge (pods with user regions)
    assert sc.regions == ["shoppers-de", "shoppers-fr"] and [d.name for d in sc.domains] == ["zone-de", "zone-fr"]
    assert np.isnan(sc.latency_ms[0, 1]) and sc.latency_ms[1, 0] == load_latency_matrix().rtt("FR", "DE")
    problem = Simulator(sc).master
    assert problem_to_dict(problem)["latency_ms"]["shoppers-de"] == {"zone-de": 5.0}
    w = next(i for i, wl in enumerate(problem.workloads) if wl.user_region == "shoppers-de")
    fr_node = int(np.flatnonzero(problem.node_domain == 1)[0])
    assignment = np.full(len(problem.workloads), -1)
    assignment[w] = fr_node
    b = evaluate(problem, assignment)
    assert b.latency_unknown == 1 and b.mean_latency_ms is None


@needs_latency
@pytest.mark.skipif(not (data_dir() / "carbon").exists(), reason="shared data not present")
def test_unknown_service_latency_is_a_config_error_not_a_crash(tmp_path, monkeypatch):
    """bank's services time every request from their users' region to the replica's domain: an
    empty cell on such a pair (DE -> FR, DE -> GB, FR -> DE) has no time to give. It stopped the
    run with a ValueError deep in the latency histogram; it is a SimConfigError naming the
    service and the domains, which the command line turns into exit 2."""
    from iro_fed.sim.engine import SimConfigError, Simulator
    from iro_fed.sim.scenarios import build_scenario

    header, *body = _rows()
    for origin, col in (("DE", "FR"), ("DE", "GB"), ("FR", "DE")):
        row = next(r for r in body if r[0] == origin)
        row[header.index(col)] = ""
    _use_matrix(tmp_path, monkeypatch, [header] + body)

    sc = build_scenario("bank", seed=0, hours=1)
    with pytest.raises(SimConfigError, match=r"service '[^']+': the latency from user region .* is unknown"):
        Simulator(sc)
