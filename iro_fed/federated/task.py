"""What one federated round computes: the typed run config, the site envs, local training, evaluation.

Everything the ClientApp and the ServerApp share lives here (Flower's ``task.py`` split):

* :class:`FedConfig`: the app's settings, declared in ``pyproject.toml`` under
  ``[tool.flwr.app.config]`` with kebab-case keys and converted here, at the app boundary, into
  one typed, validated object (unknown keys and wrong types are errors that name the key);
* :func:`make_site_env`: THE one place that builds a site's gymnasium env (the simulator's
  :class:`iro_fed.sim.env.PlacementEnv` on one site's slice of the scenario, whose observations
  are :mod:`iro_fed.features`, so a federated policy reads exactly what the ``dqn`` solver feeds it);
* :func:`get_weights` / :func:`set_weights`: the online Q-network's learned ``state_dict``
  entries as numpy arrays (the target network and the optimizer stay on the site);
* :class:`WeightLayout` / :func:`pack_weights`: how those arrays travel in a Flower message,
  as ONE flat float32 array plus a small JSON layout (names, shapes, dtypes);
* :func:`local_train` (a few hundred steps of :func:`solvers.dqn.train.train` starting from the
  global weights, the exploration and PER-beta schedules going on from round to round) and
  :func:`evaluate_policy` (greedy episodes on a site: the return, i.e. the change of R in units
  of one unplaced pod, plus the simulator's totals).

torch, gymnasium and the simulator are imported inside the functions that need them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from iro_fed import limits
from iro_fed.federated.emissions import DEFAULT_COUNTRY
from iro_fed.learning import EVAL_SEED_OFFSET, HELD_OUT

#: Strategy names accepted by ``strategy`` (Flower's own implementations).
STRATEGIES: tuple[str, ...] = ("fedavg", "fedprox", "fedmedian", "fedtrimmedavg", "krum", "bulyan")

#: Heterogeneous slices of the ``edge-iot`` scenario, one per federated site: the site's own
#: edge domain (whose users, services and carbon intensity it represents), a season (grid
#: carbon differs a lot between January and June), sensor load, analytics rate and site size.
#: Site 4 is the held-out site of the benchmark and of the server's evaluation by default.
EDGE_IOT_SITES: tuple[dict[str, Any], ...] = (
    {"name": "madrid", "domain": "edge-madrid",
     "params": {"start": "2020-03-02 00:00:00", "sensor_rps": 1500.0, "jobs_per_hour": 6, "edge_nodes": 4}},
    {"name": "oslo", "domain": "edge-oslo",
     "params": {"start": "2020-06-15 00:00:00", "sensor_rps": 800.0, "jobs_per_hour": 10, "edge_nodes": 3}},
    {"name": "frankfurt", "domain": "edge-frankfurt",
     "params": {"start": "2020-01-13 00:00:00", "sensor_rps": 2200.0, "jobs_per_hour": 4, "edge_nodes": 5}},
    {"name": "london", "domain": "edge-london",
     "params": {"start": "2020-09-07 00:00:00", "sensor_rps": 1200.0, "jobs_per_hour": 8, "edge_nodes": 4}},
    {"name": "madrid-winter", "domain": "edge-madrid",
     "params": {"start": "2020-11-16 00:00:00", "sensor_rps": 1800.0, "jobs_per_hour": 7, "edge_nodes": 4}},
)

def required_nodes(strategy: str, num_malicious: int) -> int:
    """Least replies a round needs for ``strategy`` to tolerate ``num_malicious`` bad ones: Krum
    n >= 2f + 3 (Blanchard et al. 2017: n > 2f + 2), Bulyan n >= 4f + 3 (El Mhamdi et al. 2018), else 1."""
    if strategy == "bulyan":
        return 4 * num_malicious + 3
    if strategy == "krum":
        return 2 * num_malicious + 3
    return 1


class FedConfigError(ValueError):
    """A federated setting with a wrong name, type or value; the message names the key."""


#: Upper bounds of the count settings: a typo (``num-server-rounds=1e9`` as an integer, ``local-steps``
#: with three zeros too many) must fail at once, not run for days or fill the memory.
#: Steps, top-k, episodes and hours are those of ``iro train`` / ``iro simulate`` (iro_fed.limits).
MAX_SERVER_ROUNDS = 100_000  # also the bound of `iro fed local/rounds --rounds`
_COUNT_LIMITS = {"num_server_rounds": MAX_SERVER_ROUNDS, "local_steps": limits.MAX_TRAIN_STEPS, "top_k": limits.MAX_TOP_K,
                 "min_nodes": 100_000, "eval_episodes": limits.MAX_EVAL_EPISODES}
#: A site's episode length in simulated hours (the carbon data covers about a year).
MAX_SITE_HOURS = limits.MAX_HOURS
#: Largest ``seed``. A site's round now trains with :func:`site_seed` (always within numpy's
#: 0..2**32 - 1); the bound stays from when it was ``seed * 1000 + site * 97 + round`` (outside it,
#: every site's training raised), so the accepted settings did not change.
MAX_SEED = 4_000_000
#: The scenario seeds of evaluation episodes (:func:`evaluate_policy`: ``EVAL_SEED + e``), the
#: held-out seeds of ``iro train``. A site's training env never runs them: ``seed=10`` trained
#: site 0 on 10000, the first episode its held-out evaluation then ran.
EVAL_SEED, EVAL_SEEDS = EVAL_SEED_OFFSET, HELD_OUT

@dataclass(frozen=True)
class FedConfig:
    """The app's run settings; ``[tool.flwr.app.config]`` spells each field in kebab-case."""

    num_server_rounds: int = 3
    """Federated rounds (each: local training on every sampled site, aggregation, evaluation)."""
    local_steps: int = 400
    """Environment steps of local DQN training per site and round; the exploration and PER-beta
    schedules anneal over ``num-server-rounds x local-steps`` (see :func:`local_train`)."""
    strategy: str = "fedavg"
    """Aggregation: fedavg, fedprox, fedmedian, fedtrimmedavg, krum or bulyan."""
    scenario: str = "edge-iot"
    """Simulator scenario the sites are slices of."""
    hours: float = 4.0
    """Simulated hours per training / evaluation episode."""
    top_k: int = 8
    """Candidate nodes per decision (the policy's action space, plus the defer action)."""
    seed: int = 0
    """Seed of the initial global policy (0..4,000,000); each site's round draws its own stream from
    it, the site and the round (:func:`site_seed`)."""
    fraction_train: float = 1.0
    """Share of connected sites sampled per round."""
    min_nodes: int = 2
    """Sites that must be connected before a round starts, and the least that train per round
    (Krum needs at least ``2 * num-malicious + 3``, Bulyan ``4 * num-malicious + 3``)."""
    eval_site: int = 4
    """Held-out site (index into the scenario's site list) the server evaluates the global policy on."""
    eval_episodes: int = 1
    """Greedy episodes per evaluation (different seeds)."""
    registry: str = "policies"
    """Policy-registry folder the server writes each round's global policy into."""
    resume: bool = False
    """Start from the registry's latest global policy (when it has one) instead of a fresh one:
    a run that fine-tunes, e.g. one asked for by the feedback loop (``iro fed rounds``)."""
    carbon_aware: bool = False
    """Prefer sites in low-carbon hours (and down-weight high-carbon ones) within ``carbon_min_fraction``."""
    carbon_min_fraction: float = 0.5
    """Least share of the sampled sites that trains when ``carbon_aware`` drops high-carbon ones."""
    norm_factor: float = 10.0
    """Update validation: a reply whose update norm exceeds this times the cohort's lower median (one trained reply:
    the previous round's, at most ||w_global||; none: ||w_global||) is dropped."""
    proximal_mu: float = 0.01
    """FedProx proximal term sent to the sites (>= 0; see :func:`local_train` for how a site applies it)."""
    trim_beta: float = 0.2
    """FedTrimmedAvg: share cut from each tail per coordinate."""
    num_malicious: int = 1
    """Krum / Bulyan: malicious sites to tolerate (``f``; see ``min-nodes``)."""
    embed_dim: int = 32
    hidden_dim: int = 64
    attention_heads: int = 2
    learning_rate: float = 1e-3
    batch_size: int = 32
    buffer_size: int = 5000
    learning_starts: int = 100
    target_update_every: int = 100
    gamma: float = 0.9
    keep_replay: bool = True
    """Each site keeps its replay buffer from round to round (in its node's Flower ``context.state``),
    so every local step after the first ``learning-starts`` learns and the buffer spans the rounds.
    Off: each round starts with an empty buffer and spends ``learning-starts`` steps only collecting."""
    track_emissions: bool = True
    """Measure each site's local training with codecarbon (offline, no network)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind = {"int": int, "float": float, "str": str, "bool": bool}[str(f.type)]
            ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
                ok = True
            if not ok:
                raise FedConfigError(f"{_kebab(f.name)}: expected {kind.__name__}, got {value!r}")
        if self.strategy not in STRATEGIES:
            raise FedConfigError(f"strategy: unknown {self.strategy!r} (known: {', '.join(STRATEGIES)})")
        for name, high in _COUNT_LIMITS.items():
            if not 1 <= getattr(self, name) <= high:
                raise FedConfigError(f"{_kebab(name)}: expected 1..{high:,}, got {getattr(self, name)!r}")
        for name in ("fraction_train", "carbon_min_fraction"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise FedConfigError(f"{_kebab(name)}: expected a number in (0, 1], got {getattr(self, name)!r}")
        if not 0.0 <= self.trim_beta < 0.5:
            raise FedConfigError(f"trim-beta: expected a number in [0, 0.5), got {self.trim_beta!r}")
        if not self.norm_factor > 1.0:
            raise FedConfigError(f"norm-factor: expected > 1, got {self.norm_factor!r}")
        if not (math.isfinite(self.hours) and 0 < self.hours <= MAX_SITE_HOURS):
            raise FedConfigError(f"hours: expected a finite number > 0 and <= {MAX_SITE_HOURS}, got {self.hours!r}")
        if not (math.isfinite(self.proximal_mu) and self.proximal_mu >= 0):
            raise FedConfigError(f"proximal-mu: expected a finite number >= 0, got {self.proximal_mu!r}")
        if self.num_malicious < 0:
            raise FedConfigError(f"num-malicious: expected >= 0, got {self.num_malicious!r}")
        need = required_nodes(self.strategy, self.num_malicious)
        if self.min_nodes < need:
            # Flower's Bulyan aggregates nothing below 4f + 3 replies (every round would publish the
            # unchanged policy) and Krum's selection is meaningless below 2f + 3.
            rule = "4 x num-malicious + 3" if self.strategy == "bulyan" else "2 x num-malicious + 3"
            raise FedConfigError(f"min-nodes: {self.strategy} with num-malicious {self.num_malicious} needs at least "
                                 f"{need} sites per round ({rule}), got {self.min_nodes}; add sites or lower "
                                 "num-malicious")
        if self.eval_site < 0:
            raise FedConfigError(f"eval-site: expected >= 0, got {self.eval_site!r}")
        if not 0 <= self.seed <= MAX_SEED:
            raise FedConfigError(f"seed: expected 0..{MAX_SEED:,}, got {self.seed!r}")
        if not self.registry.strip():
            # Path("") is the process's working folder: for a ServerApp, Flower's temporary app folder
            raise FedConfigError(f"registry: expected a folder path, got {self.registry!r}")
        sites(self.scenario)  # an unknown scenario fails here, not in the first evaluation of a started run
        self.dqn_config()  # DQN settings (dimensions, rates) are validated by DQNConfig itself

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> FedConfig:
        """Typed settings from Flower's ``context.run_config`` (kebab-case keys); unknown keys raise."""
        known = {_kebab(f.name): f.name for f in fields(cls)}
        unknown = sorted(set(run_config) - set(known))
        if unknown:
            raise FedConfigError(f"unknown federated setting(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**{known[k]: v for k, v in run_config.items()})

    def to_run_config(self) -> dict[str, Any]:
        """The kebab-case mapping (what ``[tool.flwr.app.config]`` and ``--run-config`` hold)."""
        return {_kebab(k): v for k, v in dataclasses.asdict(self).items()}

    def replace(self, **changes: Any) -> FedConfig:
        return dataclasses.replace(self, **changes)

    def dqn_config(self) -> Any:
        """The local learner's :class:`DQNConfig` (small network; Rainbow parts as the DQN's defaults)."""
        from solvers import ConfigError, DQNConfig

        try:
            return DQNConfig(
                top_k=self.top_k, defer_action=True, embed_dim=self.embed_dim, hidden_dim=self.hidden_dim,
                attention_heads=self.attention_heads, learning_rate=self.learning_rate, batch_size=self.batch_size,
                buffer_size=self.buffer_size, learning_starts=self.learning_starts,
                target_update_every=self.target_update_every, gamma=self.gamma, atoms=21,
            )
        except ConfigError as exc:
            raise FedConfigError(f"DQN setting: {exc}") from exc


def _kebab(name: str) -> str:
    return name.replace("_", "-")


# --- sites and their envs ----------------------------------------------------------------------


def sites(scenario: str) -> tuple[dict[str, Any], ...]:
    """The federated sites of a scenario (``edge-iot`` only so far)."""
    if scenario != "edge-iot":
        raise FedConfigError(f"scenario: federated sites are defined for 'edge-iot', got {scenario!r}")
    return EDGE_IOT_SITES


def site_profile(scenario: str, site: int) -> dict[str, Any]:
    """One site's slice of the scenario; ``site`` wraps around the list for larger federations."""
    table = sites(scenario)
    if not isinstance(site, int) or site < 0:
        raise FedConfigError(f"site: expected an index >= 0, got {site!r}")
    return table[site % len(table)]


def training_sites(scenario: str, eval_site: int, count: int) -> list[int]:
    """The site indices of ``count`` training nodes: 0, 1, 2, ... skipping every index whose slice
    is the held-out ``eval_site``'s (the list wraps, :func:`site_profile`), so that the server's
    evaluation stays on a site no node trained on (node 4 of 5 trained on the held-out site 4)."""
    n = len(sites(scenario))
    if n < 2:
        raise FedConfigError(f"eval-site: scenario {scenario!r} has one site, none is left to train on")
    held = eval_site % n
    return [i for i in range(count + count // (n - 1) + 1) if i % n != held][:count]


def site_seed(seed: int, site: int, server_round: int, resumed_from: int = 0) -> int:
    """A site's training seed in a round (torch, its replay sampling and its env's scenario seeds,
    ``S, S + 1, ...``): drawn from ``SeedSequence([seed, site, round])``, so the episodes of any two
    (site, round) pairs are disjoint streams. ``seed * 1000 + site * 97 + round`` made round
    ``r + 1`` rerun round ``r``'s episodes from its second one on (and site 1 site 0's after 97).

    ``resumed_from`` is the registry version a ``resume`` run started from (the ServerApp sends it
    as ``resumed-from``): a resumed run counts its rounds from 1 again, and every fine-tune of
    ``iro fed rounds`` reran the first run's episodes. It joins the sequence only when non-zero,
    so a fresh run's seeds are what they were."""
    from iro_fed.learning import stream_seed

    if resumed_from:
        return stream_seed(seed, site, server_round, resumed_from)
    return stream_seed(seed, site, server_round)


def make_site_env(scenario: str, site: int, seed: int, hours: float = 4.0, k: int = 8,
                  held_out: range = range(0)) -> Any:
    """The gymnasium env of one site: dict observations ``candidates[k, F]``, ``context[C]``, ``mask[k+1]``.
    A training env passes ``held_out`` (the evaluation seeds), which its episodes then never run.

    This is the only function that builds an env; adapting to a change of the simulator's env
    is a change here. It is the simulator's :class:`~iro_fed.sim.env.PlacementEnv` on the
    site's slice of the scenario; its observations are :mod:`iro_fed.features` (what the
    ``dqn`` solver computes) and its reward is the change of R in units of one unplaced pod.
    """
    import gymnasium as gym

    from iro_fed.sim.env import PlacementEnv

    profile = site_profile(scenario, site)
    env = PlacementEnv(scenario, hours=hours, k=k, seed=seed, settings=profile["params"], held_out=held_out)
    space = env.observation_space
    if not (isinstance(space, gym.spaces.Dict) and {"candidates", "context", "mask"} <= set(space.spaces)):
        raise TypeError(f"PlacementEnv observations are {space}, expected a Dict of candidates, context and mask")
    return env


def feature_sizes() -> tuple[int, int]:
    from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES

    return len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES)


# --- weights ------------------------------------------------------------------------------------


def build_agent(cfg: FedConfig, seed: int | None = None) -> Any:
    """A fresh :class:`DQNAgent` of the federation's architecture (the initial global policy)."""
    from solvers import DQNAgent

    cand_f, ctx_f = feature_sizes()
    return DQNAgent(cfg.dqn_config(), cand_f, ctx_f, seed=cfg.seed if seed is None else seed)


#: State entries that are not learned: the noisy layers' current noise samples (redrawn before use).
NOISE_BUFFERS = (".eps_in", ".eps_out")


def _shared(key: str) -> bool:
    return not key.endswith(NOISE_BUFFERS)


def fixed_buffers(cfg: FedConfig) -> list[str]:
    """Exchanged entries that are constants of the architecture, not learned (the distributional
    ``support``): the server keeps them as sent instead of averaging them."""
    return [name for name, _ in build_agent(cfg).online.named_buffers() if _shared(name)]


def get_weights(module: Any) -> dict[str, np.ndarray]:
    """The module's learned ``state_dict`` entries as float32 numpy arrays (copies), in its key order.

    The noisy layers' noise samples are left out: they are random per site, not learned, and
    would only add noise to the aggregate and to the robust strategies' distances.
    """
    return {k: v.detach().cpu().numpy().astype(np.float32, copy=True)
            for k, v in module.state_dict().items() if _shared(k)}


def set_weights(module: Any, weights: Mapping[str, np.ndarray]) -> None:
    """Load numpy arrays into the module; missing, extra or mis-shaped arrays raise ``ValueError``."""
    import torch

    expected = {k: v for k, v in module.state_dict().items() if _shared(k)}
    missing, extra = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    if missing or extra:
        raise ValueError(f"weights: missing {missing[:5]} / unexpected {extra[:5]}")
    state = {}
    for key, ref in expected.items():
        arr = np.asarray(weights[key])
        if tuple(arr.shape) != tuple(ref.shape):
            raise ValueError(f"weights[{key!r}]: shape {arr.shape}, the network has {tuple(ref.shape)}")
        state[key] = torch.as_tensor(arr, dtype=ref.dtype)
    module.load_state_dict(state, strict=False)


def full_state_dict(cfg: FedConfig, weights: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """A complete online-network ``state_dict`` (noise buffers included) from exchanged weights."""
    agent = build_agent(cfg)
    set_weights(agent.online, weights)
    return {k: v.detach().clone() for k, v in agent.online.state_dict().items()}


# --- the weights on the wire: one flat array and its layout ------------------------------------

#: The one entry of a message's ``arrays`` record: every exchanged weight, concatenated (float32).
FLAT_KEY = "weights"
#: The field of the message's ``config`` record that holds the :class:`WeightLayout` (UTF-8 JSON bytes).
LAYOUT_FIELD = "layout"
#: The record (a ``ConfigRecord``) that carries the layout, in both directions.
CONFIG_RECORD = "config"


@dataclass(frozen=True)
class WeightLayout:
    """Names, shapes and dtypes of the weights packed, in order, into one flat float32 vector.

    Flower moves every array of a message as its own objects, each one HTTP request per hop
    (ServerApp -> SuperLink -> SuperNode -> ClientApp and back); the policy's ~35 arrays made
    ~60 objects per message. One flat array plus this layout (a short JSON string in the
    message's ``config`` record) is ~6. The aggregation strategies are coordinate-wise or use
    distances over all coordinates, so they give the same result on the flat vector.
    """

    entries: tuple[tuple[str, tuple[int, ...], str], ...]

    @classmethod
    def of(cls, weights: Mapping[str, np.ndarray]) -> WeightLayout:
        """The layout of ``weights`` (in its key order)."""
        return cls(tuple((str(k), tuple(int(d) for d in np.shape(v)), str(np.asarray(v).dtype))
                         for k, v in weights.items()))

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.entries]

    @property
    def sizes(self) -> list[int]:
        return [math.prod(shape) for _, shape, _ in self.entries]

    @property
    def size(self) -> int:
        """Length of the flat vector."""
        return sum(self.sizes)

    def to_json(self) -> str:
        return json.dumps([[n, list(s), d] for n, s, d in self.entries], separators=(",", ":"))

    @classmethod
    def from_json(cls, text: Any) -> WeightLayout:
        """The layout a message carries; anything malformed raises ``ValueError`` saying what."""
        if isinstance(text, bytes):  # how it travels: Flower's logs print a ConfigRecord's bytes as <bytes>
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"weight layout: not UTF-8 ({exc})") from exc
        if not isinstance(text, str):
            raise ValueError(f"weight layout: expected JSON text, got {type(text).__name__}")
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"weight layout: not JSON ({exc})") from exc
        if not isinstance(raw, list):
            raise ValueError("weight layout: expected a list of [name, shape, dtype]")
        entries = []
        for i, item in enumerate(raw):
            ok = (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                  and isinstance(item[1], list) and isinstance(item[2], str)
                  and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in item[1]))
            if not ok:
                raise ValueError(f"weight layout: entry {i} is {item!r}, expected [name, [dims >= 0], dtype]")
            try:
                np.dtype(item[2])
            except TypeError as exc:
                raise ValueError(f"weight layout: entry {item[0]!r} has an unknown dtype {item[2]!r}") from exc
            entries.append((item[0], tuple(item[1]), item[2]))
        names = [e[0] for e in entries]
        if len(set(names)) != len(names):
            raise ValueError("weight layout: repeated array names")
        return cls(tuple(entries))

    def difference(self, other: WeightLayout) -> str | None:
        """``None`` when ``other`` (a reply's layout) equals this one (the sent one), else what differs."""
        mine, theirs = self.names, other.names
        if mine != theirs:
            missing, extra = [n for n in mine if n not in theirs], [n for n in theirs if n not in mine]
            if missing or extra:
                return f"array names differ (missing {missing[:3]}, unexpected {extra[:3]})"
            return "array names are in another order"
        for (name, shape, dtype), (_, oshape, odtype) in zip(self.entries, other.entries, strict=True):
            if shape != oshape:
                return f"shape of {name!r} is {oshape}, expected {shape}"
            if dtype != odtype:
                return f"dtype of {name!r} is {odtype}, expected {dtype}"
        return None

    def locate(self, index: int) -> str:
        """The array name the flat vector's ``index`` belongs to."""
        for name, end in zip(self.names, np.cumsum(self.sizes), strict=True):
            if index < end:
                return name
        raise IndexError(f"index {index} is beyond the layout's {self.size} values")

    def flatten(self, weights: Mapping[str, np.ndarray]) -> np.ndarray:
        """``weights`` (this layout's names and shapes) as one contiguous float32 vector."""
        diff = self.difference(WeightLayout.of(weights))
        if diff is not None and not diff.startswith("dtype"):  # every dtype travels as float32
            raise ValueError(f"weights do not match the layout: {diff}")
        if not self.entries:
            return np.zeros(0, np.float32)
        return np.concatenate([np.asarray(weights[n], np.float32).reshape(-1) for n in self.names])

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """The named arrays (copies, in this layout's dtypes) of a flat vector of :attr:`size` values."""
        flat = np.asarray(flat)
        if flat.ndim != 1 or flat.shape[0] != self.size:
            raise ValueError(f"flat weights: shape {flat.shape}, the layout needs ({self.size},)")
        out, start = {}, 0
        for (name, shape, dtype), n in zip(self.entries, self.sizes, strict=True):
            out[name] = flat[start:start + n].reshape(shape).astype(dtype, copy=True)
            start += n
        return out


