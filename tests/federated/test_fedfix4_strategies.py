"""A node asked to train that never replies, and per-node memory of nodes that left (review findings).

Flower's Grid.send_and_receive returns only the replies that came within its timeout: a node that
hangs is simply missing from ``aggregate_train``'s replies. Flower's own message types and
strategies on the in-process grid, aggregated for real (no mocks).
"""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402

from iro_fed.federated import strategies as strategies_module  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import make_strategy  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402
from tests.federated.test_fedfix3_strategies import SILENT, Answer, _honest_or, _play, _rounds  # noqa: E402
from tests.federated.test_strategies import BASE, _record  # noqa: E402


def _carbon_aware() -> object:
    return make_strategy("fedavg", FedConfig(min_nodes=2, carbon_aware=True, carbon_min_fraction=0.5), carbon_fn=None)


# --- a node that never replies is tried last ------------------------------------------------------------


def test_a_node_asked_to_train_that_never_replies_is_tried_last() -> None:
    strategy = _carbon_aware()
    asked = _rounds(strategy, 4, 4, _honest_or(lambda r, node: SILENT if node == 4 else None))
    # node 4 never had a valid reply: its intensity is unknown, which counts as low, so it was asked
    # every round and hung every round (was: [1, 2, 4] in rounds 3 and 4 too); two missing replies
    # in a row now put it last, as two dropped ones do
    assert asked == {1: [1, 2, 3, 4], 2: [1, 2, 4], 3: [1, 2], 4: [1, 2]}
    assert [strategy.rounds[r]["no_reply"] for r in (1, 2, 3)] == [[4], [4], []]
    assert strategy.rounds[3]["skipped_failing"] == [4] and strategy.rounds[3]["skipped_high_carbon"] == [3]
    # a node not asked (skipped for its carbon, or tried last) is not a missing reply
    assert strategy._failures == {4: strategies_module.DEMOTE_AFTER}


def test_a_silent_node_is_retried_after_five_rounds_and_a_valid_reply_restores_it() -> None:
    strategy = _carbon_aware()

    def answer(server_round: int, node: int) -> Answer | None:
        return SILENT if node == 4 and server_round <= 2 else None  # repaired from round 3 on

    asked = _rounds(strategy, 4, 9, _honest_or(answer))
    # skipped in rounds 3..7 (RETRY_AFTER), asked in round 8; it replies (150 gCO2/kWh): no record left,
    # and at or below the median 175 of 100, 150, 200, 300 it trains in round 9
    assert {r: 4 in nodes for r, nodes in asked.items()} == {1: True, 2: True, 3: False, 4: False, 5: False,
                                                              6: False, 7: False, 8: True, 9: True}
    assert strategy.rounds[8]["no_reply"] == [] and strategy._failures == {} and strategy._benched == {}


def test_aggregate_train_without_configure_train_counts_no_missing_reply() -> None:
    # nothing says which nodes were asked: no reply is missing (and nothing raises)
    strategy = _carbon_aware()
    grid = InProcessGrid([{"site": 0}], FedConfig().to_run_config())
    (msg,) = make_strategy("fedavg", FedConfig(min_nodes=1)).configure_train(1, _record(BASE), ConfigRecord({}), grid)
    reply = Message(content=RecordDict({"arrays": _record(BASE), "metrics": MetricRecord({"num-examples": 50})}),
                    reply_to=msg)
    strategy.aggregate_train(1, [reply])
    assert strategy.rounds[1]["no_reply"] == [] and strategy._failures == {}


# --- what is remembered by node is kept for connected nodes only --------------------------------------------


@pytest.mark.parametrize("carbon_aware", [True, False], ids=["carbon-aware", "plain"])
def test_sites_and_intensities_of_nodes_that_left_are_forgotten(carbon_aware: bool) -> None:
    cfg = FedConfig(min_nodes=2, carbon_aware=carbon_aware, carbon_min_fraction=1.0)  # every node asked
    strategy = make_strategy("fedavg", cfg, carbon_fn=None)
    honest = _honest_or(lambda r, node: None)
    _play(strategy, 1, 4, lambda node: honest(1, node))
    assert sorted(strategy.sites) == [1, 2, 3, 4] and sorted(strategy.carbon) == [1, 2, 3, 4]
    _play(strategy, 2, 3, lambda node: honest(2, node))  # node 4 left the federation
    # was: node 4's site and intensity kept for ever, one entry per node id ever seen (a SuperNode
    # that joins again gets a new id): unbounded on a long-lived server
    assert sorted(strategy.sites) == [1, 2, 3] and sorted(strategy.carbon) == [1, 2, 3]
    assert strategy.sites == {1: 0, 2: 1, 3: 2} and strategy.carbon == {1: 100.0, 2: 200.0, 3: 300.0}
