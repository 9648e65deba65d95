"""The composites forward ``preload`` (the hook a caller that swaps solvers in calls): fallback loads
its primary's checkpoint, time-budget its solver's and its ``then``'s. Before, neither had one, so
``iro scheduler`` reached into fallback's ``_primary`` and a time-budget around dqn loaded the
checkpoint inside its first budget (a bad one raised mid-solve)."""

from __future__ import annotations

from pathlib import Path

import pytest

import solvers
from solvers.base import InvalidSettingError

pytest.importorskip("torch")


@pytest.fixture()
def corrupt(tmp_path: Path) -> str:
    path = tmp_path / "policy.pt"
    path.write_bytes(b"not a torch checkpoint")
    return str(path)


def test_fallback_preload_refuses_a_corrupt_primary(corrupt: str) -> None:
    solver = solvers.make("fallback", primary="dqn", primary_params={"policy": corrupt}, fallback="best-fit")
    with pytest.raises(InvalidSettingError, match="policy"):
        solver.preload()


def test_fallback_preload_leaves_the_fallback_lazy(corrupt: str) -> None:
    solver = solvers.make("fallback", primary="best-fit", fallback="dqn", fallback_params={"policy": corrupt})
    solver.preload()  # the fallback may never run: its checkpoint is read when it does
    assert solver._fallback._policy is None


def test_fallback_preload_loads_a_good_primary() -> None:
    solver = solvers.make("fallback", primary="dqn", fallback="best-fit")
    solver.preload()
    assert solver._primary._policy is not None


@pytest.mark.parametrize("role", ["solver", "then"])
def test_time_budget_preload_loads_and_checks_both_solvers(role: str, corrupt: str) -> None:
    good = solvers.make("time-budget", **{role: "dqn"})
    good.preload()
    inner = good._inner if role == "solver" else good._then
    assert inner._policy is not None
    settings = {"solver": "dqn", "solver_params": {"policy": corrupt}} if role == "solver" else {"then": "dqn"}
    bad = solvers.make("time-budget", **settings)
    if role == "then":
        bad._then.policy = corrupt  # time-budget builds 'then' with its defaults
    with pytest.raises(InvalidSettingError, match="policy"):
        bad.preload()


def test_time_budget_with_then_none_preloads() -> None:
    solvers.make("time-budget", solver="best-fit", then="none").preload()  # nothing lazy: no error
