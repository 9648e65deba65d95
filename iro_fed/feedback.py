"""Feedback loop: predicted vs observed outcome of every placement, drift detection, fine-tuning.

For each decision the loop records what the scheduler expected (:class:`Decision`): the change of
the objective and of each of its terms (from :func:`iro_fed.objective.evaluate`, the only
scorer), the utilization of the chosen node once the pod runs and the latency its users will
see. Later an observation arrives (the simulator's service model, metrics-server's NodeMetrics,
Prometheus through :mod:`iro_fed.metrics`) and the loop stores the error per quantity.

**Usage model** (:class:`UsageModel`). Pods rarely use what they request, and each kind of pod
differs (a web replica at 60 % load, a batch job at 85 %). The predicted CPU utilization of a
node is ``min(sum_c factor_c * requested_c / capacity, 1)`` over workload classes ``c`` (a
service, a priority class, ``batch``: the caller names them). The factors are fitted by
non-negative least squares (:func:`nnls`, Lawson-Hanson) over a sliding window of observations,
with a pull towards the previous factors worth ``prior_samples`` typical observations per
class, so that a refit on a few recent observations, or classes the window cannot tell apart
(always on the same nodes), keep their values rather than trade them; a one-class model has
no pull. Observations of saturated nodes (``>= saturated``) are left
out of the fit when the measurement is capped (``saturated``, ``max_util``; the simulator's is,
metrics-server's usage over allocatable CPU is not): a node at 100 % says nothing about how
much more its pods would use.
Expected latency = the objective's network latency to the user region + a per-class offset
(queueing and service time), the mean excess observed over the window.

**Drift detection** (:class:`DriftDetector`, one per tracked quantity). An exponentially
weighted moving average of the absolute error (weight ``alpha`` on the newest). Below the calm
band (``calm`` x ``threshold``) the loop is calm and refits the model on the window every
``refit_every`` node observations (latency readings do not count; slow drift is absorbed
there, not alarmed; after a fine-tune only the experience since its drift began enters these
fits, latency readings by their own count). Leaving the band marks
where the *recent experience* begins (at most the EWMA's span, ``2 / alpha`` observations, back).
When the moving error passes ``threshold`` with at least ``min_samples`` observations since then,
one fine-tune fires, then the detector is disarmed:
it re-arms only when the error has stayed in the calm band for ``min_samples`` observations in a
row (one dip of a noisy error is not calm) or after the cooldown, so a shift triggers one
fine-tune, not a storm. A fine-tune that did not help (the moving error did not then stay at or
below the threshold for ``cooldown`` observations in a row) doubles the cooldown of the next one,
up to ``2 ** 10`` x, and until the error settles only the cooldown re-arms: an offset the model
cannot represent (a node's base load that does not scale with requests) gives a few fine-tunes,
ever rarer, not one per cooldown (or per lucky calm dip) forever. During the cooldown the model keeps refitting on the growing post-drift
experience (every ``settle_every`` node observations; once ``min_samples`` came after the trigger,
on those only), part of the same fine-tune. The first
``calibration`` observations fit the initial model and are not judged (a calibration is
recorded separately, it is not a drift); so are observations of a node that holds a class
never fitted yet (a new kind of pod): after ``min_samples`` of them the class is calibrated.

**Fine-tuning** on a trigger: the usage model is always refitted on the recent experience, then
each pluggable action runs (:class:`DQNFineTune`: local DQN training on recent simulator
experience from the current policy, published atomically to a policy registry;
:class:`FederatedRoundRequest`: a request file for a federated round in the registry folder;
any callable ``action(loop, trigger) -> str``). Every trigger is recorded (:class:`Trigger`:
time, moving error, threshold, samples, factors before and after, the actions and their
results, the error right after and at the end of the cooldown).

Prometheus metrics (``prometheus_client`` imported lazily, when a registry is given):
``iro_feedback_error{quantity}``, ``iro_feedback_threshold{quantity}``,
``iro_feedback_observations_total``, ``iro_feedback_drift_total``,
``iro_feedback_calibrations_total``, ``iro_feedback_usage_factor{workload_class}``.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from iro_fed.problem_io import _finite

log = logging.getLogger("iro_fed.feedback")

DEFAULT_CLASS = "default"
QUANTITIES = ("utilization", "latency_ms")
#: Nodes whose per-node state (latest decision, decisions waiting for a measurement, the last
#: observation's basis) the loop keeps by default: 2.5 x the largest cluster the design targets
#: (20,000 nodes), so every live node is kept while the names of nodes long gone (autoscaling,
#: renames) no longer pile up in a long-running scheduler. The least recently seen go first.
DEFAULT_MAX_NODES = 50_000


# --- non-negative least squares ---------------------------------------------------------------


def nnls(a: np.ndarray, b: np.ndarray, tol: float | None = None, max_iter: int | None = None) -> np.ndarray:
    """``argmin ||a x - b||`` subject to ``x >= 0`` (Lawson and Hanson's active-set method).

    Exact for the small systems the usage model solves (a few dozen classes); raises
    ``ValueError`` on shapes that do not match or non-finite input.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"nnls: a is {a.shape}, b is {b.shape}: need a[m, n] and b[m]")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("nnls: a and b must be finite")
    m, n = a.shape
    x = np.zeros(n)
    if n == 0 or m == 0:
        return x
    tol = 10 * np.finfo(float).eps * np.linalg.norm(a, 1) * max(m, n) if tol is None else tol
    max_iter = 3 * n + 30 if max_iter is None else max_iter
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    for _ in range(max_iter):
        if passive.all() or (w[~passive] <= tol).all():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > tol).all():
                x = z
                break
            # Step back towards x until a passive variable hits zero, and drop it.
            neg = passive & (z <= tol)
            alpha = float(np.min(x[neg] / np.maximum(x[neg] - z[neg], 1e-300)))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
            if not passive.any():
                break
        w = a.T @ (b - a @ x)
    return np.maximum(x, 0.0)


# --- the usage model --------------------------------------------------------------------------


@dataclass
class Sample:
    """One observation of a node: its CPU requests by workload class, capacity, measured share."""

    index: int
    requests: dict[str, float]
    capacity: float
    observed: float


def _as_requests(requests: Mapping[str, float] | float) -> dict[str, float]:
    if isinstance(requests, Mapping):
        return {str(k): float(v) for k, v in requests.items() if float(v) != 0.0}
    return {DEFAULT_CLASS: float(requests)} if float(requests) else {}


def _amount(value: Any, what: str) -> float:
    """``value`` as a finite float >= 0, else a ValueError naming ``what``. One NaN capacity or
    request would make the moving error NaN for good (NaN is never above the threshold: no
    fine-tune again) or make every refit of the window raise, so it is refused before anything
    is recorded."""
    if not _is_finite_number(value) or value < 0:
        raise ValueError(f"{what}: expected a finite number >= 0, got {value!r}")
    return float(value)


def _is_finite_number(value: Any) -> bool:
    """An int, float or numpy scalar (np.float32 included), finite and not a bool (an int too
    large for a float is not: math.isfinite raised OverflowError instead of the named error)."""
    number = not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)
    return number and _finite(value)


def _time(at: Any) -> float | None:
    """``at`` (seconds by the loop's clock) as a float, None left as None; anything but a finite
    number is a ValueError naming ``at``. A NaN time dropped every decision waiting on the node
    (none is made at or before NaN, none after it); a string one made each later observation of
    the node raise TypeError."""
    if at is None:
        return None
    if not _is_finite_number(at):
        raise ValueError(f"at: expected a finite time in seconds, got {at!r}")
    return float(at)


def _checked_requests(requests: Mapping[str, float] | float) -> dict[str, float]:
    """:func:`_as_requests` of input that must be finite millicores >= 0 (ValueError names the class)."""
    if isinstance(requests, Mapping):
        return _as_requests({k: _amount(v, f"requests[{str(k)!r}]") for k, v in requests.items()})
    return _as_requests(_amount(requests, "requests"))


