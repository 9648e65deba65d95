"""Policy registry: a failed ``latest`` write and a missing ``latest`` (review findings).

Real files and real torch checkpoints; the failing write is provoked with a folder where the
registry writes a file (works as root too).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("torch")

from iro_fed.federated.registry import PolicyRegistry, RegistryError  # noqa: E402
from tests.federated.test_review_registry import _meta, _state  # noqa: E402


def _versions_on_disk(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("v"))


def test_a_pointer_that_cannot_be_written_leaves_the_registry_as_it_was(tmp_path: Path) -> None:
    reg = PolicyRegistry(tmp_path / "reg")
    reg.publish(_state(), _meta(round=1))
    # the lock file `latest` is written under is a folder: opening it fails once v0002 is whole
    (tmp_path / "reg" / ".publish.lock").unlink()
    (tmp_path / "reg" / ".publish.lock").mkdir()
    with pytest.raises(RegistryError, match=r"registry '.*reg': cannot point 'latest' at version v0002 .*"
                                            r"the version was removed: .*\.publish\.lock"):
        reg.publish(_state(), _meta(round=2))  # was: a raw IsADirectoryError
    # was: v0002 left on disk with `latest` still on v0001
    assert _versions_on_disk(tmp_path / "reg") == ["v0001"]
    assert (tmp_path / "reg" / "latest").read_text().strip() == "v0001/policy.pt"
    assert reg.versions() == [1] and reg.latest_version() == 1
    (tmp_path / "reg" / ".publish.lock").rmdir()
    assert reg.publish(_state(), _meta(round=2))[0] == 2 and reg.latest_version() == 2


def test_a_first_version_whose_pointer_fails_is_not_left_behind(tmp_path: Path) -> None:
    (tmp_path / "reg" / "latest" / "x").mkdir(parents=True)  # `latest` is a folder: os.replace onto it fails
    reg = PolicyRegistry(tmp_path / "reg")
    with pytest.raises(RegistryError, match=r"cannot point 'latest' at version v0001"):
        reg.publish(_state(), _meta(round=1))
    assert _versions_on_disk(tmp_path / "reg") == [] and reg.versions() == []
    assert reg.latest_version() is None  # no version for resume's fallback to take up either
    assert [p.name for p in (tmp_path / "reg").iterdir() if p.name.startswith(".latest")] == []


def test_without_latest_the_highest_complete_version_is_taken_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reg = PolicyRegistry(tmp_path / "reg")
    reg.publish(_state(), _meta(round=1))
    reg.publish(_state(), _meta(round=2, strategy="fedprox"))
    (tmp_path / "reg" / "latest").unlink()  # the writer of v0002 died before its pointer
    # a later writer that died half-way: a checkpoint without metadata.json is not complete
    (tmp_path / "reg" / "v0003").mkdir()
    (tmp_path / "reg" / "v0003" / "policy.pt").write_bytes((tmp_path / "reg" / "v0002" / "policy.pt").read_bytes())
    with caplog.at_level(logging.WARNING, logger="iro_fed.federated.registry"):
        assert reg.latest_version() == 2  # was: None, an empty registry
    assert "no 'latest' pointer" in caplog.text and "v0001, v0002" in caplog.text and "using the highest, v0002" \
        in caplog.text
    _, meta = reg.load()
    assert meta["strategy"] == "fedprox" and meta["version"] == 2
    # the next publish writes the pointer again (past the leftover v0003)
    assert reg.publish(_state(), _meta(round=3))[0] == 4
    assert (tmp_path / "reg" / "latest").read_text().strip() == "v0004/policy.pt"


def test_resume_after_a_lost_pointer_starts_from_the_last_complete_version(tmp_path: Path) -> None:
    pytest.importorskip("flwr")
    import numpy as np

    from iro_fed.federated.server_app import initial_weights
    from iro_fed.federated.task import FedConfig, build_agent, get_weights

    cfg = FedConfig(registry=str(tmp_path / "reg"), embed_dim=8, hidden_dim=16, resume=True)
    trained = {k: v + 0.5 for k, v in _state().items()}
    reg = PolicyRegistry(tmp_path / "reg")
    reg.publish(trained, _meta(round=1))
    (tmp_path / "reg" / "latest").unlink()  # a crash between the first version and its pointer
    weights, version = initial_weights(cfg, reg)
    assert version == 1  # was: None, a fresh policy without a word
    fresh = get_weights(build_agent(cfg).online)
    key = next(k for k in weights if k != "support")
    np.testing.assert_allclose(weights[key], trained[key].numpy())
    assert not np.allclose(weights[key], fresh[key])
