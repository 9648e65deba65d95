"""The ``dqn`` solver: a trained policy scores the top-K candidate nodes of each pod.

Candidates and features come from :mod:`iro_fed.features` (the same code the simulator's env
used in training). The policy's Q-values rank the candidates; the objective module still
scores the placement it returns. ``policy`` names a checkpoint written by ``iro train`` (or a
policy-registry folder, whose ``latest`` version is used); without it the small default
policy shipped in ``solvers/dqn/policies/`` is used.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from iro_fed.feasibility import explain, feasible_nodes
from iro_fed.features import (
    CANDIDATE_FEATURES,
    CONTEXT_FEATURES,
    candidate_features,
    context_features,
    feature_layout,
    order_candidates,
    preselect,
)
from iro_fed.limits import MAX_TOP_K
from iro_fed.model import ClusterState
from solvers.base import (
    ORDER,
    SEED,
    Decision,
    InvalidSettingError,
    OnlineSolver,
    Param,
    SolverProperties,
    nonnegative_count,
    workload_index,
)

DEFAULT_POLICY = Path(__file__).parent / "policies" / "default.pt"


def resolve_policy(path: str | os.PathLike[str] | None) -> Path:
    """A checkpoint file from a path: a file as is, a registry folder's ``latest``, or the default."""
    if path is None:
        return DEFAULT_POLICY
    p = Path(path)
    if p.is_dir():
        latest = p / "latest"
        if latest.is_file():
            target = latest.read_text(encoding="utf-8").strip()
            return (p / target) if not Path(target).is_absolute() else Path(target)
        if latest.is_symlink() or latest.exists():
            return latest.resolve()
        raise InvalidSettingError(f"solver 'dqn' setting 'policy': folder {str(p)!r} has no 'latest' policy")
    return p


def layout_difference(names: Any, expected: dict[str, list[str]]) -> str:
    """Where a checkpoint's feature names first differ from ours, e.g. ``candidates[3]: 'a' vs 'b'``
    (equal counts in another order read wrong columns silently, so the count alone does not say it)."""
    if not isinstance(names, dict):
        return f"feature_names is {type(names).__name__}, expected a mapping"
    for part, ours in expected.items():
        theirs = names.get(part)
        if not isinstance(theirs, list):
            return f"{part}: missing"
        for i in range(max(len(theirs), len(ours))):
            a = theirs[i] if i < len(theirs) else None
            b = ours[i] if i < len(ours) else None
            if a != b:
                return f"{part}[{i}]: {a!r} in the policy, {b!r} here; {len(theirs)} vs {len(ours)} {part} features"
    return "other feature groups"


def check_feature_names(path: str | os.PathLike[str], names: Any, expected: dict[str, list[str]],
                        advice: str = "retrain it with `iro train`") -> None:
    """:class:`~solvers.dqn.checkpoint.CheckpointError` when a checkpoint's recorded feature names
    (its metadata's ``feature_names``; None: an older checkpoint, which records none) differ from
    ``expected``, saying where (:func:`layout_difference`) and ``advice``."""
    from solvers.dqn.checkpoint import CheckpointError

    if names is not None and names != expected:
        raise CheckpointError(f"policy {str(path)!r}: trained on other features than this version computes "
                              f"({layout_difference(names, expected)}); {advice}")


def check_policy_features(policy: str | os.PathLike[str] | None) -> None:
    """Refuse now a policy that every later load would refuse (a fine-tune that starts from it
    hours into a run): :class:`~solvers.dqn.checkpoint.CheckpointError` when it was trained on
    other features than this version computes (names, else counts). ``policy`` as the ``policy``
    setting takes it (a file, a registry folder's latest, None: the shipped default); read from its
    JSON metadata without torch where it can (as :func:`~solvers.dqn.checkpoint.read_config`)."""
    import json

    from solvers.dqn.checkpoint import CheckpointError, load_checkpoint, metadata_path

    path = resolve_policy(policy)
    if not path.is_file():
        raise CheckpointError(f"policy {str(path)!r}: no such file (train one with `iro train`)")
    try:
        meta = json.loads(metadata_path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):  # missing or not JSON: ask the checkpoint
        meta = None
    if not isinstance(meta, dict) or "candidate_features" not in meta:
        try:
            meta = load_checkpoint(path)[1]
        except ImportError as exc:
            raise CheckpointError(f"policy {str(path)!r}: its JSON metadata {str(metadata_path(path))!r} is missing "
                                  "or unreadable, and reading the checkpoint needs torch "
                                  "(pip install 'iro-fed[dqn]')") from exc
    _check_features(path, meta)