def pack_weights(weights: Mapping[str, np.ndarray]) -> tuple[np.ndarray, WeightLayout]:
    """``(flat float32 vector, layout)`` of named arrays: what a message carries."""
    layout = WeightLayout.of(weights)
    return layout.flatten(weights), layout


# --- local training and evaluation --------------------------------------------------------------


@dataclass
class LocalResult:
    """One site's round: new weights and what it reports to the server."""

    weights: dict[str, np.ndarray]
    num_examples: int
    mean_reward: float
    loss: float
    emissions_g: float
    """Grams CO2eq of the round's training; 0.0 when not measured (a metric record holds no None):
    ``emissions_measured`` says which, and the server reports such a round as null."""
    wall_s: float
    experience: dict[str, float] = dataclasses.field(default_factory=dict)
    """What the site's experience store added (``experience-*`` metrics); empty without one."""
    replay: Any = None
    """The site's replay buffer after this round (the one passed in, filled further, or a new one)."""
    emissions_measured: bool = False
    """Whether codecarbon measured ``emissions_g`` (tracking on and codecarbon installed); sent as the
    ``emissions-measured`` metric: a 0.0 from a site without codecarbon is no measurement."""
    emissions_country: str = DEFAULT_COUNTRY
    """The country (ISO alpha-3) whose grid mix ``emissions_g`` was measured with (node-config ``emissions-country``)."""


