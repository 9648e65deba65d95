"""The solver contract (in the spirit of dimod's ``Sampler`` and scikit-learn's estimators).

* Settings are keyword arguments of the constructor, declared in ``parameters`` and stored
  under the same name; ``get_params()`` returns them. An unknown or invalid setting raises
  :class:`InvalidSettingError` naming it.
* ``solve(problem) -> Placement``; the objective module scores what a solver returns, a
  solver never reports its own score. The same ``seed`` gives the same answer.
* ``properties`` say what a solver is: online (pod by pod) or batch, exact or not, and the
  optional dependency it needs.

Online solvers also expose the decision for one pod (``decide``) and a ranking of the
candidate nodes (``rank``) against a :class:`~iro_fed.model.ClusterState`, so the replay,
the simulator, the scheduler extender and the edge agent call the same code.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import operator
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from iro_fed.feasibility import explain, feasible_nodes
from iro_fed.model import ClusterState, Problem
from iro_fed.objective import evaluate
from iro_fed.placement import Placement
from iro_fed.problem_io import DECIMAL_FLOAT, DECIMAL_INT, show_value

if TYPE_CHECKING:
    from iro_fed.fragmentation import TypicalTasks


def _show(value: Any) -> str:
    # Settings show huge ints by their bits ("an integer of 1329 bits"), as they always have.
    return show_value(value, int_bits=True)


class SolverError(Exception):
    """A solver could not produce a placement."""


class InvalidSettingError(SolverError, ValueError):
    """An unknown solver, an unknown setting or a setting with an invalid value."""


class DeadlineExceeded(SolverError):
    """A cooperative deadline passed while solving."""


@dataclass(frozen=True)
class Param:
    """One constructor setting: its default, type, a one-line doc and optional checks."""

    default: Any
    kind: type
    doc: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False

    def convert(self, solver: str, name: str, value: Any) -> Any:
        """Check (and, from a command-line string, convert) a value for this setting."""
        where = f"solver {solver!r} setting {name!r}"
        if value is None:
            if self.nullable:
                return None
            raise InvalidSettingError(f"{where}: must not be null")
        return self.check(where, value)

    def check(self, where: str, value: Any) -> Any:
        """The non-null value, checked and converted; ``where`` names the setting in errors."""
        if isinstance(value, str) and self.kind is not str:
            value = parse_setting(value, self.kind, where)
        # A numpy scalar (a value from a numpy sweep) counts as its Python value; the checks
        # below then refuse np.bool_ for a number and np.float64(2.5) for an int as they do 2.5.
        if isinstance(value, np.bool_):
            value = bool(value)
        elif isinstance(value, np.integer):
            value = int(value)
        elif isinstance(value, np.floating):
            value = float(value)
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:  # an int past float's range (10**400): not a finite number
                raise InvalidSettingError(f"{where}: must be finite, got {_show(value)}") from None
        if self.kind is bool and not isinstance(value, bool):
            raise InvalidSettingError(f"{where}: expected true or false, got {_show(value)}")
        if self.kind in (int, float) and isinstance(value, bool):
            raise InvalidSettingError(f"{where}: expected a number, got {_show(value)}")
        if not isinstance(value, self.kind):
            raise InvalidSettingError(f"{where}: expected {self.kind.__name__}, got {type(value).__name__} {_show(value)}")
        if self.kind is float and not np.isfinite(value):
            raise InvalidSettingError(f"{where}: must be finite, got {_show(value)}")
        if self.choices is not None and value not in self.choices:
            raise InvalidSettingError(f"{where}: must be one of {', '.join(map(str, self.choices))}, got {_show(value)}")
        if self.minimum is not None and value < self.minimum:
            raise InvalidSettingError(f"{where}: must be >= {self.minimum}, got {_show(value)}")
        if self.maximum is not None and value > self.maximum:
            raise InvalidSettingError(f"{where}: must be <= {self.maximum}, got {_show(value)}")
        if isinstance(value, dict):
            # The solver's own copy: a caller that edits its dict after make() would otherwise
            # change get_params() (and Placement.params) but not the inner solver built from it.
            value = copy.deepcopy(value)
        return value


#: Text float() reads as nan or an infinity: read so, for each setting's own finite check to refuse
#: it in its words ("must be finite", "expected a number in [0, 1]").
_NOT_FINITE = r"[-+]?(nan|inf|infinity)"


#: A boolean setting's text, as YAML 1.2's core schema spells true and false (problem_io's loader).
_TRUE = ("true", "True", "TRUE")
_FALSE = ("false", "False", "FALSE")


def parse_setting(text: str, kind: type, where: str) -> Any:
    """A setting's value of type ``kind`` (bool, int, float or dict) from command-line text; an
    :class:`InvalidSettingError` starting with ``where`` when it is not one. Numbers are decimal
    as in problem files (``problem_io.DECIMAL_INT`` / ``DECIMAL_FLOAT``: ASCII digits, an optional
    sign; spaces and tabs around are ignored): int() and float() alone would also take ``1_000``
    or ``١٠``."""
    value = text.strip(" \t\r\n")
    if kind is bool:
        # Only YAML 1.2's core-schema spellings, as the files read: yes / on / 1 were true here,
        # while a file's boolean field (`record: yes`, `record: 1`) is refused.
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise InvalidSettingError(f"{where}: cannot read {_show(text)} as bool (use true or false)")
    elif kind is int:
        if re.fullmatch(DECIMAL_INT, value):
            try:
                return int(value, 10)
            except ValueError:  # over Python's limit on the digits int() reads (4300)
                pass
        raise InvalidSettingError(f"{where}: cannot read {_show(text)} as int (expected a decimal integer, e.g. 42)")
    elif kind is float:
        if re.fullmatch(DECIMAL_FLOAT, value) or re.fullmatch(_NOT_FINITE, value, re.IGNORECASE):
            return float(value)
        raise InvalidSettingError(
            f"{where}: cannot read {_show(text)} as float (expected a decimal number, e.g. 0.5 or 1e-3)")
    elif kind is dict:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    raise InvalidSettingError(f"{where}: cannot read {_show(text)} as {kind.__name__}")


def _importable(module: str) -> bool:
    """Whether ``module`` can be found. For a dotted name find_spec imports the parent package,
    and a parent that is missing (dimod installed without dwave-samplers: no ``dwave``) raises
    ModuleNotFoundError instead of answering None: not installed either."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


