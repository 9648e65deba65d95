"""IRO-Fed: multi-objective placement of pods across edge sites, cloud zones and a public cloud.

The library API in one place::

    from iro_fed import load_problem, evaluate
    import solvers

    problem = load_problem("examples/problems/bank-three-zone.json")
    placement = solvers.make("best-fit").solve(problem)
    print(placement.objective.score)
"""

from iro_fed.model import ClusterState, Problem, Weights
from iro_fed.objective import Breakdown, evaluate, marginal
from iro_fed.placement import Placement, placement_from_dict, write_placement
from iro_fed.problem_io import ProblemValidationError, load_problem, problem_from_dict, problem_to_dict, write_problem

__version__ = "0.1.0"

__all__ = [
    "Breakdown",
    "ClusterState",
    "Placement",
    "Problem",
    "ProblemValidationError",
    "Weights",
    "evaluate",
    "load_problem",
    "marginal",
    "placement_from_dict",
    "problem_from_dict",
    "problem_to_dict",
    "write_placement",
    "write_problem",
]
