"""Each strategy's aggregate checked against numbers worked out by hand, and the edges of update
validation (one or two replies, none left, counts, metrics that differ, constant buffers).

The replies are built with Flower's own message types and go through the strategies exactly as a
deployed round does (``configure_train`` on an in-process grid, then ``aggregate_train``); no
training runs here except in the FedProx test at the end.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict  # noqa: E402

from iro_fed.federated import wire  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import make_strategy  # noqa: E402
from iro_fed.federated.task import (  # noqa: E402
    FedConfig,
    FedConfigError,
    build_agent,
    get_weights,
    required_nodes,
    site_carbon,
)

BASE = {"w": np.zeros(2, np.float32)}


def _cfg(name: str = "fedavg", **kwargs) -> FedConfig:
    kwargs.setdefault("min_nodes", max(2, required_nodes(name, kwargs.get("num_malicious", 1))))
    return FedConfig(strategy=name, **kwargs)


def _send(strategy, n: int, server_round: int = 1, base: dict[str, np.ndarray] = BASE) -> tuple[list[Message], object]:
    """Round ``server_round``'s train messages to nodes 1..n (sorted by node id) and the layout sent."""
    grid = InProcessGrid([{"site": i} for i in range(n)], FedConfig().to_run_config())
    arrays, layout = wire.encode(base)
    sent = sorted(strategy.configure_train(server_round, arrays, wire.layout_config(layout), grid),
                  key=lambda m: m.metadata.dst_node_id)
    return sent, layout


def _reply(sent: Message, weights: dict[str, np.ndarray], examples: float = 100, **metrics) -> Message:
    arrays, layout = wire.encode(weights)
    return Message(content=RecordDict({"arrays": arrays, "config": wire.layout_config(layout),
                                       "metrics": MetricRecord({"num-examples": examples, **metrics})}),
                   reply_to=sent)


def _aggregate(strategy, values: list[float | list[float]], examples: list[float] | None = None,
               server_round: int = 1, metrics: list[dict] | None = None) -> np.ndarray | None:
    """Replies whose ``w`` is ``values[i]`` (a scalar fills both coordinates) from sites 0..n-1."""
    sent, layout = _send(strategy, len(values), server_round)
    replies = [_reply(m, {"w": np.broadcast_to(np.asarray(v, np.float32), (2,)).copy()},
                      (examples or [100] * len(values))[i], site=i, **((metrics or [{}] * len(values))[i]))
               for i, (m, v) in enumerate(zip(sent, values, strict=True))]
    arrays, _ = strategy.aggregate_train(server_round, replies)
    return None if arrays is None else wire.decode(arrays, layout)["w"]


# --- what each strategy computes -----------------------------------------------------------------


def test_fedavg_weights_each_reply_by_its_num_examples() -> None:
    strategy = make_strategy("fedavg", _cfg(), norm_factor=math.inf)
    got = _aggregate(strategy, [1.0, 2.0, 4.0], examples=[1, 1, 2])
    np.testing.assert_array_equal(got, np.float32([2.75, 2.75]))  # (1 + 2 + 2 * 4) / 4


@pytest.mark.parametrize("count", [0, -5, math.nan, math.inf, [10, 10]])
def test_a_reply_without_a_positive_finite_count_is_dropped(count) -> None:
    strategy = make_strategy("fedavg", _cfg(), norm_factor=math.inf)
    got = _aggregate(strategy, [1.0, 3.0, 100.0], examples=[10, 10, count])
    np.testing.assert_array_equal(got, np.float32([2.0, 2.0]))
    (drop,) = strategy.rounds[1]["dropped"]
    assert "num-examples" in drop["reason"] and "positive" in drop["reason"]


