"""``iro simulate``: report keys, exit status 2 on bad input, nothing written on errors."""

from __future__ import annotations

import json

import pytest

from iro_fed.cli import main
from iro_fed.sim.cli import REPORT_KEYS

from .helpers import needs_data


@needs_data
def test_simulate_writes_the_report(tmp_path, capsys):
    out = tmp_path / "r" / "report.json"
    plot = tmp_path / "timeline.png"
    rc = main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--seed", "3", "--hours", "2",
               "--set", "promo_day=0", "--set", "start=2020-03-02 13:00:00", "--out", str(out), "--plot", str(plot)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "request success %" in printed and "carbon kg CO2" in printed
    doc = json.loads(out.read_text())
    for key in REPORT_KEYS:
        assert key in doc
    assert doc["scenario"] == "bank" and doc["solver"] == "best-fit" and doc["seed"] == 3
    assert len(doc["series"]["pending"]) == 120 and len(doc["series"]["carbon_intensity.zone-a"]) == 120
    assert 0.0 <= doc["success_rate_pct"] <= 100.0 and doc["carbon_kg"] > 0
    assert plot.stat().st_size > 10_000


@needs_data
def test_plain_flag_sets_the_baseline_settings(tmp_path):
    out = tmp_path / "report.json"
    assert main(["simulate", "--scenario", "bank", "--solver", "kube-default", "--hours", "1", "--plain", "--out", str(out)]) == 0
    config = json.loads(out.read_text())["config"]
    assert config["deferral"] == "none" and config["consolidate_every"] == 0 and config["make_room"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "atlantis", "--solver", "best-fit"], "unknown scenario 'atlantis'"),
        (["--scenario", "bank", "--solver", "magic"], "unknown solver 'magic'"),
        (["--scenario", "bank", "--solver", "best-fit", "--set", "nope=1"], "--set nope: unknown setting"),
        (["--scenario", "bank", "--solver", "best-fit", "--set", "promo_day=soon"], "setting 'promo_day': cannot read 'soon'"),
        (["--scenario", "bank", "--solver", "best-fit", "--set", "deferral=always"], "setting 'deferral'"),
        (["--scenario", "bank", "--solver", "best-fit", "--hours", "0"], "--hours: must be > 0"),
        (["--scenario", "bank", "--solver", "best-fit", "--set", "carbon_de=XX"], "no carbon series for zone 'XX'"),
        (["--scenario", "bank", "--solver", "best-fit", "--solver-set", "bogus=1"], "unknown setting for solver 'best-fit'"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "report.json"
    assert main(["simulate", *args, "--hours", "1", "--out", str(out)] if "--hours" not in args else
                ["simulate", *args, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@needs_data
def test_start_outside_the_carbon_data_exits_2(tmp_path, capsys):
    out = tmp_path / "report.json"
    args = ["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1", "--set", "start=2031-01-01 00:00:00",
            "--out", str(out)]
    assert main(args) == 2
    assert "asked for a time outside it" in capsys.readouterr().err
    assert not out.exists()
