"""Flower's strategies by name, with update validation and carbon-aware participation added.

Each strategy is Flower's own (``flwr.serverapp.strategy``) subclassed once with
:class:`ValidatedStrategy` placed before it in the MRO, which calls ``super()`` after it has:

* **validated** every train reply against the global arrays it was sent: no ``arrays`` record,
  other array names, a shape that differs, a weight layout (names, shapes and dtypes packed into
  the one flat array, see :mod:`iro_fed.federated.wire`) missing, malformed or different from
  the one sent, NaN or Inf, a ``num-examples`` that is not positive or above ``max_examples``
  (what a site trains on per round: a site claiming 10^12 examples would otherwise own the
  weighted average), or an update norm ``||w - w_global||`` above ``norm_factor`` times the
  cohort's (lower) median norm; with a single valid reply there is no cohort, and the median of
  the previous round's accepted norms stands in for it (none yet: ``||w_global||`` alone bounds
  it, and a WARNING names the node). Whichever median it is, it is never above the global weights'
  own norm ``||w_global||``, so no kept update is longer than ``norm_factor x ||w_global||``: two
  colluding replies among zero updates are a cohort of their own, whose median was theirs to set.
  A norm below ``1e-6`` of the global weights' norm (a site that took no gradient step) is in
  neither median and is never dropped for its norm. Such a reply is
  dropped and logged with its node id and reason, and the round continues with the rest; with no
  reply left the round aggregates nothing and the global model stays the previous one;
* **made the replies consistent** for Flower's aggregation, which raises (ending the run) when the
  replies' metric keys differ (a site run by an edge agent adds ``experience-*`` metrics) or a
  reply carries other array or metric records: each kept reply keeps only its ``arrays`` and the
  scalar ``metrics`` every kept reply has;
* (optionally) **preferred low-carbon sites**: the sites at or below the median carbon intensity
  *at the round's time* train, but never fewer than ``carbon_min_fraction`` of the sampled ones
  (nor ``min_train_nodes``), ties broken by site then node id; the intensity is ``carbon_fn(site,
  round)`` for a site that has reported which site it is (the ServerApp passes the scenario's grid
  data), else the site's last report. Failing nodes are tried last here too: they neither set the
  median nor train for being at or below it, only to make up the minimum participation;
* **tried failing nodes last** (every strategy, with or without carbon): a node whose last
  ``DEMOTE_AFTER`` (2) replies were all dropped, errors or missing (asked to train, no reply within
  Flower's reply timeout: ``no_reply`` in ``rounds``) is swapped out of Flower's random sample for a
  healthy node it left out, and is asked only when the healthy nodes cannot fill the sample
  (``fraction_train``, ``min_train_nodes``); when every node is asked (``fraction_train`` 1, or the
  minimum is every node) the sample has nothing to demote, and only carbon-aware selection (above)
  can leave a failing node out. A failing node not asked is in ``skipped_failing``; it is *skipped*
  in a round where Flower's sample drew it (or carbon-aware selection left it out of that sample),
  not in one where the draw passed it by. After ``RETRY_AFTER`` (5) rounds skipped so it gets its
  turn again at Flower's next draw of it (a site may have been repaired under the same node id), so it
  trains in one of every ``RETRY_AFTER + 1`` draws of it whatever ``fraction_train`` is, and one more
  dropped reply puts it last again; a valid reply clears its record. Records are kept for connected nodes only, a few
  integers each; so are the sites and intensities remembered by node (every strategy).
  Replies are down-weighted by ``min(1, median / intensity)``, but never below
  ``CARBON_WEIGHT_FLOOR`` (0.1) of their weight; ``median`` and ``intensity`` are the intensities
  the valid replies report *this round*: a reply that reports none (or no number >= 0) is unknown,
  keeps its weight and is not in the median, as an unknown site trains in selection (an intensity
  it reported in an earlier round does not weigh today's update). Only a reply that passed
  validation updates the site and intensity remembered for its node (a dropped one is not believed).

After aggregation the ``fixed_arrays`` (buffers that are constants of the architecture, e.g.
the distributional DQN's ``support``) are put back exactly as sent: averaging identical float
vectors is not exact (3 equal replies weighted 3:7:11 moved them by 5e-7) and they would drift.

What happened in each round (participants, what was aggregated, dropped replies and why,
emissions) is kept in ``strategy.rounds[server_round]`` for the ServerApp's registry metadata:
``nodes``/``sites`` are the replies the aggregate was computed from (Krum: the one it selected,
Bulyan: its selection; none when the round aggregated nothing), ``valid_nodes``/``valid_sites``
those that passed validation. ``emissions_by_site`` breaks ``emissions_g`` down by reply (every
reply without an error, as the sum; in site order): ``site`` (as ``valid_sites``: ``None`` for a
node no valid reply has said), ``node``, ``emissions_g`` (``None`` when the site did not measure)
and ``country`` (the ``emissions`` record's alpha-3 code whose grid mix measured it; ``None`` from
a site that sends none, an older one, or a malformed one, which is logged naming the node).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any

import numpy as np

# flwr is an optional dependency: this module is imported only by the Flower apps, the
# federated CLI commands and the benchmark, never by core modules.
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp import strategy as fl
from flwr.serverapp.strategy.multikrum import select_multikrum
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from iro_fed.federated.emissions import COUNTRY_KEY, EMISSIONS_RECORD, alpha3
from iro_fed.federated.task import (
    FLAT_KEY,
    STRATEGIES,
    FedConfig,
    WeightLayout,
    fixed_buffers,
    required_nodes,
    site_carbon,
)
from iro_fed.federated.wire import layout_of

#: Least factor by which carbon-aware aggregation down-weights a reply (see ``_carbon_weights``).
CARBON_WEIGHT_FLOOR = 0.1
#: Node selection (Flower's sample, carbon-aware selection) tries a node last once this many of its
#: train replies in a row were dropped, errors or missing: one bad round may be a fluke, two in a row
#: are a pattern, and an unknown intensity (a node that never had a valid reply) would otherwise put
#: it first every round.
DEMOTE_AFTER = 2
#: ... and retries it after this many rounds in which it was skipped for that (Flower's sample drew it,
#: and it was left out): rounds whose draw passed it by do not count.
RETRY_AFTER = 5


def _arrays(msg: Message) -> ArrayRecord | None:
    if msg.has_error() or "arrays" not in msg.content.array_records:
        return None
    return msg.content.array_records["arrays"]


def check_reply(msg: Message, reference: dict[str, np.ndarray],
                layout: WeightLayout | None = None, max_examples: float | None = None,
                reference64: Mapping[str, np.ndarray] | None = None) -> tuple[str | None, float]:
    """``(reason or None, update norm)`` for one train reply against the global arrays.

    ``reference`` is the ``arrays`` record that was sent (with the flat encoding: the one flat
    vector) and ``layout`` the layout sent with it; a reply must then carry the same layout, so
    a reply with the right number of values in another arrangement (e.g. a transposed matrix)
    is dropped like a wrong shape. NaN/Inf are reported with the name of the array they are in.
    ``max_examples`` bounds ``num-examples`` (the weight of the reply in FedAvg/FedProx).
    ``reference64`` is ``reference`` as float64 (:func:`_float64`), made once per round by a caller
    that checks several replies; without it each entry is converted here.
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
    if not isinstance(n, int | float) or isinstance(n, bool) or not math.isfinite(float(n)) or n <= 0:
        return f"num-examples {n!r} is not a positive number", math.nan
    if max_examples is not None and n > max_examples:
        return f"num-examples {n!r} is more than a site trains on in a round ({max_examples:g})", math.nan
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
        ref64 = ref.astype(np.float64) if reference64 is None else reference64[key]
        sq += float(np.sum((arr.astype(np.float64) - ref64) ** 2))
    norm = math.sqrt(sq)
    if not math.isfinite(norm):
        return "update norm overflows", math.nan
    return None, norm