def _check_features(path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """A checkpoint's metadata against the features this version computes: names, then counts."""
    from solvers.dqn.checkpoint import CheckpointError

    check_feature_names(path, meta.get("feature_names"), feature_layout())
    counts = (meta.get("candidate_features"), meta.get("context_features"))
    if counts != (len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES)):
        raise CheckpointError(f"policy {str(path)!r}: {counts[0]}+{counts[1]} features, this version computes "
                              f"{len(CANDIDATE_FEATURES)}+{len(CONTEXT_FEATURES)}")


class LoadedPolicy:
    """A checkpoint's network in eval mode plus its metadata; checked against our features."""

    _cache: ClassVar[dict[tuple[str, float], LoadedPolicy]] = {}

    path: Path | None
    """The checkpoint; None for a policy served straight from training (:meth:`from_agent`)."""

    def __init__(self, path: Path) -> None:
        import torch

        from solvers.dqn.checkpoint import CheckpointError, load_checkpoint
        from solvers.dqn.config import ConfigError, DQNConfig

        # One intra-op thread: a 16-candidate forward pass is far too small to split, and extra
        # threads only contend with the caller (measured: 0.6 ms vs 70+ ms on a busy 2-core box).
        # Not in _serve: fit() serving its own agent keeps the caller's thread count (docs/reference.md).
        torch.set_num_threads(int(os.environ.get("IRO_TORCH_THREADS", "1")))
        state, meta = load_checkpoint(path)
        _check_features(path, meta)
        try:  # for inference: a training-only setting a later version refuses does not stop a policy placing pods
            self.config = DQNConfig.from_dict(meta["config"], training=False)
        except (ConfigError, TypeError) as exc:  # TypeError: a config that is not a mapping
            raise CheckpointError(f"policy {str(path)!r}: unusable config in its metadata ({exc})") from exc
        try:
            self._serve(state, meta, meta["candidate_features"], meta["context_features"], path)
        except RuntimeError as exc:
            raise CheckpointError(f"policy {str(path)!r}: weights do not match its config ({exc})") from exc

    @classmethod
    def from_agent(cls, agent: Any, config: Any, metadata: dict[str, Any]) -> LoadedPolicy:
        """A trained agent's online network, served as loading its checkpoint would serve it: a
        copy of the weights in eval mode (the agent keeps its own mode, noise and weights for any
        further training); ``path`` None, not cached. ``config``: the agent's :class:`DQNConfig`."""
        net = agent.online
        state = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
        self = cls.__new__(cls)
        self.config = config
        self._serve(state, metadata, net.candidate_features, net.context_features, None)
        return self

    def _serve(self, state: dict[str, Any], meta: dict[str, Any], cand_f: int, ctx_f: int,
               path: Path | None) -> None:
        """Build the eval-mode network of ``state`` for :attr:`config` (RuntimeError when the
        weights do not fit it) and trace it."""
        from solvers.dqn.agent import DQNAgent
        from solvers.dqn.config import TRAINING_ONLY, DQNConfig

        self.metadata = meta
        # The agent's optimizer is never used here: it gets the default training settings, so an
        # unchecked saved one (learning_rate nan) cannot fail Adam's own check. The agent draws its
        # initial weights on a fork of torch's generator: the host's stays as it was.
        network = {k: v for k, v in self.config.to_dict().items() if k not in TRAINING_ONLY}
        self.agent = DQNAgent(DQNConfig.from_dict(network), cand_f, ctx_f, seed=0)
        self.agent.online.load_state_dict(state)
        self.agent.online.eval()  # for good: noise off, deterministic
        self.path = path
        self._traced = self._trace(cand_f, ctx_f)

    def _trace(self, cand_f: int, ctx_f: int) -> Any:
        """The network traced and frozen for the usual input shape (one decision, K candidates):
        half the eager forward time. Other shapes run eagerly."""
        import warnings

        import torch

        k, a = self.config.top_k, self.config.num_actions
        example = (torch.zeros(1, k, cand_f), torch.zeros(1, ctx_f), torch.ones(1, a, dtype=torch.bool))

        class _Q(torch.nn.Module):
            def __init__(self, net: Any) -> None:
                super().__init__()
                self.net = net

            def forward(self, cand: Any, ctx: Any, mask: Any) -> Any:
                return self.net.q_values(cand, ctx, mask)

        try:
            with warnings.catch_warnings(), torch.inference_mode():
                warnings.simplefilter("ignore")
                traced = torch.jit.freeze(torch.jit.trace(_Q(self.agent.online).eval(), example))
                eager = self.agent.online.q_values(*example)
                if not torch.allclose(traced(*example), eager, equal_nan=True):
                    return None
            return traced
        except Exception:  # tracing is an optimization only
            return None

    @classmethod
    def load(cls, path: Path) -> LoadedPolicy:
        from solvers.dqn.checkpoint import CheckpointError

        try:
            key = (str(path.resolve()), path.stat().st_mtime)
        except OSError as exc:
            raise CheckpointError(f"policy {str(path)!r}: no such file (train one with `iro train`)") from exc
        if key not in cls._cache:
            cls._cache[key] = cls(path)
        return cls._cache[key]

    def q_values(self, cand: np.ndarray, ctx: np.ndarray, mask: np.ndarray) -> np.ndarray:
        import torch

        inputs = (torch.from_numpy(cand[None]), torch.from_numpy(ctx[None]), torch.from_numpy(mask[None].astype(bool)))
        with torch.inference_mode():
            if self._traced is not None and cand.shape[0] == self.config.top_k:
                q = self._traced(*inputs)
            else:
                q = self.agent.online.q_values(*inputs)
        return q[0].numpy()


