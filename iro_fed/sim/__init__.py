"""The cross-domain simulator: scenarios, carbon and latency signals, metrics, a gym env.

    from iro_fed.sim import simulate
    result = simulate("bank", "greedy-objective", seed=1, hours=24)
    print(result.totals["success_rate_pct"], result.totals["carbon_kg"])

Modules: :mod:`~iro_fed.sim.engine` (the step loop and the service model),
:mod:`~iro_fed.sim.metrics` (definitions), :mod:`~iro_fed.sim.signals` (carbon and latency
loaders, forecast), :mod:`~iro_fed.sim.scenarios` (``bank``, ``edge-iot``, ``promo-surge``,
``openb``), :mod:`~iro_fed.sim.env` (gymnasium ``PlacementEnv``, imports gymnasium),
:mod:`~iro_fed.sim.feedback` (the feedback loop driven by the simulator),
:mod:`~iro_fed.sim.cli` (``iro simulate``, ``iro feedback-sim``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from iro_fed.sim.engine import SimConfig, SimConfigError, SimResult, Simulator

#: Engine settings of the plain-Kubernetes baseline: no carbon deferral of batch jobs, no
#: consolidation, no moving replicas to make room for batch (kube-scheduler alone); empty nodes still power down / scale in, as the cluster
#: autoscaler does. The A/B example and the scenario benchmark run kube-default with these.
PLAIN_KUBERNETES: dict[str, Any] = {"deferral": "none", "consolidate_every": 0, "make_room": False}


def simulate(
    scenario: str,
    solver: str,
    seed: int = 0,
    hours: float | None = None,
    settings: Mapping[str, Any] | None = None,
    solver_settings: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Build scenario ``scenario`` and run it with ``solvers.make(solver, seed=seed, ...)``.

    ``settings`` mixes scenario parameters and engine settings (:class:`SimConfig`); the
    scenario's own engine defaults apply underneath them.
    """
    return build_simulator(scenario, solver, seed, hours, settings, solver_settings).run(progress=progress)


def build_simulator(
    scenario: str,
    solver: str,
    seed: int = 0,
    hours: float | None = None,
    settings: Mapping[str, Any] | None = None,
    solver_settings: Mapping[str, Any] | None = None,
) -> Simulator:
    """The :class:`Simulator` that :func:`simulate` runs (scenario built, solver made, settings applied)."""
    import solvers
    from iro_fed.sim.scenarios import build_scenario, split_settings

    scen_params, engine = split_settings(scenario, dict(settings or {}))
    SimConfig().with_settings(engine)  # bad engine settings fail before any data is read
    sc = build_scenario(scenario, seed=seed, hours=hours, **scen_params)
    check_outside_run(sc, scen_params)
    config = SimConfig().with_settings({**sc.engine_defaults, **engine})
    params = dict(solver_settings or {})
    cls = solvers.registered().get(solver)
    if cls is not None and "seed" in cls.parameters:
        params.setdefault("seed", seed)
    return Simulator(sc, solvers.make(solver, **params), config, seed=seed)


def check_outside_run(sc: Any, given: Mapping[str, Any]) -> None:
    """A scenario parameter that falls outside the run (``sc.notes["outside_run"]``: the bank's
    ``promo_day`` whose promotion the run misses, promo-surge's ``surge_start_h`` past its end) was silently no effect: a SimConfigError naming it when the
    caller gave it, else (a default past a shorter run, ``--hours 24`` being a quick run) a line
    in ``sc.notes["messages"]``, which ``iro simulate`` prints as a note. ``build_scenario`` itself
    allows it: a window of a run (a fine-tune's episodes) may well miss the promotion day."""
    for key, why in sc.notes.get("outside_run", {}).items():
        if key in given:
            raise SimConfigError(f"scenario {sc.name!r}: setting {key!r}: {why}")
        sc.notes.setdefault("messages", []).append(f"the default {key} {sc.params[key]!r} has no effect: {why}")


__all__ = ["PLAIN_KUBERNETES", "SimConfig", "SimConfigError", "SimResult", "Simulator", "build_simulator", "check_outside_run", "simulate"]
