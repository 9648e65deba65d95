"""What an exact resume still lost: ``train_every``'s count of env steps since the last gradient step
(it restarted at 0, so a resumed run learned on other steps), and a replay buffer's sampling generator
in ``state_arrays`` (a buffer restored from them restarted its stream from its own seed)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

from solvers.dqn.checkpoint import CheckpointError  # noqa: E402
from solvers.dqn.replay import PrioritizedReplayBuffer, ReplayBuffer, Transition  # noqa: E402
from solvers.dqn.train import optimizer_path, train  # noqa: E402
from tests.solvers.test_dqn_train import CFG, PickBestEnv  # noqa: E402
from tests.solvers.test_dqnstate_resume import World, _buffer, _equal, _states, _train  # noqa: E402

# Learning every 4 env steps from the first step the buffer holds 66 transitions (step 67: 8-step
# episodes of 2-step windows), so the cut at step 96, an episode boundary, falls 1 step after the
# gradient step at 95 (8 gradient steps, between the target syncs at 5 and 10). The default
# exploration (noisy layers) is on; the PER beta stays at 1.
EVERY4 = CFG.replace(train_every=4, learning_starts=66, priority_beta0=1.0, target_update_every=5)


def test_a_resumed_run_learning_every_4_steps_cut_between_them_is_the_uninterrupted_run(tmp_path) -> None:
    torch.set_num_threads(1)
    whole, whole_run = _train(EVERY4, 160, World(), _buffer(EVERY4), out=tmp_path / "whole.pt")
    assert whole_run.updates == 24  # steps 67, 71, ..., 159

    world, buffer = World(), _buffer(EVERY4)
    first = tmp_path / "policy.pt"
    _, run = _train(EVERY4, 96, world, buffer, out=first)
    assert run.updates == 8 and world.steps == 96
    resumed, result = _train(EVERY4, 64, world, buffer, resume=first, out=tmp_path / "resumed.pt")

    (online, target), (whole_online, whole_target) = _states(resumed), _states(whole)
    assert _equal(online, whole_online)  # bit for bit
    assert _equal(target, whole_target)
    assert result.last_loss == whole_run.last_loss
    assert result.updates == 16 and resumed.updates == whole.updates  # 99, ..., 159 (were 100, ..., 156: 15)
    # the cut fell 1 step after a gradient step, not a multiple of train_every
    assert torch.load(optimizer_path(first), weights_only=True).get("since_learn") == 1


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"], ids=["negative", "bool", "float", "str"])
def test_a_damaged_count_of_steps_since_learning_is_an_error_naming_the_file_and_entry(tmp_path, bad) -> None:
    first = tmp_path / "policy.pt"
    _train(EVERY4, 8, World(), _buffer(EVERY4), out=first)
    saved = torch.load(optimizer_path(first), weights_only=True)
    saved["since_learn"] = bad
    torch.save(saved, optimizer_path(first))
    out = tmp_path / "more.pt"
    with pytest.raises(CheckpointError, match=r"'since_learn': expected an integer >= 0") as info:
        train([PickBestEnv], EVERY4, steps=1, resume=first, out=out, progress=False, track_emissions=False)
    assert f"optimizer state {str(optimizer_path(first))!r}" in str(info.value)
    assert not out.exists()


@pytest.mark.parametrize("every", [4, 1])
def test_an_older_training_state_without_the_count_resumes_from_0_and_says_so_where_it_matters(
        tmp_path, caplog, every) -> None:
    cfg = EVERY4.replace(train_every=every)
    first = tmp_path / "policy.pt"
    _train(cfg, 96, World(), _buffer(cfg), out=first)
    saved = torch.load(optimizer_path(first), weights_only=True)
    del saved["since_learn"]  # as the version before this one wrote it
    torch.save(saved, optimizer_path(first))
    with caplog.at_level(logging.WARNING, logger="solvers.dqn.train"):
        _, result = train([PickBestEnv], cfg, steps=1, resume=first, progress=False, track_emissions=False)
    assert result.steps == 97
    notes = [r.getMessage() for r in caplog.records if "since its last gradient step" in r.getMessage()]
    if every == 1:
        assert notes == []  # every step learns once the buffer is full: nothing to count
    else:
        assert len(notes) == 1 and str(optimizer_path(first)) in notes[0] and "from 0" in notes[0]


def _fill(buffer: ReplayBuffer, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for i in range(n):
        obs = {"candidates": rng.normal(size=(3, 2)).astype(np.float32), "mask": np.array([1, 0, 1], np.int8)}
        nxt = {"candidates": rng.normal(size=(3, 2)).astype(np.float32), "mask": np.array([1, 1, 0], np.int8)}
        buffer.add(Transition(obs, i % 3, float(i), nxt, 0.9))


def _make(kind: str, seed: int) -> ReplayBuffer:
    return PrioritizedReplayBuffer(16, seed=seed) if kind == "prioritized" else ReplayBuffer(16, seed=seed)


def _draws(buffer: ReplayBuffer, n: int = 3) -> list[list[int]]:
    return [buffer.sample(8)["indices"].tolist() for _ in range(n)]


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_a_buffer_restored_from_its_state_arrays_continues_its_sampling_stream(kind: str) -> None:
    buf = _make(kind, seed=3)
    _fill(buf, 21)
    buf.sample(8), buf.sample(8)  # the stream has moved on from its seed
    again = _make(kind, seed=99)  # another process's buffer, of another seed
    again.load_state_arrays(buf.state_arrays())
    assert _draws(again) == _draws(buf)


def test_the_sampling_stream_survives_the_federated_node_state_record() -> None:
    pytest.importorskip("flwr")
    from iro_fed.federated import wire

    buf = _make("prioritized", seed=3)
    _fill(buf, 21)
    buf.sample(8)
    record = wire.per_layer_record(buf.state_arrays())  # what a site keeps in its context.state
    again = _make("prioritized", seed=5)
    again.load_state_arrays({k: v.numpy() for k, v in record.items()})
    assert _draws(again) == _draws(buf)


def test_state_arrays_without_the_generator_load_as_before() -> None:
    buf = _make("uniform", seed=3)
    _fill(buf, 10)
    state = {k: v for k, v in buf.state_arrays().items() if k != "_rng"}  # as an older version wrote it
    again, fresh = _make("uniform", seed=7), _make("uniform", seed=7)
    again.load_state_arrays(state)
    fresh.load_state_arrays(state)
    assert len(again) == 10
    assert again.rng.bit_generator.state == np.random.default_rng(7).bit_generator.state  # its own stream
    assert _draws(again) == _draws(fresh)


@pytest.mark.parametrize(("raw", "message"), [
    (np.array([1, 2], np.int64), r"'_rng': expected the generator's state as UTF-8 JSON bytes"),
    (np.frombuffer(b"{not json", np.uint8), r"'_rng': not JSON"),
    (np.frombuffer(b"[1, 2]", np.uint8), r"'_rng': not a state of numpy's PCG64 \(expected a mapping"),
    (np.frombuffer(b'{"bit_generator": "MT19937", "state": {"key": [1], "pos": 0}}', np.uint8),
     r"'_rng': not a state of numpy's PCG64"),
], ids=["dtype", "json", "list", "kind"])
def test_a_damaged_generator_entry_is_refused_and_changes_nothing(raw, message) -> None:
    for kind in ("uniform", "prioritized"):
        buf = _make(kind, seed=3)
        _fill(buf, 10)
        state = {**buf.state_arrays(), "_rng": raw}
        target = _make(kind, seed=7)
        _fill(target, 2, seed=1)
        before = target.rng.bit_generator.state
        with pytest.raises(ValueError, match=message):
            target.load_state_arrays(state)
        assert len(target) == 2 and target.rng.bit_generator.state == before


def test_a_refused_prioritized_state_leaves_the_buffer_as_it_was() -> None:
    """The priorities were checked only after the content was replaced: a bad one left the other
    buffer's transitions under this buffer's priorities."""
    source = PrioritizedReplayBuffer(16)
    _fill(source, 10)
    state = source.state_arrays()
    for bad in ({"_priorities": np.full(10, np.nan)}, {"_max_priority": np.array([0.0])}):
        target = PrioritizedReplayBuffer(16, seed=7)
        _fill(target, 3, seed=1)
        rewards, total = target.storage["reward"].copy(), target.tree.total()
        with pytest.raises(ValueError, match="replay state"):
            target.load_state_arrays({**state, **bad})
        assert len(target) == 3 and target.next == 3
        np.testing.assert_array_equal(target.storage["reward"], rewards)
        assert target.tree.total() == total and target.max_priority == 1.0