@dataclass(frozen=True)
class SolverProperties:
    """What a solver is."""

    mode: str  # "online" (pod by pod, given order) or "batch" (all pods jointly)
    exact: bool  # proves optimality when it says "optimal"
    description: str
    requires: tuple[str, ...] = ()  # importable modules of the optional dependency
    extra: str | None = None  # the pip extra that installs them
    composite: bool = False  # wraps other solvers

    def installed(self) -> bool:
        return all(_importable(m) for m in self.requires)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "exact": self.exact,
            "description": self.description,
            "requires": list(self.requires),
            "extra": self.extra,
            "composite": self.composite,
        }


# OR-Tools takes a signed 32-bit seed; every solver and command accepts the same range.
MAX_SEED = 2**31 - 1
SEED = Param(0, int, "Random seed; the same seed gives the same placement.", minimum=0, maximum=MAX_SEED)


class Solver(ABC):
    """Base class of every solver. Subclasses declare ``name``, ``properties``, ``parameters``."""

    name: ClassVar[str]
    properties: ClassVar[SolverProperties]
    parameters: ClassVar[dict[str, Param]] = {"seed": SEED}

    def __init__(self, **settings: Any) -> None:
        unknown = sorted(set(settings) - set(self.parameters))
        if unknown:
            known = ", ".join(sorted(self.parameters)) or "none"
            raise InvalidSettingError(f"solver {self.name!r}: unknown setting(s) {', '.join(unknown)} (known: {known})")
        for key, param in self.parameters.items():
            if key in settings:
                setattr(self, key, param.convert(self.name, key, settings[key]))
            else:
                # A copy per instance: a mutable default ({} of a composite's params) changed on
                # one solver must change neither the class default nor another solver.
                setattr(self, key, copy.deepcopy(param.default))
        self._check_settings()

    def _check_settings(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Cross-setting checks of a subclass (raise InvalidSettingError)."""

    def use_typical_tasks(self, tasks: TypicalTasks | None) -> None:  # noqa: B027 - an optional hook, not abstract
        """Take the typical tasks of the GPU fragmentation metric (None: those of each problem's own
        workloads). The trace replay hands over those of the original pod list; a solver that scores
        against them (fgd and its variants, iro-frag) keeps them, one that wraps others (cpsat's hints,
        fallback, time-budget) passes them on, and any other ignores them: this default does nothing."""

    def get_params(self) -> dict[str, Any]:
        # Copies: editing the result (or a Placement's params) must not change the solver.
        return {key: copy.deepcopy(getattr(self, key)) for key in self.parameters}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def describe(self, placement: Placement) -> str | None:
        """One line on how this solver's solve went, printed by ``iro solve`` under its table (what
        ``placement.info`` holds that the table does not show); None: nothing to add."""
        return None

    def describe_line(self, parts: list[str], info: dict[str, Any]) -> str:
        """:meth:`describe`'s line: the solver's name, ``parts`` and the phases the clock cut
        (``info["wall_clock_cut"]``)."""
        if info.get("wall_clock_cut"):
            parts = [*parts, "cut by the clock: " + ", ".join(info["wall_clock_cut"])]
        return f"{self.name}: " + "; ".join(parts)

    def solve(self, problem: Problem) -> Placement:
        """Place the problem's workloads; the result carries the objective module's score."""
        return self.solve_until(problem, deadline=None)

    def solve_until(self, problem: Problem, deadline: float | None) -> Placement:
        """``solve`` with a cooperative deadline (``time.perf_counter()`` value) that solvers
        check between steps; composites use it for time budgets and fallbacks."""
        if not isinstance(problem, Problem):
            # A path or a dict failed deep inside with "'str' object has no attribute ...".
            raise TypeError(
                f"problem: expected an iro_fed.Problem (iro_fed.load_problem(path) or problem_from_dict(doc)), "
                f"got {type(problem).__name__}"
            )
        start = time.perf_counter()
        placement = self._solve(problem, deadline)
        placement.timing["solve_s"] = time.perf_counter() - start
        placement.solver = self.name
        placement.params = self.get_params()
        placement.objective = evaluate(problem, placement)
        return placement

    @abstractmethod
    def _solve(self, problem: Problem, deadline: float | None) -> Placement:
        """Return a placement (assignment, cards, reasons, status, info); no score."""

    # A batch solver (cpsat, qubo, the composites) places all pods jointly and has no per-pod
    # decision; without these, calling one raised a bare AttributeError. OnlineSolver overrides
    # both, and callers that need them check isinstance(solver, OnlineSolver) first.
    def decide(self, state: ClusterState, w: int) -> Decision:
        """Online solvers only (:class:`OnlineSolver`): a batch solver raises TypeError."""
        raise TypeError(self._batch_only("decide"))

    def rank(self, state: ClusterState, w: int, k: int = 16) -> list[tuple[int, float]]:
        """Online solvers only (:class:`OnlineSolver`): a batch solver raises TypeError."""
        raise TypeError(self._batch_only("rank"))

    def _batch_only(self, method: str) -> str:
        what = "is a batch solver" if self.properties.mode == "batch" else f"has no {method}() of its own"
        return (f"solver {self.name!r} {what}: use solve(problem); {method}() needs an online solver "
                f"(an OnlineSolver, e.g. greedy-objective)")


@dataclass(frozen=True)
class Decision:
    """One online decision: ``node`` (-1 when none fits), the GPU cards, and why not placed."""

    node: int
    cards: tuple[int, ...] = ()
    reason: str | None = None


def _integer(name: str, value: Any, expected: str) -> int:
    """``value`` as an int (numpy ints too, bools not), else a TypeError naming ``name``."""
    if isinstance(value, (bool, np.bool_)):
        shown = repr(value)
    else:
        try:
            return operator.index(value)
        except TypeError:
            shown = _show(value)
    raise TypeError(f"{name}: expected {expected}, got {type(value).__name__} {shown}")


def workload_index(state: ClusterState, w: Any) -> int:
    """``w`` as a workload index of ``state``'s problem (numpy ints too); an error naming ``w``
    otherwise. A negative index silently meant the last pods, as a Python index does."""
    n = state.problem.num_workloads
    if type(w) is int and 0 <= w < n:  # the hot path (run(), the replay, the extender): no checks to pay for
        return w
    index = _integer("w", w, "a workload index")
    if not 0 <= index < n:
        raise IndexError(f"w: workload index {index} is out of range (the problem has {n} workload(s))")
    return index


def nonnegative_count(name: str, value: Any) -> int:
    # k=-1 returned all nodes but the last (a slice end), k=2.5 a TypeError about slices.
    count = _integer(name, value, "a non-negative integer")
    if count < 0:
        raise ValueError(f"{name}: must be >= 0, got {count}")
    return count


ORDER = Param("given", str, "Order in which pods are placed.", choices=("given", "priority", "largest-first"))


class OnlineSolver(Solver):
    """A solver that places pods one at a time, each on the best-scoring feasible node.

    Subclasses implement :meth:`score` over the feasible candidates (higher is better); ties
    go to the lowest node index unless the subclass overrides :meth:`select`.
    """

    parameters: ClassVar[dict[str, Param]] = {"seed": SEED, "order": ORDER}

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._session: Problem | None = None

    # --- per-run state ------------------------------------------------------------------

    def reset(self, problem: Problem) -> None:
        """Start a new run on ``problem``: reseed, clear per-run state. ``solve`` calls it."""
        self._session = problem
        self.rng = np.random.default_rng(self.seed)
        self._cache_state: ClusterState | None = None
        self._cursor = 0

    def _ensure(self, problem: Problem) -> None:
        if self._session is not problem:
            self.reset(problem)

    # --- per-node caches kept in step with the state through its journal -------------------

    def sync(self, state: ClusterState) -> None:
        """Refresh the per-node caches for the nodes that changed since the last call."""
        if self._cache_state is not state or self._cursor > len(state.journal):
            self._cache_state = state
            self._cursor = len(state.journal)
            self.rebuild_caches(state)
            return
        if self._cursor < len(state.journal):
            entries = state.journal[self._cursor :]
            self._cursor = len(state.journal)
            if any(sign == 0 for _, _, sign in entries):
                # A node got another base usage (ClusterState.set_node_usage, entry (-1, n, 0)):
                # rare (a what-if), so the caches are rebuilt rather than patched per node.
                self.rebuild_caches(state)
            else:
                self.apply_changes(state, entries)

    def rebuild_caches(self, state: ClusterState) -> None:
        """Compute the caches from scratch (subclasses with caches override)."""

    def apply_changes(self, state: ClusterState, entries: list[tuple[int, int, int]]) -> None:
        """Update the caches for journal entries (workload, node, +1 placed / -1 removed); a
        batch with a base-usage change (sign 0) goes to :meth:`rebuild_caches` instead."""

    # --- one decision -------------------------------------------------------------------

    @abstractmethod
    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        """Scores of the feasible ``candidates`` (node indices) for workload ``w``."""

    def candidates(self, state: ClusterState, w: int) -> np.ndarray:
        """Feasible node indices that this solver scores (all of them by default)."""
        return np.flatnonzero(feasible_nodes(state, w))

    def select(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> int:
        """Index into ``candidates`` of the winner (first best by default)."""
        return int(np.argmax(scores))

    def choose_cards(self, state: ClusterState, w: int, node: int) -> tuple[int, ...]:
        return state.default_cards(w, node)

    def decide(self, state: ClusterState, w: int) -> Decision:
        """The node for workload ``w`` in ``state`` (state is not changed)."""
        w = workload_index(state, w)
        self._ensure(state.problem)
        cand = self.candidates(state, w)
        if cand.size == 0:
            return Decision(-1, (), explain(state, w))
        node = int(cand[self.choose(state, w, cand)])
        return Decision(node, self.choose_cards(state, w, node))

    def choose(self, state: ClusterState, w: int, candidates: np.ndarray) -> int:
        """The position in ``candidates`` (non-empty) of the node :meth:`decide` takes: ``select`` on
        ``score``; a solver with a cheaper way to the same choice overrides this."""
        return self.select(state, w, candidates, self.score(state, w, candidates))

    def rank(self, state: ClusterState, w: int, k: int = 16) -> list[tuple[int, float]]:
        """The top-``k`` feasible nodes for workload ``w`` with their scores, best first."""
        w = workload_index(state, w)
        k = nonnegative_count("k", k)
        self._ensure(state.problem)
        cand = np.flatnonzero(feasible_nodes(state, w))
        if cand.size == 0:
            return []
        scores = np.asarray(self.score(state, w, cand), dtype=np.float64)
        top = self.rank_order(state, w, cand, scores)[:k]
        return [(int(cand[i]), float(scores[i])) for i in top]

    def rank_order(self, state: ClusterState, w: int, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Indices into ``candidates``, best first, for :meth:`rank`: by score, ties by index.
        A subclass whose :meth:`select` breaks ties another deterministic way overrides it, so
        that ``rank``'s first node is ``decide``'s."""
        return np.argsort(-scores, kind="stable")

    # --- whole problem ------------------------------------------------------------------

    def pod_order(self, problem: Problem) -> np.ndarray:
        if self.order == "priority":
            prio = np.array([wl.priority for wl in problem.workloads], dtype=np.int64)
            return np.argsort(-prio, kind="stable")
        if self.order == "largest-first":
            if not problem.num_nodes:
                return np.arange(problem.num_workloads)
            # The largest node's capacity as it is (max(cap, 1) shrank a sub-unit resource's shares).
            cap = problem.util_capacity.max(axis=0)
            share = np.where(cap > 0, problem.util_demand / np.where(cap > 0, cap, 1.0), 0.0)
            return np.argsort(-share.max(axis=1), kind="stable")
        return np.arange(problem.num_workloads)

    def run(
        self, problem: Problem, deadline: float | None = None, stop_at_deadline: bool = False
    ) -> tuple[ClusterState, dict[int, str], list[int]]:
        """Place the pods in :meth:`pod_order`; returns the state, the reasons of pods that fit
        nowhere, and the pods not considered because the deadline passed (with
        ``stop_at_deadline``; otherwise :class:`DeadlineExceeded` is raised)."""
        self.reset(problem)
        state = ClusterState(problem)
        reasons, rest = self.place_pods(state, [int(w) for w in self.pod_order(problem)], deadline, stop_at_deadline)
        return state, reasons, rest

    def place_pods(
        self, state: ClusterState, pods: list[int], deadline: float | None = None, stop_at_deadline: bool = False
    ) -> tuple[dict[int, str], list[int]]:
        """Decide ``pods`` one by one, in the order given, on ``state`` (placed there as decided;
        :meth:`reset` first, for the problem's run); returns the reasons of pods that fit nowhere
        and the pods not considered because the deadline passed (with ``stop_at_deadline``;
        otherwise :class:`DeadlineExceeded` is raised)."""
        reasons: dict[int, str] = {}
        for i, w in enumerate(pods):
            if deadline is not None and time.perf_counter() > deadline:
                if stop_at_deadline:
                    return reasons, pods[i:]
                raise DeadlineExceeded(f"deadline passed with {len(pods) - i} pod(s) left")
            decision = self.decide(state, w)
            if decision.node < 0:
                reasons[w] = decision.reason or "no feasible node"
            else:
                state.place(w, decision.node, decision.cards)
        return reasons, []

    def _solve(self, problem: Problem, deadline: float | None) -> Placement:
        state, reasons, _ = self.run(problem, deadline)
        return Placement(assignment=state.assignment.copy(), gpu_cards=dict(state.gpu_cards), reasons=reasons)


