"""A zero update (a site that took no gradient step: fewer transitions than learning-starts, one that just
joined) is in no norm median (audit j10, item 1).

It was the cohort's lower median of [0, 0, 0.5] and "the previous round's median" of a lone site, after
which every site that trained was dropped as a norm outlier for good (`iro fed local --nodes 1 --rounds 4
--local-steps 60`: rounds 2-4 "0 site(s), 1 dropped", "update norm 0.7647 > 10 x previous round's median 0").

A lone trained reply beside zero updates (audit j12): with no cohort and no previous median it was never
checked, and its norm became the previous round's median (round-1 norms [0, 0, 0, 1000]: 1000 kept, the bar of
later rounds 10 x 1000). A lone reply is now bounded by norm_factor x ||w_global|| (BASE: sqrt(12) = 3.464).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Message, MetricRecord, RecordDict  # noqa: E402

from iro_fed.federated import wire  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import make_strategy, validate_replies  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402
from tests.federated.test_strategies import BASE, _flat  # noqa: E402


def _moved(norm: float) -> dict[str, np.ndarray]:
    """BASE moved by an update of exactly ``norm`` (float32 rounding aside), all in one entry."""
    out = {k: v.copy() for k, v in BASE.items()}
    out["layer.bias"][0] += np.float32(norm)
    return out


def _play(strategy, server_round: int, norms: list[float]) -> dict:
    """One round of len(norms) sites replying with updates of these norms; the round's record."""
    grid = InProcessGrid([{"site": i} for i in range(len(norms))], FedConfig().to_run_config())
    flat, layout = wire.encode(BASE)
    sent = sorted(strategy.configure_train(server_round, flat, wire.layout_config(layout), grid),
                  key=lambda m: m.metadata.dst_node_id)
    replies = [Message(content=RecordDict({**_flat(_moved(n)), "metrics": MetricRecord({"num-examples": 60})}),
                       reply_to=m) for m, n in zip(sent, norms, strict=True)]
    strategy.aggregate_train(server_round, replies)
    return strategy.rounds[server_round]


def test_zero_updates_do_not_set_the_cohort_median() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=3))
    info = _play(strategy, 1, [0.0, 0.0, 0.5])
    # the lower median of [0, 0, 0.5] was 0: the one site that trained was dropped
    assert info["dropped"] == [] and len(info["nodes"]) == 3 and info["aggregated"]


def test_a_far_update_is_still_dropped_beside_zero_updates() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=4))
    info = _play(strategy, 1, [0.0, 0.0, 0.5, 100.0])  # the median of the non-zero norms is 0.5
    assert len(info["dropped"]) == 1 and "> 10 x cohort median 0.5" in info["dropped"][0]["reason"]
    assert len(info["nodes"]) == 3


def test_validate_replies_leaves_zero_norms_out_of_the_previous_median() -> None:
    grid = InProcessGrid([{"site": 0}], FedConfig().to_run_config())
    strategy = make_strategy("fedavg", FedConfig(min_nodes=1))
    flat, layout = wire.encode(BASE)
    sent = list(strategy.configure_train(1, flat, wire.layout_config(layout), grid))
    reply = Message(content=RecordDict({**_flat(_moved(0.5)), "metrics": MetricRecord({"num-examples": 5})}),
                    reply_to=sent[0])
    reference = {"weights": flat["weights"].numpy()}
    kept, dropped = validate_replies([reply], reference, 10.0, layout, previous_norms=[0.0, 0.0])
    assert len(kept) == 1 and dropped == []
    kept, dropped = validate_replies([reply], reference, 10.0, layout, previous_norms=[0.0, 0.01])
    assert kept == [] and "previous round's median 0.01" in dropped[0]["reason"]  # the test still works


def test_a_lone_site_that_trains_after_a_zero_round_is_kept_for_good() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=1))
    # round 1: no gradient step yet (60 local steps < learning-starts); then it trains
    infos = [_play(strategy, r, [n]) for r, n in enumerate([0.0, 0.7647, 0.8, 0.0, 0.9], start=1)]
    assert [len(i["nodes"]) for i in infos] == [1, 1, 1, 1, 1]  # was [1, 0, 0, 1, 0]
    assert all(i["dropped"] == [] for i in infos)
    assert strategy._accepted_norms == pytest.approx([0.9], rel=1e-6)
    # the previous round's median still catches a far update of a lone site
    info = _play(strategy, 6, [50.0])
    assert len(info["dropped"]) == 1 and "previous round's median 0.9" in info["dropped"][0]["reason"]


def test_a_lone_far_update_beside_zero_updates_is_bounded_by_the_global_norm() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=4))
    info = _play(strategy, 1, [0.0, 0.0, 0.0, 1000.0])
    # was kept, unchecked, and stored as the bar of later rounds: _accepted_norms [1000.0]
    assert len(info["dropped"]) == 1 and "> 10 x global weights' norm 3.464" in info["dropped"][0]["reason"]
    assert len(info["nodes"]) == 3 and strategy._accepted_norms == []
    # later rounds are unaffected: a cohort round, then a lone far update against that round's median
    info = _play(strategy, 2, [0.5, 0.5, 0.5, 5000.0])
    assert [d["reason"] for d in info["dropped"]] == ["update norm 5000 > 10 x cohort median 0.5"]
    info = _play(strategy, 3, [0.0, 0.0, 0.0, 20.0])
    assert [d["reason"] for d in info["dropped"]] == ["update norm 20 > 10 x previous round's median 0.5"]


def test_a_normal_lone_update_beside_zero_updates_is_kept_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    strategy = make_strategy("fedprox", FedConfig(strategy="fedprox", min_nodes=4))
    with caplog.at_level(logging.WARNING, logger="flwr"):
        info = _play(strategy, 1, [0.0, 0.0, 0.0, 0.5])  # round 1 with one real site must still train
    assert info["dropped"] == [] and len(info["nodes"]) == 4 and info["aggregated"]
    lone = info["nodes"][3]
    assert f"the update of node {lone} is the round's only trained one" in caplog.text
    assert strategy._accepted_norms == pytest.approx([0.5], rel=1e-6)


def test_an_unchecked_lone_norm_cannot_raise_the_bar_of_later_rounds() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=4))
    _play(strategy, 1, [0.0, 0.0, 0.0, 30.0])  # under 10 x 3.464: kept, unchecked
    info = _play(strategy, 2, [0.0, 0.0, 0.0, 100.0])
    # the previous median (30) was above ||w_global||: 10 x 3.464 bounds it, not 10 x 30 (kept on HEAD)
    assert len(info["dropped"]) == 1 and "> 10 x global weights' norm 3.464" in info["dropped"][0]["reason"]
    # a previous median at or below ||w_global|| is the bar as before
    grid = InProcessGrid([{"site": 0}], FedConfig().to_run_config())
    flat, layout = wire.encode(BASE)
    sent = list(make_strategy("fedavg", FedConfig(min_nodes=1)).configure_train(1, flat, wire.layout_config(layout),
                                                                                grid))
    reply = Message(content=RecordDict({**_flat(_moved(3.0)), "metrics": MetricRecord({"num-examples": 5})}),
                    reply_to=sent[0])
    reference = {"weights": flat["weights"].numpy()}
    assert len(validate_replies([reply], reference, 10.0, layout, previous_norms=[0.5])[0]) == 1
    kept, dropped = validate_replies([reply], reference, 10.0, layout, previous_norms=[0.2])
    assert kept == [] and "previous round's median 0.2" in dropped[0]["reason"]
