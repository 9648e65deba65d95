"""``iro simulate --plot``'s timeline (``iro_fed.plots.timeline_figure``): the success % axis
stops near 100 (it ran to 105) and the dashed emissions line has a legend entry (it had none)."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")


def _series(success: list[float | None]) -> dict[str, list]:
    n = len(success)
    return {"t_min": [5.0 * i for i in range(n)], "requests_per_s": [3.0] * n, "success_rate_pct": success,
            "running": [4] * n, "pending": [1] * n, "powered_nodes": [2] * n, "carbon_g_per_hour": [500.0] * n,
            "carbon_intensity.zone-a": [200.0] * n, "carbon_intensity.zone-b": [90.0] * n}


def _render(tmp_path, series):
    import matplotlib.pyplot as plt

    from iro_fed.plots import save_figure, timeline_figure

    fig = timeline_figure(series, "t")
    save_figure(fig, tmp_path / "timeline.png")  # drawn as iro simulate --plot writes it
    assert (tmp_path / "timeline.png").stat().st_size > 0
    by_label = {ax.get_ylabel(): ax for ax in fig.axes}
    plt.close(fig)
    return by_label


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []


@pytest.mark.parametrize(
    ("success", "bottom"),
    [
        ([100.0] * 6, 94.0),  # every request served: the line at 100 shows, the axis stops at 102
        ([100.0, 80.0, None, 100.0, 96.0, 100.0], 78.0),  # the bottom follows the data
        ([0.0, 50.0, 100.0, 100.0], -2.0),  # down to 0: at most a small margin below
    ],
)
def test_the_success_axis_stops_near_100(tmp_path, success, bottom):
    low, high = _render(tmp_path, _series(success))["success %"].get_ylim()
    assert 100.0 < high <= 102.0  # 105.5 before, for a run served in full
    assert bottom <= low < min(v for v in success if v is not None)


def test_the_emissions_line_has_a_legend_entry(tmp_path):
    axes = _render(tmp_path, _series([100.0] * 4))
    legends = {label: _legend(ax) for label, ax in axes.items() if _legend(ax)}
    # one legend for the bottom panel's two axes: the zones' intensity and the dashed emissions
    # (and one for the top panel's, tests/test_f2_timeline_plot.py)
    assert legends == {"success %": ["requests/s", "success % (right axis)"],
                       "count": ["running pods", "pending pods", "powered nodes"],
                       "kg CO2 / h": ["zone-a", "zone-b", "emissions kg CO2/h (right axis)"]}
    emissions = next(line for line in axes["kg CO2 / h"].get_lines() if line.get_label().startswith("emissions"))
    assert emissions.get_linestyle() == "--"


def test_timeline_plot_writes_the_file(tmp_path):
    from iro_fed.plots import timeline_plot

    timeline_plot(_series([100.0, 99.0]), tmp_path / "t.svg", "t")
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml")
