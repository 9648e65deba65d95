"""An integer too large for a float is refused by name, as any other non-finite amount (it
raised OverflowError from math.isfinite)."""

from __future__ import annotations

import pytest

from iro_fed.feedback import FeedbackLoop


def test_a_huge_integer_capacity_or_time_is_a_named_value_error() -> None:
    loop = FeedbackLoop()
    with pytest.raises(ValueError, match="capacity"):
        loop.record_decision("a", "n", 1.0, 10**400)
    with pytest.raises(ValueError, match="at"):
        loop.record_decision("a", "n", 1.0, 4.0, at=10**400)
    loop.record_decision("a", "n", 1.0, 4.0)
    with pytest.raises(ValueError, match="observed"):
        loop.observe("n", 10**400, requests={"default": 1.0}, capacity=4.0)
