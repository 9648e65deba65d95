"""Toleration semantics for an operator other than Equal / Exists, as v1.Toleration.ToleratesTaint."""

from __future__ import annotations

from iro_fed.model import Taint, Toleration


def test_an_unknown_operator_tolerates_nothing() -> None:
    taint = Taint(key="dedicated", value="gpu", effect="NoSchedule")
    # Was: read as Equal, so it tolerated the taint; upstream's switch falls to `default: false`.
    assert not Toleration(key="dedicated", operator="Lt", value="gpu", effect="NoSchedule").tolerates(taint)
    assert Toleration(key="dedicated", operator="Equal", value="gpu", effect="NoSchedule").tolerates(taint)
    assert Toleration(key="dedicated", operator="", value="gpu").tolerates(taint)  # "" means Equal
    assert Toleration(key="dedicated", operator="Exists").tolerates(taint)
