"""Carbon-aware participation: what a dropped reply may change, and the down-weight's floor (review findings).

Flower's own message types and strategies, aggregated for real (no mocks).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord  # noqa: E402

from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import CARBON_WEIGHT_FLOOR, make_strategy  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402
from tests.federated.test_strategies import BASE, _honest, _poisoned, _record, _round  # noqa: E402

CFG = FedConfig(min_nodes=2, carbon_aware=True, carbon_min_fraction=0.5)


def _second_round(strategy, n: int) -> list[int]:
    """The nodes carbon-aware participation lets train in round 2."""
    grid = InProcessGrid([{"site": i} for i in range(n)], CFG.to_run_config())
    return sorted(int(m.metadata.dst_node_id) for m in strategy.configure_train(2, _record(BASE), ConfigRecord({}), grid))


def test_a_dropped_reply_changes_no_sites_carbon_or_site_for_the_next_round() -> None:
    honest = [{"carbon-intensity": c, "site": i} for i, c in enumerate((100.0, 200.0, 300.0, 400.0))]
    # node 5 sends a poisoned update (dropped by the norm check) claiming another site's id and a
    # high intensity; carbon_fn off, so the reported intensities decide
    lying = make_strategy("fedavg", CFG, carbon_fn=None)
    _round(lying, _honest(4) + [_poisoned()], metrics=honest + [{"carbon-intensity": 10000.0, "site": 0}])
    assert [d["node"] for d in lying.rounds[1]["dropped"]] == [5]
    silent = make_strategy("fedavg", CFG, carbon_fn=None)  # the same round, node 5 reporting nothing
    _round(silent, _honest(4) + [_poisoned()], metrics=honest + [{}])

    # was [1, 2, 3]: node 5's 10000 counted (stored, in the median), so it was skipped and node 3 trained
    chosen = _second_round(lying, 5)
    assert chosen == _second_round(silent, 5) == [1, 2, 5]  # as if it had reported nothing: unknown trains
    assert 5 not in lying.carbon and 5 not in lying.sites
    assert lying.carbon == silent.carbon == {1: 100.0, 2: 200.0, 3: 300.0, 4: 400.0}
    assert lying.sites == {1: 0, 2: 1, 3: 2, 4: 3}
    assert lying.rounds[2]["carbon"] == silent.rounds[2]["carbon"] and 5 not in lying.rounds[2]["carbon"]


def test_a_valid_reply_left_out_by_krum_still_reports_its_carbon() -> None:
    # "dropped" means failed validation; Krum's choice of one reply drops nobody
    cfg = FedConfig(strategy="krum", min_nodes=5, carbon_aware=True)
    strategy = make_strategy("krum", cfg, carbon_fn=None)
    _round(strategy, _honest(5, seed=2), metrics=[{"carbon-intensity": 100.0 * (i + 1)} for i in range(5)])
    assert len(strategy.rounds[1]["nodes"]) == 1 and strategy.rounds[1]["dropped"] == []
    assert strategy.carbon == {i + 1: 100.0 * (i + 1) for i in range(5)}


def test_the_carbon_down_weight_stops_at_a_tenth() -> None:
    """Pins the documented floor: a reply at 20x the median intensity keeps 0.1 of its weight, not 0.05."""
    strategy = make_strategy("fedavg", CFG, carbon_fn=None)
    replies = [{k: np.full_like(v, float(i)) for k, v in BASE.items()} for i in range(3)]
    agg = _round(strategy, replies, metrics=[{"carbon-intensity": c} for c in (100.0, 100.0, 2000.0)],
                 examples=[50, 50, 50])
    assert CARBON_WEIGHT_FLOOR == 0.1
    weights = np.array([50.0, 50.0, 50.0 * 0.1])
    expected = float(np.dot(weights, [0.0, 1.0, 2.0]) / weights.sum())
    np.testing.assert_allclose(agg["layer.weight"], expected, rtol=1e-6)