def reads_pod_scoring(*solvers: Solver | None) -> bool:
    """Whether one of ``solvers`` (or a solver one wraps: a composite's primary, fallback or inner
    one, cpsat's hints, qubo's starts) reads ``Problem.pod_scoring`` (its class says ``reads_pod_scoring``: only kube-default).
    The Kubernetes scheduler, extender and webhook and the simulator build it only then: it walks
    every bound or running pod."""
    seen: set[int] = set()

    def reads(solver: Any) -> bool:
        if id(solver) in seen:
            return False
        seen.add(id(solver))
        if getattr(solver, "reads_pod_scoring", False):
            return True
        inner = [
            s for v in getattr(solver, "__dict__", {}).values()
            for s in (v if isinstance(v, (list, tuple)) else (v,)) if isinstance(s, Solver)
        ]  # a wrapped solver, or a list of them (cpsat's hints, qubo's starts)
        return any(reads(s) for s in inner)
    return any(reads(s) for s in solvers if s is not None)


def pass_typical_tasks(tasks: TypicalTasks | None, *inner: Solver | None) -> None:
    """Hand the trace replay's typical tasks to each wrapped solver (those that score against them
    keep them: fgd, iro-frag, a cpsat with such hints): only the wrapper itself was given them."""
    for solver in inner:
        if solver is not None:  # time-budget's then='none'
            solver.use_typical_tasks(tasks)


