"""Quickstart: load a problem, pick a solver, solve, read the score, write the placement.

Run it from anywhere:

    python examples/quickstart.py

It uses only the public API: the ``iro_fed`` package (problem files, scoring, placement files)
and the ``solvers`` registry.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import iro_fed
import solvers

# Example problems live next to this script, so the path works from any directory.
PROBLEM = Path(__file__).resolve().parent / "problems" / "bank-three-zone.json"


def main() -> None:
    # 1. Load and validate a problem file (JSON or YAML). A bad file raises
    #    iro_fed.ProblemValidationError naming every wrong field path.
    problem = iro_fed.load_problem(PROBLEM)
    print(
        f"problem {PROBLEM.name}: {problem.num_nodes} nodes in {len(problem.domains)} domains, "
        f"{problem.num_workloads} workloads"
    )

    # 2. The registry: every solver whose optional dependency is installed.
    print("solvers available:", ", ".join(solvers.available()))

    # 3. Build a solver by name; settings are keyword arguments (unknown ones raise).
    solver = solvers.make("kube-default", seed=1)
    placement = solver.solve(problem)
    print(
        f"\nsolver {placement.solver} {placement.params} -> status {placement.status}, "
        f"{placement.num_placed}/{problem.num_workloads} placed"
    )

    # 4. The score R and its terms (iro_fed.Breakdown): physical values ...
    obj = placement.objective
    print(f"score R          {obj.score:+.4f}")
    print(f"utilization      {obj.utilization_pct:.1f} % of the powered-on nodes")
    mean_ms = "n/a" if obj.mean_latency_ms is None else f"{obj.mean_latency_ms:.2f} ms"
    print(f"mean latency     {mean_ms}")
    print(f"cost             {obj.cost_per_hour:.2f} per hour")
    print(f"carbon           {obj.carbon_g_per_hour:.1f} gCO2 per hour")
    # ... and the normalized terms in [0, 1] that enter R with the problem's weights.
    for term, value in obj.terms.items():
        print(f"  term {term:12s} {value:.4f}")

    # 5. Pods that could not be placed, with kube-scheduler's kind of reason.
    for w, reason in sorted(placement.reasons.items()):
        print(f"unplaced {problem.workloads[w].name}: {reason}")

    # 6. Where a few workloads went (assignment[w] is a node index, -1 when unplaced).
    for w in range(3):
        node = placement.assignment[w]
        where = problem.nodes[node].name if node >= 0 else "-"
        print(f"  {problem.workloads[w].name} -> {where}")

    # 7. Write the placement file (format: shared/spec/interfaces.md).
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "placement.json"
        iro_fed.write_placement(placement, problem, out)
        print(f"\nwrote {out.name} ({out.stat().st_size} bytes)")

    # 8. Every solver on the same problem: the same Breakdown makes them comparable.
    print("\nsolver             score   util%  cost/h  gCO2/h  unplaced")
    for name in solvers.available():
        o = solvers.make(name).solve(problem).objective
        print(
            f"{name:16s} {o.score:+7.3f} {o.utilization_pct:7.1f} {o.cost_per_hour:7.2f} "
            f"{o.carbon_g_per_hour:7.0f} {o.unplaced:9d}"
        )


if __name__ == "__main__":
    main()