def test_a_site_claiming_more_examples_than_a_round_trains_is_dropped() -> None:
    # Before: 10^12 examples against 400 made the liar's weights the global model (w = 100.0).
    strategy = make_strategy("fedavg", _cfg(local_steps=400), norm_factor=math.inf)
    got = _aggregate(strategy, [1.0, 3.0, 100.0], examples=[400, 400, 10**12])
    np.testing.assert_array_equal(got, np.float32([2.0, 2.0]))
    (drop,) = strategy.rounds[1]["dropped"]
    assert "num-examples 1000000000000 is more than a site trains on in a round (400)" in drop["reason"]
    assert strategy.rounds[1]["sites"] == [0, 1]


def test_fedmedian_is_the_unweighted_coordinate_wise_median() -> None:
    strategy = make_strategy("fedmedian", _cfg("fedmedian"), norm_factor=math.inf)
    got = _aggregate(strategy, [[1, 5], [2, 4], [9, 0]], examples=[1, 1, 400])
    np.testing.assert_array_equal(got, np.float32([2, 4]))
    strategy = make_strategy("fedmedian", _cfg("fedmedian"), norm_factor=math.inf)
    got = _aggregate(strategy, [[1, 5], [2, 4], [9, 0], [3, 3]])  # even count: mean of the middle two
    np.testing.assert_array_equal(got, np.float32([2.5, 3.5]))


def test_fedtrimmedavg_cuts_beta_of_each_tail_per_coordinate() -> None:
    strategy = make_strategy("fedtrimmedavg", _cfg("fedtrimmedavg", trim_beta=0.2), norm_factor=math.inf)
    got = _aggregate(strategy, [[1, -50], [2, 9], [3, 8], [4, 7], [100, 6]])  # int(0.2 * 5) = 1 cut per tail
    np.testing.assert_array_equal(got, np.float32([3, 7]))


def test_krum_selects_with_the_configured_f() -> None:
    # n = 5, f = 1: each reply's score sums its n - f - 2 = 2 smallest squared distances:
    # 0 -> 1 + 6.25, 1 -> 1 + 2.25 (best), 2.5 -> 2.25 + 2.25, 4 -> 2.25 + 9. With f = 0 (3 closest) 2.5 would win.
    values = [0.0, 1.0, 2.5, 4.0, 100.0]
    strategy = make_strategy("krum", _cfg("krum", num_malicious=1), norm_factor=math.inf)
    np.testing.assert_array_equal(_aggregate(strategy, values), np.float32([1.0, 1.0]))
    assert strategy.rounds[1]["sites"] == [1] and len(strategy.rounds[1]["valid_sites"]) == 5
    strategy = make_strategy("krum", _cfg("krum", num_malicious=0), norm_factor=math.inf)
    np.testing.assert_array_equal(_aggregate(strategy, values), np.float32([2.5, 2.5]))
    assert strategy.rounds[1]["sites"] == [2]


def test_bulyan_is_multikrum_then_the_mean_of_the_beta_closest_to_the_median() -> None:
    # n = 7, f = 1: Multi-Krum keeps theta = n - 2f = 5 (0, 1, 2, 3.5, 4); their median is 2 and the
    # beta = theta - 2f = 3 values closest to it are 1, 2, 3.5: mean 6.5 / 3.
    strategy = make_strategy("bulyan", _cfg("bulyan"), norm_factor=math.inf)
    got = _aggregate(strategy, [0.0, 1.0, 2.0, 3.5, 4.0, 50.0, 100.0])
    np.testing.assert_allclose(got, np.float32([6.5 / 3] * 2), rtol=1e-6)
    assert strategy.rounds[1]["sites"] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("name", "f", "need"), [("bulyan", 1, 7), ("bulyan", 2, 11), ("krum", 1, 5), ("krum", 0, 3)])
def test_krum_and_bulyan_refuse_too_few_sites_per_round(name: str, f: int, need: int) -> None:
    # Before: accepted, and Bulyan then aggregated nothing in any round (every version the initial policy).
    with pytest.raises(FedConfigError, match=f"min-nodes: {name} with num-malicious {f} needs at least {need} sites"):
        FedConfig(strategy=name, num_malicious=f, min_nodes=need - 1)
    assert FedConfig(strategy=name, num_malicious=f, min_nodes=need).min_nodes == need