def validate_replies(
    replies: Iterable[Message], reference: dict[str, np.ndarray], norm_factor: float,
    layout: WeightLayout | None = None, max_examples: float | None = None, previous_norms: Sequence[float] = (),
) -> tuple[list[Message], list[dict[str, Any]]]:
    """Replies that pass :func:`check_reply` and the cohort norm test; the dropped ones with reasons."""
    reference64 = _float64(reference)
    kept, dropped, _ = _validate(replies, reference, norm_factor, layout, max_examples, previous_norms,
                                 reference64, global_norm(reference64))
    return [m for m, _ in kept], dropped


def _float64(reference: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``reference`` as float64, converted once per round (not once per reply and entry)."""
    return {k: np.asarray(v, dtype=np.float64) for k, v in reference.items()}


def global_norm(reference: Mapping[str, np.ndarray]) -> float:
    """``||w_global||``: the norm of the global weights sent (all entries together)."""
    return math.sqrt(sum(float(np.sum(np.asarray(v, dtype=np.float64) ** 2)) for v in reference.values()))


def _floor(scale: float) -> float:
    """The least update norm the norm test counts, for global weights of norm ``scale`` (``1e-6`` of
    it, at least ``1e-8``): a smaller one is a site that did not train, in no median and never an outlier."""
    return max(1e-6 * scale, 1e-8)


#: What :func:`_validate` compared the update norms with (``None``: nothing, no reply was checked).
COHORT, PREVIOUS, GLOBAL = "cohort median", "previous round's median", "global weights' norm"
#: The cohort median when it was above ``||w_global||`` (the norms were compared with ``||w_global||``).
COHORT_CAPPED = "cohort median capped at the global weights' norm"


def _lower_median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]  # with two values, the smaller one


def _validate(
    replies: Iterable[Message], reference: dict[str, np.ndarray], norm_factor: float,
    layout: WeightLayout | None, max_examples: float | None, previous_norms: Sequence[float],
    reference64: Mapping[str, np.ndarray], scale: float,
) -> tuple[list[tuple[Message, float]], list[dict[str, Any]], str | None]:
    """:func:`validate_replies` with each kept reply's update norm, and what the norms were compared
    with (:data:`COHORT`, :data:`COHORT_CAPPED`, :data:`PREVIOUS`, :data:`GLOBAL`; ``None``: the norm test
    did not run). ``reference64`` (:func:`_float64`) and ``scale`` (``||w_global||``) are the round's,
    computed once by the caller."""
    replies = list(replies)
    kept: list[tuple[Message, float]] = []
    dropped: list[dict[str, Any]] = []
    for msg in replies:
        reason, norm = check_reply(msg, reference, layout, max_examples, reference64)
        if reason is None:
            kept.append((msg, norm))
        else:
            dropped.append({"node": int(msg.metadata.src_node_id), "reason": reason})
    floor = _floor(scale)
    # A zero update (a site that took no gradient step: fewer transitions than learning-starts, just
    # joined) says nothing about how far a trained update goes: as the cohort's (lower) median it
    # dropped every site that trained, and as the previous round's median it did so for good.
    norms = [n for m, n in kept if not m.has_error() and n >= floor]
    previous = [n for n in previous_norms if n >= floor]
    # A norm "far outside the cohort" needs a cohort: one trained reply alone is compared with the
    # updates accepted in the previous round, and with none yet (round 1, or the others sent zero
    # updates) with the global weights' own norm, a scale-free bound. That bound also caps the
    # previous median, which may come from such a lone reply: an attacker alone among zero updates
    # kept 1000 and made it the bar of later rounds. (Global weights all 0: no scale, not checked.)
    if len(norms) >= 2:
        median, what = _lower_median(norms), COHORT
    elif norms and previous and (scale <= 0 or _lower_median(previous) <= scale):
        median, what = _lower_median(previous), PREVIOUS
    elif norms and scale > 0:
        median, what = scale, GLOBAL
    else:
        return kept, dropped, None
    if scale > 0 and median > scale:
        # The cohort's median is capped too: colluding replies (two or more huge updates while the honest
        # sites sent zero ones) were the whole cohort, and their median let every one of them through.
        median, what = scale, COHORT_CAPPED
    limit = norm_factor * max(median, floor)
    survivors = []
    for msg, norm in kept:
        if not msg.has_error() and norm > limit:
            dropped.append({"node": int(msg.metadata.src_node_id),
                            "reason": f"update norm {norm:.4g} > {norm_factor:g} x {what} {median:.4g}"})
        else:
            survivors.append((msg, norm))
    return survivors, dropped, what


def consistent_metrics(replies: Sequence[Message]) -> None:
    """Leave each reply only its ``arrays`` record and the scalar ``metrics`` all of them have.

    Flower's strategies raise ``InconsistentMessageReplies`` (which ends the run) when the replies'
    metric keys differ or a reply has other array or metric records; the replies here passed
    :func:`check_reply`, so they all have ``arrays`` and a positive ``num-examples``.
    """
    ok = [m for m in replies if not m.has_error()]
    if not ok:
        return
    common: set[str] | None = None
    for msg in ok:
        keys = {k for k, v in msg.content.metric_records["metrics"].items()
                if isinstance(v, int | float) and not isinstance(v, bool)}
        common = keys if common is None else common & keys
    for msg in ok:
        content = msg.content
        for name in [n for n in content.array_records if n != "arrays"] + \
                    [n for n in content.metric_records if n != "metrics"]:
            del content[name]
        metrics = content.metric_records["metrics"]
        for key in [k for k in metrics if k not in (common or set())]:
            del metrics[key]


class ValidatedStrategy:
    """Mixin placed before a Flower strategy: validation and carbon-aware participation, then ``super()``."""

    def __init__(self, *args: Any, norm_factor: float = 10.0, carbon_aware: bool = False,
                 carbon_min_fraction: float = 0.5, max_examples: float | None = None,
                 fixed_arrays: Iterable[str] = (), carbon_fn: Callable[[int, int], float] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.norm_factor = float(norm_factor)
        self.carbon_aware = bool(carbon_aware)
        self.carbon_min_fraction = float(carbon_min_fraction)
        self.max_examples = None if max_examples is None else float(max_examples)
        self.fixed_arrays = tuple(fixed_arrays)
        self.carbon_fn = carbon_fn
        self.carbon: dict[int, float] = {}
        self.sites: dict[int, Any] = {}
        self.rounds: dict[int, dict[str, Any]] = {}
        self._reference: dict[str, np.ndarray] = {}
        self._layout: WeightLayout | None = None
        self._accepted_norms: list[float] = []  # the last round's accepted update norms
        self._selected: list[RecordDict] | None = None  # what Krum/Bulyan selected in this round
        # train replies dropped, errors or missing in a row, by node (at most DEMOTE_AFTER), and
        # the rounds a node tried last has been skipped since (below RETRY_AFTER)
        self._failures: dict[int, int] = {}
        self._benched: dict[int, int] = {}

    # -- participation ------------------------------------------------------------------------

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self._reference = {k: v.numpy() for k, v in arrays.items()}
        self._layout = layout_of(RecordDict({"config": config}))  # None: one array per entry (no layout sent)
        self.rounds.setdefault(server_round, {})["started"] = time.time()
        messages = list(super().configure_train(server_round, arrays, config, grid))  # type: ignore[misc]
        info = self.rounds.setdefault(server_round, {})
        # Bounded memory on a long-lived server whose SuperNodes come and go (each one that joins
        # gets a new node id): records of connected nodes only.
        connected = {int(n) for n in grid.get_node_ids()}
        for record in (self.carbon, self.sites, self._failures, self._benched):
            for node in [n for n in record if n not in connected]:
                del record[node]
        drawn = {int(m.metadata.dst_node_id) for m in messages}  # Flower's own sample
        messages, left_out = self._sample_failing_last(messages, connected)
        info["sampled"] = [int(m.metadata.dst_node_id) for m in messages]
        info["skipped_high_carbon"] = []
        info["skipped_failing"] = left_out
        if self.carbon_aware and len(messages) >= 2:
            messages = self._prefer_low_carbon(server_round, messages, info)
        if info["skipped_failing"]:
            log(INFO, "round %d skips node(s) %s: their last %d replies were dropped, errors or missing",
                server_round, info["skipped_failing"], DEMOTE_AFTER)
        # Only a node Flower drew lost a turn to its failures. Counting every round it sat out brought
        # it back after RETRY_AFTER rounds whatever fraction_train is: at 0.2 it had lost about one
        # draw, and trained half as often as a healthy node instead of once in RETRY_AFTER + 1 draws.
        for node in (n for n in info["skipped_failing"] if n in drawn):
            self._benched[node] = self._benched.get(node, 0) + 1
            if self._benched[node] >= RETRY_AFTER:  # its turn again; one more drop puts it last again
                del self._benched[node]
                self._failures[node] = DEMOTE_AFTER - 1
        return messages

    def _sample_failing_last(self, messages: list[Message], connected: set[int]) -> tuple[list[Message], list[int]]:
        """Flower's sample with each failing node in it (``DEMOTE_AFTER`` bad replies in a row) swapped for a
        healthy connected node it left out, while there is one; returns the sample and the failing nodes
        not in it (sorted).

        Flower's size stands (``fraction_train``, ``min_train_nodes``): a failing node is only tried last, and
        still makes up a sample the healthy nodes cannot fill. The healthy stand-ins are drawn with ``random``
        as Flower draws its sample, so a seeded run stays reproducible. A round that asks every connected node
        has nothing to demote (carbon-aware selection may still leave failing nodes out, see
        :meth:`_prefer_low_carbon`). Every failing node not asked is returned (``skipped_failing``), but only
        those Flower drew count towards ``RETRY_AFTER`` (:meth:`configure_train`): a failing node gets one
        turn in ``RETRY_AFTER + 1`` of Flower's draws of it, whatever ``fraction_train`` is.
        """
        sampled = [int(m.metadata.dst_node_id) for m in messages]
        failing = self._failing(connected)
        if not messages or not failing or not connected - set(sampled):
            return messages, []
        spare = sorted(connected - set(sampled) - failing)
        swap = [n for n in sampled if n in failing][:len(spare)]
        stand_ins = dict(zip(swap, random.sample(spare, len(swap)), strict=True))
        out = [m if int(m.metadata.dst_node_id) not in stand_ins else
               Message(content=m.content, message_type=m.metadata.message_type,
                       dst_node_id=stand_ins[int(m.metadata.dst_node_id)])
               for m in messages]
        asked = {int(m.metadata.dst_node_id) for m in out}
        return out, sorted(failing - asked)

    def _failing(self, nodes: Iterable[int]) -> set[int]:
        """Those of ``nodes`` whose last ``DEMOTE_AFTER`` train replies were all bad: tried last."""
        return {n for n in nodes if self._failures.get(n, 0) >= DEMOTE_AFTER}

    def _prefer_low_carbon(self, server_round: int, messages: list[Message], info: dict[str, Any]) -> list[Message]:
        """The sampled nodes at or below the median intensity, failing ones tried last (see the module's
        docstring); records the nodes left out in ``info`` (``skipped_high_carbon``, ``skipped_failing``)."""
        known = {}
        for m in messages:
            value = self.intensity(int(m.metadata.dst_node_id), server_round)
            if value is not None:
                known[int(m.metadata.dst_node_id)] = value
        info["carbon"] = dict(known)
        failing = self._failing(int(m.metadata.dst_node_id) for m in messages)
        if not known and not failing:
            return messages
        # the median of the nodes that get their turn: a failing node's intensity does not move it
        values = [c for node, c in known.items() if node not in failing]
        median = float(np.median(values)) if values else math.inf
        need = max(int(getattr(self, "min_train_nodes", 1)), math.ceil(self.carbon_min_fraction * len(messages)), 1)

        def key(m: Message) -> tuple[bool, float, tuple[int, float, int]]:
            # failing nodes last; then unknown intensity first (they train: nothing says they are
            # high), ties by site then node
            node = int(m.metadata.dst_node_id)
            return node in failing, known.get(node, -math.inf), self._node_order(node)

        order = sorted(messages, key=key)
        chosen = [m for m in order if int(m.metadata.dst_node_id) not in failing
                  and known.get(int(m.metadata.dst_node_id), -math.inf) <= median]
        for m in order:  # fill up to the minimum participation with the next-lowest intensities
            if len(chosen) >= need:
                break
            if all(m is not c for c in chosen):
                chosen.append(m)
        kept_ids = {id(m) for m in chosen}
        skipped = sorted(int(m.metadata.dst_node_id) for m in messages if id(m) not in kept_ids)
        info["skipped_high_carbon"] = [n for n in skipped if n not in failing]
        info["skipped_failing"] = sorted(info["skipped_failing"] + [n for n in skipped if n in failing])
        if info["skipped_high_carbon"]:
            log(INFO, "carbon-aware: round %d skips %d high-carbon site(s) %s (median %.0f gCO2/kWh)",
                server_round, len(info["skipped_high_carbon"]), info["skipped_high_carbon"], median)
        return chosen

    def intensity(self, node: int, server_round: int) -> float | None:
        """A node's carbon intensity at ``server_round``'s time: ``carbon_fn`` for a node whose site is
        known, else its last report (``None``: nothing known, or not a finite value >= 0)."""
        site = self.sites.get(node)
        value: Any = self.carbon.get(node)
        if self.carbon_fn is not None and isinstance(site, int) and not isinstance(site, bool) and site >= 0:
            try:
                value = self.carbon_fn(site, server_round)
            except (ValueError, KeyError, IndexError) as exc:
                log(WARNING, "carbon-aware: no intensity for site %s in round %d (%s); its last report counts",
                    site, server_round, exc)
        return _intensity(value)

    # -- aggregation ----------------------------------------------------------------------------

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        sent = bool(self._reference)
        if sent:
            reference, layout = self._reference, self._layout
        else:
            reference, layout = _first_reference(replies)
        reference64 = _float64(reference)
        scale = global_norm(reference64)  # ||w_global||: once per round, for every reply's check
        checked, dropped, basis = _validate(replies, reference, self.norm_factor, layout, self.max_examples,
                                            self._accepted_norms, reference64, scale)
        floor = _floor(scale)
        trained = [(m, n) for m, n in checked if not m.has_error() and n >= floor]
        accepted = [n for _, n in trained]
        # Stored below like any accepted norm: it is at most norm_factor x ||w_global||, and a lone reply's
        # bar never exceeds that (_validate), so an unchecked norm cannot raise a later round's bar, while
        # a run with one trained reply per round (one site, or fraction_train sampling one) still has one.
        if basis == GLOBAL and accepted:
            self._warn_lone(server_round, *trained[0], scale)
        if accepted:  # a round of zero updates only (no site trained) leaves the last real ones
            self._accepted_norms = accepted
        kept = [m for m, _ in checked]
        # Counted in every mode; the next configure_train tries the failing nodes last.
        self._count_failures(server_round, replies, dropped)
        # Only replies that passed validation update what a site is and its carbon: a dropped one
        # (poisoned, malformed) is not to be believed, e.g. a low intensity that buys a seat next round
        # or another site's id. Read before consistent_metrics, which may trim these keys.
        reported = self._remember(kept)
        # Read before consistent_metrics too: a reply without a key (a site of an earlier release)
        # would trim it from the others, and the round's emissions would count theirs as 0.
        live = [m for m in replies if not m.has_error()]
        by_site = [site_emissions(m, self.sites.get(int(m.metadata.src_node_id)), server_round)
                   for m in sorted(live, key=self._site_order)]
        emissions_g = float(sum(_metric(m, "emissions-g") for m in live))
        # a site without codecarbon sends 0.0: the round's sum is a measurement only if every site measured
        emissions_measured = all(r["emissions_g"] is not None for r in by_site)
        replay_kept = int(sum(_metric(m, "replay-kept") for m in kept if not m.has_error()))
        consistent_metrics(kept)
        # Arrival order is random (nodes are sampled with random.sample), and so are node ids (Flower
        # draws them when SuperNodes join): summing in site order makes the aggregate of the same
        # sites' replies bit-identical from one deployment to the next, whatever else was dropped.
        kept.sort(key=self._site_order)
        for d in dropped:
            log(WARNING, "round %d: dropped the update of node %d: %s", server_round, d["node"], d["reason"])
        if self.carbon_aware and kept:
            self._carbon_weights(kept, reported)
        info = self.rounds.setdefault(server_round, {})
        ok = [m for m in kept if not m.has_error()]
        info.update({
            "valid_nodes": [int(m.metadata.src_node_id) for m in ok],
            "valid_sites": [self.sites.get(int(m.metadata.src_node_id)) for m in ok],
            "dropped": dropped,
            "errors": [int(m.metadata.src_node_id) for m in replies if m.has_error()],
            "emissions_g": emissions_g,
            "emissions_measured": emissions_measured,
            "emissions_by_site": by_site,
            "replay_kept": replay_kept,
            "timing": round_timing(replies, info.get("started", time.time()), time.time()),
        })
        contents = {id(m.content): m for m in ok}  # before aggregation: FedMedian pops the arrays
        self._selected = None
        arrays, metrics = self._aggregate(server_round, kept)
        if arrays is None and ok:
            log(WARNING, "round %d: %s aggregated nothing from %d valid update(s); the global policy is unchanged",
                server_round, type(self).__name__, len(ok))
        if arrays is not None and sent and self.fixed_arrays:
            arrays = restore_fixed(arrays, self._reference, self._layout, self.fixed_arrays)
        used = [] if arrays is None else ok if self._selected is None else \
            sorted((contents[id(c)] for c in self._selected), key=self._site_order)
        info["nodes"] = [int(m.metadata.src_node_id) for m in used]
        info["sites"] = [self.sites.get(int(m.metadata.src_node_id)) for m in used]
        info["aggregated"] = arrays is not None
        return arrays, metrics

    def _warn_lone(self, server_round: int, msg: Message, norm: float, scale: float) -> None:
        """Log the one trained reply of a round with no median to check it against (round 1, or the other
        sites sent zero updates): only the bound ``norm_factor x ||w_global||`` held it."""
        node = int(msg.metadata.src_node_id)
        metrics = msg.content.metric_records.get("metrics")
        site = metrics.get("site") if metrics is not None and "site" in metrics else self.sites.get(node)
        log(WARNING, "round %d: the update of node %d%s is the round's only trained one and no earlier round's "
            "median (at most ||w_global||) checks it: kept (norm %.4g), bounded only by %g x ||w_global|| %.4g",
            server_round, node, "" if site is None else f" (site {site})", norm, self.norm_factor, scale)

    def _remember(self, replies: Iterable[Message]) -> dict[int, float]:
        """Store each reply's reported ``carbon-intensity`` and ``site`` by node (replies with an error have
        none); returns the intensities reported in these replies, by node."""
        reported: dict[int, float] = {}
        for msg in replies:
            metrics = None if msg.has_error() else msg.content.metric_records.get("metrics")
            if metrics is not None:
                node = int(msg.metadata.src_node_id)
                c = _intensity(metrics.get("carbon-intensity"))
                if c is not None:
                    self.carbon[node] = reported[node] = c
                if "site" in metrics:
                    self.sites[node] = metrics["site"]
        return reported

    def _count_failures(self, server_round: int, replies: Sequence[Message], dropped: Sequence[dict[str, Any]]) -> None:
        """Count each node's train replies dropped or errors in a row (capped at ``DEMOTE_AFTER``);
        a valid reply clears its record. A node asked to train that did not reply counts as a failed
        reply too: Grid.send_and_receive returns only the replies that came within its timeout, so
        a node that hangs every round would otherwise never be tried last."""
        bad = {d["node"] for d in dropped}
        replied: set[int] = set()
        for msg in replies:
            node = int(msg.metadata.src_node_id)
            replied.add(node)
            if msg.has_error() or node in bad:
                self._failures[node] = min(DEMOTE_AFTER, self._failures.get(node, 0) + 1)
            else:
                self._failures.pop(node, None)
                self._benched.pop(node, None)
        info = self.rounds.setdefault(server_round, {})
        # the nodes configure_train asked (none known when it did not run: aggregate_train alone)
        asked = set(info.get("sampled", [])) - set(info.get("skipped_high_carbon", [])) \
            - set(info.get("skipped_failing", []))
        info["no_reply"] = sorted(asked - replied)
        for node in info["no_reply"]:
            self._failures[node] = min(DEMOTE_AFTER, self._failures.get(node, 0) + 1)
        if info["no_reply"]:
            log(WARNING, "round %d: no reply from node(s) %s within the timeout", server_round, info["no_reply"])

    def _aggregate(self, server_round: int, replies: list[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The strategy's own aggregation of the validated replies."""
        return super().aggregate_train(server_round, replies)  # type: ignore[misc]

    def _site_order(self, msg: Message) -> tuple[int, float, int]:
        """Sort key: the site the reply reports, then its node id (replies without a site last)."""
        return self._node_order(int(msg.metadata.src_node_id))

    def _node_order(self, node: int) -> tuple[int, float, int]:
        site = self.sites.get(node)
        if isinstance(site, int | float) and not isinstance(site, bool):
            return (0, float(site), node)
        return (1, 0.0, node)

    def _carbon_weights(self, kept: list[Message], reported: dict[int, float]) -> None:
        """Down-weight the kept replies by ``reported``, this round's intensities (see the module's
        docstring); a reply without one keeps its weight (unknown, not its earlier report)."""
        values = [reported[int(m.metadata.src_node_id)] for m in kept
                  if not m.has_error() and int(m.metadata.src_node_id) in reported]
        if not values:
            return
        median = float(np.median(values))
        for m in kept:
            c = reported.get(int(m.metadata.src_node_id))
            if m.has_error() or c is None or c <= median or c <= 0:
                continue
            metrics = m.content.metric_records["metrics"]
            # Floor 0.1: intensities are self-reported, so one site reporting a very low value (which
            # drags the median down) can cut another's weight at most tenfold; a site that trained
            # keeps a tenth of its say (20x the median: 0.1, not 0.05).
            metrics["num-examples"] = float(metrics["num-examples"]) * max(CARBON_WEIGHT_FLOOR, median / c)


