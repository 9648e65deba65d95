"""Composite solvers: they wrap other solvers and are solvers themselves.

* ``fallback``: run ``primary`` with ``time_limit_s`` as its deadline; when it raises (an online
  solver past the deadline raises :class:`DeadlineExceeded`) or returns a placement that breaks a
  constraint, run ``fallback`` instead and record why in ``info``. A valid placement returned
  after the limit is kept, with ``info["late_s"]``: running the fallback then would end later.
* ``time-budget``: give ``solver`` a wall-clock budget. An online solver keeps the decisions it
  made in time and ``then`` (a fast online heuristic, or ``none``) places the rest; a batch
  solver that runs out is replaced by ``then`` on the whole problem, and one that stopped its own
  online start at the budget (pods in ``info["not_reached"]``, as cpsat reports them) has ``then``
  place those pods. A placement it puts together (an online solver's, or one ``then`` completed)
  is ``feasible``, never ``optimal``, or ``infeasible`` with ``info["violations"]`` when
  :func:`check_placement` finds any.

Deadlines are cooperative (``Solver.solve_until``): online solvers check them between pods,
batch solvers pass them to their engine's own time limit.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from iro_fed.feasibility import check_placement
from iro_fed.fragmentation import TypicalTasks
from iro_fed.model import ClusterState, Problem
from iro_fed.placement import Placement
from solvers.base import (
    SEED,
    DeadlineExceeded,
    InvalidSettingError,
    OnlineSolver,
    Param,
    Solver,
    SolverProperties,
    pass_typical_tasks,
    preload_each,
)


def _build(owner: str, role: str, name: str, params: dict[str, Any], seed: int) -> Solver:
    import solvers

    if name == owner:
        raise InvalidSettingError(f"solver {owner!r} setting {role!r}: cannot wrap itself")
    bad = [key for key in params if not isinstance(key, str)]
    if bad:  # make(**settings) raised a bare "keywords must be strings"
        raise InvalidSettingError(
            f"solver {owner!r} setting {role + '_params'!r}: setting names must be strings, got {bad[0]!r}"
        )
    settings = dict(params)
    cls = solvers.registered().get(name)
    if cls is not None and "seed" in cls.parameters:
        settings.setdefault("seed", seed)
    try:
        return solvers.make(name, **settings)
    except InvalidSettingError as exc:
        # A bad setting of the wrapped solver is one of ``<role>_params``; a bad or unknown solver
        # name is ``<role>`` itself.
        where = role + "_params" if cls is not None else role
        raise InvalidSettingError(f"solver {owner!r} setting {where!r}: {exc}") from exc


def _earliest(*deadlines: float | None) -> float | None:
    present = [d for d in deadlines if d is not None]
    return min(present) if present else None


class Fallback(Solver):
    name = "fallback"
    properties = SolverProperties(
        "batch", False, "Runs a primary solver; on error, timeout or an invalid result, a fallback.", composite=True
    )
    parameters: ClassVar[dict[str, Param]] = {
        "seed": SEED,
        "primary": Param("greedy-objective", str, "The solver tried first."),
        "primary_params": Param({}, dict, "Settings of the primary solver (JSON object on the command line)."),
        "fallback": Param("best-fit", str, "The solver used when the primary fails."),
        "fallback_params": Param({}, dict, "Settings of the fallback solver."),
        "time_limit_s": Param(None, float, "Time the primary may take (none = no limit).", minimum=0.0, nullable=True),
    }

    def _check_settings(self) -> None:
        self._primary = _build(self.name, "primary", self.primary, self.primary_params, self.seed)
        self._fallback = _build(self.name, "fallback", self.fallback, self.fallback_params, self.seed)

    def use_typical_tasks(self, tasks: TypicalTasks | None) -> None:
        pass_typical_tasks(tasks, self._primary, self._fallback)

    def preload(self) -> None:
        """Load the primary's lazy model now (dqn's checkpoint): a bad one raises here, where a
        caller that swaps solvers in can refuse it; left lazy, the wrapper would hide it by falling
        back on every solve. The fallback loads when first used, as before (it may never be)."""
        preload_each(self._primary)

    def _solve(self, problem: Problem, deadline: float | None) -> Placement:
        limit = None if self.time_limit_s is None else time.perf_counter() + self.time_limit_s
        try:
            placement = self._primary.solve_until(problem, _earliest(deadline, limit))
            # A valid placement that comes back after the limit is kept: the fallback would only
            # end later still. (cpsat ends a few ms late when a step cannot stop midway; its joint
            # placement was thrown away for kube-default's.) A primary that stops at the deadline
            # without a placement raises, and gets the fallback.
            late_s = None if limit is None else max(0.0, time.perf_counter() - limit)
            violations = check_placement(problem, placement.assignment, placement.gpu_cards)
            if violations:
                raise ValueError(f"invalid placement ({len(violations)} violation(s)): {violations[0]}")
        except Exception as exc:  # any failure of the primary is what this composite is for
            reason = f"{self.primary} failed: {type(exc).__name__}: {exc}"
            placement = self._fallback.solve_until(problem, deadline)
            placement.info = {"solved_by": self.fallback, "fallback_reason": reason, "inner": placement.info}
            return placement
        placement.info = {"solved_by": self.primary, "fallback_reason": None, "inner": placement.info}
        if late_s:
            placement.info["late_s"] = round(late_s, 6)
        return placement


class TimeBudget(Solver):
    name = "time-budget"
    properties = SolverProperties(
        "batch", False, "Gives a solver a wall-clock budget; a fast heuristic places what is left.", composite=True
    )
    parameters: ClassVar[dict[str, Param]] = {
        "seed": SEED,
        "solver": Param("greedy-objective", str, "The solver that gets the budget."),
        "solver_params": Param({}, dict, "Its settings (JSON object on the command line)."),
        "budget_s": Param(10.0, float, "Wall-clock budget in seconds.", minimum=0.0),
        "then": Param("first-fit", str, "Online solver for the pods left when the budget is spent, or 'none'."),
    }

    def _check_settings(self) -> None:
        self._inner = _build(self.name, "solver", self.solver, self.solver_params, self.seed)
        self._then = None if self.then == "none" else _build(self.name, "then", self.then, {}, self.seed)
        if self._then is not None and not isinstance(self._then, OnlineSolver):
            raise InvalidSettingError(f"solver {self.name!r} setting 'then': {self.then!r} is not an online solver")

    def use_typical_tasks(self, tasks: TypicalTasks | None) -> None:
        pass_typical_tasks(tasks, self._inner, self._then)

    def preload(self) -> None:
        """Load the wrapped solvers' lazy models now, not inside the first budget (a dqn checkpoint
        loaded there took the budget's first part, and a bad one raised mid-solve)."""
        preload_each(self._inner, self._then)

    def _solve(self, problem: Problem, deadline: float | None) -> Placement:
        budget_end = _earliest(deadline, time.perf_counter() + self.budget_s)
        inner_info: dict[str, Any] | None = None
        if isinstance(self._inner, OnlineSolver):
            state, reasons, pending = self._inner.run(problem, budget_end, stop_at_deadline=True)
        else:
            try:
                placement = self._inner.solve_until(problem, budget_end)
            except DeadlineExceeded:
                state, reasons, pending = ClusterState(problem), {}, list(range(problem.num_workloads))
            else:
                # A batch solver may stop its own online start at the budget (cpsat: the pods in
                # info["not_reached"], which no part of it considered); ``then`` places those.
                pending = list(placement.info.get("not_reached") or [])
                if not pending or self._then is None:
                    placement.info = {
                        "solved_by": self.solver,
                        "budget_exhausted": bool(pending),
                        "inner": placement.info,
                    }
                    if pending:  # then='none': counted as on the other paths (the reasons are the solver's)
                        placement.info["pods_after_budget"] = len(pending)
                    return placement
                inner_info = placement.info
                state = ClusterState.with_assignment(problem, placement.assignment, placement.gpu_cards)
                reasons = {w: r for w, r in placement.reasons.items() if w not in pending}
        if pending and self._then is not None:
            self._then.reset(problem)
            # The caller's deadline (a composite's time limit) still binds ``then``: past it, stop
            # as any online solver does rather than place every pod left of a huge problem.
            then_reasons, left = self._then.place_pods(state, pending, deadline, stop_at_deadline=True)
            if left:
                raise DeadlineExceeded(f"deadline passed with {len(left)} pod(s) left after the budget")
            reasons.update(then_reasons)
        else:
            for w in pending:
                reasons[w] = f"time budget of {self.budget_s:g} s spent before this pod was considered"
        info = {"solved_by": self.solver, "budget_exhausted": bool(pending), "pods_after_budget": len(pending)}
        if pending:
            info["finished_by"] = self.then
        if inner_info is not None:
            info["inner"] = inner_info
        # Pieced together (the inner solver's decisions, then ``then``'s): nothing proves it optimal,
        # even where the inner solver's own status was; valid is all that can be said.
        violations = check_placement(problem, state.assignment, state.gpu_cards)
        if violations:
            info["violations"] = violations
        return Placement(
            assignment=state.assignment.copy(),
            gpu_cards=dict(state.gpu_cards),
            reasons=reasons,
            status="infeasible" if violations else "feasible",
            info=info,
        )


COMPOSITES = (Fallback, TimeBudget)