@pytest.mark.parametrize(("changes", "field"), [
    ({"num_malicious": -1}, "num-malicious"), ({"proximal_mu": -0.1}, "proximal-mu"),
    ({"proximal_mu": math.nan}, "proximal-mu"), ({"hours": math.inf}, "hours"), ({"hours": math.nan}, "hours"),
    ({"hours": 10_000.0}, "hours"), ({"num_server_rounds": 10**9}, "num-server-rounds"),
    ({"local_steps": 10**12}, "local-steps"), ({"top_k": 10**6}, "top-k"), ({"eval_episodes": 10**6}, "eval-episodes"),
])
def test_settings_out_of_range_name_the_field(changes: dict, field: str) -> None:
    with pytest.raises(FedConfigError, match=f"^{field}: "):
        FedConfig(**changes)


def test_bulyan_short_of_4f_plus_3_valid_replies_keeps_the_global_model() -> None:
    strategy = make_strategy("bulyan", _cfg("bulyan"))
    sent, _ = _send(strategy, 7)
    honest = [_reply(m, {"w": np.float32([0.01 * i, 0.0])}) for i, m in enumerate(sent[:5])]
    broken = [_reply(m, {"w": np.float32([math.nan, 0.0])}) for m in sent[5:]]
    arrays, _ = strategy.aggregate_train(1, honest + broken)
    info = strategy.rounds[1]
    assert arrays is None and info["aggregated"] is False and len(info["dropped"]) == 2
    assert info["nodes"] == [] and info["sites"] == [] and len(info["valid_nodes"]) == 5


# --- validation at the edges ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedmedian", "fedtrimmedavg", "krum", "bulyan"])
def test_every_reply_dropped_aggregates_nothing(name: str) -> None:
    strategy = make_strategy(name, _cfg(name))
    n = max(2, required_nodes(name, 1))
    arrays = _aggregate(strategy, [math.nan] * n)
    assert arrays is None
    assert strategy.rounds[1]["aggregated"] is False and len(strategy.rounds[1]["dropped"]) == n
    assert strategy.rounds[1]["nodes"] == []


def test_one_reply_is_checked_against_the_previous_rounds_updates() -> None:
    # Before: a reply alone had no cohort and was aggregated whatever its norm (w = 1e6 became the model).
    strategy = make_strategy("fedavg", _cfg(min_nodes=1))
    assert _aggregate(strategy, [0.01, 0.02, 0.03]) is not None
    assert _aggregate(strategy, [1e6], server_round=2) is None
    (drop,) = strategy.rounds[2]["dropped"]
    assert "previous round's median" in drop["reason"]
    np.testing.assert_array_equal(_aggregate(strategy, [0.05], server_round=3), np.float32([0.05, 0.05]))


def test_one_reply_in_the_first_round_has_nothing_to_compare_with_and_is_kept() -> None:
    strategy = make_strategy("fedavg", _cfg(min_nodes=1))
    np.testing.assert_array_equal(_aggregate(strategy, [7.0]), np.float32([7.0, 7.0]))


def test_two_replies_keep_the_smaller_update_when_they_disagree_tenfold() -> None:
    strategy = make_strategy("fedavg", _cfg())
    np.testing.assert_array_equal(_aggregate(strategy, [0.01, 5.0]), np.float32([0.01, 0.01]))
    strategy = make_strategy("fedavg", _cfg())
    np.testing.assert_allclose(_aggregate(strategy, [0.01, 0.05]), np.float32([0.03, 0.03]), rtol=1e-6)


