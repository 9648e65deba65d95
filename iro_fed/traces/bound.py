"""A lower bound on the unallocated GPU % at 100 % arrival: the share pods' optimal card packing.

At 100 % arrival the pods that arrived ask for exactly the cluster's GPU capacity, so the
unallocated GPU is the free GPU. Every card that holds share pods (one card, < 1000 milli) keeps
``1000 - (their milli)`` free for pods that fit in it; whole-GPU pods need empty cards. Whatever the
policy, if every share pod that arrived was placed (a pod fails only when no node has room), the
free GPU is at least the least waste with which those share pods fit onto cards: a one-dimensional
bin-packing optimum, ignoring CPU, memory, GPU models and the arrival order, all of which can only
raise it. We solve that packing exactly as an integer program on the arc-flow graph of
``iro_fed.packing``; cards = the flow out of position 0. Needs OR-Tools (extra ``cpsat``).

The replay does not report one instant: its value at 100 % is the mean over the arrival events
whose rounded arrived percent is 100 (about 85 on default, from 99.5 % to 100.5 % arrived; the
neighbour rule where there are none), and shares that arrive after exactly 100 % can fill rests that
the shares before left. :func:`share_packing_bound` therefore bounds each of those events (at most
``min(arrived, capacity - least waste of the shares arrived by then)`` allocated) and averages
them with the replay's rounding: a bound on the number the replay reports, not only on the free
GPU at exactly 100 %, which a policy that places every share could end below.

A policy can end below it only by leaving share pods unplaced (a share fails when no node has a
card with room and the CPU and memory it asks), so it is the floor for placing every share that
arrives; :func:`any_policy_bound` is the floor otherwise (3.09-3.11 % against 3.82-3.85 % on the
openb ``default`` list, seeds 42..51).

On the openb ``default`` list this is 3.82-3.85 % for seeds 42..51 (FGD, online: 4.77): the
yardstick's room for improvement over FGD is about 0.9 points, not 4.8.

:func:`any_policy_bound` is the floor for every policy, also one that leaves pods out on purpose
(a batch solver may drop an 810-milli share to keep its card for a whole-GPU pod that comes
later). Each card holds at most 1000 milli, so a whole-GPU card is never worse than any shares on
it: the most an event can have allocated is 1000 x (the whole cards asked, at most all cards) plus
the most share milli that fits on the cards left, again an arc-flow optimum (with "at most" counts
and cards), and at most what arrived. Same relaxations (CPU, memory, GPU models, node boundaries
and order ignored), same events and rounding as :func:`share_packing_bound`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from iro_fed.interrupt import solve_cp_sat
from iro_fed.model import GPU_MILLI
from iro_fed.packing import arc_flow
from iro_fed.replay import round_point
from iro_fed.traces.openb import OpenbPod


@dataclass(frozen=True)
class PackingBound:
    """The least number of cards that hold the share pods, and what it implies."""

    shares: int  # share pods packed
    share_milli: int  # their milli in total
    cards: int  # proven least number of cards (the solver's bound; = the packing found when optimal)
    cards_found: int  # cards of the best packing found
    optimal: bool
    capacity_milli: int
    card_milli: int = GPU_MILLI
    #: The bound on the replay's reported value (the mean over its events at that arrived percent),
    #: set by :func:`share_packing_bound`; None for a packing alone (:func:`least_cards`).
    metric_pct: float | None = None

    @property
    def waste_milli(self) -> int:
        """Free milli that the share pods' cards must keep, at least."""
        return self.cards * self.card_milli - self.share_milli

    @property
    def unallocated_gpu_pct(self) -> float:
        """The bound as a percentage of the cluster's GPU capacity: on the replay's metric where
        known (``metric_pct``), else the packing's waste."""
        if self.metric_pct is not None:
            return self.metric_pct
        return 100.0 * self.waste_milli / self.capacity_milli if self.capacity_milli else 0.0


def arrived_shares(sequence: Sequence[OpenbPod], capacity_milli: int, arrived_pct: float = 100.0) -> Counter[int]:
    """Milli -> count of the share pods among the pods that arrived while the arrived GPU
    stays within ``arrived_pct`` % of ``capacity_milli`` (the replay's arrival order)."""
    limit = arrived_pct / 100.0 * capacity_milli
    arrived = 0
    sizes: Counter[int] = Counter()
    for pod in sequence:
        if arrived + pod.gpu_total > limit:
            break
        arrived += pod.gpu_total
        if _is_share(pod):
            sizes[pod.gpu_milli] += 1
    return sizes


