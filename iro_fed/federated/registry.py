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
file or a pointer to a missing version. A write that fails (disk full), the pointer's included,
removes its version folder and raises :class:`RegistryError`: the registry is left as it was.

A writer killed between a complete version and its pointer (SIGKILL, power loss) leaves a
version ``latest`` does not name. When ``latest`` is missing altogether (it died on the first
version, or the pointer was deleted), :meth:`PolicyRegistry.latest_version` (``resume``,
:meth:`PolicyRegistry.load`) takes the highest complete version and logs a warning rather than
reporting an empty registry (a resume would silently start from a fresh policy); the edge agent
and the ``dqn`` solver read only ``latest`` and wait for the next publish, which writes it. A
``latest`` that exists is always followed, even when a higher complete version is not named.

Several writers may share a folder (the ServerApp of ``iro fed rounds`` and the feedback loop's
``DQNFineTune``): a version number is taken by creating its folder (``mkdir`` fails for the
second writer, which takes the next number), and ``latest`` only moves forward (a writer that
finishes after a higher version was published leaves ``latest`` on it).
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

VERSION_DIR = re.compile(r"^v(\d{4,})$")
CHECKPOINT = "policy.pt"
#: What a version folder holds once :meth:`PolicyRegistry.publish` has written it whole (in this order).
VERSION_FILES = (CHECKPOINT, "policy.json", "metadata.json")

logger = logging.getLogger(__name__)


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
        """The version ``latest`` names; without ``latest``, the highest complete version (a warning
        is logged: its writer stopped before pointing at it), or None for an empty registry."""
        named = self._pointer()
        if named is not None:
            return named
        complete = [v for v in self.versions() if self._complete(v)]
        if not complete:
            return None
        logger.warning("registry %r: no 'latest' pointer, but complete version(s) %s exist (a writer stopped "
                       "before pointing at its version?); using the highest, v%04d", str(self.root),
                       ", ".join(f"v{v:04d}" for v in complete), complete[-1])
        return complete[-1]

    def _pointer(self) -> int | None:
        """The version the ``latest`` file names, or None when there is none."""
        pointer = self.root / "latest"
        if not pointer.is_file():
            return None
        m = re.match(r"^v(\d{4,})/", pointer.read_text(encoding="utf-8").strip())
        if not m:
            raise RegistryError(f"registry {str(self.root)!r}: 'latest' does not name a version")
        return int(m.group(1))

    def _complete(self, version: int) -> bool:
        """Whether every file :meth:`publish` writes is in the version's folder (metadata.json comes last)."""
        folder = self.path(version).parent
        return all((folder / name).is_file() for name in VERSION_FILES)

    def publish(self, state_dict: Mapping[str, Any], metadata: Mapping[str, Any]) -> tuple[int, Path]:
        """Write the next version and point ``latest`` at it; returns ``(version, checkpoint path)``.

        ``state_dict`` holds torch tensors or numpy arrays; ``metadata`` must hold the DQN
        checkpoint keys (``config``, ``candidate_features``, ``context_features``); ``version``
        and ``created_at`` are added here. A failed write of the version or of ``latest`` removes
        the version and raises :class:`RegistryError` saying which failed.
        """
        import torch

        from iro_fed.problem_io import write_json_atomic
        from solvers import CheckpointWriteError, save_checkpoint

        for key in ("config", "candidate_features", "context_features"):
            if key not in metadata:
                raise RegistryError(f"registry {str(self.root)!r}: metadata lacks {key!r}")
        tensors = {k: (v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v))) for k, v in state_dict.items()}
        self.root.mkdir(parents=True, exist_ok=True)
        version = self._reserve()
        path = self.path(version)
        try:
            meta = {**_finite_or_none(metadata), "version": version,
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            save_checkpoint(path, tensors, meta)
            summary = {k: meta[k] for k in ("round", "strategy", "nodes", "sites", "evaluation", "created_at") if k in meta}
            # as policy.json has them (numpy numbers as floats), not a TypeError after the checkpoint is written
            summary = json.loads(json.dumps(summary, default=float))
            write_json_atomic(path.parent / "metadata.json", {
                "version": f"v{version:04d}", "solver": "dqn", "params": {"policy": "{version_dir}/" + CHECKPOINT},
                **summary,
            })
        except BaseException as exc:
            shutil.rmtree(path.parent, ignore_errors=True)  # never a half-written version left behind
            where = f"registry {str(self.root)!r}: cannot write version v{version:04d}"
            if isinstance(exc, CheckpointWriteError):  # its message already says what failed and why
                raise RegistryError(f"{where}: {exc}") from exc
            if isinstance(exc, OSError):
                raise RegistryError(f"{where} (disk full or not writable?): {exc}") from exc
            raise
        try:
            self._point_latest(version)
        except BaseException as exc:
            # A version no pointer names would be taken up by no reader but resume's fallback: remove
            # it, unless the pointer was replaced after all (an interrupt after the rename).
            try:
                pointed = self._pointer() == version
            except (RegistryError, OSError, UnicodeDecodeError):
                pointed = False
            if pointed:  # published; only an interrupt is passed on
                if isinstance(exc, Exception):
                    return version, path
                raise
            shutil.rmtree(path.parent, ignore_errors=True)
            if isinstance(exc, OSError):
                raise RegistryError(f"registry {str(self.root)!r}: cannot point 'latest' at version v{version:04d} "
                                    f"(not writable?); the version was removed: {exc}") from exc
            raise
        return version, path

    def _reserve(self) -> int:
        """The next version number, taken by creating its folder (another writer's mkdir fails)."""
        existing = self.versions()
        version = (existing[-1] + 1) if existing else 1
        while True:
            try:
                self.path(version).parent.mkdir()
                return version
            except FileExistsError:  # another writer's (or a failed write's leftover): the next one
                version += 1

    def _point_latest(self, version: int) -> None:
        """Point ``latest`` at ``version`` unless it names a higher one already (it never moves back)."""
        from iro_fed.problem_io import write_file_atomic

        with open(self.root / ".publish.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the read and the replace below, one writer at a time
            try:
                current = self._pointer()  # the file itself: a fallback version must not hold it back
            except (RegistryError, OSError, UnicodeDecodeError):
                current = None  # a damaged pointer is replaced
            if current is not None and current > version and self.path(current).is_file():
                return
            write_file_atomic(self.root / "latest",
                              lambda tmp: Path(tmp).write_text(f"v{version:04d}/{CHECKPOINT}\n", encoding="utf-8"))

    def load(self, version: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(state_dict, metadata)`` of a version (default: ``latest``)."""
        from solvers import load_checkpoint

        v = self.latest_version() if version is None else version
        if v is None:
            raise RegistryError(f"registry {str(self.root)!r}: no published policy")
        return load_checkpoint(self.path(v))

    def metadata(self, version: int) -> dict[str, Any]:
        from solvers import checkpoint_metadata_path

        return json.loads(checkpoint_metadata_path(self.path(version)).read_text(encoding="utf-8"))


def _finite_or_none(value: Any) -> Any:
    """``value`` with every float that is not finite (an evaluation metric with nothing to average,
    e.g. eval-pending-pct when no pod became ready: NaN) as None: JSON cannot hold NaN, and a
    version must not fail to publish over a metric."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value
