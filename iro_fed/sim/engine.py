"""The cross-domain simulator: a fixed-step run of a :class:`~iro_fed.sim.model.Scenario`.

Each step (60 s by default) does, in order:

1. **Nodes**: nodes whose boot (power-on or cloud provisioning, ``boot_steps``) is over come on.
2. **Departures**: service replicas whose time is up leave (scale-down); a replica that never
   ran is *dropped*. Batch jobs that have done ``duration`` steps of work complete and leave.
3. **Arrivals**: new replicas and pods arrive. A batch job with a deadline and at least
   ``min_defer_slack_steps`` of slack is, with ``deferral="carbon"``, held until the start
   within its slack whose forecast carbon intensity over its run is lowest (the day-ahead
   persistence forecast of :func:`iro_fed.sim.signals.persistence_forecast`, averaged over the
   domains the job may run in, weighted by their node count; no deferral when it would save
   under ``defer_min_saving``). A held job is *deferred*, not pending.
4. **Decisions**: the pods that are ready and not placed are handed to the solver in one
   snapshot problem: the powered-on nodes with their current usage as ``allocated``, the pods
   as workloads (priority order, then readiness), the current carbon intensity per domain.
   Solvers are built with ``solvers.make`` and called through ``solve`` (online solvers place
   pod by pod with ``decide``). Every returned node is checked against the live
   :class:`~iro_fed.model.ClusterState` before it is applied (never a capacity overrun). For a
   solver that reads ``Problem.pod_scoring`` (kube-default, or a composite around it) the
   snapshot carries kube-scheduler's system default spreading (hostname maxSkew 3, zone maxSkew
   5, ScheduleAnyway) of each pod whose controller is a ReplicaSet, StatefulSet or
   ReplicationController (a service's replicas: ``ReplicaSet/<service>``; a pod's own
   ``controller``; a Job's pods are not spread), with its group's running pods per node; other
   solvers get none (nothing is built for them).
5. **Preemption, make-room, consolidation**: a pending pod that fits no powered node evicts
   lower-priority pods of one node as kube-scheduler's DefaultPreemption picks them
   (``preemption``: per node all lower pods but those it can reprieve, most important first; the
   node with the lowest highest-victim priority, then the smallest priority sum, the fewest
   victims, the latest-started victims; every such pod, GPU pods included; an evicted batch job
   restarts; a pod's start is its current placement's step); a batch job that fits nowhere, GPU
   jobs included, gets room by moving service replicas off one node (``make_room``); every
   ``consolidate_every`` steps the least-used node holding only replicas is drained when the
   solver places them all elsewhere (``consolidate_below``).
6. **Autoscaling**: for pods still pending, powered-down nodes they fit (own data centres
   first) or cloud nodes (``elastic`` pools) are booted, enough to hold their demand.
   With ``power_down``, a node empty for ``idle_off_steps`` powers down when its domain keeps
   ``headroom`` of its powered CPU free; elastic nodes empty that long are deprovisioned.
   Own zones together (and each edge site, and a cloud domain in use) short of ``headroom`` boot
   more nodes, the greenest domain first; own data centres fully powered and short of headroom
   burst to the cloud early.
7. **Metrics**: requests, latency, energy, cost, carbon and the objective (``metrics``).

Service model (online services, per step, monotone in load and utilization):

* A service's traffic ``lambda_s(t)`` (req/s, from its user region) is split evenly over its
  running replicas: ``lambda_p = lambda_s / k``; a replica's own load ``rho_p = lambda_p / mu``.
* A node's busy share ``u_n`` = (sum over its online replicas of ``cpu * min(rho_p, 1)`` + sum
  over its other pods of ``cpu * batch_usage``) / node CPU.
* Actual vs requested CPU (off by default): with ``usage_noise`` each pod's use above is scaled
  by its own lognormal factor (mean 1, drawn once from the run seed on a separate stream); from
  ``usage_shift_at_h`` on, pods whose *usage class* (the service name of a replica, else the
  pod's class such as ``batch``) matches the glob ``usage_shift_class`` use
  ``usage_shift_factor`` times as much (a distribution shift: e.g. a release that needs 60 % more
  CPU). Only the busy share changes (and through it latency and success); the scheduler, the
  objective and energy still see requests. :meth:`Simulator.node_usage` reads the busy share;
  ``iro_fed.sim.feedback`` drives the feedback loop with it.
* Latency of a replica's requests: ``net_ms(region, domain) + service_ms / max(1 - rho,
  1 / queue_cap)`` with ``rho = min(max(rho_p, u_n), 1)``: an M/M/1-like queue that is as busy as
  the busier of the replica and its node, capped at ``queue_cap * service_ms``.
* A request succeeds when its replica's latency is within the service's SLA and the replica is
  not overloaded; an overloaded replica (``rho_p > 1``) serves ``1 / rho_p`` of its requests and
  times out the rest; a service with no running replica fails all its requests. Timed-out
  requests count at the SLA in the latency histogram.

Horizontal autoscaling of a service: ``ceil(lambda / (mu * target_rho))`` replicas clipped to
``[min_replicas, max_replicas]``, the maximum over the last ``hpa_stabilization_steps`` (the
HPA's scale-down stabilization) and applied ``hpa_delay_steps`` late. Replica j lives while the
desired count exceeds j; scale-down removes the highest replicas (a deviation from the
ReplicaSet, which deletes pending pods first).

Energy: every step, each powered node (on or booting) is costed with the objective module's
per-node coefficients at that step's intensity of its own domain: its full price per hour, its
power ``idle + (peak - idle) * ((1 - g) * CPU requests / capacity + g * GPU milli / (cards x
1000))`` (``objective.dynamic_utilization``, g the GPUs' share of the dynamic range; idle when
empty) and that power times
PUE times intensity as gCO2 per hour (the numbers ``evaluate`` gives for the step's placement plus
the powered empty nodes; tested). ``score_every`` thins out only the objective score.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iro_fed.feasibility import feasible_nodes, fit_tolerance, resource_fit, room_fits, static_filter
from iro_fed.limits import MAX_HOURS
from iro_fed.model import (
    GPU_MILLI,
    HOSTNAME_KEY,
    SPREAD_CONTROLLER_KINDS,
    SYSTEM_DEFAULT_SPREAD,
    ClusterState,
    Domain,
    Node,
    PodScoring,
    Problem,
    SoftPodTerm,
    Workload,
)
from iro_fed.objective import coefficients, dynamic_utilization, evaluate
from iro_fed.placement import jsonable as placement_jsonable
from iro_fed.sim.metrics import Recorder, histogram_percentile, pending_stats, success_pct, weighted_percentile
from iro_fed.sim.model import Scenario
from iro_fed.sim.signals import persistence_forecast

FUTURE, DEFERRED, PENDING, RUNNING, COMPLETED, DROPPED = range(6)
STATUS_NAMES = ("future", "deferred", "pending", "running", "completed", "dropped")
OFF, BOOTING, ON = 0, 1, 2
#: Waiting jobs :meth:`Simulator._make_room` tries per step (each try is a solver call).
MAKE_ROOM_PER_STEP = 3
#: Upper bounds of the float settings that multiply into the simulation (past them a value only
#: overflows): ``queue_cap`` caps a replica's latency at ``queue_cap * service_ms`` (1e6 service
#: times is far past any SLA; 1e308 made the latency inf and the run a traceback), and
#: ``usage_shift_factor`` multiplies a pod's CPU use (1000 times what it used before is far past
#: any real shift; 1e308 overflowed the node's busy share).
MAX_QUEUE_CAP = 1e6
MAX_USAGE_SHIFT_FACTOR = 1e3
DOMAIN_LABEL = "iro.example/domain"
ZONE_LABEL = "topology.kubernetes.io/zone"


class SimConfigError(ValueError):
    """An unknown or invalid simulator setting (the message names it)."""


@dataclass(frozen=True)
class SimConfig:
    """Engine settings (scenario-independent). ``--set KEY=VALUE`` on the command line."""

    deferral: str = "carbon"  # "carbon": hold slack-rich batch jobs for low-carbon hours; "none"
    power_down: bool = True  # power down empty nodes of own data centres (cloud nodes always scale down)
    idle_off_steps: int = 10  # steps a node must be empty before it powers down / is deprovisioned
    headroom: float = 0.15  # powered CPU share a domain keeps free (power-down stops, a node boots)
    hpa_delay_steps: int = 1
    hpa_stabilization_steps: int = 5
    queue_cap: float = 50.0  # latency cap in service times, 1 .. MAX_QUEUE_CAP
    batch_usage: float = 0.85
    min_defer_slack_steps: int = 30
    defer_margin_steps: int = 15
    defer_min_saving: float = 0.05
    score_every: int = 1
    consolidate_every: int = 15  # steps between consolidation rounds (0: never move running pods)
    consolidate_below: float = 0.5  # only nodes with a CPU share below this are drained
    make_room: bool = True  # move service replicas off a node to start a waiting batch job there
    preemption: bool = True  # kube-scheduler's default: a pending pod evicts lower-priority pods
    # Actual vs requested CPU (the service model's busy share; the objective still sees requests):
    usage_noise: float = 0.0  # sigma of a per-pod lognormal factor on the CPU a pod really uses (0: none)
    usage_shift_at_h: float = -1.0  # distribution shift: from this hour on ... (< 0: no shift; at most MAX_HOURS)
    usage_shift_class: str = "batch"  # ... pods whose usage class (service name, else pod class) matches this glob ...
    usage_shift_factor: float = 1.0  # ... use this many times the CPU they used before (at most MAX_USAGE_SHIFT_FACTOR)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # nan passes every range check below
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise SimConfigError(f"setting {f.name!r}: must be a finite number, got {value!r}")
        if self.deferral not in ("carbon", "none"):
            raise SimConfigError(f"setting 'deferral': must be carbon or none, got {self.deferral!r}")
        for name in ("consolidate_every", "idle_off_steps", "hpa_delay_steps", "hpa_stabilization_steps", "min_defer_slack_steps", "defer_margin_steps"):
            if getattr(self, name) < 0:
                raise SimConfigError(f"setting {name!r}: must be >= 0, got {getattr(self, name)}")
        if self.score_every < 1:
            raise SimConfigError(f"setting 'score_every': must be >= 1, got {self.score_every}")
        if not 0.0 <= self.headroom < 1.0:
            raise SimConfigError(f"setting 'headroom': must be in [0, 1), got {self.headroom}")
        if self.queue_cap < 1.0:
            raise SimConfigError(f"setting 'queue_cap': must be >= 1, got {self.queue_cap}")
        if self.queue_cap > MAX_QUEUE_CAP:
            raise SimConfigError(f"setting 'queue_cap': must be at most {MAX_QUEUE_CAP:g}, got {self.queue_cap}")
        # Fractions, not percents: defer_min_saving=5 never deferred, consolidate_below=50 drained every node.
        if not 0.0 <= self.defer_min_saving < 1.0:
            raise SimConfigError(f"setting 'defer_min_saving': must be in [0, 1) (a fraction of the carbon saved, "
                                 f"e.g. 0.05 for 5 %), got {self.defer_min_saving}")
        if not 0.0 <= self.consolidate_below <= 1.0:
            raise SimConfigError(f"setting 'consolidate_below': must be in [0, 1] (a node's CPU share, e.g. 0.5), "
                                 f"got {self.consolidate_below}")
        if not 0.0 <= self.batch_usage <= 1.0:
            raise SimConfigError(f"setting 'batch_usage': must be in [0, 1], got {self.batch_usage}")
        if not 0.0 <= self.usage_noise <= 2.0:
            raise SimConfigError(f"setting 'usage_noise': must be in [0, 2], got {self.usage_noise}")
        if not 0.0 < self.usage_shift_factor <= MAX_USAGE_SHIFT_FACTOR:
            raise SimConfigError(f"setting 'usage_shift_factor': must be > 0 and at most {MAX_USAGE_SHIFT_FACTOR:g}, "
                                 f"got {self.usage_shift_factor}")
        # An hour past any run (MAX_HOURS) is past the end of this one; 1e308 overflowed to inf
        # when turned into a step.
        if self.usage_shift_at_h > MAX_HOURS:
            raise SimConfigError(f"setting 'usage_shift_at_h': must be < 0 (no shift) or at most {MAX_HOURS:g} "
                                 f"(hours from the start), got {self.usage_shift_at_h}")
        if not self.usage_shift_class.strip():
            raise SimConfigError("setting 'usage_shift_class': must be a non-empty glob pattern")

    @property
    def usage_shift_on(self) -> bool:
        """Whether a usage shift is configured (a start hour >= 0 and a factor other than 1)."""
        return self.usage_shift_at_h >= 0 and self.usage_shift_factor != 1.0

    @classmethod
    def fields(cls) -> dict[str, type]:
        return {f.name: type(f.default) for f in dataclasses.fields(cls)}

    def with_settings(self, settings: Mapping[str, Any]) -> SimConfig:
        """A copy with ``settings`` (values may be command-line strings) applied."""
        known = self.fields()
        changes: dict[str, Any] = {}
        for key, value in settings.items():
            if key not in known:
                raise SimConfigError(f"unknown simulator setting {key!r} (known: {', '.join(sorted(known))})")
            changes[key] = convert_setting(key, value, known[key])
        return dataclasses.replace(self, **changes)


def convert_setting(key: str, value: Any, kind: type) -> Any:
    """A setting value of type ``kind`` from a Python value or a command-line string; a float
    must be finite (no setting or scenario parameter means anything at nan or inf, and nan
    passes every range check: ``load=nan`` built an empty surge, ``queue_cap=inf`` divided by 0)."""
    if isinstance(value, str) and kind in (bool, int, float):
        from solvers import InvalidSettingError, parse_setting  # the solvers' own text-to-type conversion

        try:
            value = parse_setting(value, kind, f"setting {key!r}")
        except InvalidSettingError as exc:
            raise SimConfigError(str(exc)) from None
    elif kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    elif not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise SimConfigError(f"setting {key!r}: expected {kind.__name__}, got {value!r}")
    if kind is float and not math.isfinite(value):
        raise SimConfigError(f"setting {key!r}: must be a finite number, got {value!r}")
    return value


@dataclass
class DecisionRequest:
    """One pod decision in agent mode (the gymnasium environment answers these)."""

    step: int
    problem: Problem  # the snapshot problem of this step
    state: ClusterState  # its state, with this step's earlier decisions applied
    local: int  # the pod's workload index in ``problem``
    pod: int  # the pod's index in the simulator
    candidates: np.ndarray  # feasible node indices of ``problem`` (all of them)


@dataclass
class SimResult:
    """Totals, time series and per-pod outcome of one run."""

    scenario: str
    solver: str
    seed: int
    totals: dict[str, Any]
    series: dict[str, list]
    config: dict[str, Any]
    timing: dict[str, float] = field(default_factory=dict)
    #: The scenario's parameters as run (defaults filled in) and the user carbon files it read
    #: (``carbon_files``: zone -> path), so that a report says which data it came from.
    scenario_params: dict[str, Any] = field(default_factory=dict)
    #: The solver's settings as run (``get_params()``, defaults filled in; {} in agent mode). Its
    #: ``seed`` is ``seed`` unless ``solver_settings`` gave another: ``seed`` seeds the scenario.
    solver_settings: dict[str, Any] = field(default_factory=dict)

    @property
    def solver_seed(self) -> Any:
        """The seed the solver ran with (``seed`` when it takes none or none was recorded)."""
        return self.solver_settings.get("seed", self.seed)

    def report(self) -> dict[str, Any]:
        """The JSON report (fixed keys first; see ``iro_fed.sim.metrics`` for definitions)."""
        return {**self.totals, "scenario": self.scenario, "solver": self.solver, "seed": self.seed,
                "solver_settings": self.solver_settings, "scenario_params": self.scenario_params,
                "config": self.config, "timing": self.timing, "series": self.series}


class Simulator:
    """One run of a scenario with one solver (or an agent answering :class:`DecisionRequest`)."""

    def __init__(self, scenario: Scenario, solver: Any = None, config: SimConfig | None = None, seed: int = 0) -> None:
        self.sc = scenario
        self.solver = solver
        self.config = config or SimConfig()
        self.seed = seed
        #: Optional observer (the feedback loop's simulator harness): ``decided(sim, t, problem,
        #: nodes, pods, placement)`` after each solver call, ``stepped(sim, t)`` after each step.
        self.listener: Any = None
        self._check_signals()
        self._build_cluster()
        self._expand_pods()
        self._build_master()
        self._setup_pod_scoring()

    # --- set-up --------------------------------------------------------------------------

    def _check_signals(self) -> None:
        """Every domain's carbon series covers the run (``history + steps`` values, finite, >= 0):
        a short series is an error here, naming the domain, not an IndexError in the middle of a
        run (and never a wrap-around or a silently extended last value)."""
        sc = self.sc
        if sc.steps < 1 or sc.history < 0 or not sc.step_s > 0:
            raise ValueError(f"scenario {sc.name!r}: steps must be >= 1, history >= 0 and step_s > 0, "
                             f"got {sc.steps}, {sc.history}, {sc.step_s}")
        need = sc.history + sc.steps
        for d in sc.domains:
            if d.name not in sc.carbon:
                raise ValueError(f"scenario {sc.name!r}: no carbon series for domain {d.name!r}")
            series = np.asarray(sc.carbon[d.name], dtype=np.float64)
            if series.ndim != 1 or series.size < need:
                raise ValueError(f"scenario {sc.name!r}: carbon series of domain {d.name!r} has {series.size} values, "
                                 f"the run needs {need} (history {sc.history} + steps {sc.steps})")
            if not np.all(np.isfinite(series[:need])) or np.any(series[:need] < 0):
                raise ValueError(f"scenario {sc.name!r}: carbon series of domain {d.name!r} must be finite and >= 0 (gCO2/kWh)")

    def _build_cluster(self) -> None:
        sc = self.sc
        names = {d.name for d in sc.domains}
        nodes, cap, gcount, idle, peak, pool_of, elastic, boot, min_on = [], [], [], [], [], [], [], [], []
        for pi, pool in enumerate(sc.pools):
            if pool.domain not in names:
                raise ValueError(f"pool {pool.name!r}: unknown domain {pool.domain!r}")
            for i in range(pool.count):
                labels = {ZONE_LABEL: pool.domain, DOMAIN_LABEL: pool.domain, "iro.example/pool": pool.name, **pool.labels}
                nodes.append(Node(f"{pool.name}-{i:03d}", pool.domain, labels, tuple(pool.taints), pool.gpu_model if pool.gpus else ""))
                cap.append([pool.cpu, pool.memory])
                gcount.append(pool.gpus)
                idle.append(pool.power_idle_w)
                peak.append(pool.power_peak_w)
                pool_of.append(pi)
                elastic.append(pool.elastic)
                boot.append(pool.boot_steps)
                min_on.append(pool.min_on)
        self.nodes = nodes
        self.capacity = np.array(cap, dtype=np.float64).reshape(len(nodes), 2)
        self.gpu_count = np.array(gcount, dtype=np.int32)
        width = int(self.gpu_count.max()) if len(nodes) else 0
        self.gpu_free0 = np.full((len(nodes), width), -1, dtype=np.int32)
        for i, g in enumerate(gcount):
            self.gpu_free0[i, :g] = GPU_MILLI
        self.power_idle = np.array(idle, dtype=np.float64)
        self.power_peak = np.array(peak, dtype=np.float64)
        self.pool_of = np.array(pool_of, dtype=np.int64)
        self.elastic = np.array(elastic, dtype=bool)
        self.boot_steps = np.array(boot, dtype=np.int64)
        self.pool_min_on = np.array([p.min_on for p in sc.pools], dtype=np.int64)
        self.domain_index = {d.name: i for i, d in enumerate(sc.domains)}
        self.node_domain = np.array([self.domain_index[n.domain] for n in nodes], dtype=np.int64)
        self.domain_is_cloud = np.array([d.kind == "cloud" for d in sc.domains], dtype=bool)

    def _expand_pods(self) -> None:
        """Service replicas (from the horizontal autoscaler) and the scenario's pods as arrays."""
        sc, cfg = self.sc, self.config
        T = sc.steps
        rows: list[dict[str, Any]] = []
        for si, svc in enumerate(sc.services):
            traffic = np.asarray(svc.traffic, dtype=np.float64)
            if traffic.shape != (T,):
                raise ValueError(f"service {svc.name!r}: traffic has shape {traffic.shape}, expected ({T},)")
            want = np.ceil(traffic / (svc.mu * svc.target_rho) - 1e-9).astype(np.int64)
            want = np.clip(want, svc.min_replicas, svc.max_replicas)
            # Both at most the run's steps: a longer window or delay acts as one of the whole run
            # (a window of T covers every earlier step, a delay of T never applies a change), and
            # the arrays below are that long (10**30 was "Maximum allowed dimension exceeded").
            win = max(min(cfg.hpa_stabilization_steps, T), 1)
            padded = np.concatenate([np.full(win - 1, want[0]), want])
            stab = np.lib.stride_tricks.sliding_window_view(padded, win).max(axis=1)
            d = min(cfg.hpa_delay_steps, T)
            desired = np.concatenate([np.full(d, stab[0]), stab[: T - d]]) if d else stab
            desired[: d + 1] = max(int(want[0]), svc.min_replicas)
            for j in range(int(desired.max())):
                alive = np.concatenate([[False], desired > j, [False]]).astype(np.int8)
                edges = np.diff(alive)
                starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
                for k, (a, b) in enumerate(zip(starts, ends, strict=True)):
                    rows.append({
                        "name": f"{svc.name}-r{j}" + (f"-{k}" if k else ""), "klass": "online", "cpu": svc.cpu, "memory": svc.memory,
                        "arrival": int(a), "departure": int(b) if b < T else -1, "duration": -1, "deadline": -1, "service": si,
                        "gpu_count": svc.gpu_count, "gpu_milli": svc.gpu_milli, "gpu_models": tuple(svc.gpu_models),
                        "user_region": svc.user_region,
                        "allowed_domains": svc.allowed_domains, "tolerations": svc.tolerations, "node_selector": svc.node_selector,
                        "priority": svc.priority, "max_latency_ms": svc.max_latency_ms, "controller": svc.controller,
                    })
        for pod in sc.pods:
            if pod.arrival >= T:
                continue
            check_controller(pod.name, pod.controller)
            rows.append({**{f.name: getattr(pod, f.name) for f in dataclasses.fields(pod)}, "service": -1})
        rows.sort(key=lambda r: (r["arrival"], r["name"]))
        self.pod_rows = rows
        P = len(rows)
        self.P = P
        self.arrival = np.array([r["arrival"] for r in rows], dtype=np.int64)
        self.departure = np.array([r["departure"] for r in rows], dtype=np.int64)
        self.duration = np.array([r["duration"] for r in rows], dtype=np.int64)
        self.deadline = np.array([r["deadline"] for r in rows], dtype=np.int64)
        self.service = np.array([r["service"] for r in rows], dtype=np.int64)
        self.priority = np.array([r["priority"] for r in rows], dtype=np.int64)
        self.is_batch = np.array([r["klass"] == "batch" for r in rows], dtype=bool)
        #: Each pod's controller ownerReference, ``KIND/NAME`` ("" for a bare pod).
        self.controller = [r["controller"] for r in rows]
        self.demand = np.array([[r["cpu"], r["memory"]] for r in rows], dtype=np.float64).reshape(P, 2)
        self.wl_gpu_count = np.array([r["gpu_count"] for r in rows], dtype=np.int32)
        self.wl_gpu_milli = np.array([r["gpu_milli"] for r in rows], dtype=np.int32)
        self.workloads = [
            Workload(
                name=r["name"], klass=r["klass"], user_region=r["user_region"], max_latency_ms=r["max_latency_ms"],
                node_selector=dict(r["node_selector"]), tolerations=tuple(r["tolerations"]),
                allowed_domains=tuple(r["allowed_domains"]), priority=int(r["priority"]),
                gpu_models=tuple(r["gpu_models"]),
                deadline_s=(r["deadline"] * sc.step_s if r["deadline"] >= 0 else None),
            )
            for r in rows
        ]
        # Service parameters as arrays for the service model.
        S = len(sc.services)
        self.traffic = np.array([s.traffic for s in sc.services], dtype=np.float64).reshape(S, T)
        self.svc_mu = np.array([s.mu for s in sc.services], dtype=np.float64)
        self.svc_ms = np.array([s.service_ms for s in sc.services], dtype=np.float64)
        self.svc_sla = np.array([s.sla_ms for s in sc.services], dtype=np.float64)
        region_index = {r: i for i, r in enumerate(sc.regions)}
        self.svc_region = np.array([region_index[s.user_region] for s in sc.services], dtype=np.int64)
        # The request model times each request from its users' region to its replica's domain: an
        # unknown latency there (NaN, an empty latency-matrix cell) has no time to give. A
        # service's max_latency_ms keeps its replicas out of such domains (feasibility reads NaN
        # as too far), as its allowed_domains do.
        for si, svc in enumerate(sc.services):
            reach = [self.domain_index[d] for d in svc.allowed_domains if d in self.domain_index] or range(len(sc.domains))
            unknown = [sc.domains[j].name for j in reach if np.isnan(sc.latency_ms[self.svc_region[si], j])]
            if unknown and svc.max_latency_ms is None:
                raise SimConfigError(
                    f"service {svc.name!r}: the latency from user region {svc.user_region!r} to domain(s) "
                    f"{', '.join(unknown)} is unknown (NaN: an empty latency-matrix cell); the request model "
                    "needs it wherever a replica may run: fill it in, or set the service's max_latency_ms or allowed_domains"
                )
        # Actual vs requested CPU: a pod's usage class, its own usage factor, the shifted classes.
        self.usage_class = [sc.services[r["service"]].name if r["service"] >= 0 else r["klass"] for r in rows]
        self.usage_factor = np.ones(P)
        if cfg.usage_noise > 0:
            rng = np.random.default_rng([self.seed, 0x05A6E])  # its own stream: other draws stay the same
            self.usage_factor = rng.lognormal(-0.5 * cfg.usage_noise ** 2, cfg.usage_noise, P)
        self.usage_shift_step = -1
        if cfg.usage_shift_on:
            import fnmatch

            self.usage_shift_step = int(math.ceil(cfg.usage_shift_at_h * 3600.0 / sc.step_s - 1e-9))
            shifted = np.array([fnmatch.fnmatchcase(c, cfg.usage_shift_class) for c in self.usage_class], dtype=bool)
            self.usage_shifted = shifted
            # Refused rather than run: a shift that changes no pod (a glob in the wrong case, an
            # hour past the end) gave a run whose report still claimed the shift.
            if not shifted.any():
                known = sorted(set(self.usage_class))
                more = f", ... ({len(known)} in all)" if len(known) > 20 else ""
                raise SimConfigError(f"setting 'usage_shift_class': {cfg.usage_shift_class!r} matches no usage class "
                                     f"(known: {', '.join(known[:20])}{more}; the glob is case-sensitive)")
            if self.usage_shift_step >= sc.steps:
                raise SimConfigError(f"setting 'usage_shift_at_h': {cfg.usage_shift_at_h:g} is at or past the run's "
                                     f"end ({sc.steps * sc.step_s / 3600.0:g} h): no step would be shifted")

    def _domains_at(self, t: int) -> list[Domain]:
        c = self.sc.carbon_now(t)
        return [dataclasses.replace(d, carbon_intensity=float(c[i])) for i, d in enumerate(self.sc.domains)]

    def _build_master(self) -> None:
        sc = self.sc
        self.master = Problem(
            resources=sc.resources, domains=self._domains_at(0), nodes=self.nodes, workloads=self.workloads,
            regions=sc.regions, latency_ms=sc.latency_ms, capacity=self.capacity,
            allocated=np.zeros_like(self.capacity), demand=self.demand, gpu_free=self.gpu_free0,
            gpu_count=self.gpu_count, wl_gpu_count=self.wl_gpu_count, wl_gpu_milli=self.wl_gpu_milli,
            power_idle_w=self.power_idle, power_peak_w=self.power_peak, weights=sc.weights,
        )

    def _setup_pod_scoring(self) -> None:
        """Per pod its system default spreading group (-1: none) and per node its domain id of each
        :data:`iro_fed.model.SYSTEM_DEFAULT_SPREAD` key, when the solver reads ``Problem.pod_scoring`` (only
        kube-default, or a composite around it: the Kubernetes adapters' test); otherwise nothing
        is built and the snapshots carry none (no cost for the other solvers)."""
        self.spread_group: np.ndarray | None = None
        if self.solver is None:
            return
        from solvers import reads_pod_scoring

        if not reads_pod_scoring(self.solver):
            return
        # The snapshot's rule: a pod a ReplicaSet, StatefulSet or ReplicationController controls
        # (not a Job) is spread with the others of its controller.
        owners: dict[str, int] = {}
        group = np.full(self.P, -1, dtype=np.int64)
        for p, ref in enumerate(self.controller):
            kind, _, name = ref.partition("/")
            if kind in SPREAD_CONTROLLER_KINDS and name:
                group[p] = owners.setdefault(ref, len(owners))
        self.spread_group = group
        self.spread_count = len(owners)
        self.spread_keys = tuple(key for key, _ in SYSTEM_DEFAULT_SPREAD)
        self.spread_skews = tuple(skew for _, skew in SYSTEM_DEFAULT_SPREAD)
        # A node's domain of each key (-1: it lacks the label); every node is its own hostname.
        rows = np.full((len(self.spread_keys), len(self.nodes)), -1, dtype=np.int32)
        for k, key in enumerate(self.spread_keys):
            ids: dict[str, int] = {}
            for i, node in enumerate(self.nodes):
                value = node.name if key == HOSTNAME_KEY else node.labels.get(key)
                if value is not None:
                    rows[k, i] = ids.setdefault(value, len(ids))
        self.spread_rows = rows

    def _pod_scoring(self, pods: np.ndarray, avail: np.ndarray) -> PodScoring | None:
        """``Problem.pod_scoring`` of a snapshot of ``pods`` on the nodes ``avail``: the system
        default spreading (ScheduleAnyway, hostname and zone) of each pod with a spreading group,
        that group's running pods per node as its counts; None when no pod has a group (as the
        Kubernetes snapshot). Nodes are not left out by the pods' node selectors (nodeAffinityPolicy
        Honor): a group's pods share their filters, so its pods and candidates are on matching
        nodes only, and the scores come out the same."""
        if self.spread_group is None:
            return None
        group = self.spread_group[pods]
        wanted = np.unique(group[group >= 0])
        if wanted.size == 0:
            return None
        G, N = int(wanted.size), len(self.nodes)
        local = np.full(self.spread_count, -1, dtype=np.int64)
        local[wanted] = np.arange(G)
        st = self.state
        placed = np.flatnonzero(st.assignment >= 0)
        placed_group = self.spread_group[placed]
        g = local[np.maximum(placed_group, 0)]
        keep = (placed_group >= 0) & (g >= 0)
        counts = np.bincount(g[keep] * N + st.assignment[placed[keep]], minlength=G * N).reshape(G, N)[:, avail]
        mine = np.where(group >= 0, local[np.maximum(group, 0)], -1)
        members = mine[None, :] == np.arange(G)[:, None]
        spread = [tuple(SoftPodTerm("default_spread", g, k, skew) for k, skew in enumerate(self.spread_skews)) for g in range(G)]
        terms = tuple(() if gw < 0 else spread[gw] for gw in mine.tolist())
        return PodScoring(self.spread_keys, self.spread_rows[:, avail], tuple(f"owner-{i}" for i in range(G)),
                          counts.astype(np.int32), members, terms)

    # --- run -----------------------------------------------------------------------------

    def run(self, progress: Callable[[int, int], None] | None = None) -> SimResult:
        """Run to the end with the solver; ``progress(step, steps)`` is called every step."""
        if self.solver is None:
            raise ValueError("Simulator.run needs a solver (agent mode is driven through iterate())")
        for _ in self.iterate(progress=progress):
            raise RuntimeError("unexpected decision request in solver mode")
        return self.result()

    def iterate(
        self, agent: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> Generator[DecisionRequest, int, None]:
        """The step loop as a generator. In agent mode it yields a :class:`DecisionRequest` per
        pod that has a feasible node and expects the chosen node of the snapshot problem back
        (``send``); -1 leaves the pod pending (it is offered again in the next step)."""
        self._reset_state()
        sc = self.sc
        for t in range(sc.steps):
            self.t = t
            self._boot_done(t)
            self._departures(t)
            self._arrivals(t)
            if agent:
                yield from self._decide_agent(t)
            else:
                self._decide_solver(t)
            if self.config.preemption:
                self._preempt(t)
            if not agent and self.config.make_room:
                self._make_room(t)
            if not agent and cfg_consolidate(self.config, t):
                self._consolidate(t)
            self._autoscale(t)
            self._measure(t)
            if self.listener is not None:
                self.listener.stepped(self, t)
            self._batch_progress(t)
            if progress is not None:
                progress(t + 1, sc.steps)

    def _reset_state(self) -> None:
        self.state = ClusterState(self.master)
        P, N = self.P, len(self.nodes)
        self.status = np.full(P, FUTURE, dtype=np.int8)
        self.ready = np.full(P, -1, dtype=np.int64)
        self.first_placed = np.full(P, -1, dtype=np.int64)  # its wait ends here (metrics: from readiness)
        #: The step its current placement began (-1: not running): a pod evicted and run again, or
        #: moved, is a new pod to kube (a new status.startTime); preemption orders victims by it.
        self.started = np.full(P, -1, dtype=np.int64)
        self.finished = np.full(P, -1, dtype=np.int64)
        self.remaining = self.duration.copy()
        self.release = np.full(P, -1, dtype=np.int64)
        self.burst = np.zeros(P, dtype=bool)
        self.node_state = np.where(self.elastic, OFF, ON).astype(np.int8)
        for pi in np.unique(self.pool_of):
            members = np.flatnonzero(self.pool_of == pi)
            if self.elastic[members[0]]:
                self.node_state[members[: self.pool_min_on[pi]]] = ON
        self.boot_ready = np.full(N, -1, dtype=np.int64)
        self.empty_since = np.zeros(N, dtype=np.int64)
        self.rec = Recorder(self.sc.steps, self.sc.step_s)
        width = len(self.master.util_resources)
        self.rec.used_node_steps, self.rec.cap_node_steps = np.zeros(width), np.zeros(width)
        self.deferred_pods = 0
        self.new_ready: list[int] = []
        #: Agent mode: pods a decision round found no feasible node for, in order (the env drains it).
        self.unplaceable: list[int] = []
        self.capacity_freed = True
        self.boots = 0
        self.moves = 0
        self.preemptions = 0
        self._wall = time.perf_counter()

    # --- step phases ---------------------------------------------------------------------

    def _boot_done(self, t: int) -> None:
        done = (self.node_state == BOOTING) & (self.boot_ready <= t)
        if done.any():
            self.node_state[done] = ON
            self.boot_ready[done] = -1
            # The idle clock starts when a node comes on: time spent off or booting is not idle
            # time (else a node booted for headroom powered down again in the step it came on).
            self.empty_since[done] = t
            self.capacity_freed = True

    def _remove(self, p: int, t: int, status: int) -> None:
        if self.state.assignment[p] >= 0:
            self.state.remove(p)
            self.capacity_freed = True
        self.status[p] = status
        self.finished[p] = t

    def _departures(self, t: int) -> None:
        for p in np.flatnonzero((self.departure == t) & (self.status != FUTURE)):
            st = self.status[p]
            if st == RUNNING:
                self._remove(p, t, COMPLETED)
            elif st in (PENDING, DEFERRED):
                self._remove(p, t, DROPPED)
        # Pods that arrive and leave in the same step never become ready.
        gone = (self.departure == t) & (self.status == FUTURE) & (self.arrival <= t)
        self.status[gone] = DROPPED

    def _arrivals(self, t: int) -> None:
        arriving = np.flatnonzero((self.arrival == t) & (self.status == FUTURE))
        for p in arriving:
            start = self._deferral_start(p, t) if self.is_batch[p] and self.deadline[p] >= 0 else t
            if start > t:
                self.status[p] = DEFERRED
                self.release[p] = start
                self.deferred_pods += 1
            else:
                self._make_ready(p, t)
        for p in np.flatnonzero((self.status == DEFERRED) & (self.release == t)):
            self._make_ready(p, t)

    def _make_ready(self, p: int, t: int) -> None:
        self.status[p] = PENDING
        self.ready[p] = t
        self.new_ready.append(int(p))

    def _static_mask(self, p: int) -> np.ndarray:
        return static_filter(self.master, int(p)).mask

    def _deferral_start(self, p: int, t: int) -> int:
        cfg, sc = self.config, self.sc
        if cfg.deferral != "carbon":
            return t
        dur = int(self.duration[p])
        slack = int(self.deadline[p]) - t - dur - cfg.defer_margin_steps
        if slack < cfg.min_defer_slack_steps:
            return t
        mask = self._static_mask(p)
        doms = self.node_domain[mask]
        if doms.size == 0:
            return t
        weight = np.bincount(doms, minlength=len(sc.domains)).astype(np.float64)
        steps_per_day = int(round(86400 / sc.step_s))
        # A job of duration 0 still runs one step (it completes after its first): the window is
        # at least 1 step and the horizon covers the last start's whole window (with slack + dur
        # the last start's window was empty, mean 0, and such a job was always held to the end).
        window = max(dur, 1)
        horizon = slack + window
        fc = np.zeros(horizon)
        for d in np.flatnonzero(weight):
            series = sc.carbon[sc.domains[d].name]
            fc += weight[d] * persistence_forecast(series, sc.history + t, horizon, steps_per_day)
        fc /= weight.sum()
        csum = np.concatenate([[0.0], np.cumsum(fc)])
        starts = np.arange(slack + 1)
        means = (csum[np.minimum(starts + window, horizon)] - csum[starts]) / np.maximum(np.minimum(starts + window, horizon) - starts, 1)
        best = int(np.argmin(means))
        if means[best] > means[0] * (1 - cfg.defer_min_saving):
            return t
        return t + best

    def _pending_order(self, pods: np.ndarray) -> np.ndarray:
        order = np.lexsort((pods, self.ready[pods], -self.priority[pods]))
        return pods[order]

    def _to_decide(self) -> np.ndarray:
        """Pending pods worth a decision now: all of them when capacity was freed since the last
        try, else only the pods that became ready since (the others still fit nowhere)."""
        if self.capacity_freed:
            pods = np.flatnonzero(self.status == PENDING)
        else:
            pods = np.array([p for p in self.new_ready if self.status[p] == PENDING], dtype=np.int64)
        self.new_ready = []
        self.capacity_freed = False
        return self._pending_order(pods) if pods.size else pods

    def _snapshot(self, t: int, pods: np.ndarray) -> tuple[Problem, np.ndarray]:
        """The scheduler's view: powered-on nodes with their usage, the pods to place."""
        avail = np.flatnonzero(self.node_state == ON)
        width = int(self.gpu_count[avail].max()) if avail.size else 0
        st = self.state
        sub = self.master.replace(
            domains=self._domains_at(t), nodes=[self.nodes[i] for i in avail], capacity=self.capacity[avail],
            allocated=st.allocated[avail], gpu_free=st.gpu_free[avail][:, :width], gpu_count=self.gpu_count[avail],
            power_idle_w=self.power_idle[avail], power_peak_w=self.power_peak[avail],
            workloads=[self.workloads[p] for p in pods], demand=self.demand[pods],
            wl_gpu_count=self.wl_gpu_count[pods], wl_gpu_milli=self.wl_gpu_milli[pods],
            pod_scoring=self._pod_scoring(pods, avail),
        )
        return sub, avail

    def _fits(self, p: int, n: int, cards: tuple[int, ...]) -> bool:
        """The live cluster can take pod p on node n with these cards (never an overrun)."""
        if self.node_state[n] != ON or not self._static_mask(p)[n]:
            return False
        if not resource_fit(self.state, p, np.array([n]))[0]:
            return False
        k = int(self.wl_gpu_count[p])
        if k == 0:
            return not cards
        row = self.state.gpu_free[n]
        if len(cards) != k or len(set(cards)) != k or any(c < 0 or c >= self.gpu_count[n] for c in cards):
            return False
        if k == 1 and self.wl_gpu_milli[p] < GPU_MILLI:
            return bool(row[cards[0]] >= self.wl_gpu_milli[p])
        return all(row[c] == GPU_MILLI for c in cards)

    def _apply(self, p: int, n: int, cards: tuple[int, ...] | None, t: int) -> bool:
        cards = tuple(cards) if cards is not None else self.state.default_cards(p, n) if self.wl_gpu_count[p] else ()
        if not self._fits(p, n, cards):
            self.rec.rejected += 1
            return False
        self.state.place(p, n, cards)
        self.status[p] = RUNNING
        self.started[p] = t
        if self.first_placed[p] < 0:
            self.first_placed[p] = t
        return True

    def _decide_solver(self, t: int) -> None:
        pods = self._to_decide()
        if pods.size == 0 or not (self.node_state == ON).any():
            return
        sub, avail = self._snapshot(t, pods)
        start = time.perf_counter()
        placement = self.solver.solve(sub)
        self.rec.solver_time_s += time.perf_counter() - start
        self.rec.solver_calls += 1
        self.rec.decisions += int(pods.size)
        for i, p in enumerate(pods):
            local = int(placement.assignment[i])
            if local >= 0:
                self._apply(int(p), int(avail[local]), placement.gpu_cards.get(i), t)
        if self.listener is not None:
            self.listener.decided(self, t, sub, avail, pods, placement)

    def _consolidate(self, t: int) -> None:
        """Drain the least-used powered node whose pods are all service replicas, when the solver
        places every one of them on the other powered nodes and the domain keeps its headroom
        (Karpenter-style consolidation; the drained node then powers down after idling)."""
        cfg, st = self.config, self.state
        on = np.flatnonzero((self.node_state == ON) & (st.pods_on_node > 0))
        if on.size < 2:
            return
        share = cpu_share(st.allocated[on, 0], self.capacity[on, 0])
        for n in on[np.argsort(share, kind="stable")]:
            if cpu_share(st.allocated[n, 0], self.capacity[n, 0]) >= cfg.consolidate_below:
                return
            pods = np.flatnonzero(st.assignment == n)
            if pods.size == 0 or (self.service[pods] < 0).any():
                continue
            d = self.node_domain[n]
            in_d = (self.node_domain == d) & (self.node_state != OFF)
            in_d[n] = False
            cap = float(self.capacity[in_d, 0].sum())
            if cap <= 0 or 1.0 - float(st.allocated[in_d, 0].sum() + st.allocated[n, 0]) / cap < cfg.headroom:
                continue
            if self._move_off(t, int(n), pods):
                return

    def _move_off(self, t: int, n: int, pods: np.ndarray) -> bool:
        """Re-place ``pods`` (running on node n) on the other powered nodes with the solver; all
        or nothing (on failure they stay on n). Returns whether they moved."""
        st = self.state
        saved = {int(p): st.gpu_cards.get(int(p)) for p in pods}
        for p in pods:
            st.remove(int(p))
        state_n = self.node_state[n]
        self.node_state[n] = OFF  # hidden from the snapshot while its pods look for a place
        order = self._pending_order(pods)
        sub, avail = self._snapshot(t, order)
        self.node_state[n] = state_n
        placement = self.solver.solve(sub)
        self.rec.solver_calls += 1
        targets = [int(avail[int(a)]) if a >= 0 else -1 for a in placement.assignment]
        ok = all(a >= 0 for a in targets)
        if ok:
            for i, p in enumerate(order):
                cards = tuple(placement.gpu_cards.get(i, ()))
                if not self._fits(int(p), targets[i], cards):
                    ok = False
                    break
                st.place(int(p), targets[i], cards)
        if not ok:
            for p in pods:
                if st.assignment[p] >= 0:
                    st.remove(int(p))
                st.place(int(p), int(n), saved[int(p)])
            return False
        self.moves += len(order)
        self.started[order] = t  # moved pods are recreated on their new nodes
        self.capacity_freed = True
        return True

    def _fits_after_removing(self, p: int, n: int, pods: np.ndarray) -> np.ndarray:
        """``fit[k]``: pod p's additive requests fit node n once ``pods[: k + 1]`` (running there)
        are taken off in that order, by resource_fit's test (``free + fit_tolerance >= demand``
        where it asks for some). What is free is summed as ClusterState.remove adds it back, one
        pod at a time (an emptied node then holds its base usage exactly), so a plan that frees
        "enough" is one the filters then accept: the old absolute 1e-9 let a 1e-9 pod "fit" a
        full 1e-6 node (no eviction; the filters refused it, pending for good)."""
        st = self.state
        free = np.cumsum(np.vstack([st.free[n][None, :], self.demand[pods]]), axis=0)[1:]
        if pods.size and pods.size == st.pods_on_node[n]:
            free[-1] = self.capacity[n] - st.base_allocated[n]
        return room_fits(free, fit_tolerance(self.master)[n], self.demand[p])

    def _gpu_fits_after_removing(self, p: int, n: int, pods: Any) -> bool:
        """Pod p's GPU request fits node n's cards once ``pods`` (running there) are taken off:
        each gives back what ClusterState.remove returns to its cards (whole cards of a k-GPU
        pod, a share's milli), integer-exact; then resource_fit's test (k whole free cards; a
        share: one card with that milli free)."""
        k, milli = int(self.wl_gpu_count[p]), int(self.wl_gpu_milli[p])
        if k == 0:
            return True
        row = self.state.gpu_free[n].copy()
        self._give_back_cards(row, pods, 1)
        return _cards_fit(row, k, milli)

    def _give_back_cards(self, row: np.ndarray, pods: Any, sign: int) -> None:
        """Add (sign 1) or take back (-1) the card usage of running ``pods`` to a copy of their node's row."""
        for v in pods:
            cards = self.state.gpu_cards.get(int(v), ())
            if cards:
                give = GPU_MILLI if self.wl_gpu_count[v] > 1 else int(self.wl_gpu_milli[v])
                row[list(cards)] += sign * give

    def _select_victims(self, p: int, n: int, lower: np.ndarray) -> np.ndarray | None:
        """DefaultPreemption's SelectVictimsOnNode: with all of ``lower`` (node n's pods of lower
        priority) gone pod p must fit, else None; then each is reprieved (put back) in order of
        importance (highest priority first, then the earlier start: util.MoreImportantPod) while
        p still fits. The rest, most important first, are the victims (never empty)."""
        if lower.size == 0:
            return None
        lower = lower[np.lexsort((lower, self.started[lower], -self.priority[lower]))]
        if not self._fits_after_removing(p, n, lower)[-1]:
            return None
        st = self.state
        k, milli = int(self.wl_gpu_count[p]), int(self.wl_gpu_milli[p])
        row = st.gpu_free[n].copy()  # (_gpu_fits_after_removing's row, kept for the reprieves)
        if k:
            self._give_back_cards(row, lower, 1)
            if not _cards_fit(row, k, milli):
                return None
        tol, need = fit_tolerance(self.master)[n], self.demand[p]
        free = self.capacity[n] - st.base_allocated[n] if lower.size == st.pods_on_node[n] else st.free[n] + self.demand[lower].sum(axis=0)
        victims = []
        for v in lower:
            left = free - self.demand[v]
            fits = bool(room_fits(left, tol, need))
            if fits and k:
                self._give_back_cards(row, [v], -1)
                fits = _cards_fit(row, k, milli)
                if not fits:
                    self._give_back_cards(row, [v], 1)
            if fits:
                free = left
            else:
                victims.append(int(v))
        chosen = np.array(victims, dtype=np.int64)
        # The reprieve sums in another order than the removals will: check the victims as
        # ClusterState.remove frees them (a float-rounding edge falls back to all of them).
        if chosen.size == 0 or not (self._fits_after_removing(p, n, chosen)[-1] and self._gpu_fits_after_removing(p, n, chosen)):
            return lower
        return chosen

    def _victims_key(self, victims: np.ndarray) -> tuple[int, int, int, int]:
        """pickOneNodeForPreemption's order (smaller is better; no PodDisruptionBudgets here):
        the lowest highest-victim priority, the smallest sum of victim priorities (each shifted
        by 2**31, as upstream, so that more negative-priority victims never sum to less), the
        fewest victims, the latest start of the highest-priority victims (upstream: their
        earliest start time, the node where it is latest). Ties: the first node."""
        prio = self.priority[victims]
        top = int(prio.max())
        earliest = int(self.started[victims[prio == top]].min())
        return top, int((prio + 2**31).sum()), int(victims.size), -earliest

    def _preempt(self, t: int) -> None:
        """kube-scheduler's preemption (DefaultPreemption's PostFilter): a pending pod that fits
        no powered node (its static filters passed) evicts pods of strictly lower priority from one
        of them: per node, all lower pods but those it can reprieve (SelectVictimsOnNode); the
        node by pickOneNodeForPreemption's order (:meth:`_victims_key`). It takes their place at
        once; evicted batch jobs restart from zero (their Job recreates them). Every pending pod
        is tried, highest priority first, as the scheduler tries each pod that fails its cycle;
        GPU pods preempt and are preempted like the others (their cards are counted exactly).
        Pods the round evicts are not tried again in it (their controller recreates them)."""
        st = self.state
        pending = np.flatnonzero(self.status == PENDING)
        if pending.size == 0:
            return
        tol = fit_tolerance(self.master)
        lower_free: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # priority -> (free with its lower pods gone, their count)
        # Pods alike in priority, filters and requests fail alike until a preemption changes the
        # cluster: one try per kind (thousands of pending pods of a few shapes cost a few tries).
        failed: set[tuple] = set()
        for p in self._pending_order(pending):
            p = int(p)
            if self.status[p] != PENDING:
                continue
            prio = int(self.priority[p])
            kind = (prio, self.workloads[p].constraint_key, int(self.wl_gpu_count[p]), int(self.wl_gpu_milli[p]), *self.demand[p].tolist())
            if kind in failed:
                continue
            if prio not in lower_free:
                lower_free[prio] = self._free_without_lower(prio)
            free, count = lower_free[prio]
            failed.add(kind)  # (taken out again below when it preempts)
            if not count.any():
                continue  # no running pod of lower priority anywhere
            cand = np.flatnonzero(self._static_mask(p) & (self.node_state == ON))
            if cand.size == 0 or resource_fit(st, p, cand).any():
                continue  # upstream's PostFilter runs only when no node fits; one fits: the solver left it pending
            # A quick bound (twice the tolerance: the sums' order differs from the exact check's).
            hopeful = cand[(count[cand] > 0) & room_fits(free[cand], 2 * tol[cand], self.demand[p])]
            best: tuple[tuple[int, int, int, int], int, np.ndarray] | None = None
            for n in hopeful:
                on_n = np.flatnonzero(st.assignment == n)
                lower = on_n[self.priority[on_n] < prio]
                victims = self._select_victims(p, int(n), lower)
                if victims is None:
                    continue
                key = self._victims_key(victims)
                if best is None or key < best[0]:
                    best = (key, int(n), victims)
            if best is None:
                continue
            _, best_node, victims = best
            for v in victims:
                st.remove(int(v))
                self.status[v] = PENDING
                self.started[v] = -1
                if self.first_placed[v] == t:
                    # Placed in this step's decisions and evicted before it ran a step: it never
                    # stopped pending, so its wait runs on to the placement that holds.
                    self.first_placed[v] = -1
                if self.duration[v] >= 0:
                    self.remaining[v] = self.duration[v]
                self.preemptions += 1
                self.new_ready.append(int(v))
            # The victims may free more than p takes: older pending pods that fit the rest must be
            # offered again next step (else they waited for an unrelated departure, or forever).
            self.capacity_freed = True
            lower_free.clear()
            failed.clear()
            self._apply(p, best_node, None, t)

    def _free_without_lower(self, prio: int) -> tuple[np.ndarray, np.ndarray]:
        """Per node: what would be free with every running pod of priority below ``prio`` gone
        (summed in any order: a bound for :meth:`_preempt`'s quick test), and how many there are."""
        st = self.state
        pods = np.flatnonzero((st.assignment >= 0) & (self.priority < prio))
        nodes = st.assignment[pods]
        N = len(self.nodes)
        freed = np.column_stack([np.bincount(nodes, weights=self.demand[pods, r], minlength=N) for r in range(self.demand.shape[1])])
        return st.free + freed, np.bincount(nodes, minlength=N)

    def _make_room(self, t: int) -> None:
        """A batch job (any pod not a service replica) that fits nowhere: move service replicas (which may
        run elsewhere, e.g. burst to the cloud) off the node where that frees enough for it.

        Not kube's DefaultPreemption (:meth:`_preempt`): nothing is evicted and priorities do not
        matter; the replicas are re-placed by the solver, all or none (:meth:`_move_off`), as a
        descheduler or a rescheduling operator would move them, and the job starts in their room.
        A GPU job is handled too: replicas hold no cards (a :class:`Service` asks for none), so a
        node qualifies only when it has the job's cards free now (resource_fit's card test, exact)
        and moving replicas frees its CPU and memory. At most the first ``MAKE_ROOM_PER_STEP``
        waiting jobs (engine order) are tried per step: each try is a solver call and each move
        churns running replicas, so a backlog of jobs is worked through a few per step rather than
        reshuffling the cluster in one."""
        st = self.state
        waiting = np.flatnonzero((self.status == PENDING) & (self.service < 0))
        if waiting.size == 0:
            return
        for p in self._pending_order(waiting)[:MAKE_ROOM_PER_STEP]:
            cand = np.flatnonzero(self._static_mask(int(p)) & (self.node_state == ON))
            fits_now = resource_fit(st, int(p), cand)
            best: tuple[int, int, np.ndarray] | None = None
            for n, fits in zip(cand, fits_now, strict=True):
                if fits or not self._gpu_fits_after_removing(int(p), int(n), ()):
                    continue  # (moving replicas frees no card: the cards must be free now)
                on_n = np.flatnonzero(st.assignment == n)
                movable = on_n[self.service[on_n] >= 0]
                if movable.size == 0:
                    continue
                movable = movable[np.argsort(-self.demand[movable, 0], kind="stable")]
                enough = np.flatnonzero(self._fits_after_removing(int(p), int(n), movable))
                if enough.size == 0:
                    continue
                k = int(enough[0]) + 1
                if best is None or k < best[0]:
                    best = (k, int(n), movable[:k])
            if best is None:
                continue
            _, n, pods = best
            if self._move_off(t, n, pods):
                self._apply(int(p), n, None, t)

    def _decide_agent(self, t: int) -> Generator[DecisionRequest, int, None]:
        pods = self._to_decide()
        if pods.size == 0:
            return
        if not (self.node_state == ON).any():
            self.unplaceable.extend(int(p) for p in pods)
            return
        sub, avail = self._snapshot(t, pods)
        sub_state = ClusterState(sub)
        for i, p in enumerate(pods):
            cand = np.flatnonzero(feasible_nodes(sub_state, i))
            if cand.size == 0:
                self.unplaceable.append(int(p))  # the env charges these to the agent's last decision
                continue
            self.rec.decisions += 1
            node = yield DecisionRequest(t, sub, sub_state, i, int(p), cand)
            if node is None or node < 0:
                # Offer it again next step: old pending pods are retried only after capacity frees
                # ("they fit nowhere"), which does not hold for a pod the agent chose to hold back.
                self.new_ready.append(int(p))
                continue
            if node not in cand:
                raise ValueError(f"agent chose node {node}, not a feasible candidate of pod {self.workloads[p].name!r}")
            cards = sub_state.place(i, int(node))
            self._apply(int(p), int(avail[node]), cards, t)

    def next_request(self, last_pod: int = -1) -> DecisionRequest | None:
        """After an agent-mode run: the decision the simulator would offer next (for a learner to
        bootstrap from): the first pending pod, in the engine's order, that fits a node of the final
        cluster, else ``last_pod`` (the latest decided pod) offered again on it; None when neither fits."""
        pods = self._pending_order(np.flatnonzero(self.status == PENDING))
        if last_pod >= 0 and last_pod not in pods:
            pods = np.append(pods, last_pod)  # a copy of it, arriving on the final cluster
        if pods.size == 0 or not (self.node_state == ON).any():
            return None
        t = self.sc.steps - 1
        sub, _ = self._snapshot(t, pods)
        state = ClusterState(sub)
        for i, p in enumerate(pods):
            cand = np.flatnonzero(feasible_nodes(state, i))
            if cand.size:
                return DecisionRequest(t, sub, state, i, int(p), cand)
        return None

    def _autoscale(self, t: int) -> None:
        cfg = self.config
        st = self.state
        N = len(self.nodes)
        if N == 0:
            return
        # Scale up for pods still pending: wake powered-down own nodes first, then cloud nodes.
        pending = np.flatnonzero(self.status == PENDING)
        off = self.node_state == OFF
        if pending.size and off.any():
            need: dict[int, np.ndarray] = {}
            empty_fit_cache: dict[tuple, int] = {}
            for p in pending[:2000]:
                key = (self.workloads[p].constraint_key, int(self.wl_gpu_count[p]), int(self.wl_gpu_milli[p]), *self.demand[p])
                pool = empty_fit_cache.get(key)
                if pool is None:
                    # What an empty node has free is its capacity: resource_fit's test there.
                    room = room_fits(self.capacity, fit_tolerance(self.master), self.demand[p])
                    fit = self._static_mask(p) & room & (self.gpu_count >= self.wl_gpu_count[p])
                    cand = np.flatnonzero(fit & (self.node_state != ON))
                    if cand.size == 0:
                        pool = -1
                    else:
                        order = np.lexsort((cand, self.elastic[cand]))
                        pool = int(self.pool_of[cand[order[0]]])
                    empty_fit_cache[key] = pool
                if pool >= 0:
                    need[pool] = need.get(pool, np.zeros(3)) + np.array([*self.demand[p], float(self.wl_gpu_count[p] * GPU_MILLI if self.wl_gpu_milli[p] >= GPU_MILLI else self.wl_gpu_milli[p])])
            for pool, dem in need.items():
                members = np.flatnonzero(self.pool_of == pool)
                spec = self.sc.pools[pool]
                caps = np.array([spec.cpu, spec.memory, spec.gpus * GPU_MILLI], dtype=np.float64)
                ratio = np.where(caps > 0, dem / np.where(caps > 0, caps, 1.0), 0.0)
                nodes_needed = int(math.ceil(ratio.max() - 1e-9))
                booting = int((self.node_state[members] == BOOTING).sum())
                candidates = members[self.node_state[members] == OFF]
                self._boot(candidates[: max(nodes_needed - booting, 0)], t)
        cpu_alloc = st.allocated[:, 0]

        def free_share(mask: np.ndarray) -> float:
            cap = float(self.capacity[mask, 0].sum())
            return 1.0 - float(cpu_alloc[mask].sum()) / cap if cap > 0 else 0.0

        # Headroom: a domain whose powered CPU is nearly taken boots more nodes (edge sites with
        # power-down, whose pods are often bound to the site; a cloud domain while it is in use).
        powered = self.node_state != OFF
        off = self.node_state == OFF
        own = ~self.domain_is_cloud[self.node_domain]
        for d in range(len(self.sc.domains)):
            in_d = self.node_domain == d
            if self.domain_is_cloud[d]:
                if not (in_d & powered).any():
                    continue
            elif not cfg.power_down or self.sc.domains[d].kind != "edge":
                continue  # own zones share the all-own-domains rule below
            # Planned releases of deferred batch jobs within a boot time count as used already.
            planned = self._planned_release(t, d)
            mask = in_d & powered
            cap = float(self.capacity[mask, 0].sum())
            deficit = cfg.headroom * cap - (cap - float(cpu_alloc[mask].sum()) - planned)
            if deficit > 0 and (in_d & off).any():
                self._boot(self._headroom_boots(deficit, np.flatnonzero(in_d & off)), t)
                powered, off = self.node_state != OFF, self.node_state == OFF
        # The same over all own data centres together (pods that may run in several of them move
        # between domains): boot in the greenest own domain that has spares right now.
        carbon_now = self.sc.carbon_now(t)
        if cfg.power_down and (own & off).any():
            mask = own & powered
            cap = float(self.capacity[mask, 0].sum())
            deficit = cfg.headroom * cap - (cap - float(cpu_alloc[mask].sum()))
            while deficit > 0 and (own & off).any():
                doms = [d for d in range(len(self.sc.domains)) if not self.domain_is_cloud[d] and ((self.node_domain == d) & off).any()]
                d = min(doms, key=lambda d: (carbon_now[d], free_share((self.node_domain == d) & powered), d))
                n = int(np.flatnonzero((self.node_domain == d) & off)[0])
                self._boot(np.array([n]), t)
                deficit -= float(self.capacity[n, 0]) * (1 - cfg.headroom)
                powered, off = self.node_state != OFF, self.node_state == OFF
        # Burst early: own data centres fully powered and short of headroom -> cloud nodes for the
        # shortfall (free powered cloud capacity, booting included, counts against it).
        if (own & powered).any() and not (own & off).any():
            mask = own & powered
            cap = float(self.capacity[mask, 0].sum())
            cloud = ~own & powered
            free = cap - float(cpu_alloc[mask].sum()) + float(self.capacity[cloud, 0].sum() - cpu_alloc[cloud].sum())
            deficit = cfg.headroom * cap - free
            cloud_off = np.flatnonzero(~own & off)
            if deficit > 0 and cloud_off.size:
                self._boot(self._headroom_boots(deficit, cloud_off), t)
                powered, off = self.node_state != OFF, self.node_state == OFF
        # Power down / deprovision nodes empty long enough, keeping the domain's headroom (a cloud
        # domain with nothing left running gives all its idle nodes back).
        empty = st.pods_on_node == 0
        self.empty_since = np.where(empty, np.where(self.empty_since < 0, t, self.empty_since), -1)
        idle_long = empty & (self.node_state == ON) & (t - self.empty_since >= cfg.idle_off_steps)
        for n in np.flatnonzero(idle_long):
            pool = self.pool_of[n]
            members = self.pool_of == pool
            if int((self.node_state[members] != OFF).sum()) <= self.pool_min_on[pool]:
                continue
            if not self.elastic[n] and not cfg.power_down:
                continue
            in_d = (self.node_domain == self.node_domain[n]) & (self.node_state != OFF)
            rest = in_d.copy()
            rest[n] = False
            if self.elastic[n] and float(cpu_alloc[in_d].sum()) == 0.0:
                pass
            elif not rest.any() or free_share(rest) < cfg.headroom:
                continue
            self.node_state[n] = OFF
            self.empty_since[n] = -1

    def _planned_release(self, t: int, d: int) -> float:
        """CPU of deferred batch jobs released within the longest boot time that may run in domain d."""
        horizon = int(self.boot_steps.max()) if self.boot_steps.size else 0
        soon = np.flatnonzero((self.status == DEFERRED) & (self.release > t) & (self.release <= t + horizon))
        total = 0.0
        for p in soon:
            mask = self._static_mask(int(p))
            doms = np.unique(self.node_domain[mask])
            if d in doms:
                total += float(self.demand[p, 0]) / max(len(doms), 1)
        return total

    def _headroom_boots(self, deficit: float, spare: np.ndarray) -> np.ndarray:
        """The spare nodes (in order) to boot for ``deficit`` CPU of headroom: as many as the
        first one's CPU takes to cover it (a pool's nodes are alike). Its CPU as it is: with
        max(cpu, 1) a node of 0.5 cores counted as 1, so half the nodes needed booted; a spare
        without CPU adds no headroom (none: nothing to boot)."""
        spare = spare[self.capacity[spare, 0] > 0]
        if spare.size == 0:
            return spare
        return spare[: max(1, int(math.ceil(deficit / float(self.capacity[spare[0], 0]))))]

    def _boot(self, nodes: np.ndarray, t: int) -> None:
        for n in nodes:
            self.node_state[n] = BOOTING
            self.boot_ready[n] = t + int(self.boot_steps[n])
            self.boots += 1

    def _score_problem(self, t: int, active: np.ndarray) -> Problem:
        return self.master.replace(
            domains=self._domains_at(t), workloads=[self.workloads[p] for p in active], demand=self.demand[active],
            wl_gpu_count=self.wl_gpu_count[active], wl_gpu_milli=self.wl_gpu_milli[active],
        )

    def _measure(self, t: int) -> None:
        cfg, sc, rec, st = self.config, self.sc, self.rec, self.state
        running = np.flatnonzero(self.status == RUNNING)
        pending = np.flatnonzero(self.status == PENDING)
        ser = rec.series
        ser["pending"][t] = pending.size
        ser["running"][t] = running.size
        # A pod bursts when it runs a step in the cloud, not when placed there: a preemption or a
        # move later in the same step may take it off before it ran.
        self.burst[running[self.domain_is_cloud[self.node_domain[st.assignment[running]]]]] = True
        ser["arrivals"][t] = int((self.arrival == t).sum())
        powered = self.node_state != OFF
        ser["powered_nodes"][t] = int(powered.sum())
        # Utilization of powered nodes (requested share, mean over resources).
        used = st.util_used()[powered].sum(axis=0)
        cap = self.master.util_capacity[powered].sum(axis=0)
        valid = cap > 0
        ser["utilization_pct"][t] = 100.0 * float((used[valid] / cap[valid]).mean()) if valid.any() else 0.0
        rec.used_node_steps += used
        rec.cap_node_steps += cap

        # Service model.
        self._serve(t, running)

        # Energy, cost and carbon of this step, every step (score_every thins out only the score):
        # the objective's per-node coefficients at this step's intensities, for every powered node
        # (booting or on); a node's power follows its CPU and GPU requests (the objective's rule),
        # an empty one draws idle.
        coef = self._node_coefficients(t)
        dyn = dynamic_utilization(self._coef_problem, st.allocated[:, self.master.cpu_index], st.gpu_used)
        cost_h = float(coef.node_cost[powered].sum())
        carbon_h = float((coef.carbon_idle[powered] + coef.carbon_dynamic[powered] * dyn[powered]).sum())
        power = float((self.power_idle[powered] + (self.power_peak[powered] - self.power_idle[powered]) * dyn[powered]).sum())
        # Objective of the step's placement.
        if t % cfg.score_every == 0 or t == sc.steps - 1:
            active = np.concatenate([running, pending])
            active.sort()
            # The scored problem depends only on the active pods and the carbon intensities (which
            # change hourly): reuse it, and its cached objective coefficients, while both stay.
            key = (active.tobytes(), self.sc.carbon_now(t).tobytes())
            if getattr(self, "_score_key", None) != key:
                self._score_key, self._score_sub = key, self._score_problem(t, active)
            self._last_score = evaluate(self._score_sub, st.assignment[active]).score
        ser["score"][t] = self._last_score
        ser["cost_per_hour"][t] = cost_h
        ser["carbon_g_per_hour"][t] = carbon_h
        ser["power_w"][t] = power
        rec.add_energy(cost_h, carbon_h, power)

    def _node_coefficients(self, t: int) -> Any:
        """The objective's per-node cost and carbon coefficients at step t's intensities (cached
        while the intensities stay; the problem holds no pods, so it is cheap to build)."""
        key = self.sc.carbon_now(t).tobytes()
        if getattr(self, "_coef_key", None) != key:
            nodes_only = self.master.replace(
                domains=self._domains_at(t), workloads=[], demand=np.zeros((0, self.demand.shape[1])),
                wl_gpu_count=np.zeros(0, dtype=np.int32), wl_gpu_milli=np.zeros(0, dtype=np.int32),
            )
            # (the problem is kept: coefficients are cached per problem, weakly)
            self._coef_key, self._coef, self._coef_problem = key, coefficients(nodes_only), nodes_only
        return self._coef

    def _serve(self, t: int, running: np.ndarray) -> None:
        cfg, sc, rec, st = self.config, self.sc, self.rec, self.state
        ser = rec.series
        S = len(sc.services)
        if S == 0:
            ser["requests_per_s"][t] = 0.0
            return
        lam_s = self.traffic[:, t]
        online = running[self.service[running] >= 0]
        svc = self.service[online]
        node = st.assignment[online]
        busy, k, lam_p, rho_p = self._busy(t, running)
        u = busy / np.where(self.capacity[:, 0] > 0, self.capacity[:, 0], 1.0)
        lat, req, _ = service_latency(
            net_ms=self.sc.latency_ms[self.svc_region[svc], self.node_domain[node]], service_ms=self.svc_ms[svc],
            rho_p=rho_p, node_util=u[node], sla_ms=self.svc_sla[svc], lam_p=lam_p, step_s=sc.step_s, queue_cap=cfg.queue_cap,
        )
        # Overloaded replicas time out their excess at the SLA; requests to services without a
        # running replica all time out.
        share = np.where(rho_p > 1.0, 1.0 / np.maximum(rho_p, 1e-12), 1.0)
        orphan = (k == 0) & (lam_s > 0)
        sla = self.svc_sla[svc]
        hist_lat = np.concatenate([lat, sla, self.svc_sla[orphan]])
        hist_req = np.concatenate([req * share, req * (1.0 - share), lam_s[orphan] * sc.step_s])
        # Failures counted where they happen (0.0 exactly when all is served): served / total of
        # two differently summed arrays read 100.00000000000001 % for a run without one failure.
        failed = float(np.where(lat <= sla, req * (1.0 - share), req).sum() + (lam_s[orphan] * sc.step_s).sum())
        rec.add_requests(hist_lat, hist_req, failed)
        if self.listener is not None:
            self.replica_latency = (online, lat)
        total = float(hist_req.sum())
        ser["requests_per_s"][t] = total / sc.step_s
        succ = success_pct(failed, total)
        ser["success_rate_pct"][t] = np.nan if succ is None else succ  # a gap in the plot, null in JSON
        p99 = weighted_percentile(hist_lat, hist_req, 99.0)
        ser["p99_latency_ms"][t] = p99 if p99 is not None else np.nan

    def _usage_multiplier(self, t: int) -> np.ndarray | None:
        """Per pod: actual CPU use over the service model's (noise and shift); None when all 1."""
        shift = self.usage_shift_step >= 0 and t >= self.usage_shift_step
        if not shift and self.config.usage_noise <= 0:
            return None
        if not shift:
            return self.usage_factor
        return np.where(self.usage_shifted, self.usage_factor * self.config.usage_shift_factor, self.usage_factor)

    def _busy(self, t: int, running: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """CPU millicores really in use per node at step t (service model), and per online replica
        of ``running`` its service's replica count, traffic and load ``(busy, k, lambda_p, rho_p)``."""
        cfg = self.config
        S = len(self.sc.services)
        online = running[self.service[running] >= 0]
        svc = self.service[online]
        k = np.bincount(svc, minlength=S)
        node = self.state.assignment[online]
        lam_p = self.traffic[svc, t] / np.maximum(k[svc], 1) if S else np.zeros(0)
        rho_p = lam_p / self.svc_mu[svc] if S else np.zeros(0)
        other = running[self.service[running] < 0]
        w_online = self.demand[online, 0] * np.minimum(rho_p, 1.0)
        w_other = self.demand[other, 0] * cfg.batch_usage
        mult = self._usage_multiplier(t)
        if mult is not None:
            w_online = w_online * mult[online]
            w_other = w_other * mult[other]
        # float64 explicitly: np.bincount of an empty array gives int64 even with weights, and the
        # += below then failed in a step where no replica ran but another pod did.
        busy = np.bincount(node, weights=w_online, minlength=len(self.nodes)).astype(np.float64)
        busy += np.bincount(self.state.assignment[other], weights=w_other, minlength=len(self.nodes))
        return busy, k, lam_p, rho_p

    def node_usage(self) -> np.ndarray:
        """CPU share really in use per node now (the service model's busy share, clipped to [0, 1])."""
        running = np.flatnonzero(self.status == RUNNING)
        busy = self._busy(self.t, running)[0]
        return np.clip(busy / np.where(self.capacity[:, 0] > 0, self.capacity[:, 0], 1.0), 0.0, 1.0)

    def _batch_progress(self, t: int) -> None:
        run_batch = np.flatnonzero((self.status == RUNNING) & (self.duration >= 0))
        if run_batch.size == 0:
            return
        self.remaining[run_batch] -= 1
        for p in run_batch[self.remaining[run_batch] <= 0]:
            self._remove(int(p), t + 1, COMPLETED)

    # --- results -------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Pods by status, and how many arrived (conservation: arrived = the sum of the rest)."""
        out = {name: int((self.status == i).sum()) for i, name in enumerate(STATUS_NAMES)}
        out["arrived"] = int(self.P - out.pop("future"))
        return out

    def result(self) -> SimResult:
        sc, rec = self.sc, self.rec
        step_min = sc.step_s / 60.0
        in_peak = sc.in_peak(np.maximum(self.ready, 0))
        # A pod never placed waited until it left (dropped) or until the end of the run.
        until = np.where((self.status == DROPPED) & (self.finished >= 0), self.finished, sc.steps)
        pend = pending_stats(self.ready, self.first_placed, in_peak, step_min, until)
        online = self.service >= 0
        pend_online = pending_stats(np.where(online, self.ready, -1), self.first_placed, in_peak, step_min, until)
        # Batch metrics over the jobs due inside the run (jobs due later are still in flight).
        # A deadline is a step boundary and the run ends at boundary ``steps`` (a job done in the
        # last step has finished = steps), so a job due exactly then is decided: it counts.
        jobs = self.is_batch & (self.duration >= 0) & (self.status != FUTURE)
        due = jobs & (((self.deadline >= 0) & (self.deadline <= sc.steps)) | ((self.deadline < 0) & (self.status == COMPLETED)))
        done = due & (self.finished >= 0) & (self.status == COMPLETED)
        late = done & (self.deadline >= 0) & (self.finished > self.deadline)
        unfinished_late = due & (self.status != COMPLETED) & (self.deadline >= 0)
        ser = rec.series
        succ = success_pct(rec.failed, rec.requests)
        peak_steps = sc.in_peak(np.arange(sc.steps))
        totals: dict[str, Any] = {
            "score": float(np.nanmean(ser["score"])),
            "pending_pct": pend["pending_pct"],
            "utilization_pct": rec.node_hour_utilization_pct(),
            "utilization_time_mean_pct": float(np.nanmean(ser["utilization_pct"])),
            "cpu_utilization_pct": 100.0 * float(rec.used_node_steps[0] / rec.cap_node_steps[0]) if rec.cap_node_steps[0] > 0 else 0.0,
            "success_rate_pct": succ,
            "p99_latency_ms": histogram_percentile(rec.latency_hist, 99.0),
            "cost": rec.cost,
            "carbon_kg": rec.carbon_g / 1000.0,
            "batch_completion_min": float(((self.finished - self.arrival)[done]).mean() * step_min) if done.any() else None,
            "deadline_misses": int(late.sum() + unfinished_late.sum()),
            "burst_pods": int(self.burst.sum()),
            "pending_at_peak_pct": pend["pending_at_peak_pct"],
            "pending_at_peak_online_pct": pend_online["pending_at_peak_pct"],
            "mean_pending_min": pend["mean_pending_min"],
            "mean_pending_placed_min": pend["mean_pending_placed_min"],
            "pending_pods": pend["pending_pods"],
            "never_placed_pods": pend["never_placed"],
            "peak_pending_max": int(np.nanmax(ser["pending"][peak_steps])) if peak_steps.any() else 0,
            "utilization_at_peak_pct": float(np.nanmean(ser["utilization_pct"][peak_steps])) if peak_steps.any() else None,
            "energy_kwh": rec.energy_wh / 1000.0,
            "requests": rec.requests,
            "failed_requests": rec.failed,
            "batch_jobs": int(due.sum()),
            "batch_completed": int(done.sum()),
            "deferred_pods": self.deferred_pods,
            "node_boots": self.boots,
            "pods_moved": self.moves,
            "preemptions": self.preemptions,
            "decisions": rec.decisions,
            "solver_calls": rec.solver_calls,
            "rejected_decisions": rec.rejected,
            "pods": self.counts(),
            "hours": sc.steps * sc.step_s / 3600.0,
        }
        series = {"t_min": [round(float(x), 3) for x in np.arange(sc.steps) * step_min]}
        for name, arr in ser.items():
            series[name] = [None if not np.isfinite(v) else round(float(v), 4) for v in arr]
        for d in sc.domains:
            series[f"carbon_intensity.{d.name}"] = [round(float(v), 2) for v in sc.carbon[d.name][sc.history: sc.history + sc.steps]]
        solver_name = getattr(self.solver, "name", "agent")
        params = dict(sc.params)
        if "carbon_files" in sc.notes:  # the zones read from the user's own files
            params["carbon_files"] = dict(sc.notes["carbon_files"])
        get_params = getattr(self.solver, "get_params", None)
        solver_settings = jsonable(get_params()) if callable(get_params) else {}
        return SimResult(sc.name, solver_name, self.seed, totals, series, dataclasses.asdict(self.config),
                         {"wall_s": time.perf_counter() - self._wall, "solver_s": rec.solver_time_s}, params,
                         solver_settings)


def _cards_fit(row: np.ndarray, k: int, milli: int) -> bool:
    """resource_fit's card test on one node's free milli per card: a share (one card, ``milli`` <
    1000) needs one card with that much free, k cards need k whole free cards."""
    if k == 1 and milli < GPU_MILLI:
        return bool(row.max(initial=-1) >= milli)
    return int((row == GPU_MILLI).sum()) >= k


def check_controller(pod: str, controller: str) -> None:
    """A pod's ``controller`` is "" or ``KIND/NAME``, else a SimConfigError naming the pod and field."""
    if controller == "":
        return
    kind, sep, name = controller.partition("/") if isinstance(controller, str) else ("", "", "")
    if sep and kind == kind.strip() != "" and name == name.strip() != "":
        return
    raise SimConfigError(f"pod {pod!r}: field 'controller' must be KIND/NAME (e.g. Job/{pod} or ReplicaSet/web) "
                         f"or empty, got {controller!r}")


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON (dicts, lists, str, finite numbers, bool, None): a solver setting of
    another type (a path, a set, an infinity) is written as its text, so that the report is always
    writable (placement.jsonable's ``as_text`` policy)."""
    return placement_jsonable(value, as_text=True)


def cpu_share(allocated: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """allocated / capacity per node, 0 where a node has no capacity (nothing can be allocated
    there): the ratio as it is below one unit (max(capacity, 1) halved a 0.5-core node's share)."""
    return np.where(capacity > 0, allocated / np.where(capacity > 0, capacity, 1.0), 0.0)


def cfg_consolidate(cfg: SimConfig, t: int) -> bool:
    """Whether step t runs a consolidation round."""
    return cfg.consolidate_every > 0 and t > 0 and t % cfg.consolidate_every == 0


def service_latency(
    net_ms: np.ndarray, service_ms: np.ndarray, rho_p: np.ndarray, node_util: np.ndarray, sla_ms: np.ndarray,
    lam_p: np.ndarray, step_s: float, queue_cap: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per replica: latency ms, requests in the step, requests served within the SLA (module doc)."""
    rho = np.minimum(np.maximum(rho_p, node_util), 1.0)
    latency = net_ms + service_ms / np.maximum(1.0 - rho, 1.0 / queue_cap)
    requests = lam_p * step_s
    share = np.where(rho_p > 1.0, 1.0 / np.maximum(rho_p, 1e-12), 1.0)
    served = np.where(latency <= sla_ms, requests * share, 0.0)
    return latency, requests, served
