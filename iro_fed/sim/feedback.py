"""The feedback loop driven by the simulator: predictions at decision time, observations later.

    from iro_fed.sim.feedback import run_feedback_sim
    run = run_feedback_sim("edge-iot", hours=12, seed=1,
                           settings={"usage_shift_at_h": 6, "usage_shift_factor": 1.6})
    print(run.report()["fine_tunes"], run.report()["moving_error_after_shift_max"])

:class:`SimFeedback` is the engine's listener. After each solver call it records every placed
pod as a :class:`~iro_fed.feedback.Decision`: its change of R and of each objective term
(:func:`~iro_fed.feedback.placement_terms` on the step's snapshot problem), the network latency
the objective uses, and the predicted CPU share of its node from the node's requests by workload
class (the engine's ``usage_class``: the service name for replicas, else the pod's class such as
``batch``). ``delay_steps`` later it observes the node's CPU share really in use (the service
model's busy share, :meth:`~iro_fed.sim.engine.Simulator.node_usage`, with the engine's usage
noise and shift) and, for a service replica, the latency of its requests. The usage model is
capped at 100 % like the simulator's measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iro_fed.feedback import FeedbackConfig, FeedbackLoop, FineTuneAction, UsageModel, network_latency, placement_terms
from iro_fed.objective import evaluate
from iro_fed.sim.engine import RUNNING, SimResult, Simulator

#: Loop settings for the simulator: about 30 decisions an hour on edge-iot, so the moving error
#: averages about 10 of them; calibration on the first 40; a refit every 30 node observations
#: while calm and every 5 while settling (each comes with about one latency reading, which used to
#: count too: these are the refits the former 60 / 10 gave).
SIM_FEEDBACK = FeedbackConfig(threshold=0.08, alpha=0.05, calm=0.5, min_samples=10, window=240, calibration=40,
                              refit_every=30, cooldown=60, settle_every=5)


class SimFeedback:
    """Engine listener that feeds a :class:`FeedbackLoop` (see the module docstring)."""

    def __init__(self, loop: FeedbackLoop, delay_steps: int = 2, terms: bool = True) -> None:
        if delay_steps < 0:
            raise ValueError(f"delay_steps: must be >= 0, got {delay_steps}")
        self.loop = loop
        self.delay_steps = delay_steps
        self.terms = terms
        self.due: dict[int, list[tuple[int, int]]] = {}
        self.series: dict[str, list] = {"step": [], "moving_error": [], "moving_latency_error_ms": [],
                                        "observations": [], "fine_tunes": []}
        self._classes: list[str] | None = None
        self._class_of: np.ndarray | None = None

    def attach(self, sim: Simulator) -> Simulator:
        sim.listener = self
        self._classes = sorted(set(sim.usage_class))
        index = {c: i for i, c in enumerate(self._classes)}
        self._class_of = np.array([index[c] for c in sim.usage_class], dtype=np.int64)
        return sim

    def requests(self, sim: Simulator, n: int) -> dict[str, float]:
        """CPU requests (millicores) by usage class of the pods on node n now."""
        assert self._classes is not None and self._class_of is not None
        pods = np.flatnonzero(sim.state.assignment == n)
        sums = np.bincount(self._class_of[pods], weights=sim.demand[pods, 0], minlength=len(self._classes))
        return {self._classes[i]: float(v) for i, v in enumerate(sums) if v > 0}

    def decided(self, sim: Simulator, t: int, sub: Any, avail: np.ndarray, pods: np.ndarray, placement: Any) -> None:
        at = float(t)
        by_node: dict[int, dict[str, float]] = {}
        with_all = None  # evaluate(sub, placement.assignment), the same for every pod: computed once
        for i, p in enumerate(pods):
            local = int(placement.assignment[i])
            if local < 0 or int(sim.state.assignment[p]) != int(avail[local]):
                continue  # not placed, or refused by the engine's live check
            n = int(avail[local])
            if n not in by_node:
                by_node[n] = self.requests(sim, n)
            delta, terms = None, {}
            if self.terms:
                if with_all is None:
                    with_all = evaluate(sub, np.asarray(placement.assignment, dtype=np.int64))
                delta, terms = placement_terms(sub, placement.assignment, i, with_all)
            self.loop.record_decision(sim.workloads[p].name, sim.nodes[n].name, by_node[n], float(sim.capacity[n, 0]),
                                      klass=sim.usage_class[p], delta_r=delta, terms=terms,
                                      network_latency_ms=network_latency(sub, i, local), at=at)
            self.due.setdefault(t + self.delay_steps, []).append((n, int(p)))

    def stepped(self, sim: Simulator, t: int) -> None:
        due = self.due.pop(t, [])
        if due:
            usage = sim.node_usage()
            online, lat = getattr(sim, "replica_latency", (np.zeros(0, dtype=np.int64), np.zeros(0)))
            latency = dict(zip(online.tolist(), lat.tolist(), strict=True))
            seen: set[int] = set()
            for n, p in due:
                if n not in seen:
                    seen.add(n)
                    self.loop.observe(sim.nodes[n].name, float(usage[n]), requests=self.requests(sim, n),
                                      capacity=float(sim.capacity[n, 0]), at=float(t))
                if sim.status[p] == RUNNING and p in latency:
                    self.loop.observe_latency(sim.workloads[p].name, float(latency[p]), at=float(t))
        s = self.series
        s["step"].append(t)
        s["moving_error"].append(self.loop.moving_error)
        s["moving_latency_error_ms"].append(self.loop.moving_latency_error)
        s["observations"].append(self.loop.observations)
        s["fine_tunes"].append(len(self.loop.signals))


@dataclass
class FeedbackRun:
    """A simulator run with the feedback loop: the run's result, the loop, per-step series."""

    result: SimResult
    loop: FeedbackLoop
    series: dict[str, list]
    step_s: float
    shift_step: int | None
    settings: dict[str, Any] = field(default_factory=dict)

    def moving_error_between(self, lo_h: float, hi_h: float) -> list[float]:
        """Moving errors recorded at steps in ``[lo_h, hi_h)`` hours (where one is defined)."""
        lo, hi = lo_h * 3600 / self.step_s, hi_h * 3600 / self.step_s
        return [e for t, e in zip(self.series["step"], self.series["moving_error"], strict=True)
                if lo <= t < hi and e is not None]

    def report(self) -> dict[str, Any]:
        """JSON-ready summary with fixed keys (see docs/feedback.md)."""
        summary = self.loop.summary()
        hours = self.result.totals["hours"]
        shift_h = None if self.shift_step is None else self.shift_step * self.step_s / 3600.0
        before = self.moving_error_between(0, shift_h if shift_h is not None else hours)
        after = self.moving_error_between(shift_h, hours) if shift_h is not None else []
        trig = self.loop.signals
        last_h = trig[-1].at * self.step_s / 3600.0 if trig else None
        settled = self.moving_error_between(last_h + 1.0, hours) if last_h is not None else []
        return {
            "scenario": self.result.scenario,
            "solver": self.result.solver,
            "seed": self.result.seed,
            # the solver's settings as run, as ``iro simulate``'s report has them (its seed among them)
            "solver_settings": self.result.solver_settings,
            "hours": hours,
            "shift_at_h": shift_h,
            "decisions": summary["decisions"],
            "observations": summary["observations"],
            "calibrations": summary["calibrations"],
            "fine_tunes": summary["fine_tunes"],
            "threshold": summary["threshold"],
            "moving_error_before_shift_max": max(before) if before else None,
            "moving_error_before_shift_mean": float(np.mean(before)) if before else None,
            "moving_error_after_shift_max": max(after) if after else None,
            "moving_error_1h_after_last_fine_tune_max": max(settled) if settled else None,
            "moving_error_end": summary["moving_error"],
            "decision_mae_utilization": summary["decision_mae_utilization"],
            "decision_mae_latency_ms": summary["decision_mae_latency_ms"],
            "factors": summary["factors"],
            "latency_offset_ms": summary["latency_offset_ms"],
            "triggers": [{**t, "at_h": t["at"] * self.step_s / 3600.0} for t in summary["triggers"]],
            "settings": self.run_settings(),
        }

    def run_settings(self) -> dict[str, Any]:
        """The run's settings as given, with the carbon inputs as read, as ``iro simulate``'s
        ``scenario_params`` has them: ``carbon_basis`` normalised (``LCA`` typed is ``lca``; there
        without any ``--set`` too) and ``carbon_files`` (zone -> path) when the user gave any."""
        params = self.result.scenario_params
        out = dict(self.settings)
        for key in ("carbon_basis", "carbon_files"):
            if key in params:
                out[key] = params[key]
        return out


