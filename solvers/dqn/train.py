"""Training loop: vectorized gymnasium envs, n-step prioritized replay, target network, checkpoints.

Reads top to bottom like CleanRL's ``dqn.py``: seed everything, build the envs and the agent,
collect with the online network (noisy layers or epsilon), learn from replay, copy into the target
network, write the checkpoint. The environments must produce dict observations with
``candidates[K, F]``, ``context[C]`` and ``mask[A]`` (``iro_fed.sim.env.PlacementEnv`` does).

``--resume`` restores the online and target networks, the optimizer's moments and the step
count; the learning rate and Adam epsilon are the config's. The target network and the moments
are in the training-state file beside the checkpoint (:func:`optimizer_path`); without the
target there (a file written by an older version, or a federated global policy, which has
none) it starts as a copy of the online network, and a note says so. The
config must describe the checkpoint's network (:meth:`DQNConfig.architecture`), and a checkpoint
that records other feature names than the run's ``metadata["feature_names"]`` is refused before
any env is built (a :class:`~solvers.dqn.checkpoint.CheckpointError`; the same counts in another
order fit the envs but read other columns). So is one that records none (written before they were
recorded) when the run states its names: only its counts could be checked, unless the caller
passes ``assume_feature_names=True``, which resumes it as trained on the run's features and says so. The replay
buffer is not saved (it would be far larger than the policy) and refills before learning resumes.
The schedules continue where the checkpoint stopped (its ``schedule`` metadata): epsilon and the
PER beta anneal over the horizon of the run that started them (a finished run's stay at their end
values; train a new policy for a new schedule), and the target network syncs every
``target_update_every`` gradient steps counted over both runs. A checkpoint written before the
schedules were saved restarts them from the resumed step, as resuming always did, and says so.

Training's random streams continue too: the noisy layers' noise, epsilon's draws and the replay
buffer's sampling are saved in the training-state file where the run stopped (before ``evaluate``
draws from them) and restored on resume, into a passed-in buffer as well; an older file without
them restarts them from ``seed``, and a note says so. With the replay buffer passed in (``replay``,
or one restored with ``load_state_arrays``) and an env that goes on where it stopped, a resumed run
gives bit for bit the weights of one uninterrupted run of the same total steps, exploration on or
off and at any ``train_every`` (the steps since the last gradient step are saved too), when the cut
falls at an episode boundary: every run starts by resetting its envs, so an episode cut in the
middle ends there, and the n-step windows it had in flight (at most ``n_step - 1`` transitions per
env) are dropped rather than saved, for nothing could complete them.

Randomness is training's own: torch's CPU generator and numpy's global one are seeded with
``seed`` inside and the caller's streams restored afterwards (torch's intra-op thread count too),
with the same draws, so a seed gives the weights it gave when training reseeded the host. The
noisy layers draw from the agent's own generator (:attr:`DQNAgent.noise_generator`).

``schedule_position`` places a run inside a longer schedule without a checkpoint: a federated
site's round ``r`` of ``local_steps`` anneals epsilon and the PER beta from where ``r - 1``
earlier rounds left them (:func:`iro_fed.federated.task.local_train`).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from solvers.dqn.config import ConfigError, DQNConfig
from solvers.dqn.replay import NStepAccumulator, PrioritizedReplayBuffer, ReplayBuffer, numpy_generator

EnvFactory = Callable[[], Any]
log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a run did; also written into the checkpoint's metadata."""

    steps: int
    """Environment steps of the policy, a resumed checkpoint's included."""
    episodes: int
    updates: int
    """Gradient steps of this run."""
    mean_episode_reward: float | None
    last_loss: float | None
    wall_s: float
    steps_per_s: float
    emissions_kg: float | None
    path: str | None
    evaluation: dict[str, Any] = field(default_factory=dict)