def preload_each(*inner: Solver | None) -> None:
    """Load now what each wrapped solver loads lazily (dqn's checkpoint: its ``preload``), not inside
    a solve's time limit (None, or one without ``preload``, is skipped); raises what their own
    ``preload`` raises (a bad checkpoint)."""
    for solver in inner:
        load = getattr(solver, "preload", None)
        if callable(load):
            load()


def solver_list(owner: str, setting: str, value: str, accepts: Callable[[str, type], bool], kind: str) -> list[str]:
    """The solver names of a comma-separated setting (``'none'``: none), in the order given:
    each a registered solver that ``accepts(name, cls)`` takes (``kind`` says which, for the
    error), each once. Raises :class:`InvalidSettingError` naming the setting and the name."""
    import solvers

    if value.strip() == "none":
        return []
    names = [s.strip() for s in value.split(",")]
    registered = solvers.registered()
    for name in names:
        cls = registered.get(name)
        if cls is None or not accepts(name, cls):
            allowed = sorted(n for n, c in registered.items() if accepts(n, c))
            raise InvalidSettingError(
                f"solver {owner!r} setting {setting!r}: must be 'none' or {kind}, comma-separated "
                f"({', '.join(allowed)}), got {value!r} ({name!r} is not one)"
            )
    # No repeats, as every list of names ("best-fit,best-fit" would run one solver twice).
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise InvalidSettingError(
            f"solver {owner!r} setting {setting!r}: solver {dup!r} given twice in {value!r} (each at most once)"
        )
    return names
