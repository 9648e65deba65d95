"""Per-site training emissions, with the country whose grid mix measured them, on the server (task u3).

Before, each site's ClientApp measured its training with its own ``emissions-country`` but replied with
the number only (``emissions-g``), and the strategy summed the numbers into the round's ``emissions_g``:
a run across FRA/DEU/POL sites showed one total that could not be audited. Now the reply carries an
``emissions`` ConfigRecord ``{"country": ...}`` and the strategy keeps ``emissions_by_site`` per round,
which the ServerApp writes into policy.json and the ROUND / ``--json`` rows.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Error, Message, MetricRecord, RecordDict  # noqa: E402

from iro_fed.federated import wire  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import COUNTRY_KEY, EMISSIONS_RECORD, make_strategy  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402
from tests.test_n6_emissions_country import _train_reply  # noqa: E402

BASE = {"w": np.zeros(2, np.float32)}


def _send(strategy: Any, n: int, server_round: int = 1) -> list[Message]:
    """Round ``server_round``'s train messages to nodes 1..n (sorted by node id)."""
    grid = InProcessGrid([{"site": i} for i in range(n)], FedConfig().to_run_config())
    arrays, layout = wire.encode(BASE)
    return sorted(strategy.configure_train(server_round, arrays, wire.layout_config(layout), grid),
                  key=lambda m: m.metadata.dst_node_id)


def _reply(sent: Message, value: float, site: int, grams: float, measured: int, country: Any = None) -> Message:
    """A train reply as the ClientApp makes it; ``country`` None: no ``emissions`` record (an older site)."""
    arrays, layout = wire.encode({"w": np.full(2, value, np.float32)})
    records: dict[str, Any] = {"arrays": arrays, "config": wire.layout_config(layout),
                               "metrics": MetricRecord({"num-examples": 10, "site": site, "emissions-g": grams,
                                                        "emissions-measured": measured})}
    if country is not None:
        records[EMISSIONS_RECORD] = ConfigRecord({COUNTRY_KEY: country})
    return Message(content=RecordDict(records), reply_to=sent)


def test_the_strategy_breaks_the_round_down_by_site_with_its_country() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2), norm_factor=math.inf)
    n1, n2, n3, n4 = _send(strategy, 4)
    # arrival order is not site order; node 3 (site 2) has no record (an older site) and node 2 (site 1)
    # did not measure; node 4's ClientApp raised (an error reply: in neither the sum nor the breakdown)
    replies = [_reply(n3, 3.0, site=2, grams=0.75, measured=1),
               _reply(n1, 1.0, site=0, grams=1.5, measured=1, country="FRA"),
               Message(error=Error(code=2, reason="ValueError: boom"), reply_to=n4),
               _reply(n2, 2.0, site=1, grams=0.0, measured=0, country="DEU")]
    arrays, _ = strategy.aggregate_train(1, replies)
    assert arrays is not None
    info = strategy.rounds[1]
    ids = [int(m.metadata.dst_node_id) for m in (n1, n2, n3)]
    assert info["emissions_by_site"] == [
        {"site": 0, "node": ids[0], "emissions_g": 1.5, "country": "FRA"},
        {"site": 1, "node": ids[1], "emissions_g": None, "country": "DEU"},
        {"site": 2, "node": ids[2], "emissions_g": 0.75, "country": None},
    ]
    assert info["emissions_g"] == 2.25 and info["emissions_measured"] is False  # the total as before
    assert info["errors"] == [int(n4.metadata.dst_node_id)]


@pytest.mark.parametrize("country", [42, "FR", "FRANCE", "F1A", ""])
def test_a_malformed_record_is_an_unknown_country_and_a_warning(country: Any, caplog) -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2), norm_factor=math.inf)
    n1, n2 = _send(strategy, 2)
    replies = [_reply(n1, 1.0, site=0, grams=1.0, measured=1, country="POL"),
               _reply(n2, 2.0, site=1, grams=2.0, measured=1, country=country)]
    with caplog.at_level(logging.WARNING, logger="flwr"):
        arrays, _ = strategy.aggregate_train(1, replies)
    assert arrays is not None  # the round went on
    rows = strategy.rounds[1]["emissions_by_site"]
    assert [(r["site"], r["emissions_g"], r["country"]) for r in rows] == [(0, 1.0, "POL"), (1, 2.0, None)]
    node = int(n2.metadata.dst_node_id)
    assert any(f"node {node} sent a malformed 'emissions' record" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]


