"""``iro simulate`` reports and titles (audit h5).

* The report had no solver settings, and ``--solver-set seed=5`` ran the solver with seed 5 while the
  report and the titles said seed 0 (two different runs, one description).
* The bank's ``promo_day`` past the run was silently no promotion (``--hours 48 --set promo_day=5``
  exited 0).
* The timeline of a run without online services drew an empty "success %" axis (-0.04..0.04).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iro_fed.cli import main
from iro_fed.sim import build_simulator, simulate
from iro_fed.sim.engine import SimConfigError
from iro_fed.sim.scenarios import build_scenario

from .sim.helpers import needs_data

EDGE = ["simulate", "--scenario", "edge-iot", "--solver", "random", "--hours", "0.5"]


@needs_data
def test_the_report_has_the_solver_settings_as_run():
    plain = simulate("edge-iot", "random", seed=0, hours=0.5)
    other = simulate("edge-iot", "random", seed=0, hours=0.5, solver_settings={"seed": 5})
    assert plain.report()["solver_settings"] == {"seed": 0, "order": "given"}
    assert other.report()["solver_settings"] == {"seed": 5, "order": "given"}
    assert other.report()["seed"] == 0 and other.solver_seed == 5  # --seed still seeds the scenario
    json.dumps(other.report(), allow_nan=False)


@needs_data
def test_cli_report_and_titles_say_the_solver_seed(tmp_path, capsys, monkeypatch):
    import iro_fed.sim.cli as sim_cli

    titles: list[str] = []
    monkeypatch.setattr(sim_cli, "timeline_plot", lambda series, path, title: titles.append(title))
    out = tmp_path / "r.json"
    assert main([*EDGE, "--solver-set", "seed=5", "--out", str(out), "--plot", str(tmp_path / "t.png")]) == 0
    doc = json.loads(out.read_text())
    assert doc["seed"] == 0 and doc["solver_settings"]["seed"] == 5
    assert "seed 0 (solver seed 5)" in capsys.readouterr().out
    assert titles == ["edge-iot / random / seed 0 (solver seed 5)"]
    assert main([*EDGE, "--seed", "3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["seed"] == 3 and doc["solver_settings"]["seed"] == 3
    printed = capsys.readouterr().out
    assert "seed 3" in printed and "solver seed" not in printed


def test_solver_settings_are_plain_json():
    from iro_fed.sim.engine import jsonable

    assert jsonable({"a": (1, 2.5), "b": float("inf"), "c": Path("x/y"), "d": None, "e": {"f": True}}) == \
        {"a": [1, 2.5], "b": "inf", "c": "x/y", "d": None, "e": {"f": True}}


@needs_data
@pytest.mark.parametrize(("hours", "day", "span"), [(48, 5, "days 0..1"), (48, 2, "days 0..1"), (24, 1, "day 0 only")])
def test_an_explicit_promo_day_outside_the_run_is_an_error(hours, day, span):
    with pytest.raises(SimConfigError, match=rf"setting 'promo_day': day {day} is outside this run \(it has {span}"):
        build_simulator("bank", "best-fit", hours=hours, settings={"promo_day": day})
    with pytest.raises(ValueError, match="promo_day"):  # the library's simulate() too
        simulate("bank", "best-fit", hours=hours, settings={"promo_day": day})


@needs_data
def test_promo_days_inside_the_run_are_taken():
    def messages(hours: float, **settings) -> list[str]:
        return build_simulator("bank", "best-fit", hours=hours, settings=settings).sc.notes.get("messages", [])

    assert messages(48) == [] and messages(48, promo_day=1) == [] and messages(24, promo_day=0) == []
    # from 18:00 a 24 h run reaches the next day: day 1 is in it
    assert messages(24, start="2020-03-02 18:00:00", promo_day=1) == []
    assert messages(24, promo_day=-1) == []


@needs_data
def test_a_window_of_a_run_may_miss_the_promotion():
    # build_scenario (the gym environment, a fine-tune's episodes over an hour of a longer run) allows it
    sc = build_scenario("bank", hours=1, promo_day=1)
    assert "promo_day" in sc.notes["outside_run"] and "messages" not in sc.notes


@needs_data
def test_cli_promo_day_outside_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "48", "--set", "promo_day=5",
                 "--out", str(out)]) == 2
    assert "--set promo_day: day 5 is outside this run (it has days 0..1" in capsys.readouterr().err
    assert not out.exists()


@needs_data
def test_the_default_promo_day_past_a_short_run_is_a_note(tmp_path, capsys):
    sim = build_simulator("bank", "best-fit", hours=1)
    assert sim.sc.notes["messages"] == ["the default promo_day 1 has no effect: day 1 is outside this run (it has day 0 "
                                        "only, counted from the start's UTC date; -1: no promotion)"]
    assert main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1"]) == 0
    err = capsys.readouterr().err
    assert "note: scenario 'bank': the default promo_day 1 has no effect: day 1 is outside this run" in err
    assert err.count("note:") == 1


def _series(requests: list[float | None], success: list[float | None]) -> dict[str, list]:
    n = len(requests)
    return {"t_min": [5.0 * i for i in range(n)], "requests_per_s": requests, "success_rate_pct": success,
            "running": [4] * n, "pending": [1] * n, "powered_nodes": [2] * n, "carbon_g_per_hour": [500.0] * n,
            "carbon_intensity.zone-a": [200.0] * n}


@pytest.mark.parametrize("requests", [[0.0] * 4, [None] * 4, [0.0, None, 0.0, 0.0]])
def test_a_run_without_requests_says_so_and_has_no_success_axis(tmp_path, requests):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from iro_fed.plots import save_figure, timeline_figure

    fig = timeline_figure(_series(requests, [None] * 4), "openb")
    try:
        save_figure(fig, tmp_path / "t.png")
        labels = [ax.get_ylabel() for ax in fig.axes]
        assert "success %" not in labels and len(fig.axes) == 4  # three panels, the emissions twin
        top = next(ax for ax in fig.axes if ax.get_ylabel() == "requests/s")
        assert [t.get_text() for t in top.texts] == ["no online services"]
        assert top.get_title(loc="left") == "openb"
    finally:
        plt.close(fig)


def test_a_run_with_requests_keeps_its_success_axis():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from iro_fed.plots import timeline_figure

    fig = timeline_figure(_series([0.0, 3.0, 0.0, 2.0], [None, 100.0, None, 99.0]), "t")
    try:
        assert "success %" in [ax.get_ylabel() for ax in fig.axes] and len(fig.axes) == 5
        assert not any(ax.texts for ax in fig.axes)
    finally:
        plt.close(fig)
