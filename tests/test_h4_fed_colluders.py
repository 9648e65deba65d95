"""Colluding replies among zero updates are bounded by norm_factor x ||w_global|| (audit h4, item 2).

A lone trained reply among zero updates was bounded by norm_factor x ||w_global||, but two colluders
formed a cohort of their own: the cohort median was their norm, and both were kept (the aggregate moved
by ~5e5 with BASE's ||w_global|| = 3.46).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Message, MetricRecord, RecordDict  # noqa: E402

from iro_fed.federated import wire  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import COHORT_CAPPED, make_strategy  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402
from tests.federated.test_j10_zero_updates import _moved, _play  # noqa: E402
from tests.federated.test_strategies import BASE, _flat  # noqa: E402

SCALE = float(np.sqrt(sum(float(np.sum(v.astype(np.float64) ** 2)) for v in BASE.values())))


def _aggregate(strategy, norms: list[float]) -> dict[str, np.ndarray]:
    """One round of sites replying with updates of these norms; the aggregate."""
    grid = InProcessGrid([{"site": i} for i in range(len(norms))], FedConfig().to_run_config())
    flat, layout = wire.encode(BASE)
    sent = sorted(strategy.configure_train(1, flat, wire.layout_config(layout), grid),
                  key=lambda m: m.metadata.dst_node_id)
    replies = [Message(content=RecordDict({**_flat(_moved(n)), "metrics": MetricRecord({"num-examples": 60})}),
                       reply_to=m) for m, n in zip(sent, norms, strict=True)]
    arrays, _ = strategy.aggregate_train(1, replies)
    assert arrays is not None
    return wire.decode(arrays, layout)


@pytest.mark.parametrize("name", ["fedavg", "fedprox"])
def test_colluders_among_zero_updates_are_dropped(name: str) -> None:
    strategy = make_strategy(name, FedConfig(strategy=name, min_nodes=5))
    agg = _aggregate(strategy, [0.0, 0.0, 0.0, 1e6, 1e6])
    # Before: both kept (a cohort median of 1e6), the aggregate moved by 4e5.
    moved = float(np.sqrt(sum(float(np.sum((agg[k].astype(np.float64) - BASE[k]) ** 2)) for k in BASE)))
    assert moved <= 10 * SCALE, moved
    info = strategy.rounds[1]
    assert len(info["dropped"]) == 2
    assert all(f"> 10 x {COHORT_CAPPED} 3.464" in d["reason"] for d in info["dropped"]), info["dropped"]
    assert len(info["nodes"]) == 3 and info["aggregated"]


def test_kept_updates_are_never_longer_than_norm_factor_times_the_global_norm(caplog) -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=4))
    # Two colluders just inside the bound are kept; the aggregate moves at most that far.
    inside, outside = 9.0 * SCALE, 11.0 * SCALE
    with caplog.at_level(logging.WARNING):
        info = _play(strategy, 1, [0.0, 0.0, inside, outside])
    assert len(info["dropped"]) == 1 and f"> 10 x {COHORT_CAPPED} 3.464" in info["dropped"][0]["reason"]
    assert len(info["nodes"]) == 3
    # Not the lone-reply warning: two updates were trained (one dropped).
    assert "only trained one" not in caplog.text
    assert strategy._accepted_norms == pytest.approx([inside], rel=1e-5)


def test_an_honest_cohort_is_still_checked_by_its_own_median() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=4))
    info = _play(strategy, 1, [0.5, 0.5, 0.6, 100.0])  # median 0.5 < ||w_global||: the cohort's bar
    assert len(info["dropped"]) == 1 and "> 10 x cohort median 0.5" in info["dropped"][0]["reason"]
