"""``PlacementEnv``: the simulator as a gymnasium environment, one pod decision per step.

An episode is one simulator run of a scenario (``hours`` long). Whenever the simulator has a
pending pod with at least one feasible node, the agent picks among the top-``k`` feasible
candidate nodes, ranked by the objective's marginal change (:func:`iro_fed.features.order_candidates`),
or action ``k``: leave the pod pending (it is offered again next simulator step), allowed only
for a deferrable pod (a batch job with a deadline that it still meets when it starts one step
later; once its slack is spent it must be placed). Pods with no feasible node stay pending
without a decision.

* **Action**: ``Discrete(k + 1)``. ``obs["mask"]`` (and ``info["action_mask"]``) marks the valid
  actions. A masked action is treated as leaving the pod pending. A pod left pending is offered
  again in the next simulator step (the engine otherwise retries pending pods only once capacity
  frees, which would let a deferred pod wait uncharged).
* **Reward**: the change of the shared objective R (:func:`iro_fed.objective.marginal` on the
  step's snapshot problem), in units of one unplaced pod (times the snapshot's pods over
  ``w_unplaced``), with the unplaced-pod penalty charged per decision round while a pod waits:
  placing on node n gives ``(W * dR(n) - w_unplaced) / w_unplaced``, i.e. the change of the
  utilization, latency, cost and carbon terms (the relief of the pod's own penalty cancels the
  charge); leaving it pending gives -1. A pod that a decision round finds *no* feasible node for
  (capacity stranded by earlier placements) is charged the same -1, added to the reward of the
  agent's latest decision (the one whose step led there), so the penalty of stranding reaches
  the decisions that cause it; ``info["unplaceable"]`` counts them. Returns stay within a few
  tens of units.
* **End**: the simulated ``hours`` are a time limit, not a terminal state (pods keep arriving and
  waiting), so the last step returns ``truncated=True, terminated=False``. Its observation is the
  decision the simulator would offer next, for the learner to bootstrap from: the first pending
  pod (in the engine's order) that fits a node of the final cluster, else the last decided pod
  offered again on the final cluster (a stand-in for the next arrival, beyond the horizon). Only
  when neither fits anywhere is its mask empty (nothing to bootstrap from).
* **Observation**: ``Dict(candidates=[k, F], context=[C], mask=[k + 1])`` computed by
  :mod:`iro_fed.features` (the same code the ``dqn`` solver runs at decision time), with the
  pod's deadline slack as context (no clock: the ``dqn`` solver ranks without one).
* **Greedy baseline**: ``info["greedy_action"]`` (what :func:`greedy_action` returns) is the
  slot of the ``greedy-objective`` solver's own choice, asked of the solver itself (the
  objective's argmax with its GPU-stranding guard and its tie rule), so that the DQN's baseline
  and the solver never disagree. When that node is not among the top-``k`` by marginal gain (the
  guard ranked them last, or a tie wider than ``k`` broke otherwise), the last of them gives its
  slot to it (the set ordered the same way), as the edge agent's policy samples do.
* **Start**: ``start_h`` (default 0) starts the episode's clock that many hours into the scenario:
  the simulator runs hours ``0 .. start_h + hours`` (the scenario's own times of day, arrivals and
  settings such as ``usage_shift_at_h``), the pods of the first ``start_h`` hours are placed where
  the ``greedy-objective`` solver places them (the greedy baseline's slot) without a decision, and
  the agent decides from ``start_h`` on: an episode of the window ``[start_h, start_h + hours]``
  on the cluster those hours left behind (``info["step"]`` counts from the run's start).
* **Seeds**: ``reset(seed=s)`` runs scenario seed ``s``, ``reset()`` the env's ``seed`` plus the
  episodes so far; a seed in ``held_out`` (the evaluation episodes, for a training env) is moved
  past that range, so that evaluation stays on episodes the policy never trained on.

Works with ``gymnasium.vector.SyncVectorEnv`` and passes ``gymnasium.utils.env_checker.check_env``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

import solvers
from iro_fed.features import (
    CANDIDATE_FEATURES,
    CONTEXT_FEATURES,
    candidate_features,
    context_features,
    order_candidates,
)
from iro_fed.sim.engine import DecisionRequest, SimConfig, Simulator
from iro_fed.sim.scenarios import build_scenario, split_settings
from iro_fed.sim.scenarios.common import run_steps

F = len(CANDIDATE_FEATURES)
C = len(CONTEXT_FEATURES)
BOUND = 1e3


class PlacementEnv(gym.Env):
    """One pod decision per step among the top-``k`` candidates (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        scenario: str = "bank",
        hours: float = 6.0,
        k: int = 16,
        seed: int = 0,
        settings: Mapping[str, Any] | None = None,
        held_out: range = range(0),
        start_h: float = 0.0,
    ) -> None:
        super().__init__()
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if isinstance(start_h, bool) or not isinstance(start_h, (int, float)) or not 0.0 <= start_h < math.inf:
            raise ValueError(f"start_h: expected a finite number of hours >= 0, got {start_h!r}")
        if not isinstance(held_out, range) or held_out.step != 1:
            raise ValueError(f"held_out must be a range with step 1, got {held_out!r}")
        self.scenario_name = scenario
        self.hours = float(hours)
        #: Scenario hour at which the agent's decisions start (the earlier ones are placed greedily).
        self.start_h = float(start_h)
        self.k = int(k)
        self.base_seed = int(seed)
        #: Scenario seeds this env never runs (the held-out evaluation episodes of a training env):
        #: an episode that would draw one runs the seed as far past the range instead.
        self.held_out = held_out
        self.scenario_params, engine = split_settings(scenario, dict(settings or {}))
        self.engine_settings = engine
        self.action_space = gym.spaces.Discrete(self.k + 1)
        self.observation_space = gym.spaces.Dict({
            "candidates": gym.spaces.Box(-BOUND, BOUND, shape=(self.k, F), dtype=np.float32),
            "context": gym.spaces.Box(-BOUND, BOUND, shape=(C,), dtype=np.float32),
            "mask": gym.spaces.MultiBinary(self.k + 1),
        })
        self._gen = None
        self._req: DecisionRequest | None = None
        self._final: DecisionRequest | None = None  # after the time limit: the decision to bootstrap from
        self._last_pod = -1  # the simulator pod of the latest decision
        self._cands = np.zeros(0, dtype=np.int64)
        self._gains = np.zeros(0)
        self._greedy = self.k  # slot of greedy-objective's choice among _cands (k: none, leave pending)
        # The baseline is the solver itself (one ranking rule: its GPU guard and tie rule), not a
        # copy of its argmax (the first candidate by marginal ignored the guard).
        self._greedy_solver = solvers.make("greedy-objective")
        self._episode = 0
        self._unplaceable = 0  # pods found with no feasible node during the last advance

    # --- gymnasium API -------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, np.ndarray], dict]:
        super().reset(seed=seed)
        run_seed = seed if seed is not None else self.base_seed + self._episode
        if run_seed in self.held_out:
            run_seed += len(self.held_out)
        self._episode += 1
        sc = build_scenario(self.scenario_name, seed=run_seed, hours=self.start_h + self.hours, **self.scenario_params)
        config = SimConfig().with_settings({**sc.engine_defaults, **self.engine_settings})
        self.sim = Simulator(sc, None, config, seed=run_seed)
        self._gen = self.sim.iterate(agent=True)
        self._final, self._last_pod = None, -1
        self._advance(None, first=True)
        self._warm_up(run_steps(self.start_h, sc.step_s))
        return self._obs(), self._info()

    def step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        if self._gen is None:
            raise RuntimeError("call reset() before step()")
        a = int(action)
        if self._req is None:  # the episode already ended: nothing changes
            return self._obs(), 0.0, False, True, self._info()
        req = self._req
        self._last_pod = req.pod
        w_unplaced = float(req.problem.weights.unplaced) or 1.0
        if 0 <= a < len(self._cands):
            node = int(self._cands[a])
            gain = float(self._gains[a]) * req.problem.num_workloads
            reward = (gain - w_unplaced) / w_unplaced
        else:  # leave pending (a masked action counts as that too; the engine offers it again next step)
            node = -1
            reward = -1.0
        self._advance(node)
        reward -= float(self._unplaceable)
        # The simulated hours are a time limit, never a terminal state: truncate, so the learner
        # bootstraps from the next decision instead of taking the rest of the run as worth 0.
        truncated = self._req is None
        return self._obs(), reward, False, truncated, self._info()

    # --- internals -----------------------------------------------------------------------

    def _warm_up(self, start_step: int) -> None:
        """Place the pods of the steps before ``start_step`` where greedy-objective does (no decision)."""
        while self._req is not None and self._req.step < start_step:
            self._last_pod = self._req.pod
            self._advance(int(self._cands[self._greedy]))
        # Nothing stranded before the window is charged to its first decision.
        self._unplaceable = 0

    def _advance(self, node: int | None, first: bool = False) -> None:
        try:
            self._req = next(self._gen) if first else self._gen.send(node)
        except StopIteration:
            self._req = None
            self._final = None if first else self.sim.next_request(self._last_pod)
            self._cands = self._rank(self._final) if self._final is not None else np.zeros(0, dtype=np.int64)
            if self._final is None:
                self._gains = np.zeros(0)
                self._greedy = self.k
        else:
            self._cands = self._rank(self._req)
        # Pods left without a feasible node since the last decision (none is charged before the first).
        self._unplaceable = 0 if first else len(self.sim.unplaceable)
        self.sim.unplaceable.clear()

    def _rank(self, req: DecisionRequest) -> np.ndarray:
        """The top-``k`` candidates by marginal gain, with greedy-objective's choice among them
        (``self._greedy``: its slot); sets ``self._gains``."""
        nodes, gains = order_candidates(req.state, req.local, req.candidates, self.k)
        nodes, gains = nodes[: self.k], gains[: self.k]
        pick = self._greedy_solver.decide(req.state, req.local).node  # a feasible node: req.candidates is not empty
        hits = np.flatnonzero(nodes == pick)
        if hits.size == 0:  # the last slot gives way to it (the set ordered as before)
            nodes, gains = order_candidates(req.state, req.local, np.append(nodes[: self.k - 1], pick))
            hits = np.flatnonzero(nodes == pick)
        self._gains = gains
        self._greedy = int(hits[0])
        return nodes

    def _shown(self) -> DecisionRequest | None:
        """The decision the observation shows: the pending one, or after the end the bootstrap one."""
        return self._req if self._req is not None else self._final

    def _deferrable(self) -> bool:
        """A batch job with a deadline that it still meets after waiting one more step."""
        req = self._shown()
        if req is None or not (self.sim.is_batch[req.pod] and self.sim.deadline[req.pod] >= 0):
            return False
        return bool(self.sim.deadline[req.pod] - req.step - self.sim.remaining[req.pod] >= 1)

    def action_mask(self) -> np.ndarray:
        mask = np.zeros(self.k + 1, dtype=bool)
        mask[: len(self._cands)] = True
        mask[self.k] = self._deferrable()
        return mask

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"action_mask": self.action_mask(), "unplaceable": self._unplaceable,
                                "greedy_action": self._greedy if len(self._cands) else self.k}
        if self._req is not None:
            info["step"] = self._req.step
            info["pod"] = self.sim.workloads[self._req.pod].name
        else:
            # None stays: a share with no denominator (pending_pct with no pod ready), not a 0 or a NaN.
            info["totals"] = {k: v for k, v in self.sim.result().totals.items()
                              if v is None or isinstance(v, (int, float))}
        return info

    def _obs(self) -> dict[str, np.ndarray]:
        mask = self.action_mask().astype(np.int8)
        req = self._shown()
        if req is None:
            return {"candidates": np.zeros((self.k, F), np.float32), "context": np.zeros(C, np.float32), "mask": mask}
        sim = self.sim
        deferrable = self._deferrable()
        slack_s = max(0.0, float(sim.deadline[req.pod] - req.step - sim.remaining[req.pod]) * sim.sc.step_s) \
            if deferrable else 0.0
        # No clock: the dqn solver (and the edge agent) rank without one, and a policy must see in
        # training only what it sees at run time (a learned "surge hour" would not exist there).
        context = {"deferrable": float(deferrable), "slack_s": slack_s}
        cand = candidate_features(req.state, req.local, self._cands, self._gains, self.k)
        ctx = context_features(req.state, req.local, int(np.asarray(req.candidates).size), len(self._cands), self.k,
                               context)
        return {"candidates": np.clip(cand, -BOUND, BOUND), "context": np.clip(ctx, -BOUND, BOUND), "mask": mask}


def greedy_action(info: Mapping[str, Any]) -> int:
    """The action of the ``greedy-objective`` solver's choice (``info["greedy_action"]``, asked of
    the solver: the objective's argmax with its GPU-stranding guard), or leave pending when the
    pod has no candidate. ``info`` is what :class:`PlacementEnv` returns."""
    if "greedy_action" not in info:
        raise KeyError("info: no 'greedy_action' (pass the info dict that PlacementEnv.reset/step returned)")
    return int(info["greedy_action"])
