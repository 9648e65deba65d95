"""``iro_fed.plots`` timeline: a figure whose drawing fails is closed, and the top panel (traffic
and success on two axes) has a legend.

Was: a series missing from the run (or unreadable) raised inside ``timeline_figure`` after the
figure was made, and nobody closed it (pyplot kept it for the life of the process); the top
panel's two lines, in two colours on two axes, had no legend.
"""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")


def _series(success: list[float | None]) -> dict[str, list]:
    n = len(success)
    return {
        "t_min": [5.0 * i for i in range(n)],
        "requests_per_s": [3.0] * n,
        "success_rate_pct": success,
        "running": [4] * n,
        "pending": [1] * n,
        "powered_nodes": [2] * n,
        "carbon_g_per_hour": [500.0] * n,
        "carbon_intensity.zone-a": [200.0] * n,
    }


def _top_legend(series: dict[str, list]) -> list[str]:
    import matplotlib.pyplot as plt

    from iro_fed.plots import timeline_figure

    fig = timeline_figure(series, "t")
    try:
        top = [ax for ax in fig.axes if ax.get_ylabel() in ("requests/s", "success %")]
        legends = [ax.get_legend() for ax in top if ax.get_legend() is not None]
        assert len(legends) <= 1
        return [t.get_text() for t in legends[0].get_texts()] if legends else []
    finally:
        plt.close(fig)


@pytest.mark.parametrize("missing", ["running", "carbon_g_per_hour", "success_rate_pct"])
def test_a_figure_whose_drawing_fails_is_closed(tmp_path, missing) -> None:
    import matplotlib.pyplot as plt

    from iro_fed.plots import timeline_figure, timeline_plot

    series = _series([100.0] * 4)
    del series[missing]
    before = plt.get_fignums()
    with pytest.raises(KeyError, match=missing):
        timeline_figure(series, "t")
    with pytest.raises(KeyError, match=missing):
        timeline_plot(series, tmp_path / "t.png", "t")
    assert plt.get_fignums() == before  # one more open figure per call before
    assert list(tmp_path.iterdir()) == []


def test_a_figure_whose_values_cannot_be_read_is_closed() -> None:
    import matplotlib.pyplot as plt

    from iro_fed.plots import timeline_figure

    series = _series([100.0] * 4)
    series["pending"] = ["x"] * 4
    before = plt.get_fignums()
    with pytest.raises(ValueError):
        timeline_figure(series, "t")
    assert plt.get_fignums() == before


def test_the_top_panel_has_a_legend_of_its_two_series() -> None:
    assert _top_legend(_series([100.0, 99.0, None, 100.0])) == ["requests/s", "success % (right axis)"]


def test_no_top_legend_when_only_one_series_has_data() -> None:
    # a run without requests has no success % (all None): one line, which the axis label names
    assert _top_legend(_series([None] * 4)) == []


def test_the_top_legend_sits_above_the_panel(tmp_path) -> None:
    # inside the panel any corner hid some of the traffic or the success line near 100
    import matplotlib.pyplot as plt

    from iro_fed.plots import save_figure, timeline_figure

    fig = timeline_figure(_series([100.0] * 6), "a title")
    try:
        save_figure(fig, tmp_path / "t.png")  # drawn, so the legend has its place
        ax = next(ax for ax in fig.axes if ax.get_ylabel() == "success %")
        legend = ax.get_legend().get_window_extent()
        panel = ax.get_window_extent()
        assert legend.y0 >= panel.y1 - 1
        assert not legend.overlaps(ax.title.get_window_extent())
    finally:
        plt.close(fig)
