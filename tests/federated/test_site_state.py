"""A site's state across federated rounds: its replay buffer is kept (``keep-replay``), so rounds learn at once."""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")
pytest.importorskip("flwr")

from iro_fed.federated.task import FedConfig, build_agent, full_state_dict, get_weights, make_site_env  # noqa: E402
from solvers.dqn.replay import PrioritizedReplayBuffer, ReplayBuffer  # noqa: E402
from tests.solvers.test_s10_resume_exact import _fill  # noqa: E402

TINY = dict(local_steps=40, hours=1.0, learning_starts=32, batch_size=16, track_emissions=False, min_nodes=2,
            embed_dim=16, hidden_dim=32, buffer_size=500)


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_replay_state_round_trips_exactly_after_wrapping(kind: str) -> None:
    def make() -> ReplayBuffer:
        return PrioritizedReplayBuffer(16, seed=3) if kind == "prioritized" else ReplayBuffer(16, seed=3)

    buf = make()
    _fill(buf, 21)  # wrapped: the oldest 5 overwritten, the ring position is 5
    if kind == "prioritized":
        buf.update_priorities(np.array([2, 7]), np.array([4.0, 0.5]))
    state = buf.state_arrays()
    again = make()
    again.load_state_arrays(state)
    assert (again.next, again.count) == (buf.next, buf.count) == (5, 16)
    assert set(again.storage) == set(buf.storage)
    for key, value in buf.storage.items():
        np.testing.assert_array_equal(again.storage[key], value)
        assert again.storage[key].dtype == value.dtype
    a, b = buf.sample(8), again.sample(8)  # same generator seed, same content: the same batch
    np.testing.assert_array_equal(a["indices"], b["indices"])
    np.testing.assert_array_equal(a["weights"], b["weights"])
    _fill(again, 1, seed=9)  # and it goes on filling at the ring position
    assert again.next == 6 and again.storage["reward"][5] == 0.0

    empty = make()
    restored = make()
    restored.load_state_arrays(empty.state_arrays())
    assert len(restored) == 0


def test_replay_state_that_does_not_fit_is_refused() -> None:
    buf = PrioritizedReplayBuffer(16)
    _fill(buf, 10)
    state = buf.state_arrays()
    with pytest.raises(ValueError, match="prioritized buffer of 16, this one is prioritized of 32"):
        PrioritizedReplayBuffer(32).load_state_arrays(state)
    with pytest.raises(ValueError, match="this one is uniform"):
        ReplayBuffer(16).load_state_arrays(state)
    with pytest.raises(ValueError, match="'_priorities'"):
        PrioritizedReplayBuffer(16).load_state_arrays({k: v for k, v in state.items() if k != "_priorities"})
    with pytest.raises(ValueError, match="'reward' has 9 rows, expected 10"):
        PrioritizedReplayBuffer(16).load_state_arrays({**state, "reward": state["reward"][:9]})
    # the largest priority, which every new transition gets: was an IndexError (empty) or taken as is
    for bad in (np.zeros(0), np.array([np.nan]), np.array([0.0]), np.array([-1.0]), np.array([1.0, 2.0])):
        with pytest.raises(ValueError, match="must be one finite number > 0"):
            PrioritizedReplayBuffer(16).load_state_arrays({**state, "_max_priority": bad})


def test_a_buffer_stored_under_another_priority_exponent_is_not_continued() -> None:
    """Stored priorities are already raised to priority_alpha: under another alpha (a release
    that changes the learner's default) they would weigh the replay wrongly, so the fingerprint
    holds it."""
    import json

    from iro_fed.federated.client_app import replay_fingerprint

    cfg = FedConfig(**TINY)
    assert json.loads(replay_fingerprint(cfg))["priority_alpha"] == cfg.dqn_config().priority_alpha


