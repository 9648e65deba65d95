"""``train(schedule_position=(done, horizon))``: a run placed inside a longer schedule (a federated
site's later round) anneals epsilon and the PER beta from there, not from its own start."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

from tests.solvers.test_dqn_train import CFG  # noqa: E402
from tests.solvers.test_resume_schedules import BetaBuffer, RecordingEnv, _train  # noqa: E402


def test_epsilon_starts_at_the_position_given() -> None:
    # epsilon decays from 1 to 0 over the first half of the 160-step schedule; no learning
    cfg = CFG.replace(noisy=False, epsilon_start=1.0, epsilon_end=0.0, epsilon_fraction=0.5, learning_starts=10_000,
                      buffer_size=10_000)  # holds learning_starts: still no gradient step
    seen: list[tuple[dict[str, np.ndarray], int]] = []
    agent, result = _train(cfg, 40, env_fns=[lambda: RecordingEnv(seen)], schedule_position=(80, 160))
    assert result.steps == 40 and len(seen) == 40  # the run's own count
    greedy = [int(agent.act({k: v[None] for k, v in obs.items()}, explore=False)[0]) for obs, _ in seen]
    assert [action for _, action in seen] == greedy  # exploration had ended at step 80


def test_the_per_beta_goes_on_from_the_position_given() -> None:
    buffer = BetaBuffer(CFG)
    _train(CFG, 80, replay=buffer)  # fills the buffer
    buffer.betas.clear()
    _train(CFG, 20, replay=buffer, schedule_position=(40, 160))
    assert buffer.betas == pytest.approx([0.4 + 0.6 * (40 + i) / 160 for i in range(1, 21)])


@pytest.mark.parametrize(
    ("position", "extra", "message"),
    [
        ((-1, 160), {}, "schedule_position: done expected an integer >= 0, got -1"),
        ((0, 0), {}, "schedule_position: horizon expected an integer >= 1, got 0"),
        ((0, 1.5), {}, "schedule_position: horizon expected an integer >= 1, got 1.5"),
        ((0, 160), {"out": "x.pt"}, "schedule_position: not with out"),
        ((0, 160), {"resume": "x.pt"}, "schedule_position: not with resume"),
    ],
)
def test_a_bad_position_is_an_error_naming_it(tmp_path, position, extra, message) -> None:
    extra = {k: tmp_path / v for k, v in extra.items()}
    with pytest.raises(ValueError, match=message):
        _train(CFG, 5, schedule_position=position, **extra)
    assert list(tmp_path.iterdir()) == []
