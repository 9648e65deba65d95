"""DQNFineTune writing a checkpoint (``out=``): each fine-tune goes on from the last one."""

from __future__ import annotations

import json

import pytest

from iro_fed.feedback import DQNFineTune
from tests.sim.test_feedback_sim import train_start_policy


def test_fine_tunes_to_a_checkpoint_start_from_the_previous_fine_tune(tmp_path):
    """With ``out=FILE`` every fine-tune started again from ``policy``, so the next one threw away
    (overwrote) what the previous one had learned."""
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    import solvers
    from solvers.dqn.checkpoint import metadata_path

    start = tmp_path / "start.pt"
    train_start_policy(start, 16)
    out = tmp_path / "tuned.pt"
    action = DQNFineTune(out=out, policy=str(start), scenario="edge-iot", hours=0.5, steps=16, seed=0)
    action(None, None)
    first = {k: v.detach().clone() for k, v in solvers.make("dqn", policy=str(out)).loaded.agent.online.named_parameters()}
    assert json.loads(metadata_path(out).read_text())["fine_tune"]["from"] == str(start)
    action(None, None)
    assert json.loads(metadata_path(out).read_text())["fine_tune"]["from"] == str(out)
    second = dict(solvers.make("dqn", policy=str(out)).loaded.agent.online.named_parameters())
    change = sum(float((second[k].detach().float() - first[k].float()).abs().sum()) for k in first)
    assert change > 0 and action.results[1]["weight_change_l1"] == pytest.approx(change, rel=1e-4)
