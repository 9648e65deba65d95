"""Strategies on Flower's own message types: poisoning, NaN, wrong shapes, carbon-aware sampling.

Messages use the deployed format (one flat array + its layout, :mod:`iro_fed.federated.wire`)
unless a test says otherwise; one test checks that every strategy aggregates the flat array
exactly as it aggregates one array per layer.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402

from iro_fed.federated import wire  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import CLASSES, make_strategy, validate_replies  # noqa: E402
from iro_fed.federated.task import FedConfig, WeightLayout, required_nodes  # noqa: E402

BASE = {"layer.weight": np.ones((3, 4), np.float32), "layer.bias": np.zeros(4, np.float32)}


def _cfg(name: str, **kwargs) -> FedConfig:
    """A config for ``name`` with the fewest sites per round it accepts (Krum 5, Bulyan 7 for f = 1)."""
    return FedConfig(strategy=name, min_nodes=max(2, required_nodes(name, 1)), **kwargs)


#: One array per layer (the format of messages without a layout).
_record = wire.per_layer_record


def _flat(weights: dict[str, np.ndarray]) -> dict[str, object]:
    """The deployed format: ``arrays`` with one flat array, ``config`` with its layout."""
    arrays, layout = wire.encode(weights)
    return {"arrays": arrays, "config": wire.layout_config(layout)}


def _round(strategy, replies_weights: list[dict[str, np.ndarray] | None], metrics: list[dict] | None = None,
           base: dict[str, np.ndarray] = BASE, flat: bool = True, examples: list[int] | None = None):
    """Configure a round for len(replies) nodes, answer with the given weights, aggregate."""
    n = len(replies_weights)
    grid = InProcessGrid([{"site": i} for i in range(n)], FedConfig().to_run_config())
    sent_arrays, layout = wire.encode(base) if flat else (_record(base), None)
    config = wire.layout_config(layout) if flat else ConfigRecord({})
    sent = list(strategy.configure_train(1, sent_arrays, config, grid))
    assert len(sent) == n
    if flat:  # what the sites receive: one array and the layout
        assert list(sent[0].content.array_records["arrays"].keys()) == ["weights"]
        assert wire.layout_of(sent[0].content) == layout
    replies = []
    for i, (msg, w) in enumerate(zip(sorted(sent, key=lambda m: m.metadata.dst_node_id), replies_weights, strict=True)):
        records = _flat(w) if flat else {"arrays": _record(w)}
        num = examples[i] if examples else 100
        content = RecordDict({**records, "metrics": MetricRecord({"num-examples": num,
                                                                   **((metrics or [{}] * n)[i])})})
        replies.append(Message(content=content, reply_to=msg))
    arrays, _ = strategy.aggregate_train(1, replies)
    return None if arrays is None else wire.decode(arrays, layout)


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
    strategy = make_strategy(name, _cfg(name), norm_factor=math.inf)
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
    flat, layout = wire.encode(BASE)
    sent = list(strategy.configure_train(1, flat, wire.layout_config(layout), grid))
    replies = [Message(content=RecordDict({**_flat(w), "metrics": MetricRecord({"num-examples": 5})}),
                       reply_to=m) for m, w in zip(sent, [_honest(1)[0], _poisoned()], strict=True)]
    kept, dropped = validate_replies(replies, {"weights": flat["weights"].numpy()}, 10.0, layout)
    assert len(kept) == 1 and len(dropped) == 1 and "norm" in dropped[0]["reason"]


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
        assert isinstance(make_strategy(name, _cfg(name)), base) and isinstance(make_strategy(name), base)


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


RANDOM_LAYERS = {"support": (21,), "encoder.0.weight": (16, 9), "encoder.0.bias": (16,), "head.weight": (3, 4, 5),
                 "head.bias": (1,)}


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedmedian", "fedtrimmedavg", "krum", "bulyan"])
def test_one_flat_array_aggregates_exactly_like_one_array_per_layer(name: str) -> None:
    rng = np.random.default_rng(42)
    base = {k: rng.normal(0, 1, s).astype(np.float32) for k, s in RANDOM_LAYERS.items()}
    replies = [{k: (v + rng.normal(0, 0.1 * (i + 1), v.shape)).astype(np.float32) for k, v in base.items()}
               for i in range(7)]  # Bulyan needs 4f + 3 = 7; spreads differ so Krum/Bulyan choose
    examples = [10, 50, 20, 80, 35, 5, 60]
    results = {}
    for flat in (True, False):
        strategy = make_strategy(name, _cfg(name))
        results[flat] = _round(strategy, replies, base=base, flat=flat, examples=examples)
        info = strategy.rounds[1]
        assert info["dropped"] == [] and len(info["valid_nodes"]) == 7
        # what the aggregate was computed from: Krum's one reply, Bulyan's n - 2f, else all
        assert len(info["nodes"]) == {"krum": 1, "bulyan": 5}.get(name, 7)
    assert list(results[True]) == list(base)
    for key in base:
        assert results[True][key].shape == base[key].shape and results[True][key].dtype == np.float32
        np.testing.assert_array_equal(results[True][key], results[False][key], err_msg=f"{name}: {key}")
    assert _max_diff(results[True], base) > 1e-3  # it did aggregate something


def _max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(a[k] - b[k]).max()) for k in b)


def _reply_with(records: dict[str, object], sent: Message) -> Message:
    return Message(content=RecordDict({**records, "metrics": MetricRecord({"num-examples": 10})}), reply_to=sent)


def test_layout_mismatch_missing_or_unreadable_layout_is_dropped() -> None:
    """The flat vector has the right length in every bad reply: only the layout tells them apart."""
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2))
    grid = InProcessGrid([{"site": i} for i in range(6)], FedConfig().to_run_config())
    flat, layout = wire.encode(BASE)
    sent = sorted(strategy.configure_train(1, flat, wire.layout_config(layout), grid),
                  key=lambda m: m.metadata.dst_node_id)
    honest = _honest(2, seed=11)
    reordered = {"layer.bias": BASE["layer.bias"], "layer.weight": BASE["layer.weight"]}
    as_float64 = {k: v.astype(np.float64) for k, v in BASE.items()}
    no_layout = {"arrays": wire.encode(honest[0])[0]}
    garbage = {"arrays": wire.encode(honest[0])[0], "config": ConfigRecord({"layout": b"[[1, 2]]"})}
    replies = [_reply_with(_flat(h), m) for h, m in zip(honest, sent[:2], strict=True)]
    replies += [_reply_with(_flat(reordered), sent[2]), _reply_with(_flat(as_float64), sent[3]),
                _reply_with(no_layout, sent[4]), _reply_with(garbage, sent[5])]
    assert all(r.content.array_records["arrays"]["weights"].numpy().shape == (16,) for r in replies)
    arrays, _ = strategy.aggregate_train(1, replies)
    reasons = {d["node"]: d["reason"] for d in strategy.rounds[1]["dropped"]}
    ids = [m.metadata.dst_node_id for m in sent]
    assert sorted(reasons) == sorted(ids[2:]), reasons
    assert "array names are in another order" in reasons[ids[2]]
    assert "dtype of 'layer.weight' is float64, expected float32" in reasons[ids[3]]
    assert "no weight layout" in reasons[ids[4]]
    assert "entry 0" in reasons[ids[5]]
    got = wire.decode(arrays, layout)
    np.testing.assert_allclose(got["layer.weight"], np.mean([h["layer.weight"] for h in honest], axis=0), atol=1e-6)


def test_a_message_is_a_handful_of_flower_objects() -> None:
    """The reason for the flat encoding: Flower moves each object with its own request per hop."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    from iro_fed.federated.task import build_agent, get_weights

    weights = get_weights(build_agent(FedConfig()).online)
    assert len(weights) > 20
    grid = InProcessGrid([{"site": 0}], FedConfig().to_run_config())

    def objects(records: dict[str, object]) -> int:
        msg = grid.create_message(RecordDict({**records, "metrics": MetricRecord({"num-examples": 1})}),
                                  "train", 1, "1")
        return len(get_all_nested_objects(msg))

    flat, per_layer = objects(_flat(weights)), objects({"arrays": _record(weights)})
    assert flat <= 8 < 40 <= per_layer, (flat, per_layer)
    layout = WeightLayout.of(weights)
    assert layout.size == sum(v.size for v in weights.values())


def test_the_aggregate_does_not_depend_on_which_node_id_each_site_got() -> None:
    # Flower draws node ids at random when SuperNodes join, so two deployments of the same sites
    # number them differently. Float sums depend on their order: the replies are summed by site.
    rng = np.random.default_rng(3)
    by_site = {s: {k: (v + rng.normal(0, 1e4, v.shape)).astype(np.float32) for k, v in BASE.items()} for s in range(4)}
    results = []
    for order in ([0, 1, 2, 3], [3, 1, 0, 2], [2, 3, 1, 0]):  # the site behind node 1, 2, 3, 4
        strategy = make_strategy("fedavg", FedConfig(min_nodes=2), norm_factor=math.inf)
        results.append(_round(strategy, [by_site[s] for s in order], metrics=[{"site": s} for s in order],
                              examples=[100 + 7 * s for s in order]))
    for other in results[1:]:
        for k in BASE:
            assert np.array_equal(results[0][k], other[k]), k
