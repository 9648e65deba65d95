"""``--resume`` continues the exploration, PER-beta and target-sync schedules where the checkpoint
stopped (they restarted from step 0: epsilon back at 1, beta back at ``priority_beta0``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

from solvers.dqn.checkpoint import CheckpointError, load_checkpoint, save_checkpoint  # noqa: E402
from solvers.dqn.replay import PrioritizedReplayBuffer  # noqa: E402
from solvers.dqn.train import train  # noqa: E402
from tests.solvers.test_dqn_train import CFG, PickBestEnv  # noqa: E402


class RecordingEnv(PickBestEnv):
    """PickBestEnv that keeps every observation it showed and the action taken on it."""

    def __init__(self, seen: list[tuple[dict[str, np.ndarray], int]]) -> None:
        super().__init__()
        self.seen = seen

    def step(self, action: int):
        self.seen.append(({k: v.copy() for k, v in self.current.items()}, int(action)))
        return super().step(action)


class BetaBuffer(PrioritizedReplayBuffer):
    """The real prioritized buffer, keeping the importance-sampling beta of each batch it is asked for."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg.buffer_size, cfg.priority_alpha, cfg.priority_eps, seed=0)
        self.betas: list[float] = []

    def sample(self, batch_size: int, beta: float = 0.4) -> dict[str, Any]:
        self.betas.append(beta)
        return super().sample(batch_size, beta=beta)


def _train(cfg: Any, steps: int, **kwargs: Any):
    kwargs.setdefault("env_fns", [PickBestEnv])
    return train(cfg=cfg, steps=steps, progress=False, track_emissions=False, **kwargs)


def _resave(src: Path, dst: Path, **changes: Any) -> Path:
    """``src``'s checkpoint written again with metadata ``changes`` (None: the key left out)."""
    state, meta = load_checkpoint(src)
    meta = {k: v for k, v in {**meta, **changes}.items() if v is not None and k != "format"}
    return save_checkpoint(dst, state, meta)


def test_epsilon_stays_where_the_checkpoint_left_it(tmp_path) -> None:
    # epsilon decays to 0 over the first 20 of 40 steps; no learning, so the network stays the checkpoint's
    cfg = CFG.replace(noisy=False, epsilon_start=1.0, epsilon_end=0.0, epsilon_fraction=0.5, learning_starts=10_000,
                      buffer_size=10_000)  # holds learning_starts: still no gradient step
    first = tmp_path / "policy.pt"
    _train(cfg, 40, out=first)
    seen: list[tuple[dict[str, np.ndarray], int]] = []
    agent, result = _train(cfg, 40, seed=1, resume=first, env_fns=[lambda: RecordingEnv(seen)])
    assert result.steps == 80 and len(seen) == 40
    greedy = [int(agent.act({k: v[None] for k, v in obs.items()}, explore=False)[0]) for obs, _ in seen]
    # every action is the greedy one: exploration had ended (it restarted at epsilon 1: random actions)
    assert [action for _, action in seen] == greedy


def test_per_beta_continues_from_a_finished_and_from_a_cut_schedule(tmp_path) -> None:
    buffer = BetaBuffer(CFG)
    first = tmp_path / "policy.pt"
    _train(CFG, 80, out=first, replay=buffer)
    assert buffer.betas[0] < 0.9 and buffer.betas[-1] == pytest.approx(1.0)  # annealed over the 80 steps
    buffer.betas.clear()
    _train(CFG, 20, resume=first, replay=buffer)  # the buffer is full: every step learns
    assert buffer.betas == pytest.approx([1.0] * 20)  # it restarted at 0.4 + 0.6 / 20
    # a run cut at step 80 of 160 (e.g. by its time limit): beta goes on from 0.7 towards 1 at 160
    cut = _resave(first, tmp_path / "cut.pt", schedule={"origin": 0, "horizon": 160, "updates": 10})
    buffer.betas.clear()
    _train(CFG, 20, resume=cut, replay=buffer)
    assert buffer.betas == pytest.approx([0.4 + 0.6 * (80 + i) / 160 for i in range(1, 21)])


