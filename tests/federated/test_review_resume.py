"""``resume`` from a registry whose latest version does not fit this release (review finding)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("flwr")

from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES  # noqa: E402
from iro_fed.federated.registry import PolicyRegistry  # noqa: E402
from iro_fed.federated.server_app import initial_weights  # noqa: E402
from iro_fed.federated.task import FedConfig, build_agent, get_weights  # noqa: E402
from tests.federated.test_review_registry import _meta, _state  # noqa: E402


def test_resume_refuses_a_policy_trained_on_reordered_features(tmp_path):
    cfg = FedConfig(registry=str(tmp_path / "reg"), embed_dim=8, hidden_dim=16, resume=True)
    registry = PolicyRegistry(tmp_path / "reg")
    registry.publish(_state(), _meta(feature_names={"candidates": list(CANDIDATE_FEATURES),
                                                    "context": list(CONTEXT_FEATURES)}))
    weights, version = initial_weights(cfg, registry)  # this release's features: resumed
    assert version == 1 and set(weights) == set(get_weights(build_agent(cfg).online))
    # the same counts in another order load into the network but would feed it other columns
    registry.publish(_state(), _meta(feature_names={"candidates": list(reversed(CANDIDATE_FEATURES)),
                                                    "context": list(CONTEXT_FEATURES)}))
    with pytest.raises(ValueError, match="registry version 2 of .* was trained on other features"):
        initial_weights(cfg, registry)


def test_resume_from_a_latest_that_names_a_missing_version_says_so(tmp_path):
    cfg = FedConfig(registry=str(tmp_path / "reg"), embed_dim=8, hidden_dim=16, resume=True)
    registry = PolicyRegistry(tmp_path / "reg")
    registry.publish(_state(), _meta())  # the network of FedConfig(embed_dim=8, hidden_dim=16)
    (tmp_path / "reg" / "latest").write_text("v0007/policy.pt\n")  # a registry copied without its last version
    with pytest.raises(ValueError, match=r"'latest' names version 7, which cannot be read: .*v0007/policy.pt"):
        initial_weights(cfg, registry)