def new_replay(cfg: FedConfig, seed: int) -> Any:
    """An empty replay buffer of the kind and capacity the local learner uses."""
    from solvers import new_replay_buffer

    return new_replay_buffer(cfg.dqn_config(), seed)


def local_train(
    weights: Mapping[str, np.ndarray], cfg: FedConfig, site: int, server_round: int, steps: int | None = None,
    proximal_mu: float = 0.0, experience_db: str | Path | None = None, experience_updates: int | None = None,
    replay: Any = None, resumed_from: int = 0, emissions_country: str = DEFAULT_COUNTRY,
) -> LocalResult:
    """Train the global policy on the site's own simulator slice for ``steps`` env steps.

    ``replay`` is the site's buffer from its earlier rounds (see ``keep-replay``; ``None``: a new,
    empty one): training adds to it and learns from it at once when it holds ``learning-starts``
    transitions, so a short round does not spend its first steps only refilling a buffer. It
    comes back in :attr:`LocalResult.replay`. The network (online and target) starts from the
    global weights and Adam from fresh moments in every round (moments kept from before the
    aggregation measured worse).

    **Schedules across rounds.** Epsilon (when ``noisy`` is off) and the PER beta anneal over the
    whole run, ``num-server-rounds x local-steps`` env steps, not over each round: round ``r``
    starts where ``r - 1`` rounds of ``local-steps`` left them (:func:`schedule_position`; they
    restarted at epsilon 1 and beta ``priority_beta0`` every round). The position is the
    federation's clock, derived from ``server_round`` without state on the site: a site sampled
    for the first time in round 5 explores as the others do in round 5, for the global policy it
    starts from has had four rounds of training. A ``resume`` run (fine-tuning) counts its rounds
    from 1 again, so its schedules start over, as a new ``iro train`` run does; its episodes do not
    (``resumed_from``, the version it started from, is in the round's seed: :func:`site_seed`).

    **The target network** is not exchanged (the server aggregates the online network only): each
    round sets it to the round's global policy, i.e. a target sync at the start of every round,
    and it then syncs every ``target-update-every`` gradient steps counted from the round's start.
    A target kept on the site from its last round would hold weights from before the aggregation
    that the global policy has replaced.

    ``proximal_mu > 0`` (FedProx, Li et al., MLSys 2020): every gradient step's loss, in the
    simulator steps and on the experience store, adds ``mu/2 * ||w - w_global||^2`` over the
    trainable parameters, so a site's update stays near the global policy however long it trains.

    ``experience_db`` (the edge agent's experience store, node setting ``experience-db``): after
    the simulator steps, ``experience_updates`` more gradient steps on the site's real decisions
    (see :func:`learn_from_experience`), under the same proximal term.

    ``emissions_country``: the ISO alpha-3 code of the country whose grid mix codecarbon measures
    the training with (the site's node-config ``emissions-country``, checked by the caller:
    :func:`iro_fed.federated.emissions.node_country`).
    """
    import torch

    from solvers import train_dqn

    torch.set_num_threads(1)
    seed = site_seed(cfg.seed, site, server_round, resumed_from)
    n = int(steps or cfg.local_steps)
    if replay is None:
        replay = new_replay(cfg, seed)
    else:
        replay.rng = np.random.default_rng(seed)  # this round's sampling, reproducible from the round's seed
    agent, result = train_dqn(
        [lambda: make_site_env(cfg.scenario, site, seed, cfg.hours, cfg.top_k, held_out=EVAL_SEEDS)], cfg.dqn_config(),
        steps=n, seed=seed,
        progress=False, track_emissions=cfg.track_emissions, emissions_country=emissions_country,
        initial_state=full_state_dict(cfg, weights), replay=replay, proximal_mu=proximal_mu,
        schedule_position=schedule_position(cfg, server_round, n),
    )
    experience: dict[str, float] = {}
    if experience_db is not None:
        experience = learn_from_experience(agent, experience_db, cfg, n, experience_updates, seed)
    new = get_weights(agent.online)
    return LocalResult(
        weights=new, num_examples=int(result.steps),
        mean_reward=float(result.mean_episode_reward) if result.mean_episode_reward is not None else 0.0,
        loss=float(result.last_loss) if result.last_loss is not None else 0.0,
        emissions_g=1000.0 * float(result.emissions_kg or 0.0), wall_s=float(result.wall_s), experience=experience,
        replay=replay, emissions_measured=result.emissions_kg is not None, emissions_country=emissions_country,
    )


