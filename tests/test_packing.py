"""Card-packing LP prices (iro_fed/packing.py): hand-computed duals, LP duality, dual feasibility."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from iro_fed.packing import arc_flow, arcs, card_prices
from iro_fed.traces.bound import least_cards

pytest.importorskip("ortools")


def patterns(sizes: list[int], card: int) -> list[tuple[int, ...]]:
    """Every multiset of sizes that fits on one card."""
    found = []
    for count in range(1, card // min(sizes) + 1):
        for combo in itertools.combinations_with_replacement(sizes, count):
            if sum(combo) <= card:
                found.append(combo)
    return found


def test_hand_computed_prices() -> None:
    # One 700 and two 300s: a 700 pairs with one 300, three 300s share a card. The LP needs
    # 1 + 1/3 cards; its only dual is y700 = 2/3, y300 = 1/3.
    prices = card_prices({700: 1, 300: 2})
    assert prices.price[700] == pytest.approx(2 / 3)
    assert prices.price[300] == pytest.approx(1 / 3)
    assert prices.value[1000] == pytest.approx(1.0)
    assert prices.value[699] == pytest.approx(2 / 3)  # two 300s fit
    assert prices.value[299] == 0.0
    # A 300 on an empty card gives nothing up; on a card with 400 free it strands 100 worth 0.
    assert prices.reduced_cost(np.array([1000, 400, 300]), 300) == pytest.approx([0.0, 0.0, 0.0])
    # A 700 on an empty card: 1 - value[300] - 2/3 = 0; on 800 free: value[800] (2/3) - value[100] (0) - 2/3 = 0.
    assert prices.reduced_cost(np.array([1000, 800]), 700) == pytest.approx([0.0, 0.0])
    # A size without demand is priced at what fits in it.
    assert prices.size_price(650) == pytest.approx(prices.value[650]) == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", range(6))
def test_prices_are_dual_feasible_and_worth_the_volume(seed: int) -> None:
    rng = random.Random(seed)
    sizes = sorted(rng.sample(range(150, 900, 10), rng.randint(2, 5)))
    demand = {s: rng.randint(1, 20) for s in sizes}
    prices = card_prices(demand)
    # Dual feasible: no card pattern is worth more than one card.
    for pattern in patterns(sizes, 1000):
        assert sum(prices.price[s] for s in pattern) <= 1.0 + 1e-6, pattern
    # Worth at least the volume bound (an optimal dual is worth the LP optimum, which is >= it) and no more
    # than the integer optimum.
    value = sum(demand[s] * prices.price[s] for s in sizes)
    volume = sum(s * d for s, d in demand.items()) / 1000.0
    assert value >= volume - 1e-6
    assert value <= least_cards(demand, capacity_milli=1000).cards + 1e-6
    # value[g] is the knapsack of prices within g: superadditive, so reduced costs are >= 0.
    free = np.arange(1001)
    for s in sizes:
        fits = free[free >= s]
        assert (prices.reduced_cost(fits, s) >= 0).all()
        assert prices.value[s] >= prices.price[s] - 1e-9


def test_bad_demand_and_empty() -> None:
    assert card_prices({}).value.max() == 0.0
    with pytest.raises(ValueError, match="demand"):
        card_prices({1500: 1.0})


def test_arcs_keep_one_order_per_card() -> None:
    # Sizes 600 and 400: non-increasing arcs are 0->600, 0->400, 600->1000 (400 after 600), 400->800 (400 after 400).
    assert sorted(arcs([600, 400], 1000)) == [(0, 400), (0, 600), (400, 400), (600, 400)]
    assert (400, 600) in set(arcs([600, 400], 1000, non_increasing=False))


def test_bad_counts_and_card_sizes_name_the_argument() -> None:
    # An infinite count used to scale the LP to nothing (every price 0); NaN and negative counts
    # were dropped silently and a fractional size crashed with an IndexError.
    for demand in ({300: float("inf")}, {300: float("nan")}, {300: -1}):
        with pytest.raises(ValueError, match="demand: the count of size 300"):
            card_prices(demand)
    with pytest.raises(ValueError, match="demand: sizes must be integers"):
        card_prices({300.5: 1})
    for card in (0, -5, 1.5):
        with pytest.raises(ValueError, match="card_milli"):
            card_prices({1: 1}, card_milli=card)
    assert card_prices({1500: 0, 300: 3}).price == pytest.approx({300: 1 / 3})  # a zero count is no demand


def fewest_bins(items: list[int], card: int) -> int:
    """Brute force: place the items, largest first, into every distinct open bin or a new one."""
    items = sorted(items, reverse=True)
    best = len(items)

    def place(i: int, bins: list[int]) -> None:
        nonlocal best
        if len(bins) >= best:
            return
        if i == len(items):
            best = len(bins)
            return
        for b in sorted({b for b in bins if b + items[i] <= card}):
            j = bins.index(b)
            bins[j] += items[i]
            place(i + 1, bins)
            bins[j] -= items[i]
        place(i + 1, [*bins, items[i]])

    place(0, [])
    return best


@pytest.mark.parametrize("non_increasing", [True, False])
def test_arc_flow_integer_program_is_exact_on_small_instances(non_increasing: bool) -> None:
    from ortools.sat.python import cp_model

    rng = random.Random(7)
    for _ in range(40):
        card = rng.choice([10, 13, 20])
        items = [rng.randint(1, card) for _ in range(rng.randint(1, 8))]
        counts = {s: items.count(s) for s in set(items)}
        model = cp_model.CpModel()
        by_size, leaving = arc_flow(
            sorted(counts, reverse=True), card, lambda _p, s, m=model, c=counts: m.new_int_var(0, c[s], ""), model.add,
            non_increasing,
        )
        for s, n in counts.items():
            model.add(sum(by_size[s]) == n)
        model.minimize(sum(leaving))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        assert solver.solve(model) == cp_model.OPTIMAL
        want = fewest_bins(items, card)
        assert round(solver.objective_value) == want, (card, items)
        # The LP prices are worth the LP optimum: between the volume bound and the integer optimum.
        prices = card_prices(counts, card_milli=card)
        lp = sum(n * prices.price[s] for s, n in counts.items())
        assert sum(items) / card - 1e-6 <= lp <= want + 1e-6