def least_cards(
    sizes: Mapping[int, int], capacity_milli: int, card_milli: int = GPU_MILLI, time_limit_s: float = 60.0, workers: int = 2,
) -> PackingBound:
    """The fewest cards of ``card_milli`` that hold ``sizes`` (milli -> count), by CP-SAT on the
    arc-flow model. When the time limit stops the search, ``cards`` is CP-SAT's proven bound
    (still a valid lower bound) and ``optimal`` is False."""
    items = _share_sizes(sizes, card_milli)
    total = sum(m * sizes[m] for m in items)
    count = sum(sizes[m] for m in items)
    if not items:
        return PackingBound(0, 0, 0, 0, True, capacity_milli, card_milli)
    model, by_size, leaving = _arc_flow_model(items, sizes, card_milli)
    cards = model.new_int_var(0, count, "cards")
    model.add(sum(leaving) == cards)
    for milli in items:
        model.add(sum(by_size[milli]) == sizes[milli])
    model.minimize(cards)
    solver, optimal = _solve(model, time_limit_s, workers)
    found = round(solver.objective_value)
    bound = max(int(-(-total // card_milli)), int(round(solver.best_objective_bound)))
    return PackingBound(count, total, min(bound, found), found, optimal, capacity_milli, card_milli)


def _share_sizes(sizes: Mapping[int, int], card_milli: int) -> list[int]:
    """The sizes with a count, largest first; a size outside 1..card_milli or a negative count is refused."""
    for milli, count in sizes.items():
        if not 0 < milli <= card_milli or count < 0:
            raise ValueError(f"sizes: each share must be 1..{card_milli} milli with a count >= 0, got {milli}: {count}")
    return sorted((m for m, c in sizes.items() if c > 0), reverse=True)


def _arc_flow_model(items: list[int], sizes: Mapping[int, int], card_milli: int) -> tuple[Any, dict[int, list], list]:
    """A CP-SAT model with the arc-flow graph of ``items`` (each arc at most the size's count): the
    model, the arcs of each size and the arcs leaving position 0 (one per card)."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    by_size, leaving = arc_flow(
        items, card_milli, lambda position, milli: model.new_int_var(0, sizes[milli], f"a{position}_{milli}"), model.add,
    )
    return model, by_size, leaving


def _solve(model: Any, time_limit_s: float, workers: int) -> tuple[Any, bool]:
    """The solver after solving ``model``, and whether it proved optimality; no solution is an error."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    status = solve_cp_sat(solver, model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT found no packing in {time_limit_s} s (status {solver.status_name(status)})")
    return solver, status == cp_model.OPTIMAL


def _is_share(pod: OpenbPod) -> bool:
    return pod.num_gpu == 1 and 0 < pod.gpu_milli < GPU_MILLI


def _check_point(arrived_pct: int, capacity_milli: int) -> int:
    if isinstance(arrived_pct, bool) or not float(arrived_pct).is_integer():
        raise ValueError(f"arrived_pct: the replay reports whole percents, got {arrived_pct!r}")
    if capacity_milli <= 0:
        raise ValueError(f"capacity_milli must be > 0, got {capacity_milli}")
    return int(arrived_pct)


@dataclass(frozen=True)
class _Event:
    rounded_pct: int
    arrived_milli: int
    shares: tuple[tuple[int, int], ...]  # (milli, count) of the share pods arrived so far
    whole_cards: int  # cards asked by the whole- and multi-GPU pods arrived so far


def _window(sequence: Sequence[OpenbPod], capacity_milli: int, x: int) -> list[_Event]:
    """The arrival events the replay averages for its value at ``x`` %: those whose rounded arrived
    percent is x (round half to even, as pandas), else those within 1 of it."""
    events: list[_Event] = []
    arrived = whole = 0
    sizes: Counter[int] = Counter()
    for pod in sequence:
        arrived += pod.gpu_total
        if _is_share(pod):
            sizes[pod.gpu_milli] += 1
        elif pod.num_gpu > 0:
            whole += pod.num_gpu
        a = round(100.0 * arrived / capacity_milli)
        if x - 1 <= a <= x + 1:
            events.append(_Event(a, arrived, tuple(sorted(sizes.items())), whole))
    window = [e for e in events if e.rounded_pct == x] or events
    if not window:
        raise ValueError(f"arrived_pct: no arrival event at {x} % (or within 1 of it): the replay reports no value there")
    return window


def _metric(allocated_milli: Sequence[int], capacity_milli: int) -> float:
    """The replay's unallocated % from each event's allocated milli: each event rounded to 2
    decimals, their float mean (np.mean, as the replay), then the curve's rounding."""
    allocs = [round(100.0 * a / capacity_milli, 2) for a in allocated_milli]
    return round(100.0 - round_point(np.mean(allocs)), 4)


def share_packing_bound(
    sequence: Sequence[OpenbPod], capacity_milli: int, arrived_pct: int = 100, time_limit_s: float = 60.0,
) -> PackingBound:
    """The bound for one arrival sequence (``iro_fed.traces.openb.arrival_sequence``) on the value
    that ``iro_fed.replay`` reports at ``arrived_pct`` (an integer percent): the mean, over the same
    events (rounded arrived percent == ``arrived_pct``, else within 1 of it), of the most GPU each
    event can have allocated, rounded as the replay rounds. The packing fields describe the shares
    that arrived by exactly ``arrived_pct`` %; ``optimal`` is False if any packing was cut short
    (its proven bound is used, so the result stays a lower bound)."""
    x = _check_point(arrived_pct, capacity_milli)
    window = _window(sequence, capacity_milli, x)
    # One packing per set of shares (it changes only when a share arrives); those of exactly
    # arrived_pct % are usually one of the window's.
    point = tuple(sorted(arrived_shares(sequence, capacity_milli, x).items()))
    packed = {shares: least_cards(dict(shares), capacity_milli, time_limit_s=time_limit_s)
              for shares in dict.fromkeys([point, *(e.shares for e in window)])}
    metric = _metric([min(e.arrived_milli, capacity_milli - packed[e.shares].waste_milli) for e in window], capacity_milli)
    return replace(packed[point], optimal=all(b.optimal for b in packed.values()), metric_pct=metric)


def most_share_milli(
    sizes: Mapping[int, int], cards: int, card_milli: int = GPU_MILLI, time_limit_s: float = 60.0, workers: int = 2,
) -> tuple[int, bool]:
    """The most milli of the shares ``sizes`` (milli -> count; any subset of them) that fits on
    ``cards`` cards of ``card_milli``, by CP-SAT on the arc-flow model. Returns (an upper bound,
    proven optimal): when the time limit stops the search the bound is CP-SAT's, still valid."""
    items = _share_sizes(sizes, card_milli)
    if isinstance(cards, bool) or not isinstance(cards, (int, np.integer)) or cards < 0:
        raise ValueError(f"cards must be an integer >= 0, got {cards!r}")
    if not items or cards == 0:
        return 0, True
    model, by_size, leaving = _arc_flow_model(items, sizes, card_milli)
    model.add(sum(leaving) <= cards)
    for milli in items:
        model.add(sum(by_size[milli]) <= sizes[milli])
    model.maximize(sum(milli * sum(by_size[milli]) for milli in items))
    solver, optimal = _solve(model, time_limit_s, workers)
    total = sum(m * sizes[m] for m in items)
    return min(total, cards * card_milli, int(solver.best_objective_bound + 1e-6)), optimal


@dataclass(frozen=True)
class AnyPolicyBound:
    """The floor of the replay's unallocated GPU % for every policy, also one that leaves pods out."""

    metric_pct: float  # on the replay's metric (mean over its events, its rounding)
    optimal: bool  # every packing proven optimal (else CP-SAT's bounds were used: still a floor)
    events: int  # arrival events averaged
    packings: int  # distinct packings solved

    @property
    def unallocated_gpu_pct(self) -> float:
        return self.metric_pct


def any_policy_bound(
    sequence: Sequence[OpenbPod], capacity_milli: int, arrived_pct: int = 100, time_limit_s: float = 60.0,
    card_milli: int = GPU_MILLI,
) -> AnyPolicyBound:
    """A floor on the value ``iro_fed.replay`` reports at ``arrived_pct`` that holds for every
    policy, online or batch, including one that leaves pods out on purpose: per event, at most
    ``min(arrived, card_milli x w + most share milli on the other cards)`` with ``w`` = the whole
    cards asked (at most all cards). Taking w whole cards is best because a card holds at most
    ``card_milli``: giving a card to shares instead never adds more. About 1 s per distinct event on
    the openb default trace (2 cores)."""
    x = _check_point(arrived_pct, capacity_milli)
    window = _window(sequence, capacity_milli, x)
    all_cards = capacity_milli // card_milli
    most: dict[tuple, tuple[int, bool]] = {}
    for e in window:
        key = (e.whole_cards, e.shares)
        if key not in most:
            whole = min(e.whole_cards, all_cards)
            share_milli, optimal = most_share_milli(dict(e.shares), all_cards - whole, card_milli, time_limit_s)
            most[key] = (whole * card_milli + share_milli, optimal)
    metric = _metric([min(e.arrived_milli, most[(e.whole_cards, e.shares)][0]) for e in window], capacity_milli)
    return AnyPolicyBound(metric, all(ok for _, ok in most.values()), len(window), len(most))
