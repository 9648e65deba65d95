"""The CP-SAT model of the ``cpsat`` solver (:class:`PlacementModel`), written as a model proto.

The numbered steps of :meth:`PlacementModel._build` (variables, additive resources and the
aggregate cardinality cuts, exact GPU cards, R's terms at an integer scale) are described in
:mod:`solvers.cpsat`, which builds the model for the whole problem and for each neighbourhood of
its large-neighbourhood search. This module holds the model and the exact integer scaling of
amounts (:func:`integral_scale`, :func:`scaled_demand`, :func:`scaled_capacity`) it needs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iro_fed.feasibility import fit_tolerance, pod_groups
from iro_fed.interrupt import run_interruptibly, solve_cp_sat
from iro_fed.model import GPU_MILLI, ClusterState, Problem
from iro_fed.objective import coefficients, evaluate, pair_values
from solvers.local_search import (
    OutOfTime,
    check_deadline,
    guard_penalty,
    is_share,
    pack_gpu,
)

#: Largest objective scale (integer units per unit of R) and the int64 headroom it keeps.
MAX_SCALE = 1e13
SCALE_BUDGET = 2.0**56
#: Least wall-clock time a CP-SAT run is given; the whole-problem model is not solved with less
#: left (loading it alone took 0.015-0.03 s at 500 x 100 to 1000 x 5000, past the limit).
MIN_CPSAT_S = 0.01
#: Most node sets for the aggregate cardinality cuts (the smallest candidate sets first).
MAX_CARDINALITY_SETS = 256
#: Largest model (variables) solved with every constraint in CP-SAT's LP (linearization level 2).
LP2_MAX_VARIABLES = 5_000
_BIG = 2**62
#: Capacity rows times ``on`` for nodes that may power on (:meth:`PlacementModel._on_capacity_rows`).
ON_CAPACITY_CUTS = True
#: :meth:`PlacementModel.lp_bound`: its deadline is checked once per this many rows of the build,
#: and the LP's optimum is widened by this share of its size (GLOP's optimum is one within its
#: feasibility tolerances, not an exact one).
LP_ROWS_PER_CHECK = 256
LP_BOUND_TOL = 1e-7


#: Relative distance from an integer that still counts as one after scaling by a power of ten:
#: float noise only (0.1 * 10 = 1.0000000000000002), never a real fraction. A loose tolerance
#: here once let 0.2000001 CPU count as 2 tenths, so five such pods "fit" 1.0 CPU.
INTEGRAL_TOL = 1e-12
#: The utilization-level encoding only shapes the objective (capacity rows keep placements
#: feasible), so a coarser unit there keeps its integers small.
LEVELS_SCALE_TOL = 1e-6
#: Capacity rows: powers of ten tried for an exact unit (tiny amounts need more than 10^6: pods of
#: 1e-7 on 5e-7 free rounded to 1 unit each on 0, and the model placed none), and the largest
#: amount a power past 10^6 may make: INTEGRAL_TOL of it stays under 0.1 of a unit, so only float
#: noise counts as integral (at 10^15, 1/3 read as an integer).
ROW_MAX_POWER = 15
MAX_SCALED_AMOUNT = 1e11
#: The level encoding's finer unit (:func:`levels_unit`): powers of ten tried, and the largest
#: integer it may make (or the coarse unit's largest, if more). A finer unit makes the objective's
#: rounding error (``scale_error_bound``) grow with its integers.
LEVELS_MAX_POWER = 12
LEVELS_MAX_UNITS = 1e6
#: The most change of R the level encoding's rounded amounts may make with the model still exact
#: (``levels_error``; above it "optimal" would be a claim about another U; ten pods of 0.2000001 cpu: 2e-6).
LEVELS_EXACT_ERROR = 1e-5


def _is_integral(scaled: np.ndarray, tol: float = INTEGRAL_TOL, floor: float = 0.0) -> bool:
    """Whether every amount of ``scaled`` is an integer within ``tol`` relative to itself (to at
    least ``floor``: 1 makes it absolute below 1). Relative below 1 too: with an absolute ``tol``
    a 1e-6 capacity was "integral" at unit 1, rounded to 0, and read as no capacity at all."""
    return bool(np.all(np.abs(scaled - np.round(scaled)) <= tol * np.maximum(floor, np.abs(scaled))))


def integral_scale(
    values: np.ndarray, tol: float = INTEGRAL_TOL, floor: float = 0.0, max_power: int = 6
) -> tuple[float, bool]:
    """The smallest power of ten (<= 10^``max_power``) that makes ``values`` integral within
    ``tol`` (relative, see :func:`_is_integral`), and whether it did (else 10^6). Powers past
    10^6 only while the amounts stay within :data:`MAX_SCALED_AMOUNT`."""
    top = float(np.abs(values).max()) if values.size else 0.0
    for k in range(max_power + 1):
        if k > 6 and top * 10.0**k > MAX_SCALED_AMOUNT:
            break
        if _is_integral(values * 10.0**k, tol, floor):
            return 10.0**k, True
    return 10.0**6, False


def _unit_of(values: np.ndarray, mult: float) -> float:
    """``mult`` divided by the gcd of the positive integers ``values`` make at it."""
    ints = np.round(values * mult).astype(np.int64)
    return mult / (int(np.gcd.reduce(ints[ints > 0])) if (ints > 0).any() else 1)


def levels_unit(values: np.ndarray, largest: float) -> float:
    """Integer units per resource unit for one resource's level encoding (``values``: its
    demands, usage and capacities; ``largest``: the largest amount the encoding holds). The
    coarse unit (tolerance :data:`LEVELS_SCALE_TOL`, absolute below 1: small integers) unless a
    finer one (relative, up to 10^:data:`LEVELS_MAX_POWER`) makes every amount integral with
    integers up to max(:data:`LEVELS_MAX_UNITS`, the coarse unit's): they differ only where
    amounts are tiny beside the others, and at the coarse unit a 1e-6 capacity (a listed resource
    a node has none of) rounded to 0, so the model read it as absent and U's mean left it out."""
    coarse = _unit_of(values, integral_scale(values, LEVELS_SCALE_TOL, floor=1.0)[0])
    mult, integral = integral_scale(values, LEVELS_SCALE_TOL, max_power=LEVELS_MAX_POWER)
    if integral:
        fine = _unit_of(values, mult)
        if largest * fine <= max(LEVELS_MAX_UNITS, largest * coarse):
            return fine
    return coarse


def scaled_demand(demand: np.ndarray, mult: float) -> np.ndarray:
    """Integer demands at ``mult`` units per resource unit, rounded up (float noise aside), so
    that a capacity row never admits more than the float amounts allow: a positive demand is at
    least 1 (float noise is relative, or a 1e-13 demand read 0 and any number of them fit)."""
    scaled = demand * mult
    return np.ceil(scaled - INTEGRAL_TOL * np.abs(scaled))


def _rounding_keeps_count(d: np.ndarray, ub: np.ndarray, free: float, tol: float, dem: np.ndarray, cap: int) -> bool:
    """Whether a capacity row rounded conservatively (``dem`` up, ``cap`` down) admits exactly
    the pod counts that :func:`~iro_fed.feasibility.resource_fit` does (``tol`` the node's
    :func:`~iro_fed.feasibility.fit_tolerance`), placing one pod after another. Decided only
    when the pods ask for equal amounts (one count to compare); else False."""
    if d.size == 0:  # no pod asks for the resource (its node used past capacity): none kept out
        return True
    if not np.all(d == d[0]):
        return False
    total = int(ub.sum())
    rounded = min(total, cap // int(dem[0])) if dem[0] > 0 else total
    left, fits = free, 0
    while fits < total and left + tol >= d[0]:  # as ClusterState.place subtracts, pod by pod
        left -= d[0]
        fits += 1
    return rounded == fits


def unique_rows(mask: np.ndarray) -> np.ndarray:
    """``np.unique(mask, axis=0)`` of a boolean matrix, found on its rows packed 8 to a byte:
    big-endian bits compare as the booleans do, so the rows and their order are the same.
    np.unique over 5000 booleans a row took 0.02-0.06 s at 1000 x 5000 (a step the clock cannot
    stop inside a model build); packed, 0.003-0.009 s."""
    packed = np.unique(np.packbits(mask, axis=1), axis=0)
    return np.unpackbits(packed, axis=1, count=mask.shape[1]).astype(bool)


def scaled_capacity(free: float, mult: float) -> int:
    """Integer capacity at ``mult`` units per resource unit, rounded down (float noise aside)."""
    scaled = free * mult
    return math.floor(scaled + INTEGRAL_TOL * max(1.0, abs(scaled)))


@dataclass
class _Proto:
    """A CP-SAT model proto under construction and its objective (float, units of R). With a
    ``deadline``, adding variables or constraints after it raises :class:`OutOfTime`: every
    loop of the build adds some, so the build stops within one step of the deadline."""

    proto: Any
    obj_vars: list[int] = field(default_factory=list)
    obj_coefs: list[float] = field(default_factory=list)
    obj_ubs: list[float] = field(default_factory=list)
    deadline: float | None = None

    def new_vars(self, ubs: Any) -> np.ndarray:
        check_deadline(self.deadline)
        start = len(self.proto.variables)
        for ub in ubs:
            self.proto.variables.add().domain.extend([0, int(ub)])
        return np.arange(start, len(self.proto.variables), dtype=np.int64)

    def new_var(self, lo: int, hi: int) -> int:
        index = len(self.proto.variables)
        self.proto.variables.add().domain.extend([int(lo), int(hi)])
        return index

    def linear(self, variables: Any, coefs: Any, lo: float, hi: float, enforce: int | None = None) -> None:
        check_deadline(self.deadline)
        c = self.proto.constraints.add()
        if enforce is not None:
            c.enforcement_literal.append(int(enforce))
        c.linear.vars.extend([int(v) for v in variables])
        c.linear.coeffs.extend([int(k) for k in coefs])
        c.linear.domain.extend([int(max(lo, -_BIG)), int(min(hi, _BIG))])

    def at_most_one(self, literals: Any) -> None:
        self.proto.constraints.add().at_most_one.literals.extend([int(v) for v in literals])

    def exactly_one(self, literals: Any) -> None:
        self.proto.constraints.add().exactly_one.literals.extend([int(v) for v in literals])

    def objective(self, variables: Any, coefs: Any, ubs: Any) -> None:
        self.obj_vars.extend(int(v) for v in variables)
        self.obj_coefs.extend(float(c) for c in coefs)
        self.obj_ubs.extend(float(u) for u in ubs)


@dataclass
class _UtilVars:
    """Variables of the exact utilization encoding, for the hint: per resource (A var, demand
    per pair, initial usage, capacity of the switchable nodes, initial on-capacity, levels,
    level vars) in the resource's integer units, the m one-hot and z[(r, b, m)]."""

    resources: list[tuple[int, np.ndarray, int, np.ndarray, int, list[int], list[int]]] = field(default_factory=list)
    q: dict[int, int | None] = field(default_factory=dict)
    z: dict[tuple[int, int, int], int] = field(default_factory=dict)


@dataclass
class Result:
    """One CP-SAT run on a model: status, the state it decodes to, objective and bound (units of R)."""

    status: str
    state: ClusterState | None
    objective: float | None
    bound: float | None
    deterministic_time: float
    wall_time: float
    proved: bool


class PlacementModel:
    """The CP-SAT model of placing ``pods`` on top of ``base`` (a cluster state holding every
    other pod), each pod on the nodes where ``cand`` allows it (rows follow ``pods``).

    With ``base`` the empty cluster and every pod, it is the whole problem; with a few nodes'
    pods taken out of the current solution, it is a large-neighbourhood-search step. The
    objective is the change of the problem's R from ``base`` (all terms keep the whole
    problem's normalizers), plus R(base).

    With a ``deadline`` (``time.perf_counter()`` value) the build raises :class:`OutOfTime` once
    it has passed: a large model takes a large share of a small budget (1000 x 5000: 0.26 s).
    """

    def __init__(
        self, problem: Problem, base: ClusterState, pods: np.ndarray, cand: np.ndarray, exact_levels: int,
        hint: ClusterState | None = None, cardinality_cuts: bool = True, deadline: float | None = None,
        allowed: np.ndarray | None = None,
    ) -> None:
        from ortools.sat.python import cp_model

        self.problem = problem
        self.base = base
        self.pods = np.asarray(pods, dtype=np.int64)
        self.cp = cp_model.CpModel()
        self.model = _Proto(self.cp.proto, deadline=deadline)
        self.exact_levels = exact_levels
        self.cardinality_cuts = cardinality_cuts
        self.card_plan: dict[int, dict[int, list[tuple[int, ...]]]] = {}
        self.card_vars: dict[int, tuple[list[tuple[int, int, int]], list[tuple[int, int]]]] = {}
        self.card_groups: dict[int, list[list[int]]] = {}
        self.on_var: dict[int, int] = {}
        self.util: _UtilVars | None = None
        self.levels_rounded = False  # the level encoding rounded an amount (then U is approximate)
        self.capacity_rounded = False  # a capacity row rounded so that it may keep out pods that fit
        self.levels_error = 0.0  # most change of R from the level encoding's rounded amounts
        self.levels_lost_capacity = False  # the level encoding rounded a positive capacity to 0
        self.info: dict[str, Any] = {}
        self.solver: Any = None  # the CpSolver of the running or last solve
        #: gpu_guard's [W, N] allowed pairs (None: off): the objective is then the guarded score
        self.allowed = allowed
        self._build(cand, hint)
        if hint is not None:
            check_deadline(deadline)
            values = self.hint_values(hint)
            self.model.proto.solution_hint.vars.extend(list(values))
            self.model.proto.solution_hint.values.extend(list(values.values()))

    @property
    def num_variables(self) -> int:
        return len(self.model.proto.variables)

    @property
    def num_constraints(self) -> int:
        return len(self.model.proto.constraints)

    def lp_bound(self, deadline: float | None = None, on_solver: Any = None, stop: Any = None) -> float | None:
        """A bound on the model's objective (units of R, as CP-SAT's best bound, the rounding
        allowance ``error_bound`` included) from its linear relaxation, solved by GLOP: every
        linear row, at-most-one and exactly-one with the integrality dropped; a row only enforced
        by a literal ("on => some pod") is left out, which only widens the relaxation. None when
        the LP was not solved to optimality by ``deadline`` (``time.perf_counter()`` value).

        CP-SAT's own bound comes from the LP it solves inside its search, with only part of the
        rows above :data:`LP2_MAX_VARIABLES` and within its share of the time: at 500 x 100 with
        ``deterministic`` (its share 1.75 deterministic seconds) it had not finished it and its
        bound read +0.38 against R -0.74; GLOP solves the whole LP in 0.5-1 s there (-0.706).

        ``on_solver`` (a callable), when given, gets GLOP's solver before it solves, so that
        another thread can stop it (``InterruptSolve``; GLOP releases the GIL while it solves);
        ``stop`` (a threading.Event), when set, ends the build (None)."""
        from ortools.linear_solver import linear_solver_pb2, pywraplp

        proto = self.model.proto
        nv = len(proto.variables)
        objective = np.bincount(
            np.asarray(self.model.obj_vars, dtype=np.int64), weights=np.asarray(self.model.obj_coefs), minlength=nv,
        )
        lp = linear_solver_pb2.MPModelProto(maximize=True, objective_offset=float(self.const))
        try:
            for v, c in zip(proto.variables, objective.tolist(), strict=True):
                domain = v.domain
                lp.variable.add(lower_bound=float(domain[0]), upper_bound=float(domain[len(domain) - 1]),
                                objective_coefficient=c)
            for i, c in enumerate(proto.constraints):
                if i % LP_ROWS_PER_CHECK == 0:
                    check_deadline(deadline)
                    if stop is not None and stop.is_set():
                        return None
                if len(c.enforcement_literal):
                    continue
                if c.has_linear():
                    domain = c.linear.domain
                    lo, hi = domain[0], domain[len(domain) - 1]
                    row = lp.constraint.add(
                        lower_bound=-math.inf if lo <= -_BIG else float(lo), upper_bound=math.inf if hi >= _BIG else float(hi),
                    )
                    row.var_index.extend(c.linear.vars)
                    row.coefficient.extend([float(k) for k in c.linear.coeffs])
                elif c.has_at_most_one() or c.has_exactly_one():
                    literals = c.at_most_one.literals if c.has_at_most_one() else c.exactly_one.literals
                    row = lp.constraint.add(lower_bound=0.0 if c.has_at_most_one() else 1.0, upper_bound=1.0)
                    row.var_index.extend(literals)
                    row.coefficient.extend([1.0] * len(literals))
                else:  # a kind this model never adds: no relaxation of it is known here
                    return None
            check_deadline(deadline)
        except OutOfTime:
            return None
        solver = pywraplp.Solver.CreateSolver("GLOP")
        if solver.LoadModelFromProto(lp):  # an error message: no bound (it only reports)
            return None
        if deadline is not None:
            left_ms = int((deadline - time.perf_counter()) * 1000)
            if left_ms <= 0:
                return None
            solver.SetTimeLimit(left_ms)
        if on_solver is not None:
            on_solver(solver)
        if stop is not None and stop.is_set():  # set before on_solver's caller could interrupt it
            return None
        status = run_interruptibly(solver.Solve, solver.InterruptSolve)
        if status != pywraplp.Solver.OPTIMAL:
            return None
        value = float(solver.Objective().Value())
        return value + LP_BOUND_TOL * max(1.0, abs(value)) + self.error_bound

    # --- building --------------------------------------------------------------------------

    def _build(self, cand: np.ndarray, hint: ClusterState | None) -> None:
        p, base, model = self.problem, self.base, self.model
        coef = coefficients(p)
        wts = p.weights
        row_of = {int(w): i for i, w in enumerate(self.pods)}
        self.members = pod_groups(p, self.pods)
        gfeas = np.zeros((len(self.members), p.num_nodes), dtype=bool)
        for g, m in enumerate(self.members):
            gfeas[g] = cand[[row_of[int(w)] for w in m]].any(axis=0)
        rep = np.array([int(m[0]) for m in self.members], dtype=np.int64)  # a representative per group
        size = np.array([m.size for m in self.members], dtype=np.int64)
        pg, pn = np.nonzero(gfeas)  # pairs sorted by group, then node; variable k is pair k
        pw = rep[pg]
        self.pg, self.pn = pg, pn
        free = base.free
        tol = fit_tolerance(p)  # the filters' rounding allowance, so the model admits what they do
        gpu_free = base.gpu_free

        # 1. Count variables, bounded by the group size and by what fits the node alone.
        ub = size[pg].astype(np.float64)
        for r in range(len(p.resources)):
            d = p.demand[pw, r]
            ub = np.where(d > 0, np.minimum(ub, np.floor((free[pn, r] + tol[pn, r]) / np.where(d > 0, d, 1.0))), ub)
        gpu = p.wl_gpu_count[pw] > 0
        if gpu.any():
            share = is_share(p, pw)
            milli = np.where(share, p.wl_gpu_milli[pw], GPU_MILLI).astype(np.int64)
            share_fit = (np.maximum(gpu_free[pn], 0) // milli[:, None]).sum(axis=1)
            whole_fit = (gpu_free[pn] == GPU_MILLI).sum(axis=1) // np.maximum(p.wl_gpu_count[pw], 1)
            ub = np.where(gpu, np.minimum(ub, np.where(share, share_fit, whole_fit)), ub)
        ub = np.maximum(ub, 1).astype(np.int64)  # candidate pairs fit at least once
        self.ub = ub
        x = model.new_vars(ub)
        start = evaluate(p, base.assignment)
        const = start.score

        # At most |g| pods of a group.
        gb = np.searchsorted(pg, np.arange(len(self.members) + 1))
        for g in range(len(self.members)):
            a, b = gb[g], gb[g + 1]
            if size[g] == 1 and b - a > 1:
                model.at_most_one(x[a:b])
            elif ub[a:b].sum() > size[g]:
                model.linear(x[a:b], np.ones(b - a), 0, int(size[g]))

        if self.cardinality_cuts:
            self._cardinality_cuts(x, gfeas, rep, size, gb)

        # 2. Additive resources, where the candidates could overflow a node.
        by_node = np.argsort(pn, kind="stable")
        nb = np.searchsorted(pn[by_node], np.arange(p.num_nodes + 1))
        for r in range(len(p.resources)):
            d = p.demand[pw, r]
            total = np.bincount(pn, weights=d * ub, minlength=p.num_nodes)
            binding = np.flatnonzero(total > free[:, r] + tol[:, r])
            if binding.size == 0:
                continue
            # Exact where the amounts are decimals of up to six places (more for tiny ones);
            # otherwise conservative (demands up, capacity down), never admitting what the
            # feasibility module rejects.
            amounts = np.concatenate([d, np.maximum(free[binding, r], 0.0)])
            mult, integral = integral_scale(amounts, max_power=ROW_MAX_POWER)
            for n in binding:
                ks = by_node[nb[n] : nb[n + 1]]
                ks = ks[d[ks] > 0]
                if ks.size == 0:  # a node used past capacity, no candidate asks for r: nothing to bound
                    continue  # (the empty row `0 <= negative` made the whole model invalid)
                dem, cap = scaled_demand(d[ks], mult), scaled_capacity(free[n, r] + tol[n, r], mult)
                model.linear(x[ks], dem, 0, cap)
                if not integral and not _rounding_keeps_count(d[ks], ub[ks], float(free[n, r]), float(tol[n, r]), dem, cap):
                    # Rounded up, the demands may keep out pods that fit (3 pods of 1/3 cpu on 1.0
                    # free: 333334 x 3 > 10^6): the model is then not exact, and "optimal" would
                    # be a claim about fewer placements than the feasibility module allows.
                    self.capacity_rounded = True
                # Large-item cuts: pods over 1/(j+1) of what is free fit at most j at a time.
                # Implied for integers, but they tighten the LP bound where big pods compete.
                for j in (1, 2, 3):
                    big = ks[d[ks] * (j + 1) > free[n, r] + tol[n, r]]
                    if big.size > 1 and ub[big].sum() > j:
                        model.linear(x[big], np.ones(big.size), 0, j)

        # 3. GPU cards.
        for n in np.unique(pn[gpu]):
            # Most nodes' cards pack and add nothing to the model: the clock is looked at here too
            # (1000 x 5000: 0.033 s of packing between two looks).
            check_deadline(model.deadline)
            n = int(n)
            ks = by_node[nb[n] : nb[n + 1]]
            ks = ks[gpu[ks]]
            row = gpu_free[n]
            expanded = [int(k) for k in ks for _ in range(int(ub[k]))]
            plan = pack_gpu(p, n, [int(pw[k]) for k in expanded], row)
            if plan is not None:
                per_group: dict[int, list[tuple[int, ...]]] = {}
                for k, cards in zip(expanded, plan, strict=True):
                    per_group.setdefault(int(pg[k]), []).append(cards)
                self.card_plan[n] = per_group
                continue
            share_k = [int(k) for k in ks if is_share(p, int(pw[k]))]
            whole_k = [int(k) for k in ks if not is_share(p, int(pw[k]))]
            full_cards = np.flatnonzero(row == GPU_MILLI)
            if not share_k:
                model.linear(x[whole_k], p.wl_gpu_count[pw[whole_k]], 0, full_cards.size)
                continue
            ys: list[tuple[int, int, int]] = []  # (pair, card, var)
            ts: list[tuple[int, int]] = []  # (card, var)
            load: dict[int, tuple[list[int], list[int]]] = {}
            for k in share_k:
                mk = int(p.wl_gpu_milli[pw[k]])
                fits = np.flatnonzero(row >= mk)
                yv = model.new_vars(np.minimum(ub[k], row[fits] // mk))
                for c, v in zip(fits, yv, strict=True):
                    ys.append((k, int(c), int(v)))
                    lv, lc = load.setdefault(int(c), ([], []))
                    lv.append(int(v))
                    lc.append(mk)
                model.linear([*yv, x[k]], [*([1] * yv.size), -1], 0, 0)  # x = sum_c y
            if whole_k:
                tv = model.new_vars(np.ones(full_cards.size))
                for c, v in zip(full_cards, tv, strict=True):
                    ts.append((int(c), int(v)))
                    lv, lc = load.setdefault(int(c), ([], []))
                    lv.append(int(v))
                    lc.append(GPU_MILLI)
                counts = p.wl_gpu_count[pw[whole_k]]
                model.linear([*tv, *x[whole_k]], [*([1] * tv.size), *(-counts)], 0, 0)
            for c, (lv, lc) in load.items():
                model.linear(lv, lc, 0, int(row[c]))
            # Symmetry: cards with equal free milli are interchangeable; order their loads.
            self.card_groups[n] = []
            for value in np.unique(row[row > 0]):
                group = [int(c) for c in np.flatnonzero(row == value) if int(c) in load]
                self.card_groups[n].append(group)
                for c1, c2 in zip(group, group[1:], strict=False):
                    v1, k1 = load[c1]
                    v2, k2 = load[c2]
                    model.linear([*v1, *v2], [*k1, *(-np.asarray(k2))], 0, _BIG)
            self.card_vars[n] = (ys, ts)
        self.info["gpu_nodes_with_card_variables"] = len(self.card_vars)

        # 4. Objective, per placed pod: unplaced penalty avoided, latency, dynamic carbon.
        cx = wts.unplaced / p.num_workloads + pair_values(p, pw, pn)

        # Power-on of the nodes that are off in base (those with candidates can turn on).
        cand_nodes = np.unique(pn)
        switchable = cand_nodes[~base.on[cand_nodes]]
        if switchable.size:
            ov = model.new_vars(np.ones(switchable.size))
            for n, v in zip(switchable, ov, strict=True):
                n, v = int(n), int(v)
                self.on_var[n] = v
                ks = by_node[nb[n] : nb[n + 1]]
                for k in ks:
                    model.linear([x[k], v], [1, -int(ub[k])], -_BIG, 0)  # x <= ub on
                model.linear(x[ks], np.ones(ks.size), 1, _BIG, enforce=v)  # on => some pod
                if ON_CAPACITY_CUTS:
                    self._on_capacity_rows(x, ks, pw, n, v)
            model.objective(ov, coef.off_gain_base[switchable], np.ones(switchable.size))

        # Utilization: linear, exact levels, or the tangent surrogate.
        ucap, udem = p.util_capacity, p.util_demand
        a0 = base.util_used().sum(axis=0)
        b0 = ucap[base.on].sum(axis=0)
        mode = self._utilization_mode(ucap, switchable)
        self.info["utilization_model"] = mode
        if mode == "linear":
            valid = b0 > 0
            if valid.any():
                cx += wts.utilization / int(valid.sum()) * (udem[pw][:, valid] / b0[valid]).sum(axis=1)
        elif mode == "levels":
            const -= wts.utilization * start.terms["utilization"]
            self.util = self._levels(x, pw, ub, switchable, a0, b0)
        else:  # tangent of U at the hint (else at base with every candidate node on)
            a_ref, b_ref = a0, b0 + ucap[switchable].sum(axis=0)
            if hint is not None and ucap[hint.on].sum() > 0:
                a_ref, b_ref = hint.util_used().sum(axis=0), ucap[hint.on].sum(axis=0)
            valid = b_ref > 0
            m = int(valid.sum())
            const -= wts.utilization * start.terms["utilization"]
            inv = np.where(valid, 1.0 / np.where(valid, b_ref, 1.0), 0.0)
            cx += wts.utilization / m * (udem[pw] * inv).sum(axis=1)
            const += wts.utilization / m * float((a0 * inv + a_ref * inv - a_ref * b0 * inv**2).sum())
            charge = wts.utilization / m * (ucap[switchable] * a_ref * inv**2).sum(axis=1)
            model.objective([self.on_var[int(n)] for n in switchable], -charge, np.ones(switchable.size))
        if self.allowed is not None:  # gpu_guard: the guarded score (pods in a group share a row)
            cx = cx - guard_penalty(p) * ~self.allowed[pw, pn]
        model.objective(x, cx, ub)

        # Integer scale S (module docstring). CP-SAT minimizes: minimize -S R (the constant as
        # the objective's offset) and report the objective with the factor -1/S, in units of R.
        coefs = np.asarray(model.obj_coefs)
        ubs = np.asarray(model.obj_ubs)
        total = float((np.abs(coefs) * ubs).sum())
        scale = MAX_SCALE
        if total > 0:  # in logarithms: SCALE_BUDGET / total overflows for tiny weights (1e-300)
            scale = 10.0 ** min(math.log10(MAX_SCALE), math.floor(math.log10(SCALE_BUDGET) - math.log10(total)))
        obj = model.proto.objective
        obj.vars.extend(model.obj_vars)
        obj.coeffs.extend((-np.round(coefs * scale).astype(np.int64)).tolist())
        obj.offset = -const * scale
        obj.scaling_factor = -1.0 / scale
        self.const = const
        self.error_bound = 0.5 * float(ubs.sum()) / scale + self.levels_error
        # Levels rounded a little only widen the error bound; rounded more (or a capacity lost),
        # and a rounded capacity row that may keep out pods that fit, make the model inexact.
        levels_exact = not self.levels_lost_capacity and self.levels_error <= LEVELS_EXACT_ERROR
        self.exact = mode != "surrogate" and not self.capacity_rounded and levels_exact
        self.info.update(scale=scale, scale_error_bound=self.error_bound, utilization_rounded=self.levels_rounded,
            capacity_rounded=self.capacity_rounded,
        )

    def _on_capacity_rows(self, x: np.ndarray, ks: np.ndarray, pw: np.ndarray, n: int, on: int) -> None:
        """Per resource of a node that may power on: its pods ask for at most what it has free
        times ``on``. Implied by the capacity rows and ``x <= ub on`` for integers, but in the LP
        the big-M link charges a node's power-on only 1 / ub of it per pod; this one charges it
        in proportion to the capacity used (the facility-location strengthening)."""
        p, base, model = self.problem, self.base, self.model
        tol = fit_tolerance(p)
        for r in range(len(p.resources)):
            d = p.demand[pw[ks], r]
            use = d > 0
            if not use.any():
                continue
            mult, integral = integral_scale(np.append(d[use], max(float(base.free[n, r]), 0.0)), max_power=ROW_MAX_POWER)
            if not integral:
                continue  # a cut only: rounded it could keep out pods that fit
            cap = scaled_capacity(float(base.free[n, r]) + float(tol[n, r]), mult)
            model.linear([*x[ks[use]], on], [*scaled_demand(d[use], mult), -cap], -_BIG, 0)
        gpu = ks[p.wl_gpu_count[pw[ks]] > 0]
        if gpu.size:
            w = pw[gpu]
            milli = np.where(is_share(p, w), p.wl_gpu_milli[w], GPU_MILLI * p.wl_gpu_count[w]).astype(np.int64)
            free = int(np.maximum(base.gpu_free[n], 0).sum())
            model.linear([*x[gpu], on], [*milli, -free], -_BIG, 0)

    def _cardinality_cuts(
        self, x: np.ndarray, gfeas: np.ndarray, rep: np.ndarray, size: np.ndarray, group_pairs: np.ndarray
    ) -> None:
        """Aggregate cover cuts (module docstring, step 2): the pods whose candidates all
        lie in a node set S cannot ask together for more of a resource than S has free; when
        they do, dropping the k largest is the least that fits, so at most ``count - k`` of
        them are placed. Sets: every group's candidate set and all nodes."""
        p, base = self.problem, self.base
        if gfeas.shape[0] == 0:
            return
        sets = unique_rows(gfeas)
        check_deadline(self.model.deadline)
        if sets.shape[0] > MAX_CARDINALITY_SETS:  # the smallest sets: where pods are most confined
            sets = sets[np.argsort(sets.sum(axis=1), kind="stable")[:MAX_CARDINALITY_SETS]]
        sets = np.vstack([sets, gfeas.any(axis=0)])
        # confined[s, g]: group g has no candidate outside set s.
        confined = (sets == 0).astype(np.float32) @ gfeas.T.astype(np.float32) == 0
        gf = base.gpu_free
        share = is_share(p, rep)
        gpu = p.wl_gpu_count[rep] > 0
        # Per group demand and per node supply of each aggregate: additive resources, GPU milli
        # (a share pod its milli, a k-GPU pod k whole cards) and fully free cards (k-GPU pods).
        demand = [p.demand[rep, r] for r in range(len(p.resources))]
        supply = [np.maximum(base.free[:, r], 0.0) for r in range(len(p.resources))]
        demand.append(np.where(gpu, np.where(share, p.wl_gpu_milli[rep], GPU_MILLI * p.wl_gpu_count[rep]), 0.0))
        supply.append(np.where(gf > 0, gf, 0).sum(axis=1).astype(np.float64))
        demand.append(np.where(gpu & ~share, p.wl_gpu_count[rep], 0).astype(np.float64))
        supply.append((gf == GPU_MILLI).sum(axis=1).astype(np.float64))
        # What the filters let a node take past its supply: their tolerance (GPU amounts are whole).
        tol = fit_tolerance(p)
        allowance = [tol[:, r] for r in range(len(p.resources))] + [np.zeros(p.num_nodes)] * 2
        cuts = 0
        for s in range(sets.shape[0]):
            check_deadline(self.model.deadline)
            conf = np.flatnonzero(confined[s])
            if conf.size == 0:
                continue
            drop = 0
            for d_all, f_all, t_all in zip(demand, supply, allowance, strict=True):
                d, n = d_all[conf], size[conf]
                excess = float((d * n).sum()) - float(f_all[sets[s]].sum())
                slack = float(t_all[sets[s]].sum())
                if excess <= slack:
                    continue
                order = np.argsort(-d, kind="stable")
                largest = np.repeat(d[order], n[order])
                # Dropping every pod that asks for some is always enough (supply is not negative):
                # the sum's rounding once made the search run past them (drop = count + 1, a row
                # [0, -1], and CP-SAT called the model invalid).
                asking = int(n[d > 0].sum())
                drop = max(drop, min(int(np.searchsorted(np.cumsum(largest), excess - slack)) + 1, asking))
            ks = np.concatenate([np.arange(group_pairs[g], group_pairs[g + 1]) for g in conf])
            if drop and ks.size:  # (groups without a candidate have no variables: nothing to cut)
                self.model.linear(x[ks], np.ones(ks.size), 0, int(size[conf].sum()) - drop)
                cuts += 1
        self.info["cardinality_cuts"] = cuts

    def _utilization_mode(self, ucap: np.ndarray, switchable: np.ndarray) -> str:
        """``linear`` when no node can power on; ``levels`` when each resource has at most
        ``exact_levels`` on-capacity values; else ``surrogate``."""
        if switchable.size == 0:
            return "linear"
        for r in range(ucap.shape[1]):
            sums = {0.0}
            for c in ucap[switchable, r]:
                if c > 0:
                    sums |= {s + c for s in sums}
                if len(sums) > self.exact_levels:
                    return "surrogate"
        return "levels"

    def _levels(
        self, x: np.ndarray, pw: np.ndarray, ub: np.ndarray, switchable: np.ndarray, a0: np.ndarray, b0: np.ndarray
    ) -> _UtilVars:
        """The exact disjunctive encoding of U over on-capacity levels (module docstring)."""
        p, model = self.problem, self.model
        ucap, udem = p.util_capacity, p.util_demand
        on = [self.on_var[int(n)] for n in switchable]
        util = _UtilVars()
        per_resource = []
        valid_fixed, valid_varying = 0, []
        for r in range(ucap.shape[1]):
            d = udem[pw, r]
            vals = np.concatenate([d, [a0[r]], ucap[switchable, r], [b0[r]]])
            largest = max(b0[r] + float(ucap[switchable, r].sum()), a0[r] + float((d * ub).sum()))
            unit = levels_unit(vals, largest)  # integer units per resource unit
            # Amounts that are not integers in this unit are rounded: U is then approximate
            # (reported), and A_r <= B_r is left out, as rounded usage may pass rounded capacity.
            rounded = not _is_integral(vals * unit)
            self.levels_rounded |= rounded
            d_i = np.round(d * unit).astype(np.int64)
            a0_i = int(round(a0[r] * unit))
            caps = np.round(ucap[switchable, r] * unit).astype(np.int64)
            b0_i = int(round(b0[r] * unit))
            # The levels are the subset sums of these integer capacities, so that every set of
            # nodes on has its level (rounding each sum of floats instead lost some: two nodes of
            # 953674.316 MiB gave caps 953674 each but the level round(1907348.63) = 1907349, so
            # the model could not power both on and called the one-node placement optimal).
            sums = {0}
            for c in caps[caps > 0]:
                sums |= {s + int(c) for s in sums}
            lv = sorted(b0_i + s for s in sums)
            if lv[0] == 0 and (((caps == 0) & (ucap[switchable, r] > 0)).any() or b0[r] > 0):
                # A positive capacity rounded to 0 (a coarse unit beside much larger amounts): a set
                # of nodes on with capacity of r would read as none, and U's mean over the valid
                # resources would leave r out. The error bound cannot cover that: not exact.
                self.levels_lost_capacity = True
            if rounded:
                # |A'/B' - A/B| <= (|A' - A| + |B' - B|) / B' (as A <= B), per unit of z's weight
                # w1 / m (m >= 1): added to the error bound, so that "optimal" and the bound stay
                # true up to scale_error_bound (ten pods of 0.2000001 cpu: 2e-7 off before).
                err_a = abs(a0_i - a0[r] * unit) + float((np.abs(d_i - d * unit) * ub).sum())
                err_b = abs(b0_i - b0[r] * unit) + float(np.abs(caps - ucap[switchable, r] * unit).sum())
                positive = [b for b in lv if b > 0]
                if positive:
                    self.levels_error = max(self.levels_error, p.weights.utilization * (err_a + err_b) / positive[0])
            top = max(a0_i, a0_i + int((d_i * ub).sum()) if rounded else min(a0_i + int((d_i * ub).sum()), lv[-1]))
            # A_r = a0 + sum d x, and A_r <= B_r (usage never exceeds the capacity on).
            av = model.new_var(a0_i, top)
            nz = d_i > 0
            model.linear([av, *x[nz]], [1, *(-d_i[nz])], a0_i, a0_i)
            yv = [int(v) for v in model.new_vars(np.ones(len(lv)))]
            model.exactly_one(yv)
            model.linear([*on, *yv], [*caps, *[-(b - b0_i) for b in lv]], 0, 0)
            if not rounded:
                model.linear([av, *yv], [1, *(-np.asarray(lv))], -_BIG, 0)
            if lv[0] > 0:
                valid_fixed += 1
            elif len(lv) > 1:
                valid_varying.append(yv[0])  # valid = 1 - lvl[r, 0]
            per_resource.append((av, top, lv, yv))
            util.resources.append((av, d_i, a0_i, caps, b0_i, lv, yv))
        # The number of valid resources m, one-hot over its possible values.
        m_values = list(range(valid_fixed, valid_fixed + len(valid_varying) + 1))
        util.q = {m_values[0]: None}
        if len(m_values) > 1:
            qv = [int(v) for v in model.new_vars(np.ones(len(m_values)))]
            model.exactly_one(qv)
            rhs = valid_fixed + len(valid_varying)
            model.linear([*qv, *valid_varying], [*m_values, *([1] * len(valid_varying))], rhs, rhs)
            util.q = dict(zip(m_values, qv, strict=True))
        # z[r, b, m] <= b lvl[r, b], <= A_max q[m], sum_{b, m} z <= A_r; worth w1 / (m b) per unit.
        for r, (av, top, lv, yv) in enumerate(per_resource):
            zs = []
            for b, y in zip(lv, yv, strict=True):
                hi = min(top, b)
                if b <= 0 or hi <= 0:
                    continue
                for m, qv in util.q.items():
                    if m <= 0:
                        continue
                    z = model.new_var(0, hi)
                    model.linear([z, y], [1, -hi], -_BIG, 0)
                    if qv is not None:
                        model.linear([z, qv], [1, -hi], -_BIG, 0)
                    model.objective([z], [p.weights.utilization / (m * b)], [hi])
                    zs.append(z)
                    util.z[(r, b, m)] = z
            if zs:
                model.linear([*zs, av], [*([1] * len(zs)), -1], -_BIG, 0)
        return util

    # --- hint, solve, decode ---------------------------------------------------------------

    def _group_of(self) -> dict[int, int]:
        return {int(w): g for g, m in enumerate(self.members) for w in m}

    def hint_values(self, state: ClusterState) -> dict[int, int]:
        """A complete solution (variable -> value) for the model's pods as placed in ``state``
        (``state`` = base + those pods): counts, cards (moved within groups of interchangeable
        cards to respect the load order), power-on and the utilization variables."""
        p = self.problem
        group_of = self._group_of()
        counts: dict[tuple[int, int], int] = {}
        for w in self.pods:
            n = int(state.assignment[w])
            if n >= 0:
                key = (group_of[int(w)], n)
                counts[key] = counts.get(key, 0) + 1
        x = np.array([counts.get((int(g), int(n)), 0) for g, n in zip(self.pg, self.pn, strict=True)], dtype=np.int64)
        x = np.minimum(x, self.ub)
        values = {k: int(v) for k, v in enumerate(x)}
        for n, v in self.on_var.items():
            values[v] = int(state.on[n])
        pods = set(int(w) for w in self.pods)
        for n, (ys, ts) in self.card_vars.items():
            load: dict[int, int] = {}
            on_card: dict[tuple[int, int], int] = {}  # (group, card) -> share pods
            whole: set[int] = set()
            for w in np.flatnonzero(state.assignment == n):
                w = int(w)
                if w not in pods:
                    continue
                for c in state.gpu_cards.get(w, ()):
                    if is_share(p, w):
                        load[c] = load.get(c, 0) + int(p.wl_gpu_milli[w])
                        on_card[(group_of[w], c)] = on_card.get((group_of[w], c), 0) + 1
                    else:
                        load[c] = load.get(c, 0) + GPU_MILLI
                        whole.add(c)
            source: dict[int, int] = {}  # card position -> the card whose content it gets
            for group in self.card_groups.get(n, []):
                source.update(zip(group, sorted(group, key=lambda c: -load.get(c, 0)), strict=True))
            for k, c, v in ys:
                values[v] = on_card.get((int(self.pg[k]), source.get(c, c)), 0)
            for c, v in ts:
                values[v] = int(source.get(c, c) in whole)
        if self.util is not None:
            u = self.util
            on = np.array([state.on[n] for n in self.on_var], dtype=np.int64)
            m, a_b = 0, []
            for av, d_i, a0_i, caps, b0_i, lv, yv in u.resources:
                a = a0_i + int((d_i * x).sum())
                b = b0_i + int((caps * on).sum())
                values[av] = a
                for level, v in zip(lv, yv, strict=True):
                    values[v] = int(level == b)
                m += b > 0
                a_b.append((a, b))
            for mv, qv in u.q.items():
                if qv is not None:
                    values[qv] = int(mv == m)
            for (r, b, mv), z in u.z.items():
                values[z] = a_b[r][0] if (a_b[r][1] == b and mv == m) else 0
        return values

    def solve(
        self, seed: int, wall_limit: float, deterministic_limit: float | None, workers: int = 1, relative_gap: float = 0.0,
        on_solution: Any = None,
    ) -> Result:
        """Run CP-SAT; ``deterministic_limit`` None means a wall-clock limit only. ``on_solution``
        (a callable) gets each improving solution's state as CP-SAT finds it (in CP-SAT's thread)."""
        from ortools.sat.python import cp_model

        def configured(wall: float) -> Any:
            solver = cp_model.CpSolver()
            prm = solver.parameters
            prm.random_seed = int(seed)
            prm.relative_gap_limit = float(relative_gap)
            prm.absolute_gap_limit = 0.0  # the objective is in units of R: prove to the last integer unit
            # Every constraint in the LP on models up to LP2_MAX_VARIABLES: a much stronger bound there;
            # above, the default level reaches a good bound sooner.
            prm.linearization_level = 2 if self.num_variables <= LP2_MAX_VARIABLES else 1
            prm.cp_model_probing_level = 0  # probing costs seconds of presolve on large models for little here
            prm.max_time_in_seconds = max(MIN_CPSAT_S, wall)
            if deterministic_limit is not None:
                prm.max_deterministic_time = max(0.001, deterministic_limit)
            if workers:
                prm.num_workers = int(workers)
            self.solver = solver  # for stop_search from another thread (the search run alongside)
            return solver

        callback = None
        if on_solution is not None:
            model = self

            class Found(cp_model.CpSolverSolutionCallback):
                def on_solution_callback(self) -> None:
                    on_solution(model.decode(np.asarray(self.response_proto.solution, dtype=np.int64)))

            callback = Found()
        started = time.perf_counter()
        solver = configured(wall_limit)
        try:
            status = solve_cp_sat(solver, self.cp, callback)  # Ctrl-C stops it (iro_fed.interrupt)
        except IndexError as exc:
            # CP-SAT 9.15's presolve fails on some hinted models ("absl::btree_map::at": a search
            # sub-model at 250 x 100 with nodes that may power on, a feasible hint; the same model
            # solves without its hint or without presolve). Solved again without the hint.
            if not len(self.cp.proto.solution_hint.vars):
                raise
            self.cp.clear_hints()
            self.info["hint_dropped"] = f"CP-SAT failed with the hint ({type(exc).__name__}: {exc}); solved without it"
            solver = configured(wall_limit - (time.perf_counter() - started))
            status = solve_cp_sat(solver, self.cp, callback)
        response = solver.response_proto
        found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        result = Result(
            status=solver.status_name(status).lower(), state=None, objective=None, bound=None,
            deterministic_time=float(response.deterministic_time), wall_time=float(solver.wall_time), proved=False,
        )
        if found:
            result.objective = solver.objective_value
            result.bound = solver.best_objective_bound
            result.proved = status == cp_model.OPTIMAL and result.bound - result.objective <= self.error_bound + 1e-12
            if not result.proved and result.status == "optimal":
                result.status = "feasible"  # ended by relative_gap, not by a proof (CP-SAT says OPTIMAL)
            result.state = self.decode(np.asarray(response.solution, dtype=np.int64))
        return result

    def decode(self, values: np.ndarray) -> ClusterState:
        """``base`` plus the model's pods as the solution places them (counts to pods, pods to cards)."""
        p = self.problem
        counts = values[: self.pg.size]
        on_node: dict[tuple[int, int], list[int]] = {}  # (group, node) -> pods
        cursor = [0] * len(self.members)
        for k in np.flatnonzero(counts > 0):
            g, n, c = int(self.pg[k]), int(self.pn[k]), int(counts[k])
            on_node[(g, n)] = [int(w) for w in self.members[g][cursor[g] : cursor[g] + c]]
            cursor[g] += c
        cards: dict[int, tuple[int, ...]] = {}
        whole_only: dict[int, list[int]] = {}
        for (g, n), pods in on_node.items():
            if p.wl_gpu_count[pods[0]] <= 0 or n in self.card_vars:
                continue
            if n in self.card_plan:
                cards.update(zip(pods, self.card_plan[n][g], strict=False))
            else:  # only k-GPU pods compete on this node: fully free cards in order
                whole_only.setdefault(n, []).extend(pods)
        for n, pods in whole_only.items():
            full = [int(c) for c in np.flatnonzero(self.base.gpu_free[n] == GPU_MILLI)]
            for w in sorted(pods):
                k = int(p.wl_gpu_count[w])
                cards[w], full = tuple(full[:k]), full[k:]
        for n, (ys, ts) in self.card_vars.items():
            for k, c, v in ys:
                pods = on_node.get((int(self.pg[k]), n), [])
                first = sum(1 for w in pods if w in cards)
                for w in pods[first : first + int(values[v])]:
                    cards[w] = (c,)
            taken = [c for c, v in ts if values[v] > 0]
            for (_, n2), pods in on_node.items():
                if n2 == n and p.wl_gpu_count[pods[0]] > 0 and not is_share(p, pods[0]):
                    for w in pods:
                        k = int(p.wl_gpu_count[w])
                        cards[w], taken = tuple(taken[:k]), taken[k:]
        state = self.base.copy()
        for (_, n), pods in sorted(on_node.items()):
            for w in pods:
                state.place(w, n, cards.get(w, ()))
        return state