def test_a_record_without_a_country_is_malformed_too(caplog) -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2), norm_factor=math.inf)
    n1, n2 = _send(strategy, 2)
    second = _reply(n2, 2.0, site=1, grams=2.0, measured=1, country="FRA")
    second.content[EMISSIONS_RECORD] = ConfigRecord({"where": "FRA"})
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.aggregate_train(1, [_reply(n1, 1.0, site=0, grams=1.0, measured=1, country="fra"), second])
    rows = strategy.rounds[1]["emissions_by_site"]
    assert [r["country"] for r in rows] == ["FRA", None]  # a lower-case code is still the code
    assert any(f"node {int(n2.metadata.dst_node_id)} sent a malformed" in r.getMessage() for r in caplog.records)


# --- the ClientApp's reply and the ServerApp's metadata (tiny in-process training) -------------------

TINY = dict(local_steps=20, hours=1.0, learning_starts=8, batch_size=8, min_nodes=1, embed_dim=16, hidden_dim=32,
            eval_episodes=1, track_emissions=False)


@pytest.mark.parametrize("node_config, country", [({"site": 1, "emissions-country": "FRA"}, "FRA"),
                                                  ({"site": 1}, "DEU")])
def test_the_clientapp_reply_carries_its_configured_country(node_config: dict[str, Any], country: str) -> None:
    reply = _train_reply(node_config, track_emissions=False)
    assert not reply.has_error(), reply.error
    assert dict(reply.content.config_records.get(EMISSIONS_RECORD, {})) == {COUNTRY_KEY: country}


def test_the_server_writes_the_breakdown_to_policy_json_and_the_round_rows(tmp_path) -> None:
    pytest.importorskip("torch")
    from iro_fed.federated.server_app import run_federation

    reg = tmp_path / "policies"
    cfg = FedConfig(**{**TINY, "min_nodes": 2}, num_server_rounds=1, registry=str(reg))
    grid = InProcessGrid([{"site": 2, "emissions-country": "POL"}, {"site": 0, "emissions-country": "FRA"}],
                         cfg.to_run_config())
    summary = run_federation(grid, cfg)
    # tracking off: no site's number is a measurement; the countries are still each site's
    expected = [{"site": 0, "node": 2, "emissions_g": None, "country": "FRA"},
                {"site": 2, "node": 1, "emissions_g": None, "country": "POL"}]
    meta = json.loads((reg / "v0001" / "policy.json").read_text())
    assert meta["emissions_by_site"] == expected and meta["emissions_g_round"] is None
    (row,) = summary["rounds"]
    assert row["emissions_by_site"] == expected and row["emissions_g"] is None
    json.dumps(row)  # the ROUND line and --json rows serialize it


def test_the_metadata_keeps_each_measured_number_when_tracking_is_on() -> None:
    pytest.importorskip("torch")
    from iro_fed.federated.server_app import emissions_by_site

    rows = [{"site": 0, "node": 7, "emissions_g": 1.5, "country": "FRA"},
            {"site": 1, "node": 8, "emissions_g": None, "country": None}]
    info = {"emissions_by_site": rows}
    assert emissions_by_site(info, track_emissions=True) == rows
    assert [r["emissions_g"] for r in emissions_by_site(info, track_emissions=False)] == [None, None]
    assert rows[0]["emissions_g"] == 1.5  # the strategy's record is not changed
    assert emissions_by_site({}, track_emissions=True) == []  # a round the strategy kept nothing for


def test_a_site_without_the_emissions_metrics_leaves_the_others_counted() -> None:
    # An older site sends no emissions-g / emissions-measured: the metrics the replies share are trimmed
    # for the aggregate, but the round's total read the others' grams first (it read 0.0 and "measured").
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2), norm_factor=math.inf)
    n1, n2 = _send(strategy, 2)
    older = _reply(n2, 2.0, site=1, grams=0.0, measured=0)
    del older.content["metrics"]["emissions-g"]
    del older.content["metrics"]["emissions-measured"]
    arrays, _ = strategy.aggregate_train(1, [_reply(n1, 1.0, site=0, grams=1.5, measured=1, country="FRA"), older])
    assert arrays is not None
    info = strategy.rounds[1]
    assert info["emissions_g"] == 1.5 and info["emissions_measured"] is False  # not every site measured
    assert [(r["site"], r["emissions_g"], r["country"]) for r in info["emissions_by_site"]] == [(0, 1.5, "FRA"),
                                                                                                  (1, None, None)]
