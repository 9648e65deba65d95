"""``allocation_plot`` takes any numeric x key ("12.5" raised ValueError from int()), and names
the curve and key of one that is not a number."""

from __future__ import annotations

import numpy as np
import pytest


def test_fractional_keys_draw_as_their_numbers(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    from iro_fed.plots import allocation_plot

    xs = [0, 12.5, 25, 37.5, 50, 100, 125.25]
    # Before: ValueError: invalid literal for int() with base 10: '12.5'.
    allocation_plot({"p": {str(x): 0.8 * x for x in reversed(xs)}}, tmp_path / "text.png")
    allocation_plot({"p": {x: 0.8 * x for x in xs}}, tmp_path / "numbers.png")
    assert np.array_equal(image.imread(tmp_path / "text.png"), image.imread(tmp_path / "numbers.png"))


@pytest.mark.parametrize("key", ["abc", "nan", "inf", ""])
def test_a_key_that_is_no_number_is_named(tmp_path, key):
    plt = pytest.importorskip("matplotlib.pyplot")
    from iro_fed.plots import allocation_plot

    open_before = plt.get_fignums()
    with pytest.raises(ValueError, match=rf"curves\['fgd'\]: key '{key}' is not a finite number"):
        allocation_plot({"fgd": {"10": 5.0, key: 7.0}}, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()  # nothing half-written
    assert plt.get_fignums() == open_before  # and no figure left open