def run_feedback_sim(
    scenario: str = "edge-iot",
    solver: str = "greedy-objective",
    seed: int = 0,
    hours: float | None = 12.0,
    settings: Mapping[str, Any] | None = None,
    solver_settings: Mapping[str, Any] | None = None,
    config: FeedbackConfig | None = None,
    actions: Sequence[FineTuneAction] = (),
    delay_steps: int = 2,
    terms: bool = True,
    registry: Any = None,
    progress: Callable[[int, int], None] | None = None,
) -> FeedbackRun:
    """Run ``scenario`` with ``solver`` and the feedback loop (``SIM_FEEDBACK`` by default).

    ``settings`` are scenario parameters and engine settings as for :func:`iro_fed.sim.simulate`
    (``usage_noise``, ``usage_shift_at_h``, ``usage_shift_class``, ``usage_shift_factor`` among them).
    Trigger times (``Trigger.at``) are simulator steps.
    """
    from iro_fed.sim import build_simulator

    sim = build_simulator(scenario, solver, seed, hours, settings, solver_settings)
    loop = FeedbackLoop(config or SIM_FEEDBACK, model=UsageModel(saturated=0.98, max_util=1.0), actions=actions,
                        registry=registry)
    listener = SimFeedback(loop, delay_steps=delay_steps, terms=terms)
    listener.attach(sim)
    result = sim.run(progress=progress)
    return FeedbackRun(result, loop, listener.series, sim.sc.step_s,
                       sim.usage_shift_step if sim.usage_shift_step >= 0 else None,
                       {**dict(settings or {}), "delay_steps": delay_steps})


__all__ = ["SIM_FEEDBACK", "FeedbackRun", "SimFeedback", "run_feedback_sim"]