@dataclass
class UsageModel:
    """Node CPU utilization = ``min(sum_c factor_c * requested_c / capacity, max_util)``.

    ``factors`` per workload class (``default_factor`` for a class not fitted yet);
    ``latency_offset_ms`` per class: observed latency minus the network latency.
    """

    factors: dict[str, float] = field(default_factory=dict)
    default_factor: float = 1.0
    prior_samples: float = 2.0  # pull towards the previous factors, worth this many typical observations per class
    saturated: float = math.inf  # observations at or above this share are left out of fits
    max_util: float = math.inf  # predictions are capped here (1.0 where measurements are capped, as in the simulator)
    latency_offset_ms: dict[str, float] = field(default_factory=dict)

    @property
    def factor(self) -> float:
        """The single factor of a one-class model (the mean factor of a multi-class one)."""
        return _mean_factor(self.factors) if self.factors else self.default_factor

    def factor_of(self, klass: str) -> float:
        return self.factors.get(klass, self.default_factor)

    def predict(self, requests: Mapping[str, float] | float, capacity: float) -> float:
        """Predicted CPU share of a node with these requests (millicores by class) of ``capacity``."""
        if capacity <= 0:
            return 0.0
        req = _as_requests(requests)
        used = sum(self.factor_of(c) * r for c, r in req.items())
        return min(used / capacity, self.max_util)

    def predict_latency(self, klass: str, network_ms: float | None) -> float | None:
        """Expected latency: the network latency plus the class's learned offset."""
        if network_ms is None or not math.isfinite(network_ms):
            return None
        return float(network_ms) + self.latency_offset_ms.get(klass, 0.0)

    def fit(self, samples: Iterable[Sample | tuple[Any, float, float]],
            typical: Iterable[Sample | tuple[Any, float, float]] | None = None) -> dict[str, float]:
        """Refit the factors of the classes present in ``samples`` by NNLS; returns the factors.

        A sample is a :class:`Sample` or ``(requests, capacity, observed)`` with ``requests`` a
        number (one class) or a mapping class -> millicores. ``typical``: the observations whose
        mean squared share of each class sizes the pull towards the previous factors (the loop
        passes its whole window; default: ``samples``).
        """
        rows = [_as_sample(s) for s in samples]
        rows = [s for s in rows if s.capacity > 0 and s.requests and s.observed < self.saturated]
        if not rows:
            return dict(self.factors)
        classes = sorted({c for s in rows for c in s.requests})
        col = {c: j for j, c in enumerate(classes)}
        x = np.zeros((len(rows), len(classes)))
        y = np.array([s.observed for s in rows], dtype=np.float64)
        for i, s in enumerate(rows):
            for c, r in s.requests.items():
                x[i, col[c]] = r / s.capacity
        prior = np.array([self.factor_of(c) for c in classes])
        # The pull towards the previous factors (of classes fitted before) only matters when
        # classes can be confused.
        known = np.array([c in self.factors for c in classes], dtype=np.float64)
        weight = np.sqrt(self.prior_samples * known * _typical(x, col, typical)) if len(classes) > 1 else np.zeros(1)
        a = np.vstack([x, np.diag(weight)])
        b = np.concatenate([y, weight * prior])
        f = nnls(a, b)
        for c, j in col.items():
            if (x[:, j] > 0).any():
                self.factors[c] = float(f[j])
        return dict(self.factors)

    def fit_latency(self, samples: Iterable[tuple[str, float, float]]) -> dict[str, float]:
        """Per class: the mean of observed minus network latency over ``(class, network, observed)``."""
        by: dict[str, list[float]] = {}
        for klass, net, obs in samples:
            by.setdefault(klass, []).append(obs - net)
        for klass, diffs in by.items():
            self.latency_offset_ms[klass] = float(np.mean(diffs))
        return dict(self.latency_offset_ms)

    def copy(self) -> UsageModel:
        return replace(self, factors=dict(self.factors), latency_offset_ms=dict(self.latency_offset_ms))


def _newest(decisions: Sequence[Decision]) -> Decision:
    """The decision made last by its time ``at`` (of equal times, the one recorded last): one
    recorded late with an older time (a bind worker that finished after another) is not what the
    node holds now."""
    return max(reversed(decisions), key=lambda d: d.at)


def _as_sample(s: Sample | tuple[Any, float, float]) -> Sample:
    return s if isinstance(s, Sample) else Sample(-1, _as_requests(s[0]), float(s[1]), float(s[2]))


def _typical(x: np.ndarray, col: Mapping[str, int], typical: Iterable[Any] | None) -> np.ndarray:
    """Per class of ``col``: the mean squared share (request / capacity) over the observations
    where it runs, of ``typical`` (else of the fit's own rows ``x``). From the fit's rows alone, a
    class on one lightly loaded node among the recent ones got a pull worth almost nothing and
    its factor collapsed (edge-iot's ingest-edge-oslo 0.50 -> 0.13 while its use rose 1.6 x)."""
    if typical is None:
        return (x * x).sum(axis=0) / np.maximum((x > 0).sum(axis=0), 1)
    total, count = np.zeros(len(col)), np.zeros(len(col))
    for s in map(_as_sample, typical):
        if s.capacity <= 0:
            continue
        for c, r in s.requests.items():
            j = col.get(c)
            if j is not None and r > 0:
                total[j] += (r / s.capacity) ** 2
                count[j] += 1
    # A class absent from ``typical`` keeps the pull its own rows give.
    own = (x * x).sum(axis=0) / np.maximum((x > 0).sum(axis=0), 1)
    return np.where(count > 0, total / np.maximum(count, 1), own)


# --- decisions, triggers, configuration -------------------------------------------------------


@dataclass
class Decision:
    """One placement: what was expected when it was made, and what was seen later."""

    key: str  # the pod
    node: str
    klass: str  # the pod's workload class
    requests: dict[str, float]  # CPU requests (millicores) by class on the node with the pod
    capacity: float  # the node's CPU (millicores)
    predicted_util: float
    at: float = field(default_factory=time.time)
    delta_r: float | None = None  # change of R, and of each weighted term, from iro_fed.objective
    terms: dict[str, float] = field(default_factory=dict)
    network_latency_ms: float | None = None
    expected_latency_ms: float | None = None
    observed_util: float | None = None
    observed_latency_ms: float | None = None
    observed_at: float | None = None
    errors: dict[str, float] = field(default_factory=dict)  # observed - predicted, per quantity
    calibrated: bool = True  # whether the usage model knew every class on the node when it was made

    @property
    def requested_cpu(self) -> float:
        return float(sum(self.requests.values()))

    @property
    def capacity_cpu(self) -> float:
        return self.capacity

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in out.items():
            if isinstance(v, float):
                out[k] = round(v, 6)
        return out


#: Older name of :class:`Decision` (``iro_fed.k8s.feedback`` used it).
Prediction = Decision


@dataclass
class Trigger:
    """One fine-tune (or the initial calibration) of the loop and what it did."""

    kind: str  # "fine-tune" or "calibration"
    at: float
    observation: int  # the loop's observation count when it fired
    quantity: str
    moving_error: float
    threshold: float
    samples: int  # observations the refit used (the recent experience; a latency trigger: latency samples)
    factors_before: dict[str, float]
    factors_after: dict[str, float]
    error_after: float  # mean absolute error of the refitted model on those samples (a latency trigger: ms)
    actions: list[str] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)
    settled_error: float | None = None  # moving error of ``quantity`` at the end of the cooldown
    settle_refits: int = 0

    @property
    def factor_before(self) -> float:
        return _mean_factor(self.factors_before)

    @property
    def factor_after(self) -> float:
        return _mean_factor(self.factors_after)

    @property
    def action(self) -> str:
        return ", ".join(["refit usage model", *self.actions])

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: Older name of :class:`Trigger`.
DriftSignal = Trigger


def _mean_factor(factors: Mapping[str, float]) -> float:
    return float(np.mean(list(factors.values()))) if factors else 1.0