def test_replies_with_different_metric_keys_or_extra_records_are_aggregated() -> None:
    # Before: Flower raised InconsistentMessageReplies, ending the run, as soon as one site ran under
    # an edge agent (its reply adds experience-* metrics) or a reply carried another record.
    strategy = make_strategy("fedavg", _cfg(), norm_factor=math.inf)
    sent, layout = _send(strategy, 3)
    replies = [_reply(sent[0], {"w": np.float32([1, 1])}, 10, loss=0.5),
               _reply(sent[1], {"w": np.float32([2, 2])}, 10, loss=0.7, **{"experience-samples": 12}),
               _reply(sent[2], {"w": np.float32([3, 3])}, 20, loss=0.9, history=[1.0, 2.0])]
    replies[2].content["extra"] = ArrayRecord({"x": Array(np.ones(3, np.float32))})
    replies[2].content["more"] = MetricRecord({"y": 1})
    arrays, metrics = strategy.aggregate_train(1, replies)
    np.testing.assert_array_equal(wire.decode(arrays, layout)["w"], np.float32([2.25, 2.25]))
    assert set(metrics) == {"loss"}  # the scalar metrics all three have, num-examples being the weight
    assert metrics["loss"] == pytest.approx(0.25 * 0.5 + 0.25 * 0.7 + 0.5 * 0.9)


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedmedian", "fedtrimmedavg", "krum", "bulyan"])
def test_constant_buffers_come_back_exactly_as_sent(name: str) -> None:
    # The distributional DQN's ``support`` is a constant; the weighted mean of three equal float32
    # vectors weighted 3:7:11 is not equal to them (off by 5e-7), so it drifted every round.
    cfg = _cfg(name, embed_dim=16, hidden_dim=32)
    base = get_weights(build_agent(cfg).online)
    assert "support" in base
    strategy = make_strategy(name, cfg, norm_factor=math.inf)
    n = max(3, required_nodes(name, 1))
    sent, layout = _send(strategy, n, base=base)
    rng = np.random.default_rng(0)
    replies = []
    for i, m in enumerate(sent):
        w = {k: (v if k == "support" else v + rng.normal(0, 0.01, v.shape)).astype(np.float32) for k, v in base.items()}
        replies.append(_reply(m, w, [3, 7, 11][i % 3]))
    arrays, _ = strategy.aggregate_train(1, replies)
    got = wire.decode(arrays, layout)
    np.testing.assert_array_equal(got["support"], base["support"])
    assert any(not np.array_equal(got[k], base[k]) for k in base if k != "support")


# --- carbon-aware participation --------------------------------------------------------------------


def _chosen_sites(strategy, n: int, server_round: int) -> list[int]:
    sent, _ = _send(strategy, n, server_round)
    return sorted(strategy.sites[int(m.metadata.dst_node_id)] for m in sent)


def _expected(cfg: FedConfig, n: int, server_round: int) -> list[int]:
    values = [site_carbon(cfg, s, server_round) for s in range(n)]
    median = float(np.median(values))
    order = sorted(range(n), key=lambda s: (values[s], s))
    chosen = [s for s in order if values[s] <= median]
    for s in order:
        if len(chosen) >= max(cfg.min_nodes, math.ceil(cfg.carbon_min_fraction * n)):
            break
        if s not in chosen:
            chosen.append(s)
    return sorted(chosen)


def test_carbon_aware_picks_by_the_intensity_at_the_rounds_time() -> None:
    # Before: by the intensities reported in the site's last round (round 1 here, as skipped sites
    # never report again): late in the day London (site 3) is cleaner than Madrid (site 0) and was still skipped.
    cfg = FedConfig(min_nodes=2, carbon_aware=True, carbon_min_fraction=0.5)
    strategy = make_strategy("fedavg", cfg)
    n = 4
    round1 = [site_carbon(cfg, s, 1) for s in range(n)]
    assert _aggregate(strategy, [0.01 * (s + 1) for s in range(n)],
                      metrics=[{"carbon-intensity": c} for c in round1]) is not None
    picks = {r: _chosen_sites(strategy, n, r) for r in range(2, 27)}
    assert picks == {r: _expected(cfg, n, r) for r in range(2, 27)}
    assert len({tuple(v) for v in picks.values()}) > 1  # the ranking changes during the day (rounds 23-24 here)
    assert picks == {r: _chosen_sites(strategy, n, r) for r in range(2, 27)}  # the same again: deterministic


