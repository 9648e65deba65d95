"""Pluggable placement solvers behind one contract, built by one registry.

    import solvers
    solvers.available()                      # names whose optional dependency is installed
    solver = solvers.make("kube-default", seed=1)
    placement = solver.solve(problem)

Solvers with an optional dependency register always (``iro solvers`` lists them) and import
the dependency only when they are built.

``__all__`` is the whole API the integrations (``iro_fed``, benchmarks, examples) may use: besides
the registry and the contract, the seed range and setting-text parser every solver shares, and the
DQN's config, checkpoint and training entry points (``iro train``, the federated task, the
feedback fine-tune). The DQN's names other than its config are looked up on use
(:func:`__getattr__`, :data:`_LAZY`): ``import solvers`` loads neither torch (the agent needs it)
nor the DQN's training code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from solvers.base import (
    MAX_SEED,
    DeadlineExceeded,
    Decision,
    InvalidSettingError,
    OnlineSolver,
    Param,
    Solver,
    SolverError,
    SolverProperties,
    parse_setting,
    reads_pod_scoring,
)
from solvers.dqn.config import ConfigError, DQNConfig

if TYPE_CHECKING:  # the names __getattr__ resolves, for type checkers
    from solvers.dqn.agent import DQNAgent
    from solvers.dqn.checkpoint import CheckpointError, CheckpointWriteError, load_checkpoint, save_checkpoint
    from solvers.dqn.checkpoint import metadata_path as checkpoint_metadata_path
    from solvers.dqn.checkpoint import read_config as read_checkpoint_config
    from solvers.dqn.replay import ReplayBuffer, Transition
    from solvers.dqn.solver import check_policy_features as check_dqn_policy_features
    from solvers.dqn.solver import resolve_policy as resolve_dqn_policy
    from solvers.dqn.train import new_buffer as new_replay_buffer
    from solvers.dqn.train import train as train_dqn

_REGISTRY: dict[str, type[Solver]] = {}


def register(cls: type[Solver]) -> type[Solver]:
    """Add a solver class to the registry under ``cls.name`` (a class decorator)."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"solver name {cls.name!r} is already registered by {_REGISTRY[cls.name].__name__}")
    _REGISTRY[cls.name] = cls
    return cls


def registered() -> dict[str, type[Solver]]:
    """Every registered solver class by name, installed or not."""
    return dict(sorted(_REGISTRY.items()))


def available() -> list[str]:
    """Names of the registered solvers whose optional dependency is installed."""
    return [name for name, cls in sorted(_REGISTRY.items()) if cls.properties.installed()]


def make(name: str, **params: Any) -> Solver:
    """Build a solver by name with constructor settings; unknown names and settings raise."""
    if not isinstance(name, str):  # a list raised "unhashable type", naming nothing
        raise InvalidSettingError(f"solver name: expected a string, got {type(name).__name__} {name!r}")
    cls = _REGISTRY.get(name)
    if cls is None:
        raise InvalidSettingError(f"unknown solver {name!r} (registered: {', '.join(sorted(_REGISTRY))})")
    if not cls.properties.installed():
        extra = f" (pip install 'iro-fed[{cls.properties.extra}]')" if cls.properties.extra else ""
        raise SolverError(f"solver {name!r} needs {', '.join(cls.properties.requires)}{extra}")
    return cls(**params)


def _register_builtin() -> None:
    from solvers.composite import COMPOSITES
    from solvers.cpsat import CpSat
    from solvers.dqn.solver import DQNSolver
    from solvers.fgd import PAPER_POLICIES
    from solvers.heuristics import HEURISTICS
    from solvers.iro_frag import IroFrag
    from solvers.kube_default import KubeDefault
    from solvers.qubo import Qubo

    for cls in (*HEURISTICS, KubeDefault, *PAPER_POLICIES, IroFrag, *COMPOSITES, CpSat, Qubo, DQNSolver):
        register(cls)


_register_builtin()

#: Public name -> (module, name there) of the names looked up on use. Not cached in this module:
#: the submodule stays the one place that holds each (a test that patches it there is seen here).
_LAZY: dict[str, tuple[str, str]] = {
    "CheckpointError": ("solvers.dqn.checkpoint", "CheckpointError"),
    "CheckpointWriteError": ("solvers.dqn.checkpoint", "CheckpointWriteError"),
    "DQNAgent": ("solvers.dqn.agent", "DQNAgent"),
    "ReplayBuffer": ("solvers.dqn.replay", "ReplayBuffer"),
    "Transition": ("solvers.dqn.replay", "Transition"),
    "checkpoint_metadata_path": ("solvers.dqn.checkpoint", "metadata_path"),
    "check_dqn_policy_features": ("solvers.dqn.solver", "check_policy_features"),
    "load_checkpoint": ("solvers.dqn.checkpoint", "load_checkpoint"),
    "new_replay_buffer": ("solvers.dqn.train", "new_buffer"),
    "read_checkpoint_config": ("solvers.dqn.checkpoint", "read_config"),
    "resolve_dqn_policy": ("solvers.dqn.solver", "resolve_policy"),
    "save_checkpoint": ("solvers.dqn.checkpoint", "save_checkpoint"),
    "train_dqn": ("solvers.dqn.train", "train"),
}


def __getattr__(name: str) -> Any:
    """A public name of :data:`_LAZY`, importing its module (PEP 562: ``solvers.X`` and
    ``from solvers import X`` both come here for a name this module does not hold)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    return getattr(importlib.import_module(module), attr)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

__all__ = [
    # the contract and the registry
    "DeadlineExceeded",
    "Decision",
    "InvalidSettingError",
    "OnlineSolver",
    "Param",
    "Solver",
    "SolverError",
    "SolverProperties",
    "available",
    "make",
    "register",
    "registered",
    "reads_pod_scoring",
    # shared by every solver's settings
    "MAX_SEED",
    "parse_setting",
    # the DQN: settings, policy files, training (all but the config looked up on use: _LAZY)
    "CheckpointError",
    "CheckpointWriteError",
    "ConfigError",
    "DQNAgent",
    "DQNConfig",
    "ReplayBuffer",
    "Transition",
    "check_dqn_policy_features",
    "checkpoint_metadata_path",
    "load_checkpoint",
    "new_replay_buffer",
    "read_checkpoint_config",
    "resolve_dqn_policy",
    "save_checkpoint",
    "train_dqn",
]