@dataclass(frozen=True)
class FeedbackConfig:
    """Settings of the loop (see the module docstring for how they work together)."""

    threshold: float = 0.1  # moving absolute error of node CPU share that triggers a fine-tune
    alpha: float = 0.3  # EWMA weight of the newest error
    calm: float = 0.5  # calm band = calm x threshold
    min_samples: int = 5  # observations since leaving the calm band before a trigger may fire
    window: int = 200  # sliding window of observations the model is fitted on
    calibration: int | None = None  # first observations that fit the initial model (None: min_samples; 0: none)
    refit_every: int = 0  # while calm, refit on the window every this many node observations (0: never)
    cooldown: int = 50  # observations after a trigger before the detector re-arms by itself
    settle_every: int = 10  # in a cooldown, refit on post-drift experience every this many node observations (0: never)
    latency_threshold_ms: float | None = None  # a second trigger on the latency error (None: tracked only)
    latency_alpha: float | None = None  # EWMA weight for latency (None: alpha)

    def __post_init__(self) -> None:
        # Numbers first (a string or bool is not one), and finite: an infinite threshold passes
        # "> 0" but never fires, so drift would go unnoticed for good.
        for name in ("threshold", "alpha", "calm", "latency_threshold_ms", "latency_alpha"):
            v = getattr(self, name)
            if v is None and name.startswith("latency"):
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{name}: must be a finite number, got {v!r}")
        if not self.threshold > 0:
            raise ValueError(f"threshold: must be > 0, got {self.threshold}")
        for name in ("alpha", "latency_alpha"):
            v = getattr(self, name)
            if v is not None and not 0 < v <= 1:
                raise ValueError(f"{name}: must be in (0, 1], got {v}")
        if not 0 <= self.calm < 1:
            raise ValueError(f"calm: must be in [0, 1), got {self.calm}")
        for name in ("min_samples", "window", "refit_every", "cooldown", "settle_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name}: must be an integer >= 0, got {v!r}")
        if self.window < 1:
            raise ValueError(f"window: must be >= 1, got {self.window}")
        if self.calibration is not None and (not isinstance(self.calibration, int) or isinstance(self.calibration, bool)
                                             or self.calibration < 0):
            raise ValueError(f"calibration: must be an integer >= 0 or None, got {self.calibration!r}")
        if self.latency_threshold_ms is not None and not self.latency_threshold_ms > 0:
            raise ValueError(f"latency_threshold_ms: must be > 0, got {self.latency_threshold_ms}")

    @property
    def calibration_samples(self) -> int:
        return self.min_samples if self.calibration is None else self.calibration


class DriftDetector:
    """EWMA of absolute errors with a calm band, a threshold and re-arming (hysteresis)."""

    def __init__(self, threshold: float | None, alpha: float, calm: float, min_samples: int, cooldown: int) -> None:
        self.threshold = threshold
        self.alpha = alpha
        self.calm = calm
        self.min_samples = min_samples
        self.cooldown = cooldown
        self.value: float | None = None
        self.count = 0
        self.drift_start: int | None = None  # observation index where the error left the calm band
        self._drift_count: int | None = None  # self.count then
        self.armed = True
        self._disarmed_count = 0
        self._calm_streak = 0  # consecutive moving errors in the calm band
        self._below_streak = 0  # consecutive moving errors at or below the threshold
        self.unsettled = 0  # fine-tunes in a row after which the error never settled
        self._settled = True  # below the threshold for ``cooldown`` in a row since the last fine-tune

    @property
    def cooldown_now(self) -> int:
        """The cooldown of the current disarm: ``cooldown`` x 2 per unsettled fine-tune in a row."""
        return self.cooldown * 2 ** min(self.unsettled, MAX_COOLDOWN_DOUBLINGS)

    @property
    def calm_level(self) -> float | None:
        return None if self.threshold is None else self.calm * self.threshold

    def update(self, error: float, index: int) -> bool:
        """Add one absolute error, made at observation ``index`` of the loop (where a drift
        starts is kept in those units); True when a fine-tune should fire now."""
        self.value = error if self.value is None else (1 - self.alpha) * self.value + self.alpha * error
        self.count += 1
        if self.threshold is None:
            self.armed = True
            return False
        calm = self.value <= self.calm * self.threshold
        self._calm_streak = self._calm_streak + 1 if calm else 0
        self._below_streak = self._below_streak + 1 if self.value <= self.threshold else 0
        if self._below_streak >= max(self.cooldown, 1):  # the last fine-tune helped
            self._settled, self.unsettled = True, 0
        # Calm re-arms only while fine-tunes help; after one that did not, only the cooldown does.
        settled = self._calm_streak >= max(self.min_samples, 1) and self.unsettled == 0
        if calm:
            self.drift_start, self._drift_count = None, None
        elif self.drift_start is None:
            self.drift_start, self._drift_count = index, self.count
        if not self.armed and (settled or self.count - self._disarmed_count >= self.cooldown_now):
            self.armed = True
            if not calm:  # a retry judges only what came after the last fine-tune
                self.drift_start, self._drift_count = index, self.count
        return (self.armed and self._drift_count is not None and self.value > self.threshold
                and self.count - self._drift_count + 1 >= self.min_samples)

    def disarm(self) -> None:
        """After a fine-tune: no trigger until calm again or the cooldown has passed (doubled
        when the previous fine-tune never settled)."""
        if not self._settled:
            self.unsettled += 1
        self._settled = False
        self.armed = False
        self._disarmed_count = self.count

    @property
    def in_cooldown(self) -> bool:
        return not self.armed


MAX_COOLDOWN_DOUBLINGS = 10
FineTuneAction = Callable[["FeedbackLoop", Trigger], Any]


def action_name(action: FineTuneAction) -> str:
    """How a fine-tune action is named in triggers and logs: its ``name``, else the function's name."""
    return str(getattr(action, "name", None) or getattr(action, "__name__", None) or type(action).__name__)


# --- the loop ----------------------------------------------------------------------------------


