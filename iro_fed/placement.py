"""The one result type every solver returns, and the placement file (interfaces.md)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from iro_fed.model import Problem
    from iro_fed.objective import Breakdown

STATUSES = ("optimal", "feasible", "infeasible", "error")


@dataclass
class Placement:
    """``assignment[w]`` is a node index or -1 (not placed).

    ``gpu_cards[w]`` lists the cards a GPU workload took; ``reasons[w]`` says why a workload
    was not placed; ``objective`` is always computed by :func:`iro_fed.objective.evaluate`.
    """

    assignment: np.ndarray
    gpu_cards: dict[int, tuple[int, ...]] = field(default_factory=dict)
    reasons: dict[int, str] = field(default_factory=dict)
    solver: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    status: str = "feasible"
    objective: Breakdown | None = None
    timing: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def num_placed(self) -> int:
        return int((self.assignment >= 0).sum())

    def node_of(self, problem: Problem, workload: str) -> str | None:
        index = next((i for i, w in enumerate(problem.workloads) if w.name == workload), None)
        if index is None:
            raise KeyError(f"unknown workload {workload!r}")
        n = int(self.assignment[index])
        return problem.nodes[n].name if n >= 0 else None

    def to_dict(self, problem: Problem) -> dict[str, Any]:
        """The placement file document (shared/spec/interfaces.md)."""
        _check_fits(self, problem)
        assignments = {}
        for i, w in enumerate(problem.workloads):
            n = int(self.assignment[i])
            assignments[w.name] = problem.nodes[n].name if n >= 0 else None
        doc: dict[str, Any] = {
            "solver": self.solver,
            "params": jsonable(self.params),
            "status": self.status,
            "assignments": assignments,
            "gpu_assignments": {problem.workloads[w].name: [int(x) for x in c] for w, c in sorted(self.gpu_cards.items())},
            "unplaced": {problem.workloads[w].name: r for w, r in sorted(self.reasons.items())},
            "objective": self.objective.to_dict() if self.objective is not None else None,
            "timing": {k: round(float(v), 6) for k, v in self.timing.items()},
        }
        if self.info:
            doc["info"] = jsonable(self.info)
        return doc


def _check_fits(placement: Placement, problem: Problem) -> None:
    # Written against another problem, a placement crashed with an IndexError or, where its
    # indices happened to fit, wrote a file naming the wrong pods (or -5 as unplaced).
    a = np.asarray(placement.assignment)
    if a.shape != (problem.num_workloads,):
        raise ValueError(
            f"assignment has shape {a.shape}, expected ({problem.num_workloads},): is this placement of another problem?"
        )
    if a.dtype.kind in "iuf":
        bad = np.flatnonzero((a != np.round(a)) | (a < -1) | (a >= problem.num_nodes))
    else:  # a bool mask or objects: no node indices
        bad = np.arange(a.size)
    if bad.size:
        w = int(bad[0])
        raise ValueError(
            f"assignment[{w}] ({problem.workloads[w].name}): node index {a[w].item()!r} is not -1 (unplaced) "
            f"or 0..{problem.num_nodes - 1}"
        )
    for key, name in ((placement.gpu_cards, "gpu_cards"), (placement.reasons, "reasons")):
        for w in key:
            if not 0 <= w < problem.num_workloads:
                raise ValueError(f"{name}: workload index {w!r} is out of range (the problem has {problem.num_workloads})")
    # The reader's card rules (placement_from_dict): a file it would refuse is not written.
    errors: list[str] = []
    for w, cards in placement.gpu_cards.items():
        name = problem.workloads[w].name
        if a[w] < 0:
            errors.append(f"gpu_assignments.{name}: the workload is not placed")
        else:
            listed = [int(c) if isinstance(c, np.integer) else c for c in cards]
            _card_list(problem, name, int(w), int(a[w]), listed, errors)
    if errors:
        raise ValueError(f"gpu_cards: {'; '.join(errors)}")


def placement_from_dict(problem: Problem, doc: dict[str, Any]) -> Placement:
    """Read a placement document back against its problem (names -> indices)."""
    from iro_fed.objective import evaluate
    from iro_fed.problem_io import json_kind

    if not isinstance(doc, dict):
        raise ValueError(f"invalid placement file: the document must be an object, got {type(doc).__name__}")
    errors = []

    def section(key: str) -> dict[str, Any]:
        # A missing or null section is empty; any other non-object would crash the loops below.
        value = doc.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            errors.append(f"{key}: expected an object, got {type(value).__name__}")
            return {}
        return value

    assignment = np.full(problem.num_workloads, -1, dtype=np.int64)
    wl_index = {w.name: i for i, w in enumerate(problem.workloads)}
    # Pods whose node is already reported as bad: their cards cannot be checked against a node,
    # and "not placed" would be a second, false error about the same entry.
    bad_node: set[str] = set()
    for name, node in section("assignments").items():
        if name not in wl_index:
            errors.append(f"assignments.{name}: unknown workload")
            continue
        if node is None:
            continue
        if not isinstance(node, str):
            errors.append(f"assignments.{name}: expected a node name or null, got {type(node).__name__}")
            bad_node.add(name)
            continue
        if node not in problem.node_index:
            errors.append(f"assignments.{name}: unknown node {node!r}")
            bad_node.add(name)
            continue
        assignment[wl_index[name]] = problem.node_index[node]
    cards = {}
    gpu_section = section("gpu_assignments")
    for name, card_list in gpu_section.items():
        if name not in wl_index:
            errors.append(f"gpu_assignments.{name}: unknown workload")
        elif not isinstance(card_list, list):
            errors.append(f"gpu_assignments.{name}: expected a list of card indices, got {json_kind(card_list)}")
        elif name in bad_node:
            continue
        elif assignment[wl_index[name]] < 0:
            errors.append(f"gpu_assignments.{name}: the workload is not placed")
        else:
            w = wl_index[name]
            got = _card_list(problem, name, w, int(assignment[w]), card_list, errors)
            if got:  # a pod without GPUs has none (an empty list for it is consistent)
                cards[w] = got
    if isinstance(doc.get("gpu_assignments", {}), dict | None):  # else already reported as not an object
        for w in np.flatnonzero((assignment >= 0) & (problem.wl_gpu_count > 0)):
            name = problem.workloads[w].name
            if name not in gpu_section:
                errors.append(f"gpu_assignments.{name}: missing; the workload is placed on "
                              f"{problem.nodes[assignment[w]].name!r} and asks for {int(problem.wl_gpu_count[w])} GPU(s)")
    reasons = {}
    for name, reason in section("unplaced").items():
        if name not in wl_index:
            errors.append(f"unplaced.{name}: unknown workload")
        elif assignment[wl_index[name]] >= 0:
            errors.append(f"unplaced.{name}: the workload is placed on {problem.nodes[assignment[wl_index[name]]].name!r}")
        else:
            reasons[wl_index[name]] = str(reason)
    timing: dict[str, float] = {}
    for key, value in section("timing").items():
        # A range test rather than isfinite: NaN fails it, and a huge int has no float to test.
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not -1e300 <= value <= 1e300:
            errors.append(f"timing.{key}: expected a finite number of seconds, got {type(value).__name__}")
        else:
            timing[key] = float(value)
    params, info = section("params"), section("info")
    solver = doc.get("solver", "")
    if not isinstance(solver, str):
        errors.append(f"solver: expected a solver name, got {type(solver).__name__}")
    status = doc.get("status", "feasible")
    if status not in STATUSES:
        errors.append(f"status: must be one of {', '.join(STATUSES)}, got {status!r}")
    if errors:
        raise ValueError("invalid placement file: " + "; ".join(errors))
    p = Placement(
        assignment=assignment,
        gpu_cards=cards,
        reasons=reasons,
        solver=solver,
        params=dict(params),
        status=status,
        timing=timing,
        info=dict(info),
    )
    p.objective = evaluate(problem, p)
    return p


def _card_list(problem: Problem, name: str, w: int, n: int, card_list: list[Any], errors: list[str]) -> tuple[int, ...]:
    """The cards of placed workload ``w`` on node ``n`` if the list is well formed: card indices of
    the node, distinct, as many as the workload's GPUs. Errors go to ``errors`` (path
    ``gpu_assignments.<pod>[i]``) and the result is then empty. Whether the cards have the milli the
    workload takes is feasibility, left to ``check_placement``: an overfull placement still loads."""
    from iro_fed.problem_io import show_value

    path = f"gpu_assignments.{name}"
    count, on = int(problem.wl_gpu_count[w]), int(problem.gpu_count[n])
    node = problem.nodes[n].name
    before = len(errors)
    seen: dict[int, int] = {}
    for i, c in enumerate(card_list):
        if not isinstance(c, int) or isinstance(c, bool):
            errors.append(f"{path}[{i}]: expected a card index (an integer), got {show_value(c)}")
        elif not 0 <= c < on:
            # ClusterState.place refuses these too: -1 is not "the last card", 99 not a card at all.
            where = "it has no GPU cards" if on == 0 else f"cards 0..{on - 1}"
            errors.append(f"{path}[{i}]: {show_value(c)} is not a card of node {node!r} ({where})")
        elif c in seen:
            errors.append(f"{path}[{i}]: card {c} is listed twice (also at [{seen[c]}]); a pod's cards are distinct")
        else:
            seen[c] = i
    if len(card_list) != count:
        wants = "asks for no GPU" if count == 0 else f"asks for {count} GPU(s): one card each"
        errors.append(f"{path}: {len(card_list)} card(s) listed, but the workload {wants}")
    return tuple(card_list) if len(errors) == before else ()


def write_placement(placement: Placement, problem: Problem, path: str | os.PathLike) -> None:
    """Write the placement file atomically."""
    from iro_fed.problem_io import write_json_atomic

    write_json_atomic(path, placement.to_dict(problem))


def jsonable(value: Any, *, as_text: bool = False) -> Any:
    """``value`` as plain JSON: any mapping as an object with text keys, lists, tuples and numpy
    arrays as arrays, numpy scalars as Python ones (a numpy bool as ``true``, not "True"), another
    object (a path, a set) as its text. A NaN or infinity stays a float, so that
    write_json_atomic refuses it naming the field (the placement file), or with ``as_text`` is
    its repr, "nan" / "inf" (the simulator report, which must always be writable)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, as_text=as_text) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return [jsonable(v, as_text=as_text) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if not as_text or math.isfinite(value) else repr(value)
    return str(value)