def _row(obs: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    return {k: np.array(v[i], copy=True) for k, v in obs.items()}


def _copy(obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in obs.items()}


def optimizer_path(path: str | Path) -> Path:
    """The training-state file beside a checkpoint: Adam's moments and the target network."""
    return Path(path).with_suffix(".optim.pt")


class _Emissions:
    """codecarbon's offline tracker (no network), or nothing when disabled or not installed."""

    def __init__(self, enabled: bool, country: str) -> None:
        self.tracker = None
        if not enabled:
            return
        try:
            import logging

            from codecarbon import OfflineEmissionsTracker

            logging.getLogger("codecarbon").setLevel(logging.ERROR)
            import codecarbon

            # No emissions.csv: releases with OutputMethod (3.x) take output_methods and warn that
            # their save_to_* flags are deprecated; those before it take only save_to_file.
            quiet = {"output_methods": []} if hasattr(codecarbon, "OutputMethod") else {"save_to_file": False}
            self.tracker = OfflineEmissionsTracker(
                country_iso_code=country, log_level="error", project_name="iro-train", measure_power_secs=15, **quiet,
            )
            self.tracker.start()
        except ImportError:
            self.tracker = None

    def stop(self) -> float | None:
        if self.tracker is None:
            return None
        value = self.tracker.stop()
        return float(value) if value is not None else None


def new_buffer(cfg: DQNConfig, seed: int = 0) -> ReplayBuffer:
    """An empty replay buffer of the kind (uniform or prioritized) and capacity ``cfg`` asks for."""
    if cfg.prioritized:
        return PrioritizedReplayBuffer(cfg.buffer_size, cfg.priority_alpha, cfg.priority_eps, seed=seed)
    return ReplayBuffer(cfg.buffer_size, seed=seed)


def train(
    env_fns: Sequence[EnvFactory],
    cfg: DQNConfig,
    steps: int,
    seed: int = 0,
    out: str | Path | None = None,
    resume: str | Path | None = None,
    metadata: dict[str, Any] | None = None,
    evaluate: Callable[[Any], dict[str, Any]] | None = None,
    progress: bool = True,
    track_emissions: bool = True,
    emissions_country: str = "DEU",
    console: Any = None,
    initial_state: dict[str, Any] | None = None,
    torch_threads: int = 1,
    time_limit_s: float | None = None,
    replay: ReplayBuffer | None = None,
    proximal_mu: float = 0.0,
    schedule_position: tuple[int, int] | None = None,
    assume_feature_names: bool = False,
) -> tuple[Any, TrainResult]:
    """Train for ``steps`` environment steps (summed over the envs); returns ``(agent, result)``.

    ``initial_state`` starts the online and target networks from given weights (a federated
    round's global policy); ``resume`` does the same from a checkpoint and continues its count.
    ``time_limit_s`` ends training early (at a step boundary) once that much wall time passed.
    ``torch_threads``: intra-op threads; one is fastest for networks this small (more threads
    mostly contend with the simulator for the cores).

    ``replay`` continues filling (and learning from) an existing buffer instead of a new empty
    one, so learning resumes at once when it already holds ``learning_starts`` transitions (a
    federated site keeps its own experience from round to round); it is filled in place.

    ``proximal_mu > 0`` (FedProx) adds ``mu/2 * ||w - w_start||^2`` to every gradient step's
    loss, anchored at the starting weights (``initial_state`` or ``resume``).

    ``schedule_position=(done, horizon)``: epsilon and the PER beta anneal as at env step ``done``
    of a ``horizon``-step schedule, not from this run's start over its ``steps`` (a federated
    site's later round); not with ``resume`` (the checkpoint says where its schedules stopped) nor
    ``out`` (its checkpoint could not say where they started).

    ``assume_feature_names``: resume a checkpoint that records no feature names (an older one) as
    trained on ``metadata["feature_names"]``, with a note; without it such a resume is refused.

    Torch's CPU generator and numpy's global one are seeded with ``seed`` for the run and given
    back to the caller as they were (the thread count too); the returned agent draws any further
    noise from the continuation of the run's stream (:attr:`DQNAgent.noise_generator`).
    """
    import torch

    if steps < 1:
        raise ValueError(f"steps: expected >= 1, got {steps}")
    # A config read from a checkpoint for inference skipped the training rules (a fine-tune or a
    # resume from an older policy): they hold here, before anything is built.
    cfg.check_training()
    if replay is not None and (replay.capacity != cfg.buffer_size or replay.prioritized != cfg.prioritized):
        raise ValueError(f"replay: a {'prioritized' if replay.prioritized else 'uniform'} buffer of {replay.capacity}, "
                         f"the config needs {'prioritized' if cfg.prioritized else 'uniform'} of {cfg.buffer_size}")
    if schedule_position is not None:
        if resume is not None or out is not None:
            raise ValueError(f"schedule_position: not with {'resume' if resume is not None else 'out'} "
                             "(a checkpoint records where its own schedules started)")
        done, horizon = schedule_position
        for name, value, least in (("done", done, 0), ("horizon", horizon, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"schedule_position: {name} expected an integer >= {least}, got {value!r}")
    threads, numpy_state = torch.get_num_threads(), np.random.get_state()
    try:
        # The same seeded draws as when training reseeded the host's generators (same weights for a
        # seed), now on a fork of them. numpy's global generator stays seeded for an env factory
        # that draws from it; the project's envs and buffers use their own np.random.Generator.
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            np.random.seed(seed)
            torch.set_num_threads(torch_threads)
            agent, result = _train(
                env_fns, cfg, steps, seed, out, resume, metadata, evaluate, progress, track_emissions,
                emissions_country, console, initial_state, time_limit_s, replay, proximal_mu, schedule_position,
                assume_feature_names,
            )
    finally:
        np.random.set_state(numpy_state)
        torch.set_num_threads(threads)
    return agent, result


def _train(
    env_fns: Sequence[EnvFactory], cfg: DQNConfig, steps: int, seed: int, out: str | Path | None,
    resume: str | Path | None, metadata: dict[str, Any] | None, evaluate: Callable[[Any], dict[str, Any]] | None,
    progress: bool, track_emissions: bool, emissions_country: str, console: Any,
    initial_state: dict[str, Any] | None, time_limit_s: float | None, replay: ReplayBuffer | None,
    proximal_mu: float, schedule_position: tuple[int, int] | None, assume_feature_names: bool,
) -> tuple[Any, TrainResult]:
    """:func:`train`'s run, on generators it has seeded."""
    import gymnasium as gym
    import torch

    from iro_fed.problem_io import write_file_atomic
    from solvers.dqn import checkpoint as ckpt
    from solvers.dqn.agent import DQNAgent

    resumed = None
    if resume is not None:  # read and checked before any env is built (each may be a whole simulator)
        resumed = ckpt.load_checkpoint(resume)
        _check_feature_names(resume, resumed[1], metadata, assume_feature_names, console)
    envs = gym.vector.SyncVectorEnv(list(env_fns), autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    n_envs = envs.num_envs
    space = envs.single_observation_space
    cand_f = int(space["candidates"].shape[-1])
    ctx_f = int(space["context"].shape[-1])
    shape_error = _env_shape_error(int(space["candidates"].shape[0]), int(space["mask"].shape[0]), cfg)
    if shape_error:
        envs.close()
        raise ValueError(shape_error)

    agent = DQNAgent(cfg, cand_f, ctx_f, seed=seed)
    start_step = 0
    # Epsilon and the PER beta anneal over `horizon` env steps from step `origin`: this run's, or
    # those of the run a resumed checkpoint continues.
    origin, horizon = 0, steps
    if schedule_position is not None:
        # origin may lie before step 0: only the distance step - origin is read
        origin, horizon = -schedule_position[0], schedule_position[1]
    buffer: ReplayBuffer = replay if replay is not None else new_buffer(cfg, seed)
    sampling = None  # the buffer's sampling stream a resumed run continues, set once nothing can fail
    since_learn = 0  # env steps since the last gradient step (train_every's count): a resumed run's goes on
    if initial_state is not None:
        agent.online.load_state_dict(initial_state)
        agent.target.load_state_dict(initial_state)
    if resume is not None and resumed is not None:
        state, meta = resumed
        if (meta["candidate_features"], meta["context_features"]) != (cand_f, ctx_f):
            raise ValueError(f"--resume {resume}: trained on {meta['candidate_features']}+{meta['context_features']} "
                             f"features, the env has {cand_f}+{ctx_f}")
        _check_architecture(resume, meta["config"], cfg)
        try:
            agent.online.load_state_dict(state)
        except RuntimeError as exc:  # weights that do not fit the checkpoint's own config
            raise ValueError(f"--resume {resume}: its weights do not fit its config ({exc})") from exc
        opt = optimizer_path(resume)
        target_state = rng_state = saved_since = None
        if opt.is_file():
            training_state = ckpt.load_training_state(opt)
            target_state = training_state.pop(ckpt.TARGET_STATE, None)
            rng_state = training_state.pop(ckpt.RNG_STATE, None)
            saved_since = training_state.pop(ckpt.SINCE_LEARN, None)
            if saved_since is not None:
                ckpt.checked_count(f"optimizer state {str(opt)!r}: {ckpt.SINCE_LEARN!r}", saved_since)
            agent.optimizer.load_state_dict(training_state)
            # load_state_dict brings back the saved run's hyperparameters too; the moments are
            # what resuming keeps, the rate is this run's
            for group in agent.optimizer.param_groups:
                group["lr"], group["eps"] = cfg.learning_rate, cfg.adam_eps
        if target_state is None:
            agent.target.load_state_dict(state)
            _note(console, f"--resume {resume}: no target network saved with it ({opt} is missing or from an older "
                           "version; a federated global policy has none): it starts as a copy of the online network")
        else:
            try:
                agent.target.load_state_dict(target_state)
            except RuntimeError as exc:
                raise ValueError(f"--resume {resume}: the target network in {opt} does not fit its config "
                                 f"({exc})") from exc
        if rng_state is None:
            _note(console, f"--resume {resume}: its random streams (exploration noise, epsilon, replay sampling) "
                           f"are not saved with it ({opt} is missing or from an older version): they restart from "
                           "the seed, so this run does not draw what an uninterrupted one would")
        else:
            sampling = _restore_streams(opt, rng_state, agent, buffer)
        if saved_since is not None:
            since_learn = saved_since
        elif cfg.train_every > 1:  # at 1 every step learns (once the buffer is full): nothing differs
            _note(console, f"--resume {resume}: the env steps since its last gradient step are not saved with it "
                           f"({opt} is missing or from an older version): train_every counts them from 0, so this "
                           "run may learn on other steps than an uninterrupted one")
        start_step = ckpt.checked_count(f"policy {str(resume)!r}: metadata 'steps'", meta.get("steps", 0))
        schedule = ckpt.read_schedule(resume, meta)
        if schedule is None:
            origin = start_step
            _note(console, f"--resume {resume}: the checkpoint does not record where its exploration, PER-beta and "
                           "target-sync schedules stopped (written by an older version): they restart from this run")
        else:
            origin, horizon = schedule["origin"], schedule["horizon"]
            agent.updates = schedule["updates"]  # the sync cadence counts on: learn() syncs at its multiples
    start_updates = agent.updates

    agent.set_proximal(proximal_mu)  # anchored at the weights training starts from
    accumulators = [NStepAccumulator(cfg.n_step, cfg.gamma) for _ in range(n_envs)]
    emissions = _Emissions(track_emissions, emissions_country)
    obs, _ = envs.reset(seed=seed)
    idle = [i for i in range(n_envs) if not np.asarray(obs["mask"][i]).any()]
    if idle:
        envs.close()
        emissions.stop()
        raise ValueError(f"env {idle[0]} offers no decision in its first episode (no pod arrives or none fits in "
                         "the simulated hours, e.g. promo-surge's sale starts at 10 h): train on longer episodes")
    if sampling is not None:
        buffer.rng = sampling
    returns = np.zeros(n_envs)
    finished: deque[float] = deque(maxlen=50)
    episodes, last_loss = 0, None
    total = start_step + steps
    step = start_step
    t0 = time.perf_counter()

    bar = _progress(progress, console)
    task = bar.add_task("training", total=total, completed=start_step, reward="-", loss="-", eps="-") if bar else None
    try:
        if bar:
            bar.start()
        while step < total:
            if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
                break
            frac = min(1.0, (step - origin) / max(1, horizon * cfg.epsilon_fraction))
            epsilon = cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)
            actions = agent.act(obs, epsilon=epsilon)
            next_obs, rewards, terminated, truncated, infos = envs.step(actions)
            for i in range(n_envs):
                done = bool(terminated[i] or truncated[i])
                after = _copy(infos["final_obs"][i]) if done else _row(next_obs, i)
                for t in accumulators[i].push(_row(obs, i), int(actions[i]), float(rewards[i]), after,
                                              bool(terminated[i]), bool(truncated[i])):
                    buffer.add(t)
                returns[i] += rewards[i]
                if done:
                    finished.append(float(returns[i]))
                    returns[i] = 0.0
                    episodes += 1
            obs = next_obs
            step += n_envs
            since_learn += n_envs
            if len(buffer) >= max(cfg.learning_starts, cfg.batch_size) and since_learn >= cfg.train_every:
                since_learn = 0
                beta = cfg.priority_beta0 + (1.0 - cfg.priority_beta0) * min(1.0, (step - origin) / horizon)
                batch = buffer.sample(cfg.batch_size, beta=beta)
                stats = agent.learn(batch)
                buffer.update_priorities(batch["indices"], stats["priorities"])
                last_loss = stats["loss"]
            if bar:
                bar.update(task, completed=min(step, total),
                           reward=f"{np.mean(finished):.3f}" if finished else "-",
                           loss=f"{last_loss:.4f}" if last_loss is not None else "-",
                           eps="noisy" if cfg.noisy else f"{epsilon:.3f}")
    finally:
        if bar:
            bar.stop()
        emissions_kg = emissions.stop()
        envs.close()

    wall = time.perf_counter() - t0
    # where the streams stopped, before evaluate() draws from them: what a resumed run continues
    streams = {**agent.random_state(), "replay": buffer.rng.bit_generator.state} if out is not None else None
    result = TrainResult(
        steps=step, episodes=episodes, updates=agent.updates - start_updates,
        mean_episode_reward=float(np.mean(finished)) if finished else None, last_loss=last_loss, wall_s=wall,
        steps_per_s=(step - start_step) / wall if wall > 0 else 0.0, emissions_kg=emissions_kg,
        path=str(out) if out else None,
    )
    if evaluate is not None:
        result.evaluation = evaluate(agent)
    if out is not None:
        meta = {
            **(metadata or {}), "config": cfg.to_dict(), "candidate_features": cand_f, "context_features": ctx_f,
            "steps": step, "seed": seed, "envs": n_envs,
            ckpt.SCHEDULE: {"origin": origin, "horizon": horizon, "updates": agent.updates},
            "metrics": {k: v for k, v in result.__dict__.items() if k not in ("path", "evaluation")},
            "evaluation": result.evaluation, "emissions_kg": emissions_kg,
            "emissions_country": emissions_country if track_emissions else None,  # the grid mix they are measured with
        }
        json.dumps(meta, default=float)  # fail before writing anything if the metadata cannot be saved
        ckpt.save_checkpoint(out, agent.online.state_dict(), meta)
        # Adam's moments, the target network and the random streams (an older release's
        # Optimizer.load_state_dict ignores the extra keys)
        training_state = {**agent.optimizer.state_dict(),
                          ckpt.TARGET_STATE: {k: v.detach().cpu() for k, v in agent.target.state_dict().items()},
                          ckpt.RNG_STATE: streams, ckpt.SINCE_LEARN: since_learn}
        opt_path = optimizer_path(out)
        with ckpt.write_errors(f"optimizer state {str(opt_path)!r}: cannot write it"):
            write_file_atomic(opt_path, lambda tmp: torch.save(training_state, tmp))
    return agent, result


def _restore_streams(opt: Path, saved: Any, agent: Any, buffer: ReplayBuffer) -> np.random.Generator:
    """Continue the random streams a training-state file saved (:data:`~solvers.dqn.checkpoint.RNG_STATE`)
    in ``agent``, and return the replay sampling generator for ``buffer`` (left as it was: a caller's
    buffer changes only once training starts); a :class:`CheckpointError` naming the file and entry."""
    from solvers.dqn import checkpoint as ckpt

    where = f"optimizer state {str(opt)!r}: {ckpt.RNG_STATE!r}"
    if not isinstance(saved, dict):
        raise ckpt.CheckpointError(f"{where}: expected a mapping, got {type(saved).__name__}")
    try:
        sampling = numpy_generator(saved.get("replay"), buffer.rng, "replay")
        agent.load_random_state(saved)
    except ValueError as exc:
        raise ckpt.CheckpointError(f"{where}.{exc}") from exc
    return sampling


def _note(console: Any, note: str) -> None:
    """A note on the console when training has one (``iro train``), else a logged warning."""
    if console is not None:
        console.print(f"note: {note}")
    else:
        log.warning("%s", note)


def _check_feature_names(path: str | Path, saved: dict[str, Any], metadata: dict[str, Any] | None,
                         assume: bool = False, console: Any = None) -> None:
    """:class:`CheckpointError` when a resumed checkpoint records other feature names than this run
    (its ``metadata["feature_names"]``, as the ``dqn`` solver's ``fit`` gives them): equal counts in
    another order pass the env's shape check, and the new checkpoint, recording this run's names,
    would hide that its weights were learned on other columns. A checkpoint that records none (an
    older one) is refused too unless ``assume`` (then a note names it): its counts alone let a policy
    of other features resume silently. Nothing to compare when the run states none (other envs)."""
    ours = (metadata or {}).get("feature_names")
    if ours is None:
        return
    from solvers.dqn.checkpoint import CheckpointError
    from solvers.dqn.solver import check_feature_names

    if saved.get("feature_names") is None:
        what = (f"policy {str(path)!r}: its metadata has no 'feature_names' (written before they were recorded), "
                "so only its feature counts can be checked and a policy trained on other features of the same "
                "counts would resume")
        if not assume:
            raise CheckpointError(f"{what}; if it was trained on this version's features, resume it with "
                                  "assume_feature_names=True (`iro train --assume-feature-names`), else train a "
                                  "new policy")
        _note(console, f"{what}: resumed as trained on this version's features (assume_feature_names); the new "
                       "checkpoint records them")
        return

    check_feature_names(path, saved.get("feature_names"), ours,
                        advice="train a new policy instead (`iro train` without --resume)")


def _env_shape_error(candidates: int, actions: int, cfg: DQNConfig) -> str | None:
    """Why the env's candidates and actions do not fit ``cfg``, naming the setting (``top_k:`` or
    ``defer_action:``, which ``iro train`` reports as ``--set NAME``); None when they fit."""
    if candidates != cfg.top_k:
        return (f"top_k: the env shows {candidates} candidates per decision, the config top_k {cfg.top_k}; "
                f"train with top_k {candidates} or build the env with k={cfg.top_k}")
    if actions == candidates + 1 and not cfg.defer_action:
        return (f"defer_action: false, but the env offers a defer action ({candidates} candidates and {actions} "
                "actions: iro_fed's PlacementEnv always does, for deferrable batch pods): train with "
                "defer_action true (a one-shot solve masks the action off anyway)")
    if actions == candidates and cfg.defer_action:
        return (f"defer_action: true, but the env offers no defer action ({candidates} candidates and {actions} "
                "actions): train with defer_action false")
    if actions != cfg.num_actions:
        return (f"env: {candidates} candidates and {actions} actions, config: top_k {cfg.top_k} and "
                f"{cfg.num_actions} actions (defer_action={cfg.defer_action})")
    return None


def _check_architecture(path: str | Path, saved: Any, cfg: DQNConfig) -> None:
    """``ValueError`` naming each network setting where a checkpoint's config and ``cfg`` differ
    (other weight shapes, or the same weights computing another function: attention heads, the
    C51 support)."""
    try:
        differ = cfg.architecture_differences(saved)
    except ConfigError as exc:
        raise ValueError(f"--resume {path}: its config is not readable ({exc})") from exc
    if differ:
        raise ValueError(f"--resume {path}: the checkpoint is another network ({'; '.join(differ)}); resume "
                         "with its settings (its .json metadata lists them) or train a new policy")


def _progress(enabled: bool, console: Any) -> Any:
    if not enabled:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    class _Rate(TextColumn):
        def render(self, task: Any) -> Any:
            from rich.text import Text

            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.0f} steps/s" if speed else "- steps/s")

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), _Rate(""),
        TextColumn("reward {task.fields[reward]}"), TextColumn("loss {task.fields[loss]}"),
        TextColumn("eps {task.fields[eps]}"), TimeElapsedColumn(), console=console, transient=False,
    )
