"""Flower's strategies by name, with update validation and carbon-aware participation added.

Each strategy is Flower's own (``flwr.serverapp.strategy``) subclassed once with
:class:`ValidatedStrategy` placed before it in the MRO, which calls ``super()`` after it has:

* **validated** every train reply against the global arrays it was sent: no ``arrays`` record,
  other array names, a shape that differs, a weight layout (names, shapes and dtypes packed into
  the one flat array, see :mod:`iro_fed.federated.wire`) missing, malformed or different from
  the one sent, NaN or Inf, a bad ``num-examples``, or an update
  norm ``||w - w_global||`` above ``norm_factor`` times the cohort's (lower) median norm: such a
  reply is dropped and logged with its node id and reason, and the round continues with the rest;
* (optionally) **preferred low-carbon sites**: every site reports its grid's current carbon
  intensity with its reply; the next round trains only the sites at or below the median of the
  last reports, but never fewer than ``carbon_min_fraction`` of the sampled ones (nor
  ``min_train_nodes``), and replies are down-weighted by ``min(1, median / intensity)``.

What happened in each round (participants, dropped replies and why, emissions) is kept in
``strategy.rounds[server_round]`` for the ServerApp's registry metadata.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from logging import INFO, WARNING
from typing import Any

import numpy as np

# flwr is an optional dependency: this module is imported only by the Flower apps, the
# federated CLI commands and the benchmark, never by core modules.
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp import strategy as fl

from iro_fed.federated.task import STRATEGIES, FedConfig, WeightLayout
from iro_fed.federated.wire import layout_of


def _arrays(msg: Message) -> ArrayRecord | None:
    if msg.has_error() or "arrays" not in msg.content.array_records:
        return None
    return msg.content.array_records["arrays"]


def check_reply(msg: Message, reference: dict[str, np.ndarray],
                layout: WeightLayout | None = None) -> tuple[str | None, float]:
    """``(reason or None, update norm)`` for one train reply against the global arrays.

    ``reference`` is the ``arrays`` record that was sent (with the flat encoding: the one flat
    vector) and ``layout`` the layout sent with it; a reply must then carry the same layout, so
    a reply with the right number of values in another arrangement (e.g. a transposed matrix)
    is dropped like a wrong shape. NaN/Inf are reported with the name of the array they are in.
    """
    if msg.has_error():
        return None, 0.0  # Flower's own check logs and skips replies that carry an error
    record = _arrays(msg)
    if record is None:
        return "no 'arrays' record", math.nan
    if layout is not None:
        try:
            theirs = layout_of(msg.content)
        except ValueError as exc:
            return f"unreadable {exc}", math.nan
        if theirs is None:
            return "no weight layout in the reply's 'config' record", math.nan
        diff = layout.difference(theirs)
        if diff is not None:
            return f"weight layout differs: {diff}", math.nan
    keys = list(record.keys())
    if set(keys) != set(reference):
        missing, extra = sorted(set(reference) - set(keys)), sorted(set(keys) - set(reference))
        return f"array names differ (missing {missing[:3]}, unexpected {extra[:3]})", math.nan
    metrics = msg.content.metric_records.get("metrics")
    n = metrics.get("num-examples") if metrics is not None else None
    if not isinstance(n, int | float) or not math.isfinite(float(n)) or n <= 0:
        return f"num-examples {n!r} is not a positive number", math.nan
    sq = 0.0
    for key in keys:
        arr = record[key].numpy()
        ref = reference[key]
        if tuple(arr.shape) != tuple(ref.shape):
            return f"shape of {key!r} is {tuple(arr.shape)}, expected {tuple(ref.shape)}", math.nan
        if arr.dtype != ref.dtype:
            return f"dtype of {key!r} is {arr.dtype}, expected {ref.dtype}", math.nan
        finite = np.isfinite(arr)
        if not finite.all():
            where = key
            if layout is not None and arr.ndim == 1:  # name the layer the first bad value is in
                where = layout.locate(int(np.flatnonzero(~finite)[0]))
            return f"non-finite values (NaN/Inf) in {where!r}", math.nan
        sq += float(np.sum((arr.astype(np.float64) - ref.astype(np.float64)) ** 2))
    norm = math.sqrt(sq)
    if not math.isfinite(norm):
        return "update norm overflows", math.nan
    return None, norm


def validate_replies(
    replies: Iterable[Message], reference: dict[str, np.ndarray], norm_factor: float,
    layout: WeightLayout | None = None,
) -> tuple[list[Message], list[dict[str, Any]]]:
    """Replies that pass :func:`check_reply` and the cohort norm test; the dropped ones with reasons."""
    replies = list(replies)
    kept: list[tuple[Message, float]] = []
    dropped: list[dict[str, Any]] = []
    for msg in replies:
        reason, norm = check_reply(msg, reference, layout)
        if reason is None:
            kept.append((msg, norm))
        else:
            dropped.append({"node": int(msg.metadata.src_node_id), "reason": reason})
    norms = sorted(n for m, n in kept if not m.has_error())
    if len(norms) >= 2:
        median = norms[(len(norms) - 1) // 2]  # the lower median: with two replies, the smaller one
        scale = math.sqrt(sum(float(np.sum(v.astype(np.float64) ** 2)) for v in reference.values()))
        limit = norm_factor * max(median, 1e-6 * scale, 1e-8)
        survivors = []
        for msg, norm in kept:
            if not msg.has_error() and norm > limit:
                dropped.append({"node": int(msg.metadata.src_node_id),
                                "reason": f"update norm {norm:.4g} > {norm_factor:g} x cohort median {median:.4g}"})
            else:
                survivors.append((msg, norm))
        kept = survivors
    return [m for m, _ in kept], dropped


class ValidatedStrategy:
    """Mixin placed before a Flower strategy: validation and carbon-aware participation, then ``super()``."""

    def __init__(self, *args: Any, norm_factor: float = 10.0, carbon_aware: bool = False,
                 carbon_min_fraction: float = 0.5, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.norm_factor = float(norm_factor)
        self.carbon_aware = bool(carbon_aware)
        self.carbon_min_fraction = float(carbon_min_fraction)
        self.carbon: dict[int, float] = {}
        self.sites: dict[int, Any] = {}
        self.rounds: dict[int, dict[str, Any]] = {}
        self._reference: dict[str, np.ndarray] = {}
        self._layout: WeightLayout | None = None

    # -- participation ------------------------------------------------------------------------

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self._reference = {k: v.numpy() for k, v in arrays.items()}
        self._layout = layout_of(RecordDict({"config": config}))  # None: one array per entry (no layout sent)
        self.rounds.setdefault(server_round, {})["started"] = time.time()
        messages = list(super().configure_train(server_round, arrays, config, grid))  # type: ignore[misc]
        info = self.rounds.setdefault(server_round, {})
        info["sampled"] = [int(m.metadata.dst_node_id) for m in messages]
        info["skipped_high_carbon"] = []
        if not self.carbon_aware or len(messages) < 2:
            return messages
        known = {m.metadata.dst_node_id: self.carbon[m.metadata.dst_node_id] for m in messages
                 if m.metadata.dst_node_id in self.carbon}
        if not known:
            return messages
        median = float(np.median(list(known.values())))
        need = max(int(getattr(self, "min_train_nodes", 1)), math.ceil(self.carbon_min_fraction * len(messages)))
        order = sorted(messages, key=lambda m: known.get(m.metadata.dst_node_id, -math.inf))
        chosen = [m for m in order if known.get(m.metadata.dst_node_id, -math.inf) <= median]
        for m in order:  # fill up to the minimum participation with the next-lowest intensities
            if len(chosen) >= need:
                break
            if all(m is not c for c in chosen):
                chosen.append(m)
        kept_ids = {id(m) for m in chosen}
        skipped = [int(m.metadata.dst_node_id) for m in messages if id(m) not in kept_ids]
        info["skipped_high_carbon"] = skipped
        if skipped:
            log(INFO, "carbon-aware: round %d skips %d high-carbon site(s) %s (median %.0f gCO2/kWh)",
                server_round, len(skipped), skipped, median)
        return chosen

    # -- aggregation ----------------------------------------------------------------------------

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        for msg in replies:  # remember what every site reported, valid update or not
            metrics = None if msg.has_error() else msg.content.metric_records.get("metrics")
            if metrics is not None:
                node = int(msg.metadata.src_node_id)
                if isinstance(metrics.get("carbon-intensity"), int | float):
                    self.carbon[node] = float(metrics["carbon-intensity"])
                if "site" in metrics:
                    self.sites[node] = metrics["site"]
        if self._reference:
            reference, layout = self._reference, self._layout
        else:
            reference, layout = _first_reference(replies)
        kept, dropped = validate_replies(replies, reference, self.norm_factor, layout)
        # Arrival order is random (nodes are sampled with random.sample), and so are node ids (Flower
        # draws them when SuperNodes join): summing in site order makes the aggregate of the same
        # sites' replies bit-identical from one deployment to the next, whatever else was dropped.
        kept.sort(key=self._site_order)
        for d in dropped:
            log(WARNING, "round %d: dropped the update of node %d: %s", server_round, d["node"], d["reason"])
        if self.carbon_aware and kept:
            self._carbon_weights(kept)
        info = self.rounds.setdefault(server_round, {})
        ok = [m for m in kept if not m.has_error()]
        info.update({
            "nodes": [int(m.metadata.src_node_id) for m in ok],
            "sites": [self.sites.get(int(m.metadata.src_node_id)) for m in ok],
            "dropped": dropped,
            "errors": [int(m.metadata.src_node_id) for m in replies if m.has_error()],
            "emissions_g": float(sum(_metric(m, "emissions-g") for m in replies if not m.has_error())),
            "replay_kept": int(sum(_metric(m, "replay-kept") for m in ok)),
            "timing": round_timing(replies, info.get("started", time.time()), time.time()),
        })
        arrays, metrics = super().aggregate_train(server_round, kept)  # type: ignore[misc]
        if arrays is None and ok:
            log(WARNING, "round %d: %s aggregated nothing from %d valid update(s); the global policy is unchanged",
                server_round, type(self).__name__, len(ok))
        info["aggregated"] = arrays is not None
        return arrays, metrics

    def _site_order(self, msg: Message) -> tuple[int, float, int]:
        """Sort key: the site the reply reports, then its node id (replies without a site last)."""
        node = int(msg.metadata.src_node_id)
        site = self.sites.get(node)
        if isinstance(site, int | float) and not isinstance(site, bool):
            return (0, float(site), node)
        return (1, 0.0, node)

    def _carbon_weights(self, kept: list[Message]) -> None:
        values = [self.carbon[int(m.metadata.src_node_id)] for m in kept if int(m.metadata.src_node_id) in self.carbon]
        if not values:
            return
        median = float(np.median(values))
        for m in kept:
            c = self.carbon.get(int(m.metadata.src_node_id))
            if m.has_error() or c is None or c <= median or c <= 0:
                continue
            metrics = m.content.metric_records["metrics"]
            metrics["num-examples"] = float(metrics["num-examples"]) * max(0.1, median / c)


def round_timing(replies: Sequence[Message], sent: float, received: float) -> dict[str, float]:
    """Where a round's time went, on the critical path (the reply created last), in seconds.

    From the reply's ``created_at`` and the ClientApp's ``handler-s`` / ``train-s`` metrics
    (one machine's clock on loopback; across machines, clock skew moves time between the
    ``dispatch`` and ``return`` parts):

    * ``replies_s``: configure_train -> every reply pulled by the ServerApp;
    * ``dispatch_s``: sent -> the ClientApp handler started (SuperNode poll, executor poll,
      ClientApp process start, imports of flwr and the app, pulling the message);
    * ``client_setup_s``: handler time that is not training (imports inside the handler,
      building the network and the site's env);
    * ``client_train_s``: the local training itself (the only compute on the client);
    * ``return_s``: reply created -> pulled by the ServerApp (ClientApp push, SuperNode push, ServerApp poll).

    ``client_handler_s`` / ``client_train_s_max`` are the maxima over all replies.
    """
    ok = [m for m in replies if not m.has_error() and m.content.metric_records.get("metrics") is not None]
    out = {"replies_s": received - sent}
    if not ok:
        return out
    last = max(ok, key=lambda m: float(m.metadata.created_at))
    created = float(last.metadata.created_at)
    handler, train = _metric(last, "handler-s"), _metric(last, "train-s")
    out.update({
        "dispatch_s": max(0.0, created - handler - sent), "client_setup_s": max(0.0, handler - train),
        "client_train_s": train, "return_s": max(0.0, received - created),
        "client_handler_s": max(_metric(m, "handler-s") for m in ok),
        "client_train_s_max": max(_metric(m, "train-s") for m in ok),
    })
    return out


def _metric(msg: Message, key: str) -> float:
    metrics = msg.content.metric_records.get("metrics")
    value = metrics.get(key) if metrics is not None else None
    return float(value) if isinstance(value, int | float) and math.isfinite(float(value)) else 0.0


def _first_reference(replies: list[Message]) -> tuple[dict[str, np.ndarray], WeightLayout | None]:
    """Without the sent arrays (aggregate called directly): the first valid reply as the shape and layout reference."""
    for msg in replies:
        record = _arrays(msg)
        if record is not None:
            try:
                layout = layout_of(msg.content)
            except ValueError:
                continue
            return {k: np.zeros_like(v.numpy()) for k, v in record.items()}, layout
    return {}, None


class FedAvg(ValidatedStrategy, fl.FedAvg):
    """Flower's FedAvg with update validation."""


class FedProx(ValidatedStrategy, fl.FedProx):
    """Flower's FedProx (``proximal-mu`` sent to the sites) with update validation."""


class FedMedian(ValidatedStrategy, fl.FedMedian):
    """Flower's coordinate-wise median with update validation."""


class FedTrimmedAvg(ValidatedStrategy, fl.FedTrimmedAvg):
    """Flower's trimmed mean with update validation."""


class Krum(ValidatedStrategy, fl.Krum):
    """Flower's Krum with update validation."""


class Bulyan(ValidatedStrategy, fl.Bulyan):
    """Flower's Bulyan (needs ``4 * num_malicious + 3`` replies) with update validation."""


CLASSES: dict[str, type] = {"fedavg": FedAvg, "fedprox": FedProx, "fedmedian": FedMedian,
                            "fedtrimmedavg": FedTrimmedAvg, "krum": Krum, "bulyan": Bulyan}
assert tuple(CLASSES) == STRATEGIES


def make_strategy(name: str, cfg: FedConfig | None = None, **overrides: Any) -> Any:
    """The named strategy configured from ``cfg``; ``overrides`` go to its constructor."""
    cfg = cfg or FedConfig(strategy=name)
    cls = CLASSES.get(name)
    if cls is None:
        raise ValueError(f"strategy: unknown {name!r} (known: {', '.join(CLASSES)})")
    kwargs: dict[str, Any] = {
        "fraction_train": cfg.fraction_train, "fraction_evaluate": 0.0, "min_train_nodes": cfg.min_nodes,
        "min_available_nodes": cfg.min_nodes, "norm_factor": cfg.norm_factor, "carbon_aware": cfg.carbon_aware,
        "carbon_min_fraction": cfg.carbon_min_fraction,
    }
    if name == "fedprox":
        kwargs["proximal_mu"] = cfg.proximal_mu
    elif name == "fedtrimmedavg":
        kwargs["beta"] = cfg.trim_beta
    elif name in ("krum", "bulyan"):
        kwargs["num_malicious_nodes"] = cfg.num_malicious
    kwargs.update(overrides)
    return cls(**kwargs)
