"""One feature layout (``iro_fed.features.feature_layout``) for what a checkpoint records and what
a load compares: the shipped policy still matches it, a caller changing its copy changes no other,
and the dqn solver refuses a checkpoint whose names differ from it."""

from __future__ import annotations

import pytest

from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES, feature_layout


def test_the_layout_is_the_feature_tuples_as_lists_and_each_call_has_its_own():
    layout = feature_layout()
    assert layout == {"candidates": list(CANDIDATE_FEATURES), "context": list(CONTEXT_FEATURES)}
    layout["candidates"].append("extra")
    layout["context"] = []
    assert feature_layout() == {"candidates": list(CANDIDATE_FEATURES), "context": list(CONTEXT_FEATURES)}


def test_the_shipped_policy_records_this_layout_and_a_renamed_one_is_refused(tmp_path):
    pytest.importorskip("torch")
    import solvers
    from solvers.dqn.checkpoint import load_checkpoint, save_checkpoint
    from solvers.dqn.solver import DEFAULT_POLICY

    state, meta = load_checkpoint(DEFAULT_POLICY)
    assert meta["feature_names"] == feature_layout()
    renamed = feature_layout()
    renamed["context"][0], renamed["context"][1] = renamed["context"][1], renamed["context"][0]
    path = tmp_path / "renamed.pt"
    save_checkpoint(path, state, {**meta, "feature_names": renamed})
    with pytest.raises(solvers.InvalidSettingError, match=r"context\[0\]"):
        solvers.make("dqn", policy=str(path)).preload()