def test_train_continues_a_filled_buffer_and_learns_from_the_first_step() -> None:
    """A round that continues its site's buffer spends no steps only refilling it."""
    from solvers.dqn.train import train

    cfg = FedConfig(**TINY)
    dqn = cfg.dqn_config()
    init = full_state_dict(cfg, get_weights(build_agent(cfg).online))
    env = [lambda: make_site_env(cfg.scenario, 0, 5, cfg.hours, cfg.top_k)]
    fresh = PrioritizedReplayBuffer(dqn.buffer_size, dqn.priority_alpha, dqn.priority_eps)
    agent, first = train(env, dqn, steps=40, seed=5, progress=False, track_emissions=False, initial_state=init,
                         replay=fresh)
    assert 0 < first.updates <= 40 - 32 + 1  # learning starts once 32 transitions are in
    held = len(fresh)
    assert 40 - 2 * (dqn.n_step - 1) <= held <= 40
    agent, second = train(env, dqn, steps=40, seed=6, progress=False, track_emissions=False, initial_state=init,
                          replay=fresh)
    assert second.updates == 40  # every step learns
    assert len(fresh) > held + 30
    with pytest.raises(ValueError, match="buffer of 16, the config needs prioritized of 500"):
        train(env, dqn, steps=5, progress=False, track_emissions=False, replay=PrioritizedReplayBuffer(16))


def _federate(cfg: FedConfig, tmp_path) -> tuple[dict, object]:
    from iro_fed.federated.inprocess import InProcessGrid
    from iro_fed.federated.server_app import run_federation

    grid = InProcessGrid([{"site": 0}, {"site": 2}], cfg.to_run_config())
    return run_federation(grid, cfg.replace(registry=str(tmp_path / "reg"))), grid


def test_sites_keep_their_replay_buffer_across_rounds(tmp_path) -> None:
    from iro_fed.federated.client_app import REPLAY_STATE, replay_fingerprint

    cfg = FedConfig(num_server_rounds=2, **TINY)
    summary, grid = _federate(cfg, tmp_path)
    assert [r["replay_kept"] for r in summary["rounds"]] == [0, 2]  # round 2 continued both sites' buffers
    n = cfg.dqn_config().n_step
    for ctx in grid.contexts.values():
        arrays = {k: v.numpy() for k, v in ctx.state[REPLAY_STATE].items()}
        count = int(arrays["_meta"][2])
        assert 2 * (40 - 2 * (n - 1)) <= count <= 80  # both rounds' transitions
        assert arrays["reward"].shape == (count,) and arrays["obs.candidates"].shape[1] == cfg.top_k
        assert ctx.state["iro-fed-replay-info"]["fingerprint"] == replay_fingerprint(cfg)


def test_keep_replay_off_starts_every_round_empty(tmp_path) -> None:
    from iro_fed.federated.client_app import REPLAY_STATE

    summary, grid = _federate(FedConfig(num_server_rounds=2, keep_replay=False, **TINY), tmp_path)
    assert [r["replay_kept"] for r in summary["rounds"]] == [0, 0]
    assert all(REPLAY_STATE not in ctx.state for ctx in grid.contexts.values())
    assert FedConfig.from_run_config({"keep-replay": False}).keep_replay is False
    assert FedConfig().keep_replay is True


def test_a_buffer_filled_under_other_settings_is_replaced(caplog: pytest.LogCaptureFixture) -> None:
    from flwr.app import Context, RecordDict

    from iro_fed.federated.client_app import load_replay, save_replay

    small, big = FedConfig(**TINY), FedConfig(**{**TINY, "buffer_size": 800})
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    buf, kept = load_replay(ctx, small, 1)
    assert not kept and len(buf) == 0
    _fill(buf, 5)
    save_replay(ctx, small, buf)
    again, kept = load_replay(ctx, small, 1)
    assert kept and len(again) == 5
    with caplog.at_level(logging.WARNING):
        other, kept = load_replay(ctx, big, 1)
    assert not kept and len(other) == 0 and other.capacity == 800
    assert "other settings" in caplog.text
