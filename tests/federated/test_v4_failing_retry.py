"""A failing node's retry counts only the rounds it was skipped for failing (v4).

Every round a failing node sat out counted towards its retry after RETRY_AFTER rounds, including the
rounds in which Flower's sample would not have drawn it anyway: with a small ``fraction_train`` it
came back after RETRY_AFTER rounds whatever the fraction, i.e. after losing only a few of its draws,
and trained far more often than "tried last" means. Counted only when Flower drew it (and it was
swapped out), it trains in one of every RETRY_AFTER + 1 of its draws. Flower's own strategies on the
in-process grid, aggregated for real; Flower samples with the global ``random``, seeded here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("flwr")

from iro_fed.federated import strategies as strategies_module  # noqa: E402
from iro_fed.federated.strategies import make_strategy  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402
from tests.federated.test_fedfix3_strategies import _play  # noqa: E402
from tests.federated.test_s5_failing_last import _bad, _failing_after_two_rounds  # noqa: E402

N, SAMPLE, ROUNDS, FAILING = 10, 2, 300, 10  # fraction_train 0.2: Flower draws 2 of 10 nodes a round


@pytest.fixture
def seeded() -> Iterator[Callable[[int], None]]:
    state = random.getstate()
    yield random.seed
    random.setstate(state)


def _rounds(failing: set[int]) -> tuple[list[list[int]], object]:
    strategy = make_strategy("fedavg", FedConfig(min_nodes=2, carbon_aware=False))
    answer = _bad("error", failing)
    _failing_after_two_rounds(strategy, N, answer)  # node 10 failed twice: tried last from round 3
    strategy.fraction_train = SAMPLE / N
    asked = [_play(strategy, r, N, lambda node, r=r: answer(r, node)) for r in range(3, 3 + ROUNDS)]
    return asked, strategy


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_failing_node_trains_in_one_of_retry_after_plus_one_of_its_draws(seeded, seed: int) -> None:
    seeded(seed)
    asked, strategy = _rounds({FAILING})
    assert all(len(nodes) == SAMPLE for nodes in asked)  # Flower's size stands
    turns = sum(FAILING in nodes for nodes in asked)
    # Flower draws it in about ROUNDS x 2/10 = 60 rounds; it is asked in one of every RETRY_AFTER + 1 of
    # them: about 10 (was about 30: 5 rounds out, whatever the fraction, then its next draw, ~5 rounds on)
    expected = ROUNDS * SAMPLE / N / (strategies_module.RETRY_AFTER + 1)
    assert 0.5 * expected <= turns <= 1.5 * expected, turns
    # a round that does not ask it lists it as a failing node left out, drawn or not (after its retry
    # is due it is not failing until it is asked: it waits for Flower's next draw of it)
    listed = [strategy.rounds[r]["skipped_failing"] for r in range(3, 3 + ROUNDS)]
    assert all(skipped == [] for skipped, nodes in zip(listed, asked, strict=True) if FAILING in nodes)
    assert all(skipped in ([], [FAILING]) for skipped in listed)
    assert sum(skipped == [FAILING] for skipped in listed) > ROUNDS / 2


@pytest.mark.parametrize("seed", [0, 1])
def test_the_sample_is_flowers_own_while_no_node_fails(seeded, seed: int) -> None:
    seeded(seed)
    asked, strategy = _rounds(set())
    seeded(seed)
    draws = [sorted(random.sample(range(1, N + 1), N if r <= 2 else SAMPLE)) for r in range(1, 3 + ROUNDS)]
    assert asked == draws[2:]
    assert strategy._benched == {} and strategy._failures == {}
