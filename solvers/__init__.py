"""Pluggable placement solvers behind one contract, built by one registry.

    import solvers
    solvers.available()                      # names whose optional dependency is installed
    solver = solvers.make("kube-default", seed=1)
    placement = solver.solve(problem)

Solvers with an optional dependency register always (``iro solvers`` lists them) and import
the dependency only when they are built.
"""

from __future__ import annotations

from typing import Any

from solvers.base import (
    DeadlineExceeded,
    Decision,
    InvalidSettingError,
    OnlineSolver,
    Param,
    Solver,
    SolverError,
    SolverProperties,
)

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

__all__ = [
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
]
