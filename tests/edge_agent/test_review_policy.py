"""Hot reload of the federated registry's DQN policy (review finding): a new version whose
checkpoint is corrupt or was trained on other features is refused when it is polled, and the last
good version keeps ranking (the dqn solver loads lazily: it used to replace the good one and fail
at the first /recommend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from edge_agent.policy import PolicyLoadError, RegistryPolicySource  # noqa: E402
from iro_fed.federated import task  # noqa: E402
from iro_fed.federated.registry import PolicyRegistry  # noqa: E402
from iro_fed.model import ClusterState  # noqa: E402
from iro_fed.problem_io import load_problem  # noqa: E402
from tests.federated.test_review_registry import _meta, _state  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _publish(registry: PolicyRegistry, **meta: Any) -> Path:
    return registry.publish(_state(), _meta(**meta))[1]


@pytest.mark.parametrize("broken", ["corrupt", "other-features"])
def test_a_broken_new_version_is_refused_and_the_last_good_one_keeps_ranking(tmp_path, broken):
    registry = PolicyRegistry(tmp_path / "reg")
    _publish(registry, round=1)
    src = RegistryPolicySource(tmp_path / "reg")
    assert src.poll() is True and src.current.version == "v0001"
    if broken == "corrupt":
        _publish(registry, round=2).write_bytes(b"not a torch checkpoint")
        why = "not a readable torch checkpoint"
    else:
        cand_f, ctx_f = task.feature_sizes()
        _publish(registry, round=2, feature_names={"candidates": [f"x{i}" for i in range(cand_f)],
                                                   "context": [f"y{i}" for i in range(ctx_f)]})
        why = "trained on other features"
    with pytest.raises(PolicyLoadError, match=why):
        src.poll()
    assert src.current.version == "v0001" and why in src.last_error
    problem = load_problem(REPO / "examples" / "problems" / "edge-cloud-gpu.yaml")
    assert src.current.rank(ClusterState(problem), 0, 3)  # the good policy still ranks