def _intensity(value: Any) -> float | None:
    """``value`` as a carbon intensity: a finite number >= 0 (gCO2/kWh), else None."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def restore_fixed(arrays: ArrayRecord, reference: dict[str, np.ndarray], layout: WeightLayout | None,
                  names: Iterable[str]) -> ArrayRecord:
    """``arrays`` with the entries ``names`` (those the layout or record has) copied from ``reference``."""
    if layout is not None:
        if list(arrays.keys()) != [FLAT_KEY] or FLAT_KEY not in reference:
            return arrays
        flat = np.array(arrays[FLAT_KEY].numpy(), copy=True)
        ref = reference[FLAT_KEY]
        ends = np.cumsum(layout.sizes)
        for name, end, size in zip(layout.names, ends, layout.sizes, strict=True):
            if name in names:
                flat[end - size:end] = ref[end - size:end]
        return ArrayRecord({FLAT_KEY: Array(flat)})
    out = ArrayRecord({k: v for k, v in arrays.items()})
    for name in names:
        if name in out and name in reference:
            out[name] = Array(np.array(reference[name], copy=True))
    return out


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


def site_emissions(msg: Message, site: Any, server_round: int) -> dict[str, Any]:
    """One row of a round's ``emissions_by_site`` for the train reply ``msg`` (no error) from ``site``:
    ``emissions_g`` ``None`` when the site did not measure, ``country`` ``None`` when its reply has no
    ``emissions`` record (a site of an earlier release) or a malformed one (logged naming the node)."""
    node = int(msg.metadata.src_node_id)
    measured = _metric(msg, "emissions-measured") >= 1
    return {"site": site, "node": node, "emissions_g": _metric(msg, "emissions-g") if measured else None,
            "country": reply_country(msg, server_round)}


def reply_country(msg: Message, server_round: int) -> str | None:
    """The alpha-3 country of the reply's ``emissions`` record (upper case); ``None`` without the record,
    and with a malformed one (no ``country``, or not a 3-letter string), which a WARNING names the node of:
    a site's record must not fail the round."""
    record = msg.content.config_records.get(EMISSIONS_RECORD)
    if record is None:
        return None
    value = record.get(COUNTRY_KEY)
    code = alpha3(value)
    if code is None:
        log(WARNING, "round %d: node %d sent a malformed %r record (%s %r: expected an ISO alpha-3 code such as "
            "FRA); its emissions' country is recorded as unknown", server_round, int(msg.metadata.src_node_id),
            EMISSIONS_RECORD, COUNTRY_KEY, value)
        return None
    return code


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
    """Flower's Krum with update validation; the reply it selects is recorded (``nodes``/``sites``)."""

    def _aggregate(self, server_round: int, replies: list[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        # Flower's MultiKrum.aggregate_train, step for step, keeping the selection it makes
        valid, _ = self._check_and_log_replies(replies, is_train=True)
        if not valid:
            return None, None
        selected = select_multikrum([m.content for m in valid], num_malicious_nodes=self.num_malicious_nodes,
                                    num_nodes_to_select=self.num_nodes_to_select)
        self._selected = selected
        return (aggregate_arrayrecords(selected, self.weighted_by_key),
                self.train_metrics_aggr_fn(selected, self.weighted_by_key))


class Bulyan(ValidatedStrategy, fl.Bulyan):
    """Flower's Bulyan (needs ``4 * num_malicious + 3`` replies, else the round keeps the global
    model) with update validation; its Multi-Krum selection is recorded (``nodes``/``sites``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rule = self.selection_rule

        def recording(contents: list[RecordDict], f: int, n: int) -> list[RecordDict]:
            self._selected = rule(contents, f, n)
            return self._selected

        recording.__name__ = getattr(rule, "__name__", "selection_rule")
        self.selection_rule = recording


CLASSES: dict[str, type] = {"fedavg": FedAvg, "fedprox": FedProx, "fedmedian": FedMedian,
                            "fedtrimmedavg": FedTrimmedAvg, "krum": Krum, "bulyan": Bulyan}
assert tuple(CLASSES) == STRATEGIES


def make_strategy(name: str, cfg: FedConfig | None = None, **overrides: Any) -> Any:
    """The named strategy configured from ``cfg``; ``overrides`` go to its constructor."""
    cls = CLASSES.get(name)
    if cls is None:
        raise ValueError(f"strategy: unknown {name!r} (known: {', '.join(CLASSES)})")
    cfg = cfg or FedConfig(strategy=name, min_nodes=max(2, required_nodes(name, FedConfig.num_malicious)))
    kwargs: dict[str, Any] = {
        "fraction_train": cfg.fraction_train, "fraction_evaluate": 0.0, "min_train_nodes": cfg.min_nodes,
        "min_available_nodes": cfg.min_nodes, "norm_factor": cfg.norm_factor, "carbon_aware": cfg.carbon_aware,
        "carbon_min_fraction": cfg.carbon_min_fraction,
        # a site trains local-steps env steps per round: a larger count is a lie that buys weight
        "max_examples": cfg.local_steps, "fixed_arrays": fixed_buffers(cfg),
    }
    if cfg.carbon_aware:  # the site's grid at the round's time (the data the sites report from)
        kwargs["carbon_fn"] = lambda site, server_round: site_carbon(cfg, site, server_round)
    if name == "fedprox":
        kwargs["proximal_mu"] = cfg.proximal_mu
    elif name == "fedtrimmedavg":
        kwargs["beta"] = cfg.trim_beta
    elif name in ("krum", "bulyan"):
        kwargs["num_malicious_nodes"] = cfg.num_malicious
    kwargs.update(overrides)
    return cls(**kwargs)