class FeedbackLoop:
    """Records decisions and observations, tracks the error, fine-tunes on drift (module doc)."""

    def __init__(self, config: FeedbackConfig | None = None, *, model: UsageModel | None = None,
                 actions: Sequence[FineTuneAction] = (), on_drift: Callable[[Trigger], Any] | None = None,
                 registry: Any = None, keep: int = 10_000, clock: Callable[[], float] = time.time,
                 record_terms: bool = True, background_actions: bool = False, max_nodes: int = DEFAULT_MAX_NODES,
                 **settings: Any) -> None:
        """``settings`` are :class:`FeedbackConfig` fields overriding ``config`` (``threshold=0.1``).
        ``record_terms=False`` skips the objective terms in :meth:`record_placement` (two
        ``evaluate`` calls per decision: about 4 ms at 5,000 nodes). ``background_actions`` runs
        the fine-tune actions (and ``on_drift``) one trigger at a time on a worker thread, so that
        a DQN fine-tune of minutes does not hold up the caller of :meth:`observe` (a scheduler's
        metrics feed); :meth:`wait_actions` waits for them, :meth:`close` stops the worker.
        ``max_nodes``: per-node state is kept for at most this many nodes, the least recently
        seen (decided on or observed) forgotten first (:data:`DEFAULT_MAX_NODES`)."""
        known = {f.name for f in fields(FeedbackConfig)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown feedback setting (known: {', '.join(sorted(known))})")
        self.config = replace(config or FeedbackConfig(), **settings)
        cfg = self.config
        for name, value in (("keep", keep), ("max_nodes", max_nodes)):  # keep=0 broke every record_decision
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        self.max_nodes = max_nodes
        self.model = model or UsageModel()
        self.actions = list(actions)
        self.on_drift = on_drift
        self.clock = clock
        self.record_terms = record_terms
        self.observations = 0
        self.experience: deque[Sample] = deque(maxlen=cfg.window)
        # (latency reading, class, network ms, observed ms): indexed by the loop's own count of
        # latency readings, not of node observations: with no node observed after a latency drift
        # began, a fine-tune found no reading "since" it and refitted on the whole window.
        self.latency_experience: deque[tuple[int, str, float, float]] = deque(maxlen=cfg.window)
        self.latency_readings = 0
        self._latency_marks: deque[tuple[int, int]] = deque(maxlen=cfg.window)  # (reading, observations then)
        self.latest: OrderedDict[str, Decision] = OrderedDict()  # per node, least recently seen first
        self.pending: dict[str, list[Decision]] = {}  # per node, in the order made: not observed yet
        self._basis: dict[str, Decision] = {}  # per node, the newest decision an observation completed
        self.by_key: dict[str, Decision] = {}
        self.decisions: deque[Decision] = deque(maxlen=keep)
        self.signals: list[Trigger] = []  # fine-tunes
        self.calibrations: list[Trigger] = []
        self.errors: deque[float] = deque(maxlen=keep)  # absolute utilization errors, latest ``keep``
        self.history: deque[tuple[int, float, float | None]] = deque(maxlen=keep)  # (observation, value, moving error)
        self.calibrated = cfg.calibration_samples == 0
        self.detectors = {
            "utilization": DriftDetector(cfg.threshold, cfg.alpha, cfg.calm, cfg.min_samples, cfg.cooldown),
            "latency_ms": DriftDetector(cfg.latency_threshold_ms, cfg.latency_alpha or cfg.alpha, cfg.calm,
                                        cfg.min_samples, cfg.cooldown),
        }
        self._since_refit = 0  # node observations since the last refit (latency readings do not count)
        self._active: Trigger | None = None  # the fine-tune whose cooldown is running
        self._active_reading = 0  # latency readings when it fired
        self._settle_start: int | None = None
        self._regime_start = 0
        self._lat_settle_start = 0  # the same two starts in latency readings
        self._lat_regime_start = 0
        self._unfitted: dict[str, int] = {}  # classes seen but never fitted: observations so far
        self._lock = threading.RLock()
        self.background_actions = background_actions
        self._queue: queue.Queue[Trigger | None] | None = None
        self._worker: threading.Thread | None = None
        self._metrics = _metrics(registry) if registry is not None else None
        if self._metrics:
            self._metrics["threshold"].labels("utilization").set(cfg.threshold)
            if cfg.latency_threshold_ms is not None:
                self._metrics["threshold"].labels("latency_ms").set(cfg.latency_threshold_ms)

    # --- compatibility accessors ----------------------------------------------------------

    @property
    def threshold(self) -> float:
        return self.config.threshold

    @property
    def alpha(self) -> float:
        return self.config.alpha

    @property
    def moving_error(self) -> float | None:
        """Moving absolute error of the predicted node utilization (None before any is judged)."""
        return self.detectors["utilization"].value

    @property
    def moving_latency_error(self) -> float | None:
        return self.detectors["latency_ms"].value

    @property
    def triggers(self) -> list[Trigger]:
        return self.signals

    # --- decisions --------------------------------------------------------------------------

    def record_decision(self, key: str, node: str, requests: Mapping[str, float] | float, capacity: float, *,
                        klass: str = DEFAULT_CLASS, delta_r: float | None = None,
                        terms: Mapping[str, float] | None = None, network_latency_ms: float | None = None,
                        at: float | None = None) -> Decision:
        """A placement was made: ``requests`` are the node's CPU requests by class with the pod.
        Requests, capacity and ``network_latency_ms`` must be finite and >= 0 (ValueError names
        the argument; nothing is recorded)."""
        req = _checked_requests(requests)
        capacity = _amount(capacity, "capacity")
        if network_latency_ms is not None:
            network_latency_ms = _amount(network_latency_ms, "network_latency_ms")
        at = _time(at)
        with self._lock:
            d = Decision(key, node, klass, req, float(capacity), self.model.predict(req, capacity),
                         self.clock() if at is None else at, delta_r, dict(terms or {}), network_latency_ms,
                         self.model.predict_latency(klass, network_latency_ms),
                         calibrated=self.calibrated and all(c in self.model.factors for c in req))
            if len(self.decisions) == self.decisions.maxlen:  # bounded memory in a long-running scheduler
                old = self.decisions[0]
                if self.by_key.get(old.key) is old:
                    del self.by_key[old.key]
                # A node never measured (metrics-server down, a node it does not report) kept up
                # to 1,000 decisions each for good: what leaves ``decisions`` stops waiting too.
                waiting = self.pending.get(old.node)
                if waiting and waiting[0] is old:  # the oldest decision: first of its node's, if waiting
                    del waiting[0]
                    if not waiting:
                        del self.pending[old.node]
            self.latest[node] = d
            waiting = self.pending.setdefault(node, [])
            waiting.append(d)
            if len(waiting) > 1000:  # a node never measured: keep only its latest decisions waiting
                del waiting[:-1000]
            self.by_key[key] = d
            self.decisions.append(d)
            self._touch(node)
            return d

    def _touch(self, node: str) -> None:
        """Mark ``node`` as just seen; past ``max_nodes``, forget the least recently seen one.
        (Under the lock.) Its decisions stay in ``decisions`` and ``by_key``; only the per-node
        state goes, as if the node had never been decided on. ``node`` must be in ``latest``
        (``pending`` and ``_basis`` hold only nodes that are)."""
        self.latest.move_to_end(node)
        while len(self.latest) > self.max_nodes:
            gone, _ = self.latest.popitem(last=False)
            self.pending.pop(gone, None)
            self._basis.pop(gone, None)

    def predict(self, key: str, node: str, requested_cpu: float, capacity_cpu: float) -> Decision:
        """One-class form of :meth:`record_decision` (what ``iro scheduler`` records)."""
        return self.record_decision(key, node, requested_cpu, capacity_cpu)

    def record_placement(self, key: str, node: str, problem: Any, state: Any, klass: str = DEFAULT_CLASS, *,
                         explained: tuple[float, Mapping[str, float]] | None = None) -> Decision:
        """After a bind: the node's CPU requests with the pod (one class) and, when the pod is a
        workload of ``problem``, its change of R and of each term from :func:`placement_terms`
        (``explained``: those two when the caller has them already, as the scheduler does)."""
        n = problem.node_index[node]
        cpu = problem.cpu_index
        delta, terms, net = None, {}, None
        w = next((i for i, wl in enumerate(problem.workloads) if wl.name == key), None) if self.record_terms else None
        if w is not None and int(state.assignment[w]) == n:
            delta, terms = explained if explained is not None else placement_terms(problem, state.assignment, w)
            net = network_latency(problem, w, n)
        return self.record_decision(key, node, {klass: float(state.allocated[n, cpu])}, float(problem.capacity[n, cpu]),
                                    klass=klass, delta_r=delta, terms=terms, network_latency_ms=net)

    # --- observations -----------------------------------------------------------------------

    def observe(self, node: str, observed_util: float, *, requests: Mapping[str, float] | None = None,
                capacity: float | None = None, at: float | None = None) -> float | None:
        """A measured CPU share of ``node``, measured at ``at`` (default: now, by the loop's clock).
        Completes the node's decisions made at or before ``at`` (a measurement taken before a
        placement cannot show its pod: later ones keep waiting), adds one sample (the node's
        ``requests`` by class now, else those of its newest decision made by ``at``) and returns
        the absolute error of the current model on it (None: nothing known of the node then).
        With ``requests``, a measurement taken before a decision on the node is not used at all
        (None, nothing recorded): the requests now count that decision's pod, which it cannot show."""
        if not (_is_finite_number(observed_util) and observed_util >= 0):
            raise ValueError(f"observed_util: expected a finite number >= 0 for node {node!r}, got {observed_util!r}")
        given = _checked_requests(requests) if requests is not None else None
        if capacity is not None:
            capacity = _amount(capacity, "capacity")
        at = _time(at)
        fired: Trigger | None = None
        with self._lock:
            pred = self.latest.get(node)
            if pred is None and (given is None or capacity is None):
                return None
            now = self.clock() if at is None else at
            waiting = self.pending.get(node, [])
            if given is not None and any(d is not None and d.at > now
                                         for d in (pred, self._basis.get(node), *waiting)):
                # A scrape taken before a bind, read after it, was judged against requests with the
                # new pod (a large error that could fire a fine-tune); its decisions keep waiting.
                return None
            done = [d for d in waiting if d.at <= now]
            req, cap = given, capacity
            if req is None:
                # What the node held when measured: its newest decision made by then.
                known = [d for d in (self._basis.get(node), *done) if d is not None and d.at <= now]
                basis = _newest(known) if known else pred if pred is not None and pred.at <= now else None
                if basis is None:  # every decision known on the node came after the measurement
                    return None
                req = dict(basis.requests)
            if cap is None and pred is not None:  # capacity does not change with what runs on the node
                cap = pred.capacity
            cap = float(cap or 0.0)
            later = [d for d in waiting if d.at > now]
            if later:
                self.pending[node] = later
            else:
                self.pending.pop(node, None)
            if done:
                self._basis[node] = _newest([d for d in (self._basis.get(node), *done) if d is not None])
            if pred is not None:  # the node has per-node state
                self._touch(node)
            for d in done:
                d.observed_util = float(observed_util)
                d.observed_at = now
                d.errors["utilization"] = float(observed_util) - d.predicted_util
            predicted = self.model.predict(req, cap)
            error = abs(float(observed_util) - predicted)
            index = self.observations
            self.experience.append(Sample(index, req, cap, float(observed_util)))
            self.observations += 1
            self.errors.append(error)
            unknown = [c for c in req if c not in self.model.factors] if self.calibrated else []
            if not self.calibrated:
                if self.observations >= self.config.calibration_samples:
                    self._calibrate(now)
            elif unknown:
                # A class never fitted (a new kind of pod) is calibrated, not judged: the model
                # never claimed to know it.
                # Only observations a fit can use count (a saturated node says nothing of its
                # pods): a class seen only on saturated nodes was "calibrated" (a refit and a
                # record) on every observation, and never fitted.
                usable = cap > 0 and float(observed_util) < self.model.saturated
                for c in unknown:
                    self._unfitted[c] = self._unfitted.get(c, 0) + usable
                if any(self._unfitted[c] >= max(self.config.min_samples, 1) for c in unknown):
                    self._calibrate(now, start=self._regime_start, since_reading=self._lat_regime_start)
            else:
                fire = self.detectors["utilization"].update(error, index)
                fired = self._after_update("utilization", fire, index, now)
            self.history.append((index, float(observed_util), self.moving_error))
            if self._metrics:
                self._metrics["observations"].inc()
                if self.moving_error is not None:
                    self._metrics["error"].labels("utilization").set(self.moving_error)
        if fired is not None:
            self._run_actions(fired)
        return error

    def observe_latency(self, key: str, latency_ms: float, at: float | None = None) -> float | None:
        """A measured latency of the requests served by pod ``key``; returns the absolute error
        against the model's expectation (None: no decision with a user region for it, or one made
        after ``at``: the reading cannot be of that pod)."""
        if not (_is_finite_number(latency_ms) and latency_ms >= 0):
            raise ValueError(f"latency_ms: expected a finite number >= 0 for {key!r}, got {latency_ms!r}")
        at = _time(at)
        with self._lock:
            d = self.by_key.get(key)
        return None if d is None else self._observe_latency_of([d], latency_ms, at)

    def _observe_latency_of(self, decisions: Sequence[Decision], latency_ms: float, at: float | None) -> float | None:
        """One latency reading of the requests served by ``decisions`` (not looked up by key: a pod
        rescheduled under the same name has two): each is completed and enters the latency fit,
        and the reading is one observation of the moving error (their mean absolute error). One
        service P99 given to each of its N new pods was N observations: a single reading passed
        ``min_samples`` and fired a fine-tune."""
        fired: Trigger | None = None
        with self._lock:
            now = self.clock() if at is None else at
            # A reading taken before a pod was bound is not its latency (as for node readings).
            decisions = [d for d in decisions if d.network_latency_ms is not None and d.at <= now]
            if not decisions:
                return None
            reading = self.latency_readings
            self.latency_readings += 1
            self._latency_marks.append((reading, self.observations))
            errors = []
            for d in decisions:
                expected = self.model.predict_latency(d.klass, d.network_latency_ms)
                if d.observed_latency_ms is None:
                    d.observed_latency_ms = float(latency_ms)
                    if d.expected_latency_ms is not None:
                        d.errors["latency_ms"] = float(latency_ms) - d.expected_latency_ms
                errors.append(abs(float(latency_ms) - float(expected or 0.0)))
                self.latency_experience.append((reading, d.klass, d.network_latency_ms, float(latency_ms)))
            error = float(np.mean(errors))
            if self.calibrated:
                fire = self.detectors["latency_ms"].update(error, reading)
                fired = self._after_update("latency_ms", fire, reading, now)
            if self._metrics and self.moving_latency_error is not None:
                self._metrics["error"].labels("latency_ms").set(self.moving_latency_error)
        if fired is not None:
            self._run_actions(fired)
        return error

    # --- refits and triggers ----------------------------------------------------------------

    def _reading_at(self, observation: int) -> int:
        """The first latency reading made once ``observation`` node observations had been made
        (``latency_readings``: none yet)."""
        for reading, seen in self._latency_marks:
            if seen >= observation:
                return reading
        return self.latency_readings

    def _observation_at(self, reading: int) -> int:
        """The node observations made before latency reading ``reading`` (the first kept one
        from it on; ``observations``: none yet)."""
        for r, seen in self._latency_marks:
            if r >= reading:
                return seen
        return self.observations

    def _refit(self, samples: Sequence[Sample], since_reading: int) -> tuple[dict[str, float], float, int, float]:
        """Refit the factors on ``samples`` and the latency offsets on the readings from
        ``since_reading`` on. Returns the factors and their in-sample error, and how many latency
        samples the offsets were fitted on and their in-sample error (ms)."""
        # The pull towards the previous factors is sized over the whole window (the documented
        # "typical observations"), not over the few rows of a recent refit.
        self.model.fit(samples, typical=self.experience)
        lat = [(k, n, o) for r, k, n, o in self.latency_experience if r >= since_reading]
        lat_mae = 0.0
        if lat:
            self.model.fit_latency(lat)
            lat_mae = float(np.mean([abs(o - float(self.model.predict_latency(k, n) or 0.0)) for k, n, o in lat]))
        mae = float(np.mean([abs(s.observed - self.model.predict(s.requests, s.capacity)) for s in samples])) \
            if samples else 0.0
        self._since_refit = 0
        if self._metrics:
            for c, f in self.model.factors.items():
                self._metrics["factor"].labels(c).set(f)
        return dict(self.model.factors), mae, len(lat), lat_mae

    def _calibrate(self, now: float, start: int = 0, since_reading: int = 0) -> None:
        before = dict(self.model.factors)
        samples = [s for s in self.experience if s.index >= start]
        after, mae, _, _ = self._refit(samples, since_reading)
        for c in list(self._unfitted):  # fitted now; any other starts counting afresh
            if c in after:
                del self._unfitted[c]
            else:
                self._unfitted[c] = 0
        self.calibrated = True
        self.calibrations.append(Trigger("calibration", now, self.observations, "utilization", float("nan"),
                                         self.threshold, len(samples), before, after, mae))
        if self._metrics:
            self._metrics["calibrations"].inc()

    def _after_update(self, quantity: str, fire: bool, index: int, now: float) -> Trigger | None:
        """Periodic refit when calm, settling refits in a cooldown, or a new fine-tune."""
        cfg = self.config
        det = self.detectors[quantity]
        # refit_every and settle_every count node observations, as documented: latency readings
        # counted too made both come sooner (a service P99 per node poll: twice as often).
        if quantity == "utilization":
            self._since_refit += 1
        if fire:
            return self._fine_tune(quantity, det, index, now)
        if self._active is not None:
            if cfg.settle_every and self._since_refit >= cfg.settle_every and self._settle_start is not None:
                # What came after the trigger is surely the new regime: fit on it once there is
                # enough (node observations and latency readings each on their own count).
                after = [s for s in self.experience if s.index >= self._active.observation]
                if len(after) >= max(cfg.min_samples, 1):
                    self._regime_start = self._active.observation
                else:
                    after = [s for s in self.experience if s.index >= self._settle_start]
                if self.latency_readings - self._active_reading >= max(cfg.min_samples, 1):
                    self._lat_regime_start = self._active_reading
                    since_reading = self._active_reading
                else:
                    since_reading = self._lat_settle_start
                self._refit(after, since_reading)
                self._active.settle_refits += 1
            own = self.detectors[self._active.quantity]
            if own.armed:  # settled in the trigger's own quantity (a latency trigger: ms)
                self._active.settled_error = own.value
                self._active = None
                self._settle_start = None
            return None
        calm = all(d.threshold is None or d.value is None or d.value <= d.calm * d.threshold
                   for d in self.detectors.values())
        if cfg.refit_every and calm and self._since_refit >= cfg.refit_every:
            # A fine-tune marks a new regime: what came before it no longer enters a fit.
            self._refit([s for s in self.experience if s.index >= self._regime_start], self._lat_regime_start)
        return None

    def _fine_tune(self, quantity: str, det: DriftDetector, index: int, now: float) -> Trigger:
        # ``index`` and the drift start count the detector's own events: node observations for
        # utilization, latency readings for latency.
        start = det.drift_start if det.drift_start is not None else index
        # The recent experience: since the error left the calm band, at most the EWMA's span.
        span = max(self.config.min_samples, math.ceil(2.0 / det.alpha))
        start = max(start, index + 1 - span)
        if quantity == "latency_ms":
            since_reading, start = start, self._observation_at(start)
        else:
            since_reading = self._reading_at(start)
        recent = [s for s in self.experience if s.index >= start]
        before = dict(self.model.factors)
        after, mae, lat_samples, lat_mae = self._refit(recent, since_reading)
        # A latency trigger reports its own refit: the latency samples and their error in ms.
        samples, error_after = (lat_samples, lat_mae) if quantity == "latency_ms" else (len(recent), mae)
        trigger = Trigger("fine-tune", now, self.observations, quantity, float(det.value or 0.0), float(det.threshold or 0.0),
                          samples, before, after, error_after, [action_name(a) for a in self.actions])
        self.signals.append(trigger)
        if self._active is not None and self._active.settled_error is None:
            self._active.settled_error = self.detectors[self._active.quantity].value
        self._active = trigger
        self._active_reading = self.latency_readings
        self._settle_start = start
        self._regime_start = start
        self._lat_settle_start = since_reading
        self._lat_regime_start = since_reading
        for d in self.detectors.values():
            if d.threshold is not None:
                d.disarm()
        if self._metrics:
            self._metrics["drift"].inc()
        log.warning("feedback: %s moving error %.4f > %.4f after %d samples; usage model refitted (%s), "
                    "in-sample error %.4f", quantity, trigger.moving_error, trigger.threshold, samples,
                    ", ".join(f"{c} {f:.3f}" for c, f in sorted(after.items())), error_after)
        return trigger

    def _run_actions(self, trigger: Trigger) -> None:
        if not self.background_actions:
            self._perform(trigger)
            return
        for action in self.actions:
            trigger.results[action_name(action)] = "queued"
        with self._lock:
            if self._queue is None:
                self._queue = queue.Queue()
                self._worker = threading.Thread(target=self._work, args=(self._queue,), name="feedback-actions",
                                                daemon=True)
                self._worker.start()
            self._queue.put(trigger)

    def _work(self, jobs: queue.Queue[Trigger | None]) -> None:
        while True:
            trigger = jobs.get()
            try:
                if trigger is None:
                    return
                self._perform(trigger)
            except Exception:  # on_drift failed: log it, keep serving the next trigger
                log.exception("feedback: drift callback failed")
            finally:
                jobs.task_done()

    def wait_actions(self, timeout: float | None = None) -> bool:
        """Wait until every queued fine-tune action has run; False if ``timeout`` passed first."""
        jobs = self._queue
        if jobs is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        with jobs.all_tasks_done:
            while jobs.unfinished_tasks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                jobs.all_tasks_done.wait(left)
        return True

    def close(self, timeout: float | None = None) -> None:
        """Stop the action worker after the actions already queued (waits up to ``timeout``)."""
        with self._lock:
            jobs, worker = self._queue, self._worker
            self._queue, self._worker = None, None
        if jobs is not None and worker is not None:
            jobs.put(None)
            worker.join(timeout)

    def _perform(self, trigger: Trigger) -> None:
        for action in self.actions:
            name = action_name(action)
            try:
                trigger.results[name] = str(action(self, trigger))
            except Exception as exc:  # a failed action must not stop the loop (or the scheduler)
                log.exception("feedback: fine-tune action %s failed", name)
                trigger.results[name] = f"failed: {type(exc).__name__}: {exc}"
        if self.on_drift is not None:
            self.on_drift(trigger)

    # --- reports ------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Counts, moving errors, factors, triggers and mean errors per quantity (JSON-ready)."""
        # Everything is read under the lock (observe and record_decision change it from other
        # threads: a refit adds factors, an observation fills a decision's errors); the means
        # are computed from the copies after it.
        with self._lock:
            util = [d.errors["utilization"] for d in self.decisions if d.observed_util is not None and d.calibrated]
            lat = [d.errors["latency_ms"] for d in self.decisions if "latency_ms" in d.errors and d.calibrated]
            out = {
                "decisions": len(self.decisions),
                "observations": self.observations,
                "moving_error": self.moving_error,
                "moving_latency_error_ms": self.moving_latency_error,
                "threshold": self.threshold,
                "fine_tunes": len(self.signals),
                "calibrations": len(self.calibrations),
                "factors": dict(sorted(self.model.factors.items())),
                "latency_offset_ms": dict(sorted(self.model.latency_offset_ms.items())),
            }
            triggers = [t.to_dict() for t in self.signals]
        out["decision_mae_utilization"] = float(np.mean(np.abs(util))) if util else None
        out["decision_mae_latency_ms"] = float(np.mean(np.abs(lat))) if lat else None
        out["triggers"] = triggers
        return out


# --- observations from the perception layer --------------------------------------------------


def observe_snapshot(loop: FeedbackLoop, snapshot: Any, at: float | None = None) -> int:
    """Feed a perception-layer snapshot (:class:`iro_fed.metrics.ClusterSnapshot`) to ``loop``.

    Every node with a decision and a CPU reading is observed: usage over the CPU the decision
    predicted a share of (on Kubernetes the node's allocatable CPU, less than the machine's cores
    a snapshot reports: dividing by those would compare shares of two different wholes), the
    snapshot's capacity only where the decision has none. A service's P99 latency completes the
    decisions of that class still waiting for a latency (one observation of the moving latency
    error per service, not one per pod). Returns how many node observations it fed.
    """
    at = _time(at)
    fed = 0
    for name, usage in snapshot.nodes.items():
        pred = loop.latest.get(name)
        if pred is None or usage.cpu_millicores is None:
            continue
        cap = pred.capacity if pred.capacity > 0 else usage.cpu_capacity_millicores
        if not cap or cap <= 0:
            continue
        loop.observe(name, float(usage.cpu_millicores) / float(cap), at=at)
        fed += 1
    for service, stats in snapshot.services.items():
        if stats.p99_latency_ms is None:
            continue
        with loop._lock:  # the scheduler may record decisions meanwhile
            # Only each pod's current decision: one rescheduled under the same name left its old
            # decision waiting, and observe_latency(key) then judged the new one again on every
            # snapshot while the old never completed.
            waiting = [d for d in loop.decisions if d.klass == service and d.observed_latency_ms is None
                       and d.network_latency_ms is not None and loop.by_key.get(d.key) is d]
        if waiting:  # one reading of the service: one observation of the moving error
            loop._observe_latency_of(waiting, float(stats.p99_latency_ms), at)
    return fed


# --- objective terms of a placement ---------------------------------------------------------


def placement_terms(problem: Any, assignment: np.ndarray, w: int,
                    with_pod: Any = None) -> tuple[float, dict[str, float]]:
    """Change of R and of each weighted term when workload ``w`` is placed as in ``assignment``
    (R with the pod minus R without it, both from :func:`iro_fed.objective.evaluate`).
    ``with_pod``: ``evaluate(problem, assignment)`` when the caller already has it (the same for
    every pod of one placement)."""
    from iro_fed.objective import TERMS, evaluate

    assignment = np.asarray(assignment, dtype=np.int64)
    if with_pod is None:
        with_pod = evaluate(problem, assignment)
    without = assignment.copy()
    without[w] = -1
    without_pod = evaluate(problem, without)
    return with_pod.score - without_pod.score, {t: with_pod.weighted[t] - without_pod.weighted[t] for t in TERMS}


def network_latency(problem: Any, w: int, n: int) -> float | None:
    """The objective's latency (ms) from workload ``w``'s user region to node ``n``'s domain."""
    region = int(problem.wl_region[w])
    if region < 0:
        return None
    ms = float(problem.latency_ms[region, problem.node_domain[n]])
    return ms if math.isfinite(ms) else None


# --- fine-tune actions ----------------------------------------------------------------------


class FederatedRoundRequest:
    """Asks for a federated round: writes ``ROOT/requests/<time>-<site>-<pid>-<n>-<random>.json``
    atomically. The process id and a random part keep two writers (two processes of one site, or
    one restarted within the same second) from replacing each other's waiting request.

    The file (format ``iro-fed/round-request/1``) names the site, the reason and the trigger's
    numbers; the federated server or an operator acts on it (see docs/feedback.md).
    """

    name = "federated-round-request"
    FORMAT = "iro-fed/round-request/1"

    def __init__(self, root: str | Path, site: str = "local") -> None:
        self.root = Path(root).expanduser()
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"root: {str(self.root)!r} exists and is not a folder")
        # The site is part of the file name: "a/b" put the request in a subfolder that
        # ``iro fed rounds`` never lists (lost), "x/../../y" wrote outside ``root``, and "" was
        # written and then rejected by the consumer (read_request needs a non-empty site).
        if not isinstance(site, str) or not site or "/" in site or "\0" in site:
            raise ValueError(f"site: expected a non-empty name without '/', got {site!r}")
        self.site = site
        self.written: list[Path] = []

    def __call__(self, loop: FeedbackLoop, trigger: Trigger) -> str:
        from iro_fed.problem_io import write_json_atomic

        folder = self.root / "requests"
        folder.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = folder / f"{stamp}-{self.site}-{os.getpid()}-{len(self.written) + 1:04d}-{secrets.token_hex(4)}.json"
        write_json_atomic(path, {
            "format": self.FORMAT, "requested_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "site": self.site, "reason": f"{trigger.quantity} moving error {trigger.moving_error:.4f} "
                                         f"> threshold {trigger.threshold:.4f}",
            "quantity": trigger.quantity, "moving_error": trigger.moving_error, "threshold": trigger.threshold,
            "samples": trigger.samples, "factors_before": trigger.factors_before,
            "factors_after": trigger.factors_after, "error_after": trigger.error_after,
        })
        self.written.append(path)
        return str(path)


