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
arrives, and a close estimate of the floor of the metric otherwise.

On the openb ``default`` list this is 3.82-3.85 % for seeds 42..51 (FGD, online: 4.77): the
yardstick's room for improvement over FGD is about 0.9 points, not 4.8.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

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
    from ortools.sat.python import cp_model

    for milli, count in sizes.items():
        if not 0 < milli <= card_milli or count < 0:
            raise ValueError(f"sizes: each share must be 1..{card_milli} milli with a count >= 0, got {milli}: {count}")
    items = sorted((m for m, c in sizes.items() if c > 0), reverse=True)
    total = sum(m * sizes[m] for m in items)
    count = sum(sizes[m] for m in items)
    if not items:
        return PackingBound(0, 0, 0, 0, True, capacity_milli, card_milli)
    model = cp_model.CpModel()
    by_size, leaving = arc_flow(
        items, card_milli, lambda position, milli: model.new_int_var(0, sizes[milli], f"a{position}_{milli}"), model.add,
    )
    cards = model.new_int_var(0, count, "cards")
    model.add(sum(leaving) == cards)
    for milli in items:
        model.add(sum(by_size[milli]) == sizes[milli])
    model.minimize(cards)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT found no packing in {time_limit_s} s (status {solver.status_name(status)})")
    found = round(solver.objective_value)
    bound = max(int(-(-total // card_milli)), int(round(solver.best_objective_bound)))
    return PackingBound(count, total, min(bound, found), found, status == cp_model.OPTIMAL, capacity_milli, card_milli)


def _is_share(pod: OpenbPod) -> bool:
    return pod.num_gpu == 1 and 0 < pod.gpu_milli < GPU_MILLI


def share_packing_bound(
    sequence: Sequence[OpenbPod], capacity_milli: int, arrived_pct: int = 100, time_limit_s: float = 60.0,
) -> PackingBound:
    """The bound for one arrival sequence (``iro_fed.traces.openb.arrival_sequence``) on the value
    that ``iro_fed.replay`` reports at ``arrived_pct`` (an integer percent): the mean, over the same
    events (rounded arrived percent == ``arrived_pct``, else within 1 of it), of the most GPU each
    event can have allocated, rounded as the replay rounds. The packing fields describe the shares
    that arrived by exactly ``arrived_pct`` %; ``optimal`` is False if any packing was cut short
    (its proven bound is used, so the result stays a lower bound)."""
    if isinstance(arrived_pct, bool) or not float(arrived_pct).is_integer():
        raise ValueError(f"arrived_pct: the replay reports whole percents, got {arrived_pct!r}")
    if capacity_milli <= 0:
        raise ValueError(f"capacity_milli must be > 0, got {capacity_milli}")
    x = int(arrived_pct)
    # The replay's x axis: the rounded percent after each arrival (round half to even, as pandas).
    events: list[tuple[int, int, tuple[tuple[int, int], ...]]] = []  # (rounded %, arrived milli, shares)
    arrived = 0
    sizes: Counter[int] = Counter()
    for pod in sequence:
        arrived += pod.gpu_total
        if _is_share(pod):
            sizes[pod.gpu_milli] += 1
        a = round(100.0 * arrived / capacity_milli)
        if x - 1 <= a <= x + 1:
            events.append((a, arrived, tuple(sorted(sizes.items()))))
    window = [e for e in events if e[0] == x] or events
    if not window:
        raise ValueError(f"arrived_pct: no arrival event at {x} % (or within 1 of it): the replay reports no value there")
    # One packing per set of shares (it changes only when a share arrives); those of exactly
    # arrived_pct % are usually one of the window's.
    point = tuple(sorted(arrived_shares(sequence, capacity_milli, x).items()))
    packed = {shares: least_cards(dict(shares), capacity_milli, time_limit_s=time_limit_s)
              for shares in dict.fromkeys([point, *(shares for _, _, shares in window)])}
    # The most each event can have allocated, rounded as the replay rounds each event.
    allocs = [round(100.0 * min(arrived_milli, capacity_milli - packed[shares].waste_milli) / capacity_milli, 2)
              for _, arrived_milli, shares in window]
    # np.mean: the replay's float sum; then its curve's rounding
    metric = round(100.0 - round_point(np.mean(allocs)), 4)
    return replace(packed[point], optimal=all(b.optimal for b in packed.values()), metric_pct=metric)
