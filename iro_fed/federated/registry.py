"""Policy registry: versioned global policies in a folder, with a ``latest`` pointer.

Layout (read by the ``dqn`` solver's ``policy=DIR`` and by the edge agent)::

    DIR/v0001/policy.pt     checkpoint (solvers.dqn.checkpoint format, torch.load(weights_only=True))
    DIR/v0001/policy.json   its metadata: version, round, strategy, nodes, evaluation, emissions, config ...
    DIR/v0001/metadata.json {"version": "v0001", "solver": "dqn", "params": {"policy": "{version_dir}/policy.pt"},
                             round, strategy, nodes, evaluation}: how to build the solver from this version
    DIR/v0002/...
    DIR/latest              a text file holding "v0002/policy.pt" (replaced atomically)

A version is complete before ``latest`` names it: the checkpoint and its JSON are written
atomically first, then ``latest`` is replaced with ``os.replace``; readers never see a partial
file or a pointer to a missing version. One writer (the ServerApp) per folder.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

VERSION_DIR = re.compile(r"^v(\d{4,})$")
CHECKPOINT = "policy.pt"


class RegistryError(ValueError):
    """A registry folder that cannot be read or written; the message names the path."""


class PolicyRegistry:
    """Versioned global policies under ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()
        if self.root.exists() and not self.root.is_dir():
            raise RegistryError(f"registry {str(self.root)!r}: exists and is not a folder")

    def versions(self) -> list[int]:
        """Published versions (complete ones: the checkpoint exists), ascending."""
        if not self.root.is_dir():
            return []
        out = []
        for child in self.root.iterdir():
            m = VERSION_DIR.match(child.name)
            if m and (child / CHECKPOINT).is_file():
                out.append(int(m.group(1)))
        return sorted(out)

    def path(self, version: int) -> Path:
        return self.root / f"v{version:04d}" / CHECKPOINT

    def latest_version(self) -> int | None:
        """The version ``latest`` names, or None for an empty registry."""
        pointer = self.root / "latest"
        if not pointer.is_file():
            return None
        m = re.match(r"^v(\d{4,})/", pointer.read_text(encoding="utf-8").strip())
        if not m:
            raise RegistryError(f"registry {str(self.root)!r}: 'latest' does not name a version")
        return int(m.group(1))

    def publish(self, state_dict: Mapping[str, Any], metadata: Mapping[str, Any]) -> tuple[int, Path]:
        """Write the next version and point ``latest`` at it; returns ``(version, checkpoint path)``.

        ``state_dict`` holds torch tensors or numpy arrays; ``metadata`` must hold the DQN
        checkpoint keys (``config``, ``candidate_features``, ``context_features``); ``version``
        and ``created_at`` are added here.
        """
        import torch

        from iro_fed.problem_io import write_json_atomic
        from solvers.dqn.checkpoint import save_checkpoint

        for key in ("config", "candidate_features", "context_features"):
            if key not in metadata:
                raise RegistryError(f"registry {str(self.root)!r}: metadata lacks {key!r}")
        self.root.mkdir(parents=True, exist_ok=True)
        existing = self.versions()
        version = (existing[-1] + 1) if existing else 1
        path = self.path(version)
        tensors = {k: (v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v))) for k, v in state_dict.items()}
        meta = {**metadata, "version": version, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        save_checkpoint(path, tensors, meta)
        summary = {k: meta[k] for k in ("round", "strategy", "nodes", "sites", "evaluation", "created_at") if k in meta}
        write_json_atomic(path.parent / "metadata.json", {
            "version": f"v{version:04d}", "solver": "dqn", "params": {"policy": "{version_dir}/" + CHECKPOINT},
            **summary,
        })
        self._point_latest(f"v{version:04d}/{CHECKPOINT}")
        return version, path

    def _point_latest(self, target: str) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".latest.", dir=self.root)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(target + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.root / "latest")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load(self, version: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(state_dict, metadata)`` of a version (default: ``latest``)."""
        from solvers.dqn.checkpoint import load_checkpoint

        v = self.latest_version() if version is None else version
        if v is None:
            raise RegistryError(f"registry {str(self.root)!r}: no published policy")
        return load_checkpoint(self.path(v))

    def metadata(self, version: int) -> dict[str, Any]:
        import json

        from solvers.dqn.checkpoint import metadata_path

        return json.loads(metadata_path(self.path(version)).read_text(encoding="utf-8"))
