"""``--resume`` continues training's random streams: the noisy layers' noise, epsilon's draws and the
replay buffer's sampling are saved in the training state (``policy.optim.pt``) and restored, so a
resumed run with exploration on is bit for bit the uninterrupted one (they restarted from the seed)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

from solvers.dqn.checkpoint import RNG_STATE, CheckpointError, load_checkpoint  # noqa: E402
from solvers.dqn.train import optimizer_path, train  # noqa: E402
from tests.solvers.test_dqn_train import CFG, PickBestEnv  # noqa: E402
from tests.solvers.test_dqnstate_resume import World, _buffer, _equal, _states, _train  # noqa: E402

# The default exploration (noisy layers) and prioritized replay; the PER beta stays at 1 (the cut run
# anneals it over its own 96 steps, the whole run over 160) and the target syncs every 20 gradient
# steps, so the cut at step 96 (33 gradient steps) lies between two syncs.
NOISY = CFG.replace(priority_beta0=1.0, target_update_every=20)
# Epsilon-greedy at a constant epsilon (an annealed one would anneal over each run's own steps).
EPSILON = CFG.replace(noisy=False, epsilon_start=0.3, epsilon_end=0.3, priority_beta0=1.0, target_update_every=20)


def _streams(agent: Any, buffer: Any) -> tuple[torch.Tensor, dict, dict]:
    return agent.noise_generator.get_state(), agent.rng.bit_generator.state, buffer.rng.bit_generator.state


@pytest.mark.parametrize("cfg", [NOISY, EPSILON], ids=["noisy", "epsilon"])
def test_a_resumed_run_with_exploration_is_the_uninterrupted_run_bit_for_bit(tmp_path, cfg) -> None:
    torch.set_num_threads(1)
    whole_buffer = _buffer(cfg)
    whole, whole_run = _train(cfg, 160, World(), whole_buffer, out=tmp_path / "whole.pt")

    world, buffer = World(), _buffer(cfg)
    first = tmp_path / "policy.pt"
    _, run = _train(cfg, 96, world, buffer, out=first)  # 12 whole episodes
    assert run.updates == 33 and world.steps == 96
    # a fresh buffer holding the same transitions: its sampling stream comes from the checkpoint alone
    refilled = _buffer(cfg)
    refilled.load_state_arrays(buffer.state_arrays())
    second = tmp_path / "resumed.pt"
    resumed, result = _train(cfg, 64, world, refilled, resume=first, out=second)

    assert result.steps == 160 and resumed.updates == whole.updates
    (online, target), (whole_online, whole_target) = _states(resumed), _states(whole)
    assert _equal(online, whole_online)  # bit for bit
    assert _equal(target, whole_target)
    assert result.last_loss == whole_run.last_loss
    assert load_checkpoint(second)[1]["metrics"]["last_loss"] == load_checkpoint(tmp_path / "whole.pt")[1]["metrics"][
        "last_loss"]
    # and the streams go on alike after it
    (noise, eps, replay), (w_noise, w_eps, w_replay) = _streams(resumed, refilled), _streams(whole, whole_buffer)
    assert torch.equal(noise, w_noise) and eps == w_eps and replay == w_replay


def test_the_streams_saved_are_those_the_run_stopped_at_not_after_its_evaluation(tmp_path) -> None:
    first = tmp_path / "policy.pt"
    buffer = _buffer(NOISY)
    obs = {"candidates": np.zeros((2, CFG.top_k, 3), np.float32), "context": np.zeros((2, 2), np.float32),
           "mask": np.ones((2, CFG.top_k), bool)}
    seen: list[Any] = []

    def evaluate(agent: Any) -> dict[str, Any]:
        seen.append(_streams(agent, buffer))
        agent.act(obs)  # exploring draws noise: not part of the run a resumed one continues
        return {}

    agent, _ = _train(NOISY, 24, World(), buffer, out=first, evaluate=evaluate)
    saved = torch.load(optimizer_path(first), weights_only=True)[RNG_STATE]
    (noise, eps, replay), = seen
    assert torch.equal(saved["noise"], noise) and not torch.equal(saved["noise"], agent.noise_generator.get_state())
    assert saved["epsilon"] == eps and saved["replay"] == replay
    # the file the dqn solver loads is as before: the online network and its metadata
    state, _ = load_checkpoint(first)
    assert _equal(state, agent.online.state_dict())
    # an older release reads Adam's part alone (Optimizer.load_state_dict ignores the other keys)
    older = torch.optim.Adam(agent.online.parameters(), lr=1.0)
    older.load_state_dict(torch.load(optimizer_path(first), weights_only=True))
    assert older.state_dict().keys() == {"state", "param_groups"}


def test_an_older_training_state_without_the_streams_resumes_and_says_so(tmp_path, caplog) -> None:
    first = tmp_path / "policy.pt"
    cut, _ = _train(NOISY, 96, World(), _buffer(NOISY), out=first)
    saved = torch.load(optimizer_path(first), weights_only=True)
    del saved[RNG_STATE]  # as the version before this one wrote it: Adam's state and the target
    torch.save(saved, optimizer_path(first))
    with caplog.at_level(logging.WARNING, logger="solvers.dqn.train"):
        resumed, result = train([PickBestEnv], NOISY, steps=1, resume=first, progress=False, track_emissions=False)
    assert result.steps == 97 and result.updates == 0
    assert _equal(resumed.target.state_dict(), cut.target.state_dict())  # the target still resumes
    notes = [r.getMessage() for r in caplog.records]
    assert any("random streams" in n and "restart from the seed" in n and str(first) in n for n in notes)
    assert not any("no target network" in n for n in notes)


def _damage_rng(path: Any, change: Any) -> None:
    saved = torch.load(path, weights_only=True)
    change(saved)
    torch.save(saved, path)


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s.__setitem__(RNG_STATE, [1, 2]), r"'rng_state': expected a mapping, got list"),
    (lambda s: s[RNG_STATE].__setitem__("noise", torch.zeros(3, dtype=torch.uint8)), r"'rng_state'\.noise"),
    (lambda s: s[RNG_STATE].__setitem__("noise", "abc"), r"'rng_state'\.noise"),
    (lambda s: s[RNG_STATE].__setitem__("epsilon", {"bit_generator": "MT19937"}), r"'rng_state'\.epsilon"),
    (lambda s: s[RNG_STATE]["replay"].__setitem__("state", {"state": "x"}), r"'rng_state'\.replay"),
    (lambda s: s[RNG_STATE].pop("replay"), r"'rng_state'\.replay"),
], ids=["not-a-mapping", "noise-size", "noise-type", "epsilon-kind", "replay-state", "replay-missing"])
def test_damaged_random_streams_are_an_error_naming_the_file_and_entry(tmp_path, change, message) -> None:
    first = tmp_path / "policy.pt"
    _train(NOISY, 10, World(), _buffer(NOISY), out=first)
    _damage_rng(optimizer_path(first), change)
    buffer = _buffer(NOISY)
    before = buffer.rng.bit_generator.state
    out = tmp_path / "more.pt"
    with pytest.raises(CheckpointError, match=message) as info:
        train([PickBestEnv], NOISY, steps=1, resume=first, out=out, replay=buffer, progress=False,
              track_emissions=False)
    assert f"optimizer state {str(optimizer_path(first))!r}" in str(info.value)
    assert not out.exists()
    assert buffer.rng.bit_generator.state == before  # nothing restored halfway