def fine_tune_min_steps(config: Mapping[str, Any] | None = None) -> int:
    """The fewest decisions a :class:`DQNFineTune` with these DQN settings (default: the ``dqn``
    solver's defaults) needs for one gradient update: a batch of transitions (``learning_starts``
    when given and larger), each complete ``n_step`` - 1 decisions after it was made (one env)."""
    from solvers import DQNConfig

    cfg = {**DQNConfig().to_dict(), **(config or {})}
    batch = int(cfg["batch_size"])
    starts = int(config["learning_starts"]) if config and "learning_starts" in config else batch
    return max(max(starts, batch) + int(cfg["n_step"]) - 1, int(cfg["train_every"]))


def fine_tune_config(start: Mapping[str, Any], overrides: Mapping[str, Any], steps: int) -> dict[str, Any]:
    """The DQN settings a :class:`DQNFineTune` of ``steps`` decisions trains with: the start
    policy's (all of them, as ``DQNConfig.to_dict``), ``overrides`` on top; ``learning_starts``,
    unless overridden, at most ``max(batch_size, steps // 4)``: a trained policy need not wait long
    before learning."""
    cfg = {**start, **overrides}
    if "learning_starts" not in overrides:
        cfg["learning_starts"] = min(int(cfg["learning_starts"]), max(int(cfg["batch_size"]), steps // 4))
    return cfg


def start_policy_config(policy: str | os.PathLike[str] | None) -> dict[str, Any]:
    """Every DQN setting of the policy a fine-tune starts from (a checkpoint, a registry folder's
    latest version, None: the shipped default), read without torch where its JSON metadata is
    there. :class:`~solvers.CheckpointError` naming the file when unreadable, or when it was trained
    on other features than this version computes (the fine-tune's load would refuse it only at the
    first trigger, maybe hours into the run)."""
    from solvers import (
        CheckpointError,
        ConfigError,
        DQNConfig,
        check_dqn_policy_features,
        read_checkpoint_config,
        resolve_dqn_policy,
    )

    path = resolve_dqn_policy(policy)
    check_dqn_policy_features(path)
    try:  # a setting the checkpoint leaves out takes its default, as loading the policy does
        return DQNConfig.from_dict(read_checkpoint_config(path), training=False).to_dict()
    except (ConfigError, TypeError) as exc:
        raise CheckpointError(f"policy {str(path)!r}: unusable config in its metadata ({exc})") from exc


def fine_tune_start_policy(registry: str | os.PathLike[str] | None, policy: str | None) -> str | None:
    """The policy a fine-tune starts from: the registry when it has a ``latest`` version, else
    ``policy`` (None: the shipped default). The CLIs check ``--dqn-steps`` against the same one."""
    if registry is not None and (Path(registry) / "latest").is_file():
        return str(registry)
    return policy


def fine_tune_seed(seed: int, index: int) -> int:
    """The seed of a :class:`DQNFineTune`'s ``index``-th fine-tune (torch, replay sampling and its
    env's scenario seeds): drawn from ``SeedSequence([seed, index])``, so each fine-tune trains on
    episodes of its own (with one ``seed`` for all, every fine-tune replayed the first one's).
    31 bits: the ``dqn`` solver's ``seed`` setting is at most 2**31 - 1."""
    from iro_fed.learning import stream_seed

    return stream_seed(seed, index) >> 1


class DQNFineTune:
    """Local DQN fine-tuning on recent simulator experience, published atomically.

    Starts from the registry's latest version (else ``policy``, a checkpoint, else the shipped default),
    trains ``steps`` decisions on :class:`iro_fed.sim.env.PlacementEnv` built by ``env_fns``
    (or from ``scenario``/``hours``/``settings``) with the ``dqn`` solver's ``fit``, and writes
    the new weights as the next version of the policy registry ``registry`` (``latest`` moves
    only once the version is complete), or to the checkpoint ``out``.

    ``step_s``: scenario seconds per unit of ``Trigger.at`` (``run_feedback_sim``'s triggers count
    simulator steps: the scenario's step, 60 s). With it, a trigger at scenario hour ``t`` trains on
    the ``hours`` that led to it: episodes of ``PlacementEnv(start_h=max(0, t - hours))``, the
    scenario's hours ``t - hours`` to ``t`` (``0`` to ``hours`` for an early trigger). Without it
    (None: ``iro scheduler``, whose triggers carry wall-clock times, no scenario clock) every
    fine-tune trains on the scenario's first ``hours``. Each fine-tune draws its own seed
    (:func:`fine_tune_seed`).
    """

    name = "dqn-fine-tune"

    def __init__(self, registry: str | Path | None = None, out: str | Path | None = None, policy: str | None = None,
                 scenario: str = "edge-iot", hours: float = 1.0, settings: Mapping[str, Any] | None = None,
                 env_fns: Sequence[Callable[[], Any]] | None = None, steps: int = 256, seed: int = 0,
                 config: Mapping[str, Any] | None = None, time_limit_s: float | None = None,
                 steps_flag: str = "steps", step_s: float | None = None) -> None:
        if (registry is None) == (out is None):
            raise ValueError("registry / out: give exactly one place to write the fine-tuned policy")
        if steps < 1:
            raise ValueError(f"steps: must be >= 1, got {steps}")
        if step_s is not None and not (_is_finite_number(step_s) and step_s > 0):
            raise ValueError(f"step_s: expected a finite number of seconds > 0 (or None), got {step_s!r}")
        self.registry = Path(registry).expanduser() if registry is not None else None
        # Found at construction, not at the first trigger hours later (as FederatedRoundRequest does).
        if self.registry is not None and self.registry.exists() and not self.registry.is_dir():
            raise ValueError(f"registry: {str(self.registry)!r} exists and is not a folder")
        self.out = Path(out) if out is not None else None
        self.policy = policy
        self.scenario = scenario
        self.hours = hours
        self.settings = dict(settings or {})
        self.env_fns = list(env_fns) if env_fns is not None else None
        self.steps = steps
        #: What set ``steps``, named when they are too few for the start policy (a command line's flag).
        self.steps_flag = steps_flag
        self.seed = seed
        self.config = dict(config or {})
        self.time_limit_s = time_limit_s
        self.step_s = None if step_s is None else float(step_s)
        self.results: list[dict[str, Any]] = []
        self.started = 0  # fine-tunes begun (failed ones too: the next never reuses their seed)

    def _start_policy(self) -> str | None:
        """The registry's latest version, else the checkpoint ``out`` once this action wrote it
        (each fine-tune goes on from the last: starting again from ``policy`` overwrote what the
        previous one learned), else ``policy``, else None (the shipped default)."""
        written = self.out is not None and bool(self.results) and self.out.is_file()
        return fine_tune_start_policy(self.registry, str(self.out) if written else self.policy)

    def window_start_h(self, trigger: Trigger | None) -> float:
        """Scenario hour the fine-tune's episodes start at: ``hours`` before the trigger's time
        (0 at the earliest); 0 without a scenario clock (``step_s`` None) or a trigger."""
        if self.step_s is None or trigger is None:
            return 0.0
        return max(0.0, float(trigger.at) * self.step_s / 3600.0 - self.hours)

    def __call__(self, loop: FeedbackLoop | None, trigger: Trigger | None) -> str:
        import solvers
        from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES, feature_layout

        seed = fine_tune_seed(self.seed, self.started)
        self.started += 1
        start_h = self.window_start_h(trigger)
        solver = solvers.make("dqn", policy=self._start_policy(), seed=seed)
        start = solver.loaded
        cfg = fine_tune_config(start.config.to_dict(), self.config, self.steps)
        least = fine_tune_min_steps(cfg)
        if self.steps < least:  # it would publish the starting weights as a "fine-tuned" version
            raise ValueError(f"{self.steps_flag}: {self.steps} decisions make no gradient update with the settings "
                             f"of the policy it starts from, {str(start.path)!r} (batch_size {cfg['batch_size']}, "
                             f"n_step {cfg['n_step']}); need at least {least}")
        initial = {k: v.detach().clone() for k, v in start.agent.online.state_dict().items()}
        env_fns = self.env_fns or [self._env_fn(cfg["top_k"], seed, start_h)]
        meta: dict[str, Any] = {"fine_tune": {
            "from": str(start.metadata.get("version", self._start_policy() or "default")),
            "trigger": None if trigger is None else {k: v for k, v in trigger.to_dict().items() if k != "results"},
            "scenario": self.scenario, "start_h": start_h, "hours": self.hours, "settings": self.settings,
            "steps": self.steps, "seed": seed}}
        result = solver.fit(env_fns, self.steps, out=self.out, config=cfg, metadata=meta, initial_state=initial,
                            progress=False, track_emissions=False, time_limit_s=self.time_limit_s)
        state = {k: v.detach().cpu() for k, v in solver.agent.online.state_dict().items()}
        # Learned parameters only (noisy layers also keep their last noise sample as buffers).
        learned = [n for n, _ in solver.agent.online.named_parameters()]
        changed = float(sum(float((state[k].float() - initial[k].float()).abs().sum()) for k in learned))
        where = str(self.out) if self.out is not None else ""
        if result.updates == 0:  # a time limit, or episodes too short to fill a batch: nothing learned
            raise RuntimeError(f"trained {result.steps} steps but made no gradient update (need "
                               f"{max(int(cfg['learning_starts']), int(cfg['batch_size']))} transitions first): "
                               + ("nothing published" if self.registry is not None
                                  else f"{where} holds the starting weights"))
        if self.registry is not None:
            from iro_fed.federated.registry import PolicyRegistry

            version, path = PolicyRegistry(self.registry).publish(state, {
                **meta, "config": cfg, "candidate_features": len(CANDIDATE_FEATURES),
                "context_features": len(CONTEXT_FEATURES), "steps": result.steps, "strategy": "local-fine-tune",
                "feature_names": feature_layout(),
                "metrics": {"updates": result.updates, "last_loss": result.last_loss, "wall_s": result.wall_s},
            })
            where = str(path)
        record = {"path": where, "steps": result.steps, "updates": result.updates, "last_loss": result.last_loss,
                  "weight_change_l1": changed, "wall_s": result.wall_s, "start_h": start_h, "seed": seed}
        self.results.append(record)
        return f"trained {result.steps} steps ({result.updates} updates), wrote {where}"

    def _env_fn(self, k: int, seed: int, start_h: float) -> Callable[[], Any]:
        scenario, hours, settings = self.scenario, self.hours, dict(self.settings)

        def make() -> Any:
            from iro_fed.sim.env import PlacementEnv

            return PlacementEnv(scenario, hours=hours, k=k, seed=seed, settings=settings, start_h=start_h)

        return make


# --- Prometheus ------------------------------------------------------------------------------


def _metrics(registry: Any) -> dict[str, Any]:
    from prometheus_client import Counter, Gauge

    return {
        "error": Gauge("iro_feedback_error", "Moving absolute error of the prediction (node CPU share; latency ms)",
                       ["quantity"], registry=registry),
        "threshold": Gauge("iro_feedback_threshold", "Moving error that triggers a fine-tune", ["quantity"],
                           registry=registry),
        "observations": Counter("iro_feedback_observations", "Observed outcomes compared with predictions",
                                registry=registry),
        "drift": Counter("iro_feedback_drift", "Fine-tunes triggered by drift", registry=registry),
        "calibrations": Counter("iro_feedback_calibrations", "Initial calibrations of the usage model",
                                registry=registry),
        "factor": Gauge("iro_feedback_usage_factor", "Usage model: CPU used per CPU requested, by workload class",
                        ["workload_class"], registry=registry),
    }


__all__ = [
    "DEFAULT_CLASS", "QUANTITIES", "DQNFineTune", "Decision", "DriftDetector", "DriftSignal", "FederatedRoundRequest",
    "FeedbackConfig", "FeedbackLoop", "FineTuneAction", "fine_tune_config", "fine_tune_seed", "fine_tune_min_steps", "Prediction", "Sample", "Trigger", "UsageModel",
    "network_latency", "nnls", "observe_snapshot", "placement_terms", "start_policy_config",
]
