"""Card packing of GPU shares as a cutting-stock problem: the arc-flow graph and its LP prices.

A card of 1000 milli is a path 0 -> 1000 in the arc-flow graph (Valério de Carvalho, Ann. Oper.
Res. 86, 1999): positions are nodes, an arc (i, i + s) puts a share of s milli at offset i, and a
card may end at any position (the loss arc). Integer flows are card packings; the LP relaxation
of "fewest cards for this demand" is as strong as Gilmore-Gomory's.

The LP's dual gives each share size a price ``y[s]`` in cards (a 470-milli share is worth half a
card when 470s pair up, an 810 a whole card when nothing fills its rest) and every free amount
``g`` of a card a value ``value[g]``: the most that shares fitting in g are worth. Putting a share
of s on a card with g free then has the *reduced cost* ``value[g] - value[g - s] - y[s] >= 0``: the
part of the card's future that the placement gives up beyond what the share itself is worth. A
zero reduced cost keeps the card on a pattern of an optimal packing of the expected demand, the
dual-price rule of online bin packing with a known size distribution (Gupta and Radovanović,
"Interior-point-based online stochastic bin packing", Oper. Res. 68(5), 2020).
Needs OR-Tools (extra ``cpsat``), imported when called.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from iro_fed.model import GPU_MILLI


def arcs(sizes: list[int], card_milli: int = GPU_MILLI, non_increasing: bool = True) -> Iterator[tuple[int, int]]:
    """The item arcs ``(position, size)`` of the arc-flow graph from position 0. With
    ``non_increasing`` sizes only shrink along a card (every packing keeps one representative:
    fewer arcs for the integer program); without, every order is a path."""
    order = sorted(set(sizes), reverse=True)
    if not order:
        return
    allowed = {0: order[0]}
    for position in range(card_milli + 1):
        if position not in allowed:
            continue
        for size in order:
            if (size <= allowed[position] or not non_increasing) and position + size <= card_milli:
                yield position, size
                allowed[position + size] = max(allowed.get(position + size, 0), size)


def arc_flow(
    sizes: list[int], card_milli: int, new_arc: Callable[[int, int], Any], add: Callable[[Any], Any],
    non_increasing: bool = True,
) -> tuple[dict[int, list], list]:
    """Build the arc-flow model in any solver: ``new_arc(position, size)`` makes an arc's variable,
    ``add(constraint)`` adds flow conservation at every inner position (a card may end anywhere,
    so inflow >= outflow). Returns the arcs of each size and the arcs leaving position 0 (their
    sum is the number of cards)."""
    inflow: dict[int, list] = {}
    outflow: dict[int, list] = {}
    by_size: dict[int, list] = {s: [] for s in sizes}
    for position, size in arcs(sizes, card_milli, non_increasing):
        arc = new_arc(position, size)
        by_size[size].append(arc)
        outflow.setdefault(position, []).append(arc)
        inflow.setdefault(position + size, []).append(arc)
    for position in set(inflow) | set(outflow):
        if position > 0:
            add(sum(inflow.get(position, [])) >= sum(outflow.get(position, [])))
    return by_size, outflow.get(0, [])


@dataclass(frozen=True)
class CardPrices:
    """LP prices of share sizes (``price[s]``, cards) and of free amounts (``value[g]``)."""

    price: dict[int, float]
    value: np.ndarray  # [card_milli + 1]

    def size_price(self, milli: int) -> float:
        """A size's price; a size the demand did not have gets the value of what fits in it."""
        return self.price.get(milli, float(self.value[milli]))

    def reduced_cost(self, free: np.ndarray, milli: int) -> np.ndarray:
        """Cards given up by putting a share of ``milli`` on cards with ``free`` milli (free >= milli)."""
        free = np.clip(free, 0, len(self.value) - 1)
        rest = np.clip(free - milli, 0, len(self.value) - 1)
        return np.maximum(self.value[free] - self.value[rest] - self.size_price(milli), 0.0)


def card_prices(demand: Mapping[int, float], card_milli: int = GPU_MILLI) -> CardPrices:
    """Dual prices of the arc-flow LP "fewest cards for ``demand``" (size -> expected count, any
    scale; whole cards as size ``card_milli``), and the value of every free amount."""
    from ortools.linear_solver import pywraplp

    if isinstance(card_milli, bool) or not isinstance(card_milli, (int, np.integer)) or card_milli < 1:
        raise ValueError(f"card_milli must be a positive integer, got {card_milli!r}")
    for s, d in demand.items():
        # An infinite count would scale the LP to nothing (every price 0); NaN or negative has no meaning.
        if not isinstance(d, (int, float, np.integer, np.floating)) or not math.isfinite(d) or d < 0:
            raise ValueError(f"demand: the count of size {s!r} must be a finite number >= 0, got {d!r}")
        if d > 0 and (isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 < s <= card_milli):
            raise ValueError(f"demand: sizes must be integers 1..{card_milli} milli, got {s!r}")
    sizes = sorted(int(s) for s, d in demand.items() if d > 0)
    value = np.zeros(card_milli + 1)
    if not sizes:
        return CardPrices({}, value)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    # All orders (not the reduced graph): the prices then do not depend on where a size sits on a card.
    by_size, cards = arc_flow(
        sizes, card_milli, lambda _position, _size: solver.NumVar(0.0, solver.infinity(), ""), solver.Add,
        non_increasing=False,
    )
    scale = 1000.0 / max(demand[s] for s in sizes)  # keep the LP well scaled
    rows = {s: solver.Add(sum(by_size[s]) >= scale * demand[s]) for s in sizes}
    solver.Minimize(sum(cards))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("the card-packing LP did not solve")
    price = {s: max(float(rows[s].dual_value()), 0.0) for s in sizes}
    for g in range(1, card_milli + 1):
        best = value[g - 1]
        for s in sizes:
            if s > g:
                break
            best = max(best, value[g - s] + price[s])
        value[g] = best
    return CardPrices(price, value)
