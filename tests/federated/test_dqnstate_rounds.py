"""A site's exploration and PER-beta schedules across federated rounds: round ``r`` goes on where
``r - 1`` rounds of ``local-steps`` left them (every round restarted them: beta back at
``priority_beta0``, epsilon back at 1)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

from iro_fed.federated.task import FedConfig, build_agent, get_weights, local_train, schedule_position  # noqa: E402
from tests.solvers.test_resume_schedules import BetaBuffer  # noqa: E402

TINY = dict(local_steps=40, hours=1.0, learning_starts=32, batch_size=16, track_emissions=False, min_nodes=2,
            embed_dim=16, hidden_dim=32, buffer_size=500)


def _beta(cfg: FedConfig, step: int) -> float:
    """The PER beta at env step ``step`` of the whole run's schedule (num-server-rounds x local-steps)."""
    beta0 = cfg.dqn_config().priority_beta0
    return beta0 + (1.0 - beta0) * min(1.0, step / (cfg.num_server_rounds * cfg.local_steps))


def test_round_3_starts_where_two_rounds_of_local_steps_left_the_schedules() -> None:
    cfg = FedConfig(num_server_rounds=4, **TINY)
    assert schedule_position(cfg, 3, 40) == (80, 160)
    weights = get_weights(build_agent(cfg).online)
    buffer = BetaBuffer(cfg.dqn_config())  # the site's buffer, kept from round to round as keep-replay does
    per_round = []
    for server_round in (1, 2, 3):
        buffer.betas = []
        result = local_train(weights, cfg, site=0, server_round=server_round, replay=buffer)
        weights = result.weights  # the site trains on from its own update (the server's aggregate of one site)
        per_round.append(buffer.betas)
    first, second, third = per_round
    # round 1 learns once 32 transitions are in, each step after that; rounds 2 and 3 from their first step
    assert first == pytest.approx([_beta(cfg, s) for s in range(41 - len(first), 41)])
    assert second == pytest.approx([_beta(cfg, 40 + s) for s in range(1, 41)])
    # round 3's first step is step 81 of the 160: it restarted at priority_beta0 + 0.6 / 40
    assert third == pytest.approx([_beta(cfg, 80 + s) for s in range(1, 41)])
    assert third[0] == pytest.approx(second[-1] + 0.6 / 160)


def test_a_round_past_the_last_stays_at_the_schedules_end_and_round_0_at_their_start() -> None:
    cfg = FedConfig(num_server_rounds=2, **TINY)
    assert schedule_position(cfg, 9, 40) == (320, 80)
    assert schedule_position(cfg, 0, 40) == (0, 80)
    buffer = BetaBuffer(cfg.dqn_config())
    local_train(get_weights(build_agent(cfg).online), cfg, site=1, server_round=9, replay=buffer)
    assert buffer.betas and buffer.betas == pytest.approx([1.0] * len(buffer.betas))
