"""The edge agent's default policy loader preloads any solver that offers ``preload()``: a dqn
subclass whose ``loaded`` is not a ``property`` and a wrapper that forwards to a dqn solver are
refused at load time when their checkpoint is bad, as the plain dqn solver is (the loader used to
recognize only a class with a ``loaded`` property, so these two failed later, at their first rank,
after they had replaced the last good policy)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

pytest.importorskip("torch")

import solvers  # noqa: E402
from edge_agent.policy import PolicyLoadError, load_solver_policy  # noqa: E402
from iro_fed.model import ClusterState  # noqa: E402
from solvers.base import OnlineSolver, Param, SolverProperties  # noqa: E402
from solvers.dqn.solver import DQNSolver, LoadedPolicy  # noqa: E402


class CachedDQN(DQNSolver):
    """A subclass that memoizes its policy with ``cached_property`` instead of the base property."""

    name = "leftover-cached-dqn"

    @functools.cached_property
    def loaded(self) -> LoadedPolicy:  # type: ignore[override]
        return DQNSolver.loaded.fget(self)  # type: ignore[attr-defined]


class ForwardingDQN(OnlineSolver):
    """A wrapper around a dqn solver that forwards what it does not define (``preload`` included)."""

    name = "leftover-forwarding-dqn"
    properties = DQNSolver.properties
    parameters: ClassVar[dict[str, Param]] = {**OnlineSolver.parameters, "policy": DQNSolver.parameters["policy"]}

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.inner = DQNSolver(policy=self.policy)

    def __getattr__(self, attr: str) -> Any:  # only for attributes the wrapper lacks
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return self.inner.score(state, w, candidates)


class Plain(OnlineSolver):
    """A solver with nothing to preload: loaded as before."""

    name = "leftover-plain"
    properties = SolverProperties("online", False, "test")

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        return np.zeros(len(candidates))


@pytest.fixture
def registered(monkeypatch):
    for cls in (CachedDQN, ForwardingDQN, Plain):
        monkeypatch.setitem(solvers._REGISTRY, cls.name, cls)


@pytest.mark.parametrize("name", ["dqn", CachedDQN.name, ForwardingDQN.name])
def test_a_lazily_loading_solver_with_a_bad_checkpoint_is_refused_at_load(tmp_path: Path, registered, name):
    bad = tmp_path / "policy.pt"
    bad.write_bytes(b"not a torch checkpoint")
    with pytest.raises(PolicyLoadError, match="not a readable torch checkpoint"):
        load_solver_policy(tmp_path, {"solver": name, "params": {"policy": "{version_dir}/policy.pt"}})


@pytest.mark.parametrize("name", ["dqn", CachedDQN.name, ForwardingDQN.name])
def test_a_good_checkpoint_is_loaded_before_the_solver_is_returned(tmp_path: Path, registered, name):
    solver = load_solver_policy(tmp_path, {"solver": name, "params": {}})  # the shipped default policy
    inner = solver.inner if isinstance(solver, ForwardingDQN) else solver
    assert inner._policy is not None  # loaded now, not at its first rank


def test_a_solver_without_preload_is_returned_as_is(tmp_path: Path, registered):
    solver = load_solver_policy(tmp_path, {"solver": Plain.name, "params": {}})
    assert type(solver) is Plain