class DQNSolver(OnlineSolver):
    """Online placement by a trained Rainbow-style DQN over the top-K candidates."""

    name = "dqn"
    properties = SolverProperties(
        "online", False, "A trained Rainbow-style DQN ranks each pod's top-K candidate nodes (see `iro train`).",
        requires=("torch",), extra="dqn",
    )
    parameters: ClassVar[dict[str, Param]] = {
        "seed": SEED,
        "order": ORDER,
        "policy": Param(None, str, "Checkpoint from `iro train`, or a policy-registry folder (its latest); "
                        "default: the shipped default policy.", nullable=True),
        # At most MAX_TOP_K, the bound of a policy's own top_k (DQNConfig): no policy is trained on more
        # candidates, and a forward pass holds heads x k x k attention weights (1000: 16 MB; 100,000: 160 GB).
        "top_k": Param(None, int, "Candidates per decision (default: the policy's; more shows the policy more candidates "
                       "than it was trained on).", minimum=1, maximum=MAX_TOP_K, nullable=True),
    }

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._policy: LoadedPolicy | None = None

    @property
    def loaded(self) -> LoadedPolicy:
        """The policy, loaded on first use (a missing or incompatible one is a clear error)."""
        if self._policy is None:
            from solvers.dqn.checkpoint import CheckpointError

            try:
                self._policy = LoadedPolicy.load(resolve_policy(self.policy))
            except CheckpointError as exc:
                raise InvalidSettingError(f"solver 'dqn' setting 'policy': {exc}") from exc
        return self._policy

    def preload(self) -> None:
        """Load and check the policy now, not at the first decision: raises
        :class:`InvalidSettingError` for a missing, corrupt or incompatible checkpoint.

        The hook a caller that swaps solvers in (the edge agent's policy registry) calls on any
        solver that has it, so a bad checkpoint is refused before it replaces a working one; a
        subclass or a wrapper that loads something lazily keeps the contract by offering it too."""
        self.loaded  # noqa: B018 - the property loads and checks the checkpoint

    @property
    def k(self) -> int:
        return self.top_k or self.loaded.config.top_k

    def _mask(self, m: int, k: int) -> np.ndarray:
        extra = 1 if self.loaded.config.defer_action else 0
        mask = np.zeros(k + extra, dtype=np.int8)
        mask[:m] = 1  # no "later" in a one-shot solve: the defer action stays masked
        return mask

    def _slots(self, m: int, k: int) -> int:
        """Slots of the network input for ``m <= k`` candidates of a ``k``-candidate decision.

        The candidates' Q-values are the same for one padding slot or many (not for none): the
        attention masks padding out, the dueling heads average over valid slots only, and the
        value head's max over slots sees identical padding rows (one or many). So a decision with
        fewer candidates than ``k`` pads to the trained width (the traced network) or to ``m + 1``
        if more, not to ``k`` (``top_k=3000`` on 16 nodes was a 3000-slot pass: 20 s, 650 MB).
        ``k`` itself still enters the context features (``candidate_share``)."""
        if m >= k:
            return k
        trained = self.loaded.config.top_k
        return trained if m < trained else m + 1

    def _q(self, state: ClusterState, w: int, nodes: np.ndarray, gains: np.ndarray, num_feasible: int) -> np.ndarray:
        k = max(self.k, nodes.size)
        slots = self._slots(nodes.size, k)
        cand = candidate_features(state, w, nodes, gains, slots)
        ctx = context_features(state, w, num_feasible, nodes.size, k, {"deferrable": 0.0})
        return self.loaded.q_values(cand, ctx, self._mask(nodes.size, slots))[: nodes.size]

    def _scores(self, state: ClusterState, w: int, nodes: np.ndarray, gains: np.ndarray,
                num_feasible: int) -> list[float]:
        """Scores of ``nodes`` (best marginal gain first): the policy's Q-values of the first K, as
        :meth:`decide` sees them; the rest in their order, below the policy's."""
        head = min(self.k, nodes.size)
        q = self._q(state, w, nodes[:head], gains[:head], num_feasible)
        floor = float(q.min())
        return q.tolist() + [floor - 1.0 - i for i in range(nodes.size - head)]

    def decide(self, state: ClusterState, w: int) -> Decision:
        w = workload_index(state, w)
        self._ensure(state.problem)
        nodes, gains, num_feasible = preselect(state, w, self.k)
        if nodes.size == 0:
            return Decision(-1, (), explain(state, w))
        q = self._q(state, w, nodes, gains, num_feasible)
        node = int(nodes[int(np.argmax(q))])
        return Decision(node, self.choose_cards(state, w, node))

    def score(self, state: ClusterState, w: int, candidates: np.ndarray) -> np.ndarray:
        """Scores of arbitrary candidates, as :meth:`rank` orders them: the best K by marginal gain
        get the policy's Q-values on the K-slot input it was trained on (so the best of all
        feasible nodes is :meth:`decide`'s node); the others follow by marginal gain below them.

        Feeding every candidate at once (the extender asks about all filtered nodes) showed the
        policy more candidates than training ever did: its best differed from decide's."""
        candidates = np.asarray(candidates, dtype=np.int64)
        if candidates.size == 0:
            return np.zeros(0)
        nodes, gains = order_candidates(state, w, candidates)
        num_feasible = int(np.count_nonzero(feasible_nodes(state, w)))
        by_node = dict(zip(nodes.tolist(), self._scores(state, w, nodes, gains, num_feasible), strict=True))
        return np.array([by_node[int(n)] for n in candidates])

    def rank(self, state: ClusterState, w: int, k: int = 16) -> list[tuple[int, float]]:
        """The policy's order of its K candidates (as :meth:`decide` sees them); beyond K, the
        next candidates by marginal gain, scored below the policy's."""
        w = workload_index(state, w)
        k = nonnegative_count("k", k)
        self._ensure(state.problem)
        nodes, gains, num_feasible = preselect(state, w, max(k, self.k))
        if nodes.size == 0:
            return []
        scores = self._scores(state, w, nodes, gains, num_feasible)
        head = min(self.k, nodes.size)
        order = np.argsort(-np.asarray(scores[:head]), kind="stable")
        ranked = [(int(nodes[i]), scores[i]) for i in order]
        ranked += [(int(n), s) for n, s in zip(nodes[head:].tolist(), scores[head:], strict=True)]
        return ranked[:k]

    # --- learning ----------------------------------------------------------------------------

    def fit(
        self, env_fns: list[Any], steps: int, out: str | os.PathLike[str] | None = None,
        config: dict[str, Any] | None = None, resume: str | os.PathLike[str] | None = None,
        metadata: dict[str, Any] | None = None, **train_options: Any,
    ) -> Any:
        """Train a policy on gymnasium envs (``iro_fed.sim.env.PlacementEnv``) and use it.

        The solver then decides with the trained weights: those of the checkpoint ``out`` (its
        ``policy`` setting names it), or without ``out`` a copy of the trained online network in
        eval mode (``policy`` stays as it was but no longer decides). ``self.agent`` is the trained
        agent itself (its training mode and noise as training left them).

        ``config`` holds :class:`~solvers.dqn.config.DQNConfig` fields (an unknown or invalid one
        raises :class:`InvalidSettingError` naming it); the checkpoint records the feature
        layout so a later load can refuse a policy trained on other features. Returns the
        :class:`~solvers.dqn.train.TrainResult`.
        """
        from solvers.dqn.config import ConfigError, DQNConfig
        from solvers.dqn.train import train

        try:
            cfg = DQNConfig.from_dict(dict(config or {}))
        except (ConfigError, TypeError) as exc:
            raise InvalidSettingError(f"solver 'dqn' training config: {exc}") from exc
        if self.top_k is not None and self.top_k != cfg.top_k:
            cfg = cfg.replace(top_k=self.top_k)
        meta = {**(metadata or {}), "feature_names": feature_layout()}
        agent, result = train(env_fns, cfg, steps, seed=self.seed, out=out, resume=resume, metadata=meta,
                              **train_options)
        if out is not None:
            self.policy = str(out)
            self._policy = None
        else:  # nothing written to load: decide with the trained weights themselves (the policy it had is gone)
            net = agent.online
            self._policy = LoadedPolicy.from_agent(agent, cfg, {
                **meta, "config": cfg.to_dict(), "candidate_features": net.candidate_features,
                "context_features": net.context_features, "steps": result.steps})
        self.agent = agent
        return result
