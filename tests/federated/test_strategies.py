"""Strategies on Flower's own message types: poisoning, NaN, wrong shapes, carbon-aware sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402

from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import CLASSES, make_strategy, validate_replies  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402

BASE = {"layer.weight": np.ones((3, 4), np.float32), "layer.bias": np.zeros(4, np.float32)}


def _record(weights: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in weights.items()})


def _round(strategy, replies_weights: list[dict[str, np.ndarray] | None], metrics: list[dict] | None = None):
    """Configure a round for len(replies) nodes, answer with the given weights, aggregate."""
    n = len(replies_weights)
    grid = InProcessGrid([{"site": i} for i in range(n)], FedConfig().to_run_config())
    sent = list(strategy.configure_train(1, _record(BASE), ConfigRecord({}), grid))
    assert len(sent) == n
    replies = []
    for i, (msg, w) in enumerate(zip(sorted(sent, key=lambda m: m.metadata.dst_node_id), replies_weights, strict=True)):
        content = RecordDict({"arrays": _record(w), "metrics": MetricRecord({"num-examples": 100,
                                                                              **((metrics or [{}] * n)[i])})})
        replies.append(Message(content=content, reply_to=msg))
    arrays, _ = strategy.aggregate_train(1, replies)
    return None if arrays is None else {k: v.numpy() for k, v in arrays.items()}


def _honest(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{k: (v + rng.normal(0, 0.01, v.shape)).astype(np.float32) for k, v in BASE.items()} for _ in range(n)]


def _poisoned() -> dict[str, np.ndarray]:
    return {k: v + np.float32(1e6) for k, v in BASE.items()}


def _shift(agg: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(agg[k] - BASE[k]).max()) for k in BASE)


@pytest.mark.parametrize("name", ["fedavg", "fedmedian", "fedtrimmedavg", "krum", "bulyan", "fedprox"])
def test_poisoned_reply_moves_only_fedavg_when_norm_check_is_off(name: str) -> None:
    n = 7 if name == "bulyan" else 5  # Bulyan needs 4f + 3 replies
    strategy = make_strategy(name, FedConfig(strategy=name, min_nodes=2), norm_factor=math.inf)
    agg = _round(strategy, _honest(n - 1) + [_poisoned()])
    shift = _shift(agg)
    if name in ("fedavg", "fedprox"):
        assert shift > 1e5, shift  # the mean of 4 honest + 1e6 moves by ~2e5
    else:
        assert shift < 0.1, shift


def test_norm_check_drops_the_poisoned_reply_before_fedavg() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2))
    honest = _honest(4)
    agg = _round(strategy, honest + [_poisoned()])
    assert _shift(agg) < 0.1
    info = strategy.rounds[1]
    assert len(info["nodes"]) == 4 and len(info["dropped"]) == 1
    assert "norm" in info["dropped"][0]["reason"]
    expected = np.mean([h["layer.weight"] for h in honest], axis=0)
    np.testing.assert_allclose(agg["layer.weight"], expected, rtol=1e-5, atol=1e-6)


def test_nan_reply_is_dropped_and_the_round_continues() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2))
    bad = {k: v.copy() for k, v in BASE.items()}
    bad["layer.bias"][1] = np.nan
    honest = _honest(2, seed=3)
    agg = _round(strategy, honest + [bad])
    assert all(np.isfinite(v).all() for v in agg.values())
    np.testing.assert_allclose(agg["layer.bias"], np.mean([h["layer.bias"] for h in honest], axis=0), atol=1e-6)
    (drop,) = strategy.rounds[1]["dropped"]
    assert "NaN" in drop["reason"] and "layer.bias" in drop["reason"]


def test_wrong_shape_and_wrong_names_are_dropped() -> None:
    strategy = make_strategy("fedmedian", FedConfig(strategy="fedmedian", min_nodes=2))
    wrong_shape = {"layer.weight": np.ones((4, 3), np.float32), "layer.bias": np.zeros(4, np.float32)}
    wrong_name = {"other.weight": np.ones((3, 4), np.float32), "layer.bias": np.zeros(4, np.float32)}
    agg = _round(strategy, _honest(3, seed=5) + [wrong_shape, wrong_name])
    assert agg["layer.weight"].shape == (3, 4) and _shift(agg) < 0.1
    reasons = sorted(d["reason"] for d in strategy.rounds[1]["dropped"])
    assert len(reasons) == 2
    assert any("array names differ" in r for r in reasons) and any("shape of 'layer.weight'" in r for r in reasons)


def test_validate_replies_without_enough_valid_replies_returns_none() -> None:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2))
    bad = {k: np.full_like(v, np.inf) for k, v in BASE.items()}
    assert _round(strategy, [bad, bad]) is None
    assert len(strategy.rounds[1]["dropped"]) == 2 and strategy.rounds[1]["aggregated"] is False


def test_lower_median_catches_a_poisoned_reply_among_two() -> None:
    grid = InProcessGrid([{"site": 0}, {"site": 1}], FedConfig().to_run_config())
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2))
    sent = list(strategy.configure_train(1, _record(BASE), ConfigRecord({}), grid))
    replies = [Message(content=RecordDict({"arrays": _record(w), "metrics": MetricRecord({"num-examples": 5})}),
                       reply_to=m) for m, w in zip(sent, [_honest(1)[0], _poisoned()], strict=True)]
    kept, dropped = validate_replies(replies, BASE, 10.0)
    assert len(kept) == 1 and len(dropped) == 1


def test_carbon_aware_skips_high_carbon_sites_within_minimum_participation() -> None:
    cfg = FedConfig(min_nodes=2, carbon_aware=True, carbon_min_fraction=0.5)
    strategy = make_strategy("fedavg", cfg)
    carbon = [100.0, 500.0, 120.0, 800.0]
    agg = _round(strategy, _honest(4), metrics=[{"carbon-intensity": c} for c in carbon])
    assert agg is not None and strategy.carbon  # round 1 learns each site's intensity; everyone trains
    grid = InProcessGrid([{"site": i} for i in range(4)], cfg.to_run_config())
    sent = list(strategy.configure_train(2, _record(BASE), ConfigRecord({}), grid))
    by_node = {node: c for node, c in strategy.carbon.items()}
    chosen = sorted(by_node[m.metadata.dst_node_id] for m in sent)
    assert chosen == [100.0, 120.0]  # at the median or below, and at least half of the sampled sites
    assert sorted(by_node[n] for n in strategy.rounds[2]["skipped_high_carbon"]) == [500.0, 800.0]


def test_every_strategy_name_is_flowers_class() -> None:
    from flwr.serverapp import strategy as fl

    for name, cls in CLASSES.items():
        base = {"fedavg": fl.FedAvg, "fedprox": fl.FedProx, "fedmedian": fl.FedMedian,
                "fedtrimmedavg": fl.FedTrimmedAvg, "krum": fl.Krum, "bulyan": fl.Bulyan}[name]
        assert issubclass(cls, base)
        assert isinstance(make_strategy(name, FedConfig(strategy=name)), base)


def test_error_reply_is_skipped_and_the_round_continues() -> None:
    from flwr.app import Error

    strategy = make_strategy("fedavg", FedConfig(min_nodes=2))
    grid = InProcessGrid([{"site": i} for i in range(3)], FedConfig().to_run_config())
    sent = sorted(strategy.configure_train(1, _record(BASE), ConfigRecord({}), grid), key=lambda m: m.metadata.dst_node_id)
    honest = _honest(2, seed=9)
    replies = [Message(content=RecordDict({"arrays": _record(w), "metrics": MetricRecord({"num-examples": 10})}),
                       reply_to=m) for m, w in zip(sent[:2], honest, strict=True)]
    replies.append(Message(error=Error(code=2, reason="ClientApp raised"), reply_to=sent[2]))
    arrays, _ = strategy.aggregate_train(1, replies)
    np.testing.assert_allclose(arrays["layer.weight"].numpy(), np.mean([h["layer.weight"] for h in honest], axis=0),
                               atol=1e-6)
    assert strategy.rounds[1]["errors"] == [sent[2].metadata.dst_node_id]
    assert len(strategy.rounds[1]["nodes"]) == 2