def schedule_position(cfg: FedConfig, server_round: int, local_steps: int) -> tuple[int, int]:
    """``(done, horizon)`` of a site's round for :func:`solvers.dqn.train.train`: the env steps
    ``server_round - 1`` earlier rounds of ``local_steps`` took (none before round 1), of
    ``num-server-rounds`` rounds' worth; a round past the last stays at the schedules' end."""
    return max(0, server_round - 1) * local_steps, cfg.num_server_rounds * local_steps


def learn_from_experience(agent: Any, experience_db: str | Path, cfg: FedConfig, local_steps: int,
                          updates: int | None = None, seed: int = 0) -> dict[str, float]:
    """Gradient steps of ``agent`` on the decisions an edge agent recorded in its experience store.

    The agent records each decision in this policy's own observation format (the ``k`` candidates'
    features, the context, the mask), the slot it chose and the env's reward for it; rows recorded
    for another ``top-k`` or feature set, or without an observation, are skipped and counted.
    Each decision becomes a one-step transition to the site's next recorded decision, discounted
    by ``gamma`` and bootstrapped from it, as the simulator's episodes are: the agent's stream of
    decisions has no end (see :func:`experience_transitions`). They form a replay buffer of their
    own (the DQN training loop owns the simulator's buffer), sampled uniformly for ``updates``
    steps (default: two passes over the transitions, at most ``local_steps``). A missing or
    unreadable store trains nothing and says so in ``experience-error``. Returns the
    ``experience-*`` metrics (``experience-samples``: the decisions read, the newest included).
    """
    import sqlite3

    from iro_fed.experience import read_policy_samples
    from solvers import ReplayBuffer

    out = {"experience-samples": 0, "experience-skipped": 0, "experience-updates": 0, "experience-loss": 0.0,
           "experience-mean-reward": 0.0, "experience-error": 0}
    path = Path(experience_db)
    cand_f, ctx_f = feature_sizes()
    try:
        if not path.is_file():
            raise FileNotFoundError(f"no experience store at {path}")
        found = read_policy_samples(path, cfg.top_k, cand_f, ctx_f, limit=cfg.buffer_size)
    except (OSError, sqlite3.Error) as exc:
        import logging

        logging.getLogger(__name__).warning("experience-db %s: %s", path, exc)
        out["experience-error"] = 1
        return out
    samples = found.samples
    out["experience-samples"] = len(samples)
    out["experience-skipped"] = found.without_observation + found.other_shape + found.invalid
    if not samples:
        return out
    out["experience-mean-reward"] = float(np.mean([s.reward for s in samples]))
    transitions = experience_transitions(samples, cfg.gamma)
    if not transitions:
        return out
    buffer = ReplayBuffer(len(transitions), seed=seed)
    for t in transitions:
        buffer.add(t)
    batch_size = min(cfg.batch_size, len(transitions))
    n = updates if updates is not None else min(2 * math.ceil(len(transitions) / batch_size), local_steps)
    losses = [agent.learn(buffer.sample(batch_size))["loss"] for _ in range(max(0, int(n)))]
    out["experience-updates"] = len(losses)
    out["experience-loss"] = float(np.mean(losses)) if losses else 0.0
    return out


