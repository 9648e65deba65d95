"""Where the agent's ranking comes from: the global policy of a registry, a configured solver,
or the fallback heuristic.

Policy registry folder (written by the federated server, read here)::

    REGISTRY/
      latest            -> a text file holding a version name or a path in it ("v0002/policy.pt"),
                           or a symlink to the version folder
      v0001/metadata.json
      v0002/metadata.json   {"version": "v0002", "solver": "dqn", "params": {"policy": "{version_dir}/policy.pt"}, ...}

A version is loaded by a *loader* ``(version_dir, metadata) -> OnlineSolver``; the default one
builds ``solvers.make(metadata["solver"], **metadata["params"])`` with ``{version_dir}`` in
string parameters replaced by the version's folder, so any registered online solver (the DQN
solver when it exists) can be a policy. :class:`RegistryPolicySource` polls ``latest``, loads a
new version when it changes, and keeps serving the last good version while a new one is
missing, half-written or fails to load.

A solver that loads its model lazily offers ``preload()`` (the dqn solver's
:meth:`~solvers.dqn.solver.DQNSolver.preload`; a wrapper forwards it): the default loader calls
it on whatever solver it built, so a version that cannot load fails here, not at its first rank.
It raises :class:`solvers.SolverError` for an unusable model.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solvers.base import OnlineSolver

LATEST = "latest"
METADATA = "metadata.json"


class PolicyLoadError(Exception):
    """The registry has no usable policy (no ``latest``, a broken version, a bad solver)."""


@dataclass
class Ranker:
    """An online solver and where it came from; ``rank`` is serialized (solvers keep per-run state)."""

    solver: OnlineSolver
    source: str  # "policy", "solver" or "heuristic"
    version: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    loaded_at: float = field(default_factory=time.time)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def rank(self, state: Any, w: int, k: int) -> list[tuple[int, float]]:
        with self._lock:
            return self.solver.rank(state, w, k)


PolicyLoader = Callable[[Path, dict[str, Any]], OnlineSolver]


def load_solver_policy(version_dir: Path, metadata: dict[str, Any]) -> OnlineSolver:
    """The default loader: a registered online solver named by the metadata (see module doc)."""
    import solvers

    name = metadata.get("solver")
    if not isinstance(name, str) or not name:
        raise PolicyLoadError(f"{version_dir / METADATA}: 'solver' must name a registered solver")
    params = metadata.get("params", {})
    if not isinstance(params, dict):
        raise PolicyLoadError(f"{version_dir / METADATA}: 'params' must be an object")
    params = {k: v.replace("{version_dir}", str(version_dir)) if isinstance(v, str) else v for k, v in params.items()}
    try:
        solver = solvers.make(name, **params)
    except solvers.SolverError as exc:
        raise PolicyLoadError(f"{version_dir / METADATA}: {exc}") from exc
    if not isinstance(solver, OnlineSolver):
        raise PolicyLoadError(f"{version_dir / METADATA}: solver {name!r} cannot rank nodes (not an online solver)")
    # A solver that loads its model lazily would only fail at its first rank, after it replaced
    # the last good version: preload it here, so a corrupt checkpoint or one trained on other
    # features is refused while the old version keeps serving (see the module doc).
    preload = getattr(solver, "preload", None)
    if callable(preload):
        try:
            preload()
        except solvers.SolverError as exc:
            raise PolicyLoadError(f"{version_dir}: {exc}") from exc
    return solver


class RegistryPolicySource:
    """Follows the ``latest`` pointer of a policy registry folder (thread-safe)."""

    def __init__(self, registry: str | Path, loader: PolicyLoader = load_solver_policy) -> None:
        self.registry = Path(registry)
        self.loader = loader
        self.current: Ranker | None = None
        self.last_error: str | None = None
        self.last_check: float | None = None
        self._lock = threading.Lock()

    def latest_version(self) -> str:
        """The version name ``latest`` points to."""
        pointer = self.registry / LATEST
        # Every way the folder or the pointer can be unreadable (gone, no permission, not UTF-8) is a
        # PolicyLoadError: the caller keeps the last good policy and reports why.
        try:
            if not self.registry.is_dir():
                raise PolicyLoadError(f"policy registry {self.registry} does not exist")
            if pointer.is_symlink():
                return Path(pointer.readlink()).name
            text = pointer.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise PolicyLoadError(f"policy registry {self.registry} has no '{LATEST}' pointer yet") from None
        except IsADirectoryError:
            return pointer.resolve().name
        except (OSError, ValueError) as exc:
            raise PolicyLoadError(f"{pointer}: cannot read: {exc}") from exc
        # "v0002" or a path inside the version folder ("v0002/policy.pt", as iro_fed.federated.registry writes).
        version = text.split("/", 1)[0]
        if not version or text.startswith("/") or version in (".", ".."):
            raise PolicyLoadError(f"{pointer}: expected a version name (or VERSION/FILE), got {text!r}")
        return version

    def poll(self) -> bool:
        """Load the version ``latest`` names if it is new; True when the policy changed.

        Raises :class:`PolicyLoadError` when the registry or the new version is unusable; the
        current policy (the last good one) stays in place.
        """
        self.last_check = time.time()
        try:
            version = self.latest_version()
            if self.current is not None and self.current.version == version:
                self.last_error = None
                return False
            version_dir = self.registry / version
            try:
                metadata = json.loads((version_dir / METADATA).read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise PolicyLoadError(f"{version_dir / METADATA}: missing") from None
            except (OSError, ValueError) as exc:
                raise PolicyLoadError(f"{version_dir / METADATA}: cannot read: {exc}") from exc
            if not isinstance(metadata, dict):
                raise PolicyLoadError(f"{version_dir / METADATA}: expected a JSON object")
            try:
                solver = self.loader(version_dir, metadata)
            except PolicyLoadError:
                raise
            except Exception as exc:  # a loader's own failure: never take the agent down
                raise PolicyLoadError(f"{version_dir}: loading failed: {type(exc).__name__}: {exc}") from exc
        except PolicyLoadError as exc:
            self.last_error = str(exc)
            raise
        with self._lock:
            self.current = Ranker(solver, "policy", version, metadata)
        self.last_error = None
        return True
