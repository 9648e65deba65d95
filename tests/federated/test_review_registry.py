"""The policy registry with more than one writer, failed writes and numpy metadata (review findings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from iro_fed.federated import task  # noqa: E402
from iro_fed.federated.registry import PolicyRegistry  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _state() -> dict[str, Any]:
    net = task.build_agent(task.FedConfig(embed_dim=8, hidden_dim=16)).online
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _meta(**extra: Any) -> dict[str, Any]:
    cand_f, ctx_f = task.feature_sizes()
    cfg = task.FedConfig(embed_dim=8, hidden_dim=16)
    return {"config": cfg.dqn_config().to_dict(), "candidate_features": cand_f, "context_features": ctx_f, **extra}


class _Racing(PolicyRegistry):
    """A writer that another writer overtakes at a chosen point of its publish (real writes, forced order)."""

    def __init__(self, root: Path, at: str) -> None:
        super().__init__(root)
        self.at = at
        self.other_version: int | None = None

    def _overtake(self, where: str) -> None:
        if where == self.at and self.other_version is None:
            self.other_version, _ = PolicyRegistry(self.root).publish(_state(), _meta(round=100, strategy="other"))

    def versions(self) -> list[int]:
        found = super().versions()
        self._overtake("numbering")  # the other writer publishes after this one has counted
        return found

    def _point_latest(self, *args: Any) -> None:
        self._overtake("pointer")  # the other writer publishes a higher version before this one points
        super()._point_latest(*args)


def test_a_second_writer_never_overwrites_a_version_the_first_took(tmp_path):
    # ServerApp (iro fed rounds) and the feedback loop's DQNFineTune write the same registry.
    reg = _Racing(tmp_path / "reg", at="numbering")
    mine, _ = reg.publish(_state(), _meta(round=1, strategy="fedavg"))
    assert reg.other_version == 1 and mine == 2  # was: both wrote v0001, the other writer's policy lost
    assert reg.versions() == [1, 2] and reg.latest_version() == 2
    assert reg.metadata(1)["strategy"] == "other" and reg.metadata(2)["strategy"] == "fedavg"
    assert json.loads((tmp_path / "reg" / "v0001" / "metadata.json").read_text())["round"] == 100


def test_latest_never_moves_back_to_a_lower_version(tmp_path):
    reg = _Racing(tmp_path / "reg", at="pointer")
    mine, _ = reg.publish(_state(), _meta(round=1))
    assert (mine, reg.other_version) == (1, 2)
    # the other writer published v0002 while this one was finishing v0001: readers stay on v0002
    assert reg.latest_version() == 2 and (tmp_path / "reg" / "latest").read_text().strip() == "v0002/policy.pt"
    assert reg.versions() == [1, 2]


def test_numpy_numbers_in_the_metadata_publish_a_complete_version(tmp_path):
    # evaluate_policy / the feedback loop hand numpy floats; policy.json takes them (default=float),
    # metadata.json raised TypeError after the checkpoint was written: a version without metadata.json.
    reg = PolicyRegistry(tmp_path / "reg")
    version, path = reg.publish(_state(), _meta(round=np.int64(1), evaluation={"eval-reward": np.float32(0.5)}))
    assert version == 1 and reg.latest_version() == 1
    doc = json.loads((path.parent / "metadata.json").read_text())
    assert doc["round"] == 1 and doc["evaluation"] == {"eval-reward": 0.5} and doc["solver"] == "dqn"


def test_a_write_that_fails_for_lack_of_space_leaves_no_version_behind(tmp_path):
    """A real subprocess whose file-size limit is below a checkpoint's size: the write fails (as on a
    full disk) and neither a version folder nor a pointer is left; the next publish is v0001."""
    code = f"""
import resource, signal, sys
sys.path.insert(0, {str(REPO)!r})
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_review_registry import _meta, _state
from iro_fed.federated.registry import PolicyRegistry, RegistryError
state, meta = _state(), _meta(round=1)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
try:
    PolicyRegistry({str(tmp_path / "reg")!r}).publish(state, meta)
except RegistryError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    # was: torch's "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0"
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(f"registry {str(tmp_path / 'reg')!r}: cannot write version v0001: "), out.stdout
    assert out.stdout.count("(disk full or not writable?)") == 1, out.stdout  # was: the hint twice
    reg = PolicyRegistry(tmp_path / "reg")
    assert reg.versions() == [] and reg.latest_version() is None
    assert not [p for p in (tmp_path / "reg").iterdir() if p.name.startswith("v")]  # was: an empty v0001 left
    assert reg.publish(_state(), _meta(round=1))[0] == 1
