"""``iro simulate --plot``'s timeline: a point with no neighbour is drawn (it failed before the fix)."""

from __future__ import annotations

import numpy as np
import pytest


def _series(t_min: list[float], success: list[float | None]) -> dict[str, list]:
    n = len(t_min)
    return {"t_min": t_min, "requests_per_s": [3.0] * n, "success_rate_pct": success, "running": [4] * n,
            "pending": [1] * n, "powered_nodes": [2] * n, "carbon_g_per_hour": [500.0] * n, "carbon_intensity.z": [200.0] * n}


def _green_pixels(img: np.ndarray) -> int:
    # success % is the one series in tab:green (#2ca02c), and its panel has no legend
    green = np.array([0x2C, 0xA0, 0x2C]) / 255
    return int((np.abs(img[..., :3] - green).max(axis=-1) < 0.1).sum())


# Before: a run of one step drew a line of zero length per series, which shows nothing: the
# image was the same as one of two steps at the same time (also zero-length lines, same axes).
def test_a_single_step_run_draws_its_points(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    from iro_fed.sim.cli import timeline_plot

    timeline_plot(_series([0.0], [99.0]), str(tmp_path / "one.png"), "t")
    timeline_plot(_series([0.0, 0.0], [99.0, 99.0]), str(tmp_path / "blank.png"), "t")  # nothing visible drawn
    one = image.imread(tmp_path / "one.png")
    blank = image.imread(tmp_path / "blank.png")
    assert one.shape == blank.shape
    assert _green_pixels(blank) == 0
    assert _green_pixels(one) > 20  # the success % marker
    assert (np.abs(one - blank).max(axis=-1) > 0.1).sum() > 100  # every series' marker


# A value alone between gaps (success % is None while no request came) drew nothing either.
def test_a_value_between_gaps_is_drawn(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    from iro_fed.sim.cli import timeline_plot

    timeline_plot(_series([0.0, 1.0, 2.0], [None, 99.0, None]), str(tmp_path / "alone.png"), "t")
    assert _green_pixels(image.imread(tmp_path / "alone.png")) > 20
