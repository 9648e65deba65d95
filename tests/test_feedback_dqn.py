"""DQNFineTune writing a checkpoint (``out=``): each fine-tune goes on from the last one."""

from __future__ import annotations

import json

import pytest

from iro_fed.feedback import DQNFineTune
from tests.sim.test_feedback_sim import TINY


def test_fine_tunes_to_a_checkpoint_start_from_the_previous_fine_tune(tmp_path):
    """With ``out=FILE`` every fine-tune started again from ``policy``, so the next one threw away
    (overwrote) what the previous one had learned."""
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    import solvers
    from iro_fed.sim.env import PlacementEnv
    from solvers.dqn.checkpoint import metadata_path

    start = tmp_path / "start.pt"
    solvers.make("dqn", seed=0).fit([lambda: PlacementEnv("edge-iot", hours=0.5, k=16, seed=1)], 16, out=start,
                                    config=TINY, progress=False, track_emissions=False)
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