def test_carbon_aware_never_trains_zero_sites() -> None:
    cfg = FedConfig(min_nodes=1, carbon_aware=True, carbon_min_fraction=0.01)
    strategy = make_strategy("fedavg", cfg)
    strategy.carbon_fn = None  # only what the sites report
    assert _aggregate(strategy, [0.01, 0.02, 0.03],
                      metrics=[{"carbon-intensity": c} for c in (math.nan, -5.0, math.inf)]) is not None
    assert strategy.carbon == {}  # none of those is an intensity
    assert _chosen_sites(strategy, 3, 2) == [0, 1, 2]
    strategy.carbon = {1: 900.0, 2: 900.0, 3: 900.0}
    assert _chosen_sites(strategy, 3, 3) == [0, 1, 2]  # all at the median
    strategy.carbon = {1: 100.0, 2: 900.0, 3: 950.0}
    assert _chosen_sites(strategy, 3, 4) == [0, 1]  # at or below the median 900
    strategy.carbon = {1: 950.0, 2: 100.0, 3: math.nan}
    assert _chosen_sites(strategy, 3, 5) == [1, 2]  # NaN is no intensity: the site trains, as unknown ones do


# --- FedProx reaches the site ----------------------------------------------------------------------


def test_fedprox_mu_reaches_the_client_and_pulls_its_update_towards_the_global_weights() -> None:
    cfg = FedConfig(local_steps=60, hours=1.0, learning_starts=16, batch_size=8, track_emissions=False,
                    embed_dim=16, hidden_dim=32, keep_replay=False, proximal_mu=0.5, min_nodes=1)
    base = get_weights(build_agent(cfg).online)
    arrays, layout = wire.encode(base)
    updates = {}
    for name in ("fedavg", "fedprox"):
        strategy = make_strategy(name, cfg.replace(strategy=name))
        grid = InProcessGrid([{"site": 1}], cfg.replace(strategy=name).to_run_config())
        (msg,) = strategy.configure_train(1, arrays, wire.layout_config(layout), grid)
        assert msg.content["config"].get("proximal-mu") == (0.5 if name == "fedprox" else None)
        (reply,) = grid.send_and_receive([msg])
        assert not reply.has_error(), reply.error
        got = wire.read_weights(reply.content)[0]
        updates[name] = math.sqrt(sum(float(np.sum((got[k].astype(np.float64) - base[k]) ** 2)) for k in base))
    # same site, round and seed: the proximal term shrinks the step from the global weights
    assert 0 < updates["fedprox"] < updates["fedavg"]


def test_site_carbon_reads_the_rounds_hour_of_the_sites_own_day() -> None:
    # Before: indexed from the start of the scenario's carbon window, which holds the day before
    # the start (the deferral forecast's history), so round r read the previous day's hour r - 1.
    from iro_fed.federated.task import site_profile
    from iro_fed.sim.scenarios.common import series_for
    from iro_fed.sim.scenarios.edge_iot import SITES
    from iro_fed.sim.signals import parse_time

    cfg = FedConfig()
    zones = {name: zone for name, zone, _, _ in SITES}
    checked = 0
    for site in range(4):
        profile = site_profile(cfg.scenario, site)
        start = profile["params"]["start"]
        zone = zones[profile["domain"]]
        series = series_for(zone)
        t0 = parse_time(("2022" + start[4:]) if zone in ("ES", "NO") else start)
        for server_round in (1, 8, 25):
            hour = (server_round - 1) % 24
            want = float(series.at(t0 + 3600.0 * hour))
            yesterday = float(series.at(t0 + 3600.0 * (hour - 24)))
            got = site_carbon(cfg, site, server_round)
            assert got == pytest.approx(want), (site, server_round)
            checked += got != pytest.approx(yesterday)
    assert checked > 0  # the two days differ somewhere, so the old indexing would have failed
