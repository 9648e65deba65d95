"""Carbon-aware weighting by this round's reports, and sites whose replies keep being dropped (review findings).

Flower's own message types and strategies on the in-process grid, aggregated for real (no mocks).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Error, Message, MetricRecord, RecordDict  # noqa: E402

from iro_fed.federated import strategies as strategies_module  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import make_strategy  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402
from tests.federated.test_strategies import BASE, _honest, _poisoned, _record  # noqa: E402

#: What a node answers in a round: (weights, metrics), an error reply (``ERROR``), or nothing
#: within the timeout (``SILENT``: its reply is missing from aggregate_train's, as Grid.send_and_receive leaves it).
Answer = tuple[dict[str, np.ndarray], dict] | str
ERROR = "error"
SILENT = "silent"


def _play(strategy, server_round: int, n: int, answer: Callable[[int], Answer]) -> list[int]:
    """One round on ``n`` connected nodes (ids 1..n) as Strategy.start plays it: configure, the
    replies of the nodes that were asked, aggregate. Returns the nodes asked to train."""
    grid = InProcessGrid([{"site": i} for i in range(n)], FedConfig().to_run_config())
    sent = sorted(strategy.configure_train(server_round, _record(BASE), ConfigRecord({}), grid),
                  key=lambda m: m.metadata.dst_node_id)
    replies = []
    for msg in sent:
        node = int(msg.metadata.dst_node_id)
        got = answer(node)
        if got == SILENT:
            continue
        if got == ERROR:
            replies.append(Message(error=Error(code=2, reason="ClientApp raised"), reply_to=msg))
            continue
        weights, metrics = got
        content = RecordDict({"arrays": _record(weights), "metrics": MetricRecord({"num-examples": 50, **metrics})})
        replies.append(Message(content=content, reply_to=msg))
    arrays, _ = strategy.aggregate_train(server_round, replies)
    strategy.last_arrays = arrays
    return [int(m.metadata.dst_node_id) for m in sent]


def _const(value: float) -> dict[str, np.ndarray]:
    return {k: np.full_like(v, value) for k, v in BASE.items()}


# --- 1. the down-weight reads this round's reports --------------------------------------------------


@pytest.mark.parametrize("round2, expected_weights", [
    # node 3 reported 2000 in round 1 and nothing now: unknown, full weight (was 0.1 of it, by its old 2000)
    ({1: 100.0, 2: 100.0, 3: None}, [1.0, 1.0, 1.0]),
    # median of what is reported now (100, 2000: 1050), not of the remembered 100, 100, 2000 (100)
    ({1: 100.0, 2: None, 3: 2000.0}, [1.0, 1.0, 1050.0 / 2000.0]),
])
def test_the_carbon_down_weight_uses_the_intensities_reported_this_round(round2: dict, expected_weights: list) -> None:
    cfg = FedConfig(min_nodes=2, carbon_aware=True, carbon_min_fraction=1.0)  # everyone trains in round 2
    strategy = make_strategy("fedavg", cfg, carbon_fn=None)
    first = {1: 100.0, 2: 100.0, 3: 2000.0}
    _play(strategy, 1, 3, lambda node: (_const(0.0), {"carbon-intensity": first[node]}))
    assert strategy.carbon == first

    def answer(node: int) -> Answer:
        c = round2[node]
        return _const(float(node - 1)), ({} if c is None else {"carbon-intensity": c})

    assert _play(strategy, 2, 3, answer) == [1, 2, 3]
    got = strategy.last_arrays["layer.weight"].numpy()
    weights = np.array(expected_weights)
    np.testing.assert_allclose(got, float(np.dot(weights, [0.0, 1.0, 2.0]) / weights.sum()), rtol=1e-6)
    # selection still goes by each node's last report (the documented rule for a site not reporting now)
    assert strategy.carbon == {node: first[node] if round2[node] is None else round2[node] for node in first}


# --- 3. a node whose replies keep being dropped loses its priority ---------------------------------------


CARBON = {1: 100.0, 2: 200.0, 3: 300.0}  # node 4 never has a valid reply: its intensity stays unknown


def _honest_or(bad: Callable[[int, int], Answer | None]) -> Callable[[int, int], Answer]:
    honest = _honest(5, seed=4)

    def answer(server_round: int, node: int) -> Answer:
        return bad(server_round, node) or (honest[node - 1], {"carbon-intensity": CARBON.get(node, 150.0), "site": node - 1})

    return answer


def _rounds(strategy, n: int, count: int, answer: Callable[[int, int], Answer]) -> dict[int, list[int]]:
    return {r: _play(strategy, r, n, lambda node, r=r: answer(r, node)) for r in range(1, count + 1)}


@pytest.mark.parametrize("failure", ["poisoned", "error"])
def test_a_node_whose_last_replies_were_all_dropped_is_tried_last(failure: str) -> None:
    cfg = FedConfig(min_nodes=2, carbon_aware=True, carbon_min_fraction=0.5)
    strategy = make_strategy("fedavg", cfg, carbon_fn=None)
    bad = (lambda r, node: (_poisoned(), {}) if node == 4 else None) if failure == "poisoned" else \
        (lambda r, node: ERROR if node == 4 else None)
    asked = _rounds(strategy, 4, 4, _honest_or(bad))
    # round 1: nothing known, all train; round 2: node 4 is unknown (nothing valid from it), which
    # counts as low: it trains beside 1 and 2 (median 200); from round 3 (2 dropped in a row) it is
    # tried last and the two low-carbon sites suffice (was: asked every round, dropped every round)
    assert asked == {1: [1, 2, 3, 4], 2: [1, 2, 4], 3: [1, 2], 4: [1, 2]}
    assert strategy.rounds[3]["skipped_failing"] == [4] and strategy.rounds[3]["skipped_high_carbon"] == [3]
    assert strategy.rounds[2]["skipped_failing"] == []
    assert strategies_module.DEMOTE_AFTER == 2


def test_a_node_tried_last_is_retried_after_five_rounds_skipped() -> None:
    cfg = FedConfig(min_nodes=2, carbon_aware=True, carbon_min_fraction=0.5)
    strategy = make_strategy("fedavg", cfg, carbon_fn=None)
    asked = _rounds(strategy, 4, 9, _honest_or(lambda r, node: (_poisoned(), {}) if node == 4 else None))
    # skipped in rounds 3..7 (RETRY_AFTER), asked in round 8 (a repaired site keeps its node id),
    # dropped again: one more drop puts it last again at once
    assert strategies_module.RETRY_AFTER == 5
    assert {r: 4 in nodes for r, nodes in asked.items()} == {1: True, 2: True, 3: False, 4: False, 5: False,
                                                              6: False, 7: False, 8: True, 9: False}
    assert [strategy.rounds[r]["skipped_failing"] for r in (7, 8, 9)] == [[4], [], [4]]


def test_a_node_tried_last_still_fills_the_minimum_and_a_valid_reply_restores_it() -> None:
    cfg = FedConfig(min_nodes=2, carbon_aware=True, carbon_min_fraction=0.75)  # 3 of 4 must train
    strategy = make_strategy("fedavg", cfg, carbon_fn=None)

    def bad(server_round: int, node: int) -> Answer | None:
        return (_poisoned(), {}) if node == 4 and server_round <= 3 else None

    asked = _rounds(strategy, 4, 3, _honest_or(bad))
    # round 3: node 4 (2 drops in a row) is tried last, after the high-carbon node 3 that fills the minimum
    assert asked[3] == [1, 2, 3] and strategy.rounds[3]["skipped_failing"] == [4]
    strategy.carbon_min_fraction = 1.0  # now every node is needed: the one tried last fills the minimum
    assert _play(strategy, 4, 4, lambda node: _honest_or(bad)(4, node)) == [1, 2, 3, 4]
    assert strategy.rounds[4]["skipped_failing"] == [] and strategy.rounds[4]["dropped"] == []
    strategy.carbon_min_fraction = 0.5
    # its round-4 reply was valid (150 gCO2/kWh): its priority is back, and at or below the median
    # 175 of 100, 150, 200, 300 it trains
    assert _play(strategy, 5, 4, lambda node: _honest_or(bad)(5, node)) == [1, 4]
    assert strategy.rounds[5]["skipped_failing"] == [] and strategy.rounds[5]["skipped_high_carbon"] == [2, 3]


def test_drop_counts_are_kept_only_for_connected_nodes_and_capped() -> None:
    cfg = FedConfig(min_nodes=2, carbon_aware=True, carbon_min_fraction=1.0)  # every node asked every round
    strategy = make_strategy("fedavg", cfg, carbon_fn=None)
    bad = _honest_or(lambda r, node: (_poisoned(), {}) if node == 4 else None)
    assert _rounds(strategy, 4, 6, bad)[6] == [1, 2, 3, 4]
    assert strategy._failures == {4: strategies_module.DEMOTE_AFTER}  # capped: 2, not 6
    strategy.carbon_min_fraction = 0.5
    assert 4 not in _play(strategy, 7, 4, lambda node: bad(7, node)) and strategy._benched == {4: 1}
    _play(strategy, 8, 3, lambda node: bad(8, node))  # node 4 left the federation
    assert strategy._failures == {} and strategy._benched == {}