def test_the_target_network_syncs_on_the_gradient_steps_counted_over_both_runs(tmp_path) -> None:
    buffer = BetaBuffer(CFG)
    first = tmp_path / "policy.pt"
    _, before = _train(CFG, 80, out=first, replay=buffer)
    assert before.updates > 1
    # one more gradient step is the (updates + 1)-th: a sync point of every updates + 1 steps
    cfg = CFG.replace(target_update_every=before.updates + 1)
    out = tmp_path / "more.pt"
    agent, result = _train(cfg, 1, resume=first, replay=buffer, out=out)
    assert result.updates == 1  # this run's gradient steps, as before
    online, target = dict(agent.online.named_parameters()), dict(agent.target.named_parameters())
    assert all(torch.equal(online[k], target[k]) for k in online)  # synced (counting from 0: no sync yet)
    saved, _ = load_checkpoint(first)
    assert not torch.equal(online["encoder.0.weight"], saved["encoder.0.weight"])  # and the step moved it
    assert load_checkpoint(out)[1]["schedule"] == {"origin": 0, "horizon": 80, "updates": before.updates + 1}


def test_a_checkpoint_without_schedules_restarts_them_and_says_so(tmp_path, caplog) -> None:
    buffer = BetaBuffer(CFG)
    first = tmp_path / "policy.pt"
    _train(CFG, 80, out=first, replay=buffer)
    old = _resave(first, tmp_path / "old.pt", schedule=None)  # as written before the schedules were saved
    buffer.betas.clear()
    with caplog.at_level(logging.WARNING, logger="solvers.dqn.train"):
        _, result = _train(CFG, 20, resume=old, replay=buffer)
    assert result.steps == 100
    assert buffer.betas[0] == pytest.approx(0.4 + 0.6 / 20)  # restarted, as resuming always did
    assert any("does not record where its exploration" in r.getMessage() and str(old) in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({"origin": 0, "horizon": 0, "updates": 3}, "'schedule'.horizon: expected an integer >= 1, got 0"),
        ({"origin": 0, "horizon": 80}, "'schedule'.updates: expected an integer >= 0, got None"),
        ({"origin": 500, "horizon": 80, "updates": 3}, "'schedule'.origin: 500 is not within the checkpoint's steps"),
        ([0, 80, 3], "'schedule': expected a mapping"),
        ("steps", "'steps': expected an integer >= 0, got 'ten'"),  # was int()'s error, naming no field
    ],
)
def test_a_damaged_schedule_is_an_error_naming_the_field(tmp_path, schedule, message) -> None:
    first = tmp_path / "policy.pt"
    _train(CFG, 10, out=first)
    damage = {"steps": "ten"} if schedule == "steps" else {"schedule": schedule}
    bad = _resave(first, tmp_path / "bad.pt", **damage)
    out = tmp_path / "more.pt"
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(")) as info:
        _train(CFG, 10, resume=bad, out=out)
    assert str(bad) in str(info.value)
    assert not out.exists()


def test_iro_train_resume_of_a_damaged_schedule_exits_2(tmp_path, capsys) -> None:
    from iro_fed.cli import main
    from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES, feature_layout
    from solvers.dqn.agent import DQNAgent
    from solvers.dqn.config import DQNConfig

    cfg = DQNConfig(top_k=4, embed_dim=16, hidden_dim=16, attention_heads=2, atoms=11)
    cand_f, ctx_f = len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES)
    old = tmp_path / "old.pt"
    save_checkpoint(old, DQNAgent(cfg, cand_f, ctx_f).online.state_dict(),
                    {"config": cfg.to_dict(), "candidate_features": cand_f, "context_features": ctx_f, "steps": 10,
                     "feature_names": feature_layout(), "schedule": {"origin": 0, "horizon": "10", "updates": 0}})
    out = tmp_path / "new.pt"
    argv = ["train", "--scenario", "bank", "--steps", "10", "--envs", "1", "--hours", "1", "--eval-episodes", "0",
            "--no-emissions", "--resume", str(old), "--out", str(out), "--set", "top_k=4", "--set", "embed_dim=16",
            "--set", "hidden_dim=16", "--set", "attention_heads=2", "--set", "atoms=11"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "'schedule'.horizon: expected an integer >= 1, got '10'" in err and str(old) in err
    assert not out.exists()
