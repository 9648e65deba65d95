"""``iro simulate --set carbon.ZONE=FILE``: a user's own carbon series replaces the shipped one of
that zone; bad input exits 2 naming the setting and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from iro_fed.cli import main
from iro_fed.sim import simulate
from iro_fed.sim.signals import _iso, carbon_zone
from tests.sim.helpers import needs_data

#: bank's default start is 2020-03-02 00:00 UTC; a run reads a day of history before it.
FROM, TO = "2020-03-01 00:00:00", "2020-03-03 00:00:00"


def write_series(path: Path, times: np.ndarray, values: np.ndarray) -> Path:
    rows = "".join(f"{_iso(float(t))},{float(v)!r}\n" for t, v in zip(times, values, strict=True))
    path.write_text("Time,Carbon Intensity\n" + rows, encoding="utf-8")
    return path


def hourly_constant(path: Path, value: float, start: str = FROM, hours: int = 48) -> Path:
    t0 = np.datetime64(start.replace(" ", "T"), "s").astype(np.int64)
    return write_series(path, t0 + 3600.0 * np.arange(hours), np.full(hours, value))


def doubled(tmp_path: Path, zone: str) -> Path:
    """The shipped series of ``zone`` over FROM .. TO with every value doubled."""
    shipped = carbon_zone(zone)
    lo = np.datetime64(FROM.replace(" ", "T"), "s").astype(np.int64)
    hi = np.datetime64(TO.replace(" ", "T"), "s").astype(np.int64)
    keep = (shipped.times >= lo) & (shipped.times < hi)
    return write_series(tmp_path / f"{zone.lower()}_x2.csv", shipped.times[keep], 2.0 * shipped.values[keep])


def run(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    # No carbon term and no deferral: the placements do not depend on the intensities, so the
    # carbon integral scales with them exactly.
    assert main(["simulate", "--scenario", "bank", "--solver", "greedy-objective", "--hours", "2", "--set", "w_carbon=0",
                 "--set", "deferral=none", "--out", str(out), *extra]) == 0
    return json.loads(out.read_text())


@needs_data
def test_doubled_series_double_the_carbon(tmp_path: Path) -> None:
    base = run(tmp_path, "shipped")
    files = {zone: doubled(tmp_path, zone) for zone in ("DE", "FR", "GB")}
    mine = run(tmp_path, "mine", *[a for zone, f in files.items() for a in ("--set", f"carbon.{zone}={f}")])
    assert base["carbon_kg"] > 0
    assert mine["carbon_kg"] == pytest.approx(2.0 * base["carbon_kg"], rel=1e-9)
    for domain in ("zone-a", "zone-b", "burst-london"):
        key = f"carbon_intensity.{domain}"
        assert mine["series"][key] == pytest.approx([2.0 * v for v in base["series"][key]], abs=0.011)
    # Energy and cost are the same run's: only the intensities changed.
    assert mine["energy_kwh"] == pytest.approx(base["energy_kwh"], rel=1e-12)
    assert mine["cost"] == pytest.approx(base["cost"], rel=1e-12)


@needs_data
def test_zone_file_replaces_every_domain_on_that_zone_only(tmp_path: Path) -> None:
    # edge-iot has two domains on the DE grid (edge-frankfurt, cloud-frankfurt).
    zero = hourly_constant(tmp_path / "de0.csv", 0.0)
    base = simulate("edge-iot", "best-fit", hours=1, settings={"deferral": "none"})
    mine = simulate("edge-iot", "best-fit", hours=1, settings={"deferral": "none", "carbon.de": str(zero)})
    for domain in ("edge-frankfurt", "cloud-frankfurt"):
        assert set(mine.series[f"carbon_intensity.{domain}"]) == {0.0}
        assert min(base.series[f"carbon_intensity.{domain}"]) > 0
    for domain in ("edge-madrid", "edge-oslo", "edge-london", "cloud-paris"):
        assert mine.series[f"carbon_intensity.{domain}"] == base.series[f"carbon_intensity.{domain}"]
    assert mine.totals["carbon_kg"] < base.totals["carbon_kg"]
    # The report says which data it came from: the parameters as run and the user's files.
    assert mine.report()["scenario_params"]["carbon_files"] == {"DE": str(zero)}
    assert "carbon_files" not in base.report()["scenario_params"]
    assert base.report()["scenario_params"]["start"] == mine.report()["scenario_params"]["start"]


@needs_data
def test_user_series_is_read_at_its_own_timestamps(tmp_path: Path) -> None:
    # A 2023 run: the shipped DE/FR/GB files end in January 2021; the user's own series cover it.
    files = {z: hourly_constant(tmp_path / f"{z}.csv", v, start="2023-06-30 00:00:00") for z, v in
             (("DE", 300.0), ("FR", 50.0), ("GB", 200.0))}
    args = [a for z, f in files.items() for a in ("--set", f"carbon.{z}={f}")]
    doc = run(tmp_path, "y2023", "--set", "start=2023-07-01 00:00:00", *args)
    assert set(doc["series"]["carbon_intensity.zone-a"]) == {300.0}
    assert set(doc["series"]["carbon_intensity.zone-b"]) == {50.0}
    assert set(doc["series"]["carbon_intensity.burst-london"]) == {200.0}


def bad_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad.csv"
    path.write_text("Time,Carbon Intensity\n2020-03-01 00:00:00,120\n2020-03-01 01:00:00,abc\n", encoding="utf-8")
    return path


@needs_data
@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        # A zone the scenario does not read: the ones it does are listed.
        (lambda t: hourly_constant(t / "x.csv", 1.0), ("--set", "carbon.XX={}"),
         "--set carbon.XX: scenario 'bank' reads no carbon zone 'XX' (its zones: DE, FR, GB)"),
        # carbon_de=const:120 takes zone-a off the DE series: DE is no longer read.
        (lambda t: hourly_constant(t / "x.csv", 1.0), ("--set", "carbon_de=const:120", "--set", "carbon.DE={}"),
         "--set carbon.DE: scenario 'bank' reads no carbon zone 'DE' (its zones: FR, GB)"),
        (lambda t: t / "missing.csv", ("--set", "carbon.DE={}"), "--set carbon.DE: "),
        (lambda t: t, ("--set", "carbon.DE={}"), "--set carbon.DE: "),  # a folder
        (bad_file, ("--set", "carbon.DE={}"), "--set carbon.DE: "),
        (lambda t: t / "x.csv", ("--set", "carbon.DE="), "--set carbon.DE: expected the path of a carbon-intensity CSV"),
        # Ends before the run does (2 h from 2020-03-02 00:00): not wrapped, not held.
        (lambda t: hourly_constant(t / "short.csv", 1.0, hours=25), ("--set", "carbon.DE={}"),
         "--set carbon.DE: "),
        # Starts at the run's start: the day of history before it is missing.
        (lambda t: hourly_constant(t / "late.csv", 1.0, start="2020-03-02 00:00:00"), ("--set", "carbon.DE={}"),
         "24 h of history before the start"),
    ],
    ids=["unknown-zone", "zone-not-read", "missing", "folder", "malformed", "empty", "too-short", "no-history"],
)
def test_bad_carbon_file_exits_2_and_writes_nothing(tmp_path: Path, capsys, make, extra, message) -> None:
    path = make(tmp_path)
    out = tmp_path / "out" / "report.json"
    args = [a.format(path) for a in extra]
    assert main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "2", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not out.exists()
    if "reads no carbon zone" not in message and "expected the path" not in message:
        assert str(path) in err  # the file is named, with the reader's or the coverage's reason


@needs_data
def test_short_series_names_its_coverage_and_the_run(tmp_path: Path, capsys) -> None:
    short = hourly_constant(tmp_path / "short.csv", 1.0, hours=25)  # to 2020-03-02 01:00
    assert main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "2",
                 "--set", f"carbon.DE={short}"]) == 2
    err = capsys.readouterr().err
    assert "covers 2020-03-01 00:00:00 .. 2020-03-02 01:00:00" in err
    assert "the run needs 2020-03-01 00:00:00 .. 2020-03-02 02:00:00" in err


@needs_data
def test_malformed_file_gives_the_readers_line(tmp_path: Path, capsys) -> None:
    path = bad_file(tmp_path)
    assert main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1",
                 "--set", f"carbon.DE={path}"]) == 2
    assert f"--set carbon.DE: {path} line 3: Carbon Intensity: expected a number, got 'abc'" in capsys.readouterr().err


@needs_data
@pytest.mark.parametrize("name", ["bank", "edge-iot", "promo-surge", "openb"])
def test_declared_zones_are_the_ones_the_domains_read(name: str) -> None:
    # carbon_zones is what --set carbon.ZONE is checked against: it must match the built domains.
    from iro_fed.sim.scenarios import SCENARIOS, build_scenario

    params = {"nodes": 6} if name == "openb" else {}
    sc = build_scenario(name, hours=1, **params)
    assert SCENARIOS[name].carbon_zones(params) == list(dict.fromkeys(d.carbon_zone for d in sc.domains))
