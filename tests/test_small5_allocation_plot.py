"""``allocation_plot`` draws each curve by its numeric x (it failed before the fix)."""

from __future__ import annotations

import numpy as np
import pytest


# Before: points were joined in the dict's order, so a curve whose keys came sorted as text
# ("0", "1", "10", "100", "101", ..., as json.dump(sort_keys=True) writes them) zigzagged.
def test_a_curve_in_text_order_draws_as_in_numeric_order(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    from iro_fed.plots import allocation_plot

    numeric = {str(x): 0.8 * x for x in range(131)}
    as_text = {k: numeric[k] for k in sorted(numeric)}
    assert list(as_text)[:4] == ["0", "1", "10", "100"]
    as_text["55"] = None  # a gap is skipped as before
    numeric["55"] = None
    allocation_plot({"p": numeric}, tmp_path / "numeric.png")
    allocation_plot({"p": as_text}, tmp_path / "text.png")
    assert np.array_equal(image.imread(tmp_path / "text.png"), image.imread(tmp_path / "numeric.png"))
