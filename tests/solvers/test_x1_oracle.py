"""The brute-force oracle enumerates exactly the placements ``check_placement`` accepts.

It used to walk the pods in index order through the filters, which subtract one pod at a time
from what is free: at the rounding edge (1e-6 and 1e10 amounts, with the filters' old absolute
1e-9) that order refused placements check_placement accepted and a solver found, so on
tight-eps-443 cpsat's "optimal" R 9.3335 stood above brute force's 7.667.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from iro_fed.feasibility import check_placement
from iro_fed.problem_io import problem_from_dict
from iro_fed.testing import all_placements, brute_force, conformance_failures
from tests.solvers import fuzz_problems

pytest.importorskip("ortools")


def _small_docs() -> list:
    docs = [(f"tight-eps-{s}", fuzz_problems.tight(s, eps=True)) for s in range(0, 500, 3)]
    docs += [(f"tight-{s}", fuzz_problems.tight(s)) for s in range(0, 300, 5)]
    docs += [(f"brim-{s}", fuzz_problems.brim(s)) for s in range(40)]
    # GPU pods need card choices, which a plain assignment does not give check_placement.
    keep = [(c, d) for c, d in docs if not any("gpu" in wl for wl in d["workloads"])
            and (len(d["nodes"]) + 1) ** len(d["workloads"]) <= 4096]
    return [pytest.param(c, d, id=c) for c, d in keep]


@pytest.mark.parametrize("case,doc", _small_docs())
def test_all_placements_are_what_check_placement_accepts(case: str, doc: dict):
    p = problem_from_dict(doc)
    accepted = set()
    for a in itertools.product(range(-1, p.num_nodes), repeat=p.num_workloads):
        if check_placement(p, np.array(a, dtype=np.int64), {}) == []:
            accepted.add(a)
    found = [tuple(int(n) for n in a) for a, _ in all_placements(p)]
    assert len(found) == len(set(found))
    assert set(found) == accepted, f"{case}: missing {sorted(accepted - set(found))[:5]}, extra {sorted(set(found) - accepted)[:5]}"


def test_no_solver_beats_the_oracle_on_tight_eps_443():
    p = problem_from_dict(fuzz_problems.tight(443, eps=True))
    optimum = brute_force(p).objective.score
    assert conformance_failures("cpsat", p, optimum=optimum, seed=0, deterministic=True, time_limit_s=2.0,
                                max_deterministic_time=0.1) == []
    # The old answer, [0, -1, 0, 0, 0, 0], fills the 6e-6 node with 6.001e-6.
    errors = check_placement(p, np.array([0, -1, 0, 0, 0, 0]), {})
    assert errors and "cpu over capacity" in errors[0]