def experience_transitions(samples: Sequence[Any], gamma: float) -> list[Any]:
    """The recorded decisions of one site (oldest first, as the store lists them) as 1-step
    transitions: each to the next recorded decision's observation (its mask the valid actions
    there, for the target's argmax), discount ``gamma``.

    The decisions are a continuing stream, as the simulator's episode ends are time limits, not
    terminal states: a discount of 0 (as stored before) made the value of a decision its
    immediate reward, so every site pulled the policy away from the actions it had taken. A
    decision without a successor here is left out: the newest one (it is not the end of
    anything; the store keeps it, and the next round, which reads the store again, trains on it
    once the decision after it is recorded), and one whose next row was skipped (no observation,
    another shape: where it led is not known). Samples that carry their store ``row_id`` pair only
    with the row right after; without it, neighbours in the list pair.
    """
    from solvers import Transition

    out = []
    for s, nxt in zip(samples, samples[1:], strict=False):
        here, there = getattr(s, "row_id", None), getattr(nxt, "row_id", None)
        if here is not None and there is not None and there != here + 1:
            continue  # rows between them were skipped: nxt is not the decision that followed
        out.append(Transition(s.obs, s.action, s.reward, nxt.obs, float(gamma)))
    return out


def evaluate_policy(weights: Mapping[str, np.ndarray], cfg: FedConfig, site: int, episodes: int | None = None,
                    seed: int = EVAL_SEED, shuffle: bool = True) -> dict[str, float]:
    """Greedy episodes of the policy on ``site``: mean return (see :func:`run_episodes`) and simulator totals.

    ``shuffle`` presents the candidate slots in a random order at every decision. The env lists
    candidates best-marginal-R first, so a degenerate network (e.g. constant Q-values after a
    poisoned aggregate) would otherwise inherit the objective's greedy choice from slot 0 via
    argmax's tie-break; a trained policy reads its features and is unaffected (the network is
    permutation-equivariant over candidates).
    """
    import torch

    torch.set_num_threads(1)
    agent = build_agent(cfg)
    set_weights(agent.online, weights)
    rng = np.random.default_rng(seed)
    k = cfg.top_k

    def choose(obs: Mapping[str, np.ndarray]) -> int:
        perm = rng.permutation(k) if shuffle else np.arange(k)
        mask = np.array(obs["mask"], copy=True)
        mask[:k] = obs["mask"][:k][perm]
        batch = {"candidates": obs["candidates"][perm][None], "context": obs["context"][None], "mask": mask[None]}
        a = int(agent.act(batch, explore=False)[0])
        return int(perm[a]) if a < k else a

    return run_episodes(choose, cfg, site, episodes or cfg.eval_episodes, seed)


