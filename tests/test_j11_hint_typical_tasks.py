"""The trace replay's typical tasks reach the solvers inside a batch solver: cpsat's hint solvers
(fgd, iro-frag) and a composite's wrapped solvers. Only the top-level solver was given them, so a
hint computed its typical tasks from the window's 50-1000 pods instead of the original pod list."""

from __future__ import annotations

import pytest

import solvers
from iro_fed.fragmentation import typical_tasks
from iro_fed.replay import replay_problem
from iro_fed.traces.openb import OpenbNode, OpenbPod, build_problem
from solvers.fgd import Fgd

pytest.importorskip("ortools")


def trace() -> tuple[list[OpenbNode], list[OpenbPod], list[OpenbPod]]:
    nodes = [OpenbNode(f"n{i}", 64000, 262144, 4, "T4") for i in range(4)]
    # The original pod list: many 250-milli shares; the replayed window: 700-milli shares and whole cards.
    original = [OpenbPod(f"o{i}", 2000, 4096, 1, 250) for i in range(12)]
    window = [OpenbPod(f"w{i}", 2000, 4096, 1 if i % 2 else 2, 700 if i % 2 else 1000) for i in range(6)]
    return nodes, original, window


@pytest.fixture
def seen_tasks(monkeypatch):
    """The typical tasks every fgd-family solver scored against, in reset order."""
    seen = []
    reset = Fgd.reset

    def spy(self, problem):
        reset(self, problem)
        seen.append((self.name, self.tasks))

    monkeypatch.setattr(Fgd, "reset", spy)
    return seen


@pytest.mark.parametrize("hint", ["fgd", "iro-frag", "best-fit,fgd"])
def test_cpsat_hands_the_replay_tasks_to_its_hint_solvers(seen_tasks, hint):
    nodes, original, window = trace()
    tasks = typical_tasks(build_problem(nodes, original))
    problem = build_problem(nodes, window)
    cpsat = solvers.make("cpsat", hint=hint, time_limit_s=5.0)
    replay_problem(problem, cpsat, seed=0, batch_window=3, tasks=tasks)
    assert len(seen_tasks) == 2  # one hint run per window
    assert all(t is tasks for _, t in seen_tasks), [name for name, t in seen_tasks if t is not tasks]


def test_cpsat_alone_still_computes_the_window_tasks(seen_tasks):
    nodes, _, window = trace()
    problem = build_problem(nodes, window)
    solvers.make("cpsat", hint="fgd", time_limit_s=5.0).solve(problem)
    (_, own), = seen_tasks
    assert own.milli.tolist() == typical_tasks(problem).milli.tolist()


@pytest.mark.parametrize(
    ("composite", "settings"),
    [
        ("fallback", {"primary": "fgd", "fallback": "iro-frag"}),
        ("time-budget", {"solver": "cpsat", "solver_params": {"hint": "iro-frag", "time_limit_s": 5.0}, "budget_s": 30.0}),
    ],
)
def test_composites_hand_the_replay_tasks_to_their_solvers(seen_tasks, composite, settings):
    nodes, original, window = trace()
    tasks = typical_tasks(build_problem(nodes, original))
    replay_problem(build_problem(nodes, window), solvers.make(composite, **settings), seed=0, batch_window=6, tasks=tasks)
    assert seen_tasks and all(t is tasks for _, t in seen_tasks)