def run_episodes(choose: Any, cfg: FedConfig, site: int, episodes: int, seed: int) -> dict[str, float]:
    """Mean episode return (change of R in units of one unplaced pod), simulator score, carbon and
    pending share of a decision function on a site."""
    rewards, scores, carbon, pending = [], [], [], []
    for e in range(episodes):
        env = make_site_env(cfg.scenario, site, seed + e, cfg.hours, cfg.top_k)
        obs, info = env.reset(seed=seed + e)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, info = env.step(choose(obs))
            total += float(r)
            done = bool(term or trunc)
        totals = info.get("totals", {})
        rewards.append(total)
        scores.append(float(totals.get("score", math.nan)))
        carbon.append(float(totals.get("carbon_kg", math.nan)))
        pct = totals.get("pending_pct")
        if pct is not None and math.isfinite(pct):  # None: no pod became ready, no share to average
            pending.append(float(pct))
        env.close()
    return {"eval-reward": float(np.mean(rewards)), "eval-score": float(np.mean(scores)),
            "eval-carbon-kg": float(np.mean(carbon)),
            "eval-pending-pct": float(np.mean(pending)) if pending else math.nan}


def random_choice(seed: int) -> Any:
    """A decision function picking uniformly among the valid actions (the lower reference)."""
    rng = np.random.default_rng(seed)
    return lambda obs: int(rng.choice(np.flatnonzero(obs["mask"])))


def greedy_choice(obs: Mapping[str, np.ndarray]) -> int:
    """The objective's greedy decision (best marginal R candidate): the reference policy."""
    mask = np.asarray(obs["mask"])
    return 0 if mask[0] else len(mask) - 1


def site_carbon(cfg: FedConfig, site: int, server_round: int) -> float:
    """The site's grid carbon intensity (gCO2/kWh) at the round's simulated hour (one round = one hour)."""
    from iro_fed.sim.scenarios import build_scenario

    profile = site_profile(cfg.scenario, site)
    sc = build_scenario(cfg.scenario, seed=cfg.seed, hours=24.0, **profile["params"])
    series = np.asarray(sc.carbon[profile["domain"]])  # history steps of the day before, then the run
    per_h = int(round(3600.0 / sc.step_s))
    return float(series[sc.history + ((server_round - 1) % 24) * per_h])


def default_registry(cfg: FedConfig) -> Path:
    return Path(cfg.registry).expanduser()
