"""``iro train``: train the DQN placement policy on a simulator scenario and judge it.

    iro train --scenario bank --steps 20000 --seed 0 --out policy.pt [--resume policy.pt]

The policy is trained on :class:`iro_fed.sim.env.PlacementEnv` (vectorized, ``--envs``) through
the ``dqn`` solver's ``fit`` (the registry builds it), then evaluated on held-out seeds of the
same scenario against the ``greedy-objective`` solver's choice (``greedy_action``: the env asks
the solver, GPU-stranding guard included). The checkpoint and its JSON metadata hold the config,
the scenario, steps, metrics and the run's emissions (``emissions_country``: the ISO alpha-3 code whose
grid mix codecarbon measured them with, ``--emissions-country``, default DEU).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iro_fed import limits

if TYPE_CHECKING:
    from iro_fed.cli import UsageError

EVAL_SEED_OFFSET = 10_000  # held-out scenario seeds start here
#: Upper bounds of ``iro train``'s counts, generous for real use: each env is a whole simulator
#: built up front (``--envs 100000000`` ran out of memory building them), and steps and episodes
#: are run one by one (10^8 steps is days of training; a typo of more would never finish).
#: Steps and episodes are shared with the federated settings and the fine-tune flags (iro_fed.limits).
MAX_ENVS = 256
MAX_TRAIN_STEPS = limits.MAX_TRAIN_STEPS
MAX_EVAL_EPISODES = limits.MAX_EVAL_EPISODES
#: Scenario seeds that training envs never run: every evaluation episode :func:`evaluate_policy`
#: can run by default. The training streams (then ``seed * 1000 + env * 97 + episode``, and the vector
#: reset's ``seed + env``) reached them: ``--seed 10`` trained on seeds 10001, 10002, ...
HELD_OUT = range(EVAL_SEED_OFFSET, EVAL_SEED_OFFSET + MAX_EVAL_EPISODES)
#: Episode length per scenario for training: long enough to hold its decisions, no longer.
TRAIN_HOURS = {"bank": 6.0, "promo-surge": 14.0}
#: DQN settings per scenario on top of the config defaults (``--set`` overrides them). In
#: promo-surge the cost of a placement shows up tens of decisions later (a large pod that finds
#: no node): longer n-step returns and a fresher target network carry it back in a 10-minute run
#: (measured in benchmarks/README.md); in bank they measure worse. Bank has about 20 decisions in
#: a 6-hour episode, and its end is a time limit the learner bootstraps over: gamma 0.9 (a horizon
#: of about ten decisions, some hours) learns the consolidating policy on 2 of 3 seeds, 0.99 on
#: none (it stays at the objective's greedy choice, measured in benchmarks/README.md).
TRAIN_CONFIG: dict[str, dict[str, Any]] = {"bank": {"gamma": 0.9},
                                           "promo-surge": {"n_step": 10, "target_update_every": 100}}


def train_hours(scenario: str) -> float:
    """Default simulated hours per training episode of ``scenario`` (:data:`TRAIN_HOURS`, else its length)."""
    from iro_fed.sim.scenarios import SCENARIOS

    if scenario in TRAIN_HOURS:
        return TRAIN_HOURS[scenario]
    return SCENARIOS[scenario].default_hours


def register(sub: Any) -> None:
    """Add ``train`` to the ``iro`` subcommands."""
    p = sub.add_parser("train", help="train the DQN placement policy on a simulator scenario")
    p.add_argument("--scenario", required=True, metavar="NAME", help="bank, edge-iot, promo-surge or openb")
    p.add_argument("--steps", type=int, default=20_000, help=f"environment steps over all envs (default 20000, at most {MAX_TRAIN_STEPS:,})")
    p.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    p.add_argument("--out", default="policy.pt", metavar="FILE", help="checkpoint to write (default policy.pt)")
    p.add_argument("--resume", metavar="FILE", help="continue from this checkpoint (weights, target network, optimizer, schedules, random streams)")
    p.add_argument("--assume-feature-names", action="store_true",
                   help="with --resume: resume a checkpoint that records no feature names (written before they were "
                        "recorded) as trained on this version's features (refused without it)")
    p.add_argument("--envs", type=int, default=4, help=f"vectorized environments (default 4, at most {MAX_ENVS})")
    p.add_argument("--hours", type=float, default=None,
                   help="simulated hours per episode (default: 6 for bank, 14 for promo-surge (its sale starts "
                        "at 10 h), else the scenario's length)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="DQN config field (see solvers/dqn/config.py), e.g. n_step=5; repeat for several")
    p.add_argument("--scenario-set", action="append", metavar="KEY=VALUE",
                   help="scenario parameter or engine setting, as in `iro simulate --set`")
    p.add_argument("--eval-episodes", type=int, default=3, help=f"held-out episodes to evaluate on (default 3, at most {MAX_EVAL_EPISODES})")
    p.add_argument("--no-emissions", action="store_true", help="do not measure emissions with codecarbon")
    p.add_argument("--emissions-country", metavar="CODE", default=None,
                   help="ISO 3166-1 alpha-3 code of the country whose grid mix codecarbon measures the training "
                        "with (default DEU; one codecarbon has no mix for is refused)")
    p.set_defaults(func=cmd_train)


def _config_pairs(pairs: list[str] | None) -> dict[str, Any]:
    import dataclasses

    from iro_fed.cli import UsageError, split_pairs
    from solvers import DQNConfig, parse_setting  # the solvers' own text-to-type conversion

    kinds = {f.name: f.type for f in dataclasses.fields(DQNConfig)}
    out: dict[str, Any] = {}
    for key, value in split_pairs(pairs, "--set"):
        if key not in kinds:
            raise UsageError(f"--set {key}: unknown DQN config field (known: {', '.join(sorted(kinds))})")
        kind = {"int": int, "float": float, "bool": bool}[str(kinds[key])]
        out[key] = parse_setting(value.strip(), kind, f"--set {key}")
    return out


def stream_seed(*parts: int) -> int:
    """A 32-bit seed drawn from ``SeedSequence(parts)``: different ``parts`` give disjoint streams
    (training envs, federated sites and rounds, fine-tunes), where ``seed * 1000 + i * 97`` overlapped."""
    import numpy as np

    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def env_seed(seed: int, env: int) -> int:
    """Training env ``env``'s base scenario seed (its episodes run base + 1, base + 2, ... after the
    vector reset's ``seed + env``): drawn from ``SeedSequence([seed, env])``, so the envs' streams
    are disjoint. ``seed * 1000 + env * 97`` made env 1 rerun env 0's episodes after 97 of them."""
    return stream_seed(seed, env)


def env_factories(scenario: str, count: int, seed: int, hours: float, k: int, settings: dict[str, Any]) -> list[Any]:
    """Zero-argument env constructors for ``gymnasium.vector``, each with its own seed stream
    (:func:`env_seed`), none of which runs a held-out evaluation seed (:data:`HELD_OUT`)."""
    from iro_fed.sim.env import PlacementEnv

    def make(i: int) -> Any:
        return lambda: PlacementEnv(scenario, hours=hours, k=k, seed=env_seed(seed, i), settings=settings,
                                    held_out=HELD_OUT)

    return [make(i) for i in range(count)]


def evaluate_policy(agent: Any, scenario: str, episodes: int, hours: float, k: int, settings: dict[str, Any],
                    seed: int = EVAL_SEED_OFFSET, baseline: bool = True) -> dict[str, Any]:
    """Mean episode reward (sum of objective changes) of the greedy policy and of the
    objective's own greedy choice on the same held-out scenario seeds.

    ``baseline=False`` skips the objective's greedy episodes (``greedy_reward`` is then None),
    for callers that evaluate many policies on the same seeds.
    """
    import numpy as np

    from iro_fed.sim.env import PlacementEnv, greedy_action

    policy: list[float] = []
    greedy: list[float] = []
    for e in range(episodes):
        for who, out in (("policy", policy), ("greedy", greedy))[:2 if baseline else 1]:
            env = PlacementEnv(scenario, hours=hours, k=k, seed=seed + e, settings=settings)
            obs, info = env.reset(seed=seed + e)
            total, done = 0.0, False
            while not done:
                if who == "policy":
                    action = int(agent.act({key: v[None] for key, v in obs.items()}, explore=False)[0])
                else:
                    action = greedy_action(info)
                obs, reward, terminated, truncated, info = env.step(action)
                total += reward
                done = terminated or truncated
            out.append(total)
    return {"episodes": episodes, "policy_reward": float(np.mean(policy)),
            "greedy_reward": float(np.mean(greedy)) if greedy else None, "policy_rewards": policy, "greedy_rewards": greedy}


def _config_error(exc: Exception, given: dict[str, Any], other: str = "--set: ") -> UsageError:
    """A DQN config error (``field: why``) as ``--set field: why`` when ``field`` was given on
    ``--set``; any other message after ``other`` (a rule of several fields, a scenario default)."""
    from iro_fed.cli import UsageError

    name, sep, why = str(exc).partition(": ")
    if sep and name in given:
        return UsageError(f"--set {name}: {why}")
    return UsageError(f"{other}{exc}")


def _check_scenario_settings(scenario: str, seed: int, hours: float, settings: dict[str, Any]) -> None:
    """``--scenario-set``'s keys and values, read as the training envs will (the scenario built
    once): a bad one was found only inside ``fit``, as the simulator's text with no flag. Every
    episode (training and evaluation) runs the same ``hours`` from the scenario's start, so a given
    setting outside them (the bank's ``promo_day`` past the episode) is refused as ``iro simulate``
    refuses it, where it trained silently without. A default's miss says nothing: short training
    episodes miss the bank's default promotion day by design (every 6-hour bank run would print it)."""
    from iro_fed.cli import UsageError
    from iro_fed.sim import check_outside_run
    from iro_fed.sim.cli import setting_error
    from iro_fed.sim.engine import SimConfig, SimConfigError
    from iro_fed.sim.scenarios import build_scenario, split_settings
    from iro_fed.sim.signals import SignalFormatError

    try:
        params, engine = split_settings(scenario, settings)
        SimConfig().with_settings(engine)
        built = build_scenario(scenario, seed=seed, hours=hours, **params)
        SimConfig().with_settings({**built.engine_defaults, **engine})
        check_outside_run(built, params)
    except (SimConfigError, SignalFormatError) as exc:
        error = setting_error(exc, settings, "--scenario-set")
        if settings and not str(error).startswith("--scenario-set"):  # about several settings, or a value's effect
            error = UsageError(f"--scenario-set: {error}")
        raise error from exc


@contextmanager
def _output_folder(flag: str, path: str) -> Iterator[None]:
    """Make the folders ``path`` needs for the run inside; if it fails, remove those of them it
    left empty (a bad --resume is found only when training loads it: nothing must be left)."""
    from iro_fed.cli import check_output_file

    folder = Path(path).absolute().parent
    missing = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    check_output_file(flag, path)
    try:
        yield
    except BaseException:
        for made in missing:
            try:
                made.rmdir()
            except OSError:  # not empty (something was written): kept
                break
        raise


def cmd_train(args: argparse.Namespace) -> int:
    import solvers
    from iro_fed.cli import (
        EXIT_OK,
        UsageError,
        _console,
        check_hours,
        check_input_file,
        check_int,
        check_output_file,
        check_seed,
        split_pairs,
    )
    from iro_fed.sim.cli import STEP_S
    from iro_fed.sim.scenarios import SCENARIOS
    from iro_fed.sim.scenarios.common import run_steps
    from solvers import CheckpointError, ConfigError, DQNConfig, checkpoint_metadata_path

    # Every flag is checked before anything is made: the --out folder only once all are.
    if args.scenario not in SCENARIOS:
        raise UsageError(f"--scenario: unknown scenario {args.scenario!r} (known: {', '.join(SCENARIOS)})")
    check_int("--steps", args.steps, 1, MAX_TRAIN_STEPS)
    check_int("--envs", args.envs, 1, MAX_ENVS)
    check_int("--eval-episodes", args.eval_episodes, 0, MAX_EVAL_EPISODES)
    check_seed("--seed", args.seed)
    if args.hours is None:
        args.hours = train_hours(args.scenario)
    check_hours("--hours", args.hours)
    if run_steps(args.hours, STEP_S) < 1:  # the envs round hours to whole steps (was the library's text, no flag)
        raise UsageError(f"--hours: must cover at least one step of {STEP_S:g} s, got {args.hours:g}")
    # The checkpoint and its metadata are written after training: a bad path must fail now.
    check_output_file("--out", args.out, make=False)
    check_output_file("--out (its metadata file)", checkpoint_metadata_path(args.out), make=False)
    if args.resume:
        check_input_file("--resume", args.resume)
    elif args.assume_feature_names:  # it only tells the resume how to read an old checkpoint
        raise UsageError("--assume-feature-names: only with --resume")
    country = _emissions_country(args)
    given = _config_pairs(args.set)
    config = {**TRAIN_CONFIG.get(args.scenario, {}), **given}
    try:  # the whole config, before any env is built (a bad top_k was a traceback, exit 1)
        cfg = DQNConfig.from_dict(config)
    except ConfigError as exc:
        raise _config_error(exc, given) from exc
    if not cfg.defer_action:  # PlacementEnv's actions always end with it: the trainer refused it once the envs were built
        raise UsageError("--set defer_action: must stay true for `iro train`: its envs always offer the defer action "
                         "(for deferrable batch pods; a one-shot solve masks it off anyway)")
    k = cfg.top_k
    scenario_settings: dict[str, Any] = {key: v.strip() for key, v in split_pairs(args.scenario_set, "--scenario-set")}
    _check_scenario_settings(args.scenario, env_seed(args.seed, 0), args.hours, scenario_settings)  # the first env's seed

    solver = solvers.make("dqn", seed=args.seed)
    console = _console(stderr=True, markup=False)  # the trainer's notes may quote paths and values
    fns = env_factories(args.scenario, args.envs, args.seed, args.hours, k, scenario_settings)

    def judge(agent: Any) -> dict[str, Any]:
        if args.eval_episodes == 0:
            return {}
        console.print(f"evaluating on {args.eval_episodes} held-out episode(s) ...")
        return evaluate_policy(agent, args.scenario, args.eval_episodes, args.hours, k, scenario_settings)

    with _output_folder("--out", args.out):
        try:
            result = solver.fit(
                fns, args.steps, out=args.out, config=config, resume=args.resume,
                metadata={"scenario": args.scenario, "hours": args.hours, "scenario_settings": scenario_settings,
                          "command": "iro train " + " ".join(_argv(args, country))},
                evaluate=judge, track_emissions=not args.no_emissions, emissions_country=country, console=console,
                assume_feature_names=args.assume_feature_names,
            )
        except CheckpointError as exc:
            raise UsageError(f"--resume: {exc}") from exc
        except ValueError as exc:  # env / config mismatch found by the trainer ("--resume FILE: ..." names its flag)
            raise _config_error(exc, given, other="") from exc  # e.g. "buffer_size: ... GiB" as --set buffer_size
    _print_result(result, args, _console(markup=False), country)
    return EXIT_OK


def _emissions_country(args: argparse.Namespace) -> str:
    """``--emissions-country`` checked as a site's node-config ``emissions-country`` is (codecarbon's
    tracker only logs an unknown code and measures with no country's mix); DEU when not given."""
    from iro_fed.cli import UsageError
    from iro_fed.federated.emissions import DEFAULT_COUNTRY, check_country

    if args.emissions_country is None:
        return DEFAULT_COUNTRY
    if args.no_emissions:  # nothing is measured: a country given with it is a mistake in the command
        raise UsageError("--emissions-country: nothing is measured with --no-emissions")
    try:
        return check_country(args.emissions_country)
    except ValueError as exc:
        raise UsageError(f"--emissions-country: {exc}") from None


def _argv(args: argparse.Namespace, country: str) -> list[str]:
    out = [f"--scenario {args.scenario}", f"--steps {args.steps}", f"--seed {args.seed}", f"--envs {args.envs}",
           f"--hours {args.hours:g}"]
    out += [f"--set {s}" for s in args.set or []]
    out += [f"--scenario-set {s}" for s in args.scenario_set or []]
    if args.emissions_country is not None:
        out.append(f"--emissions-country {country}")  # as checked: upper case
    return out


def _print_result(result: Any, args: argparse.Namespace, console: Any, country: str) -> None:
    from rich.table import Table

    table = Table(title=f"iro train: {args.scenario}, seed {args.seed}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("steps", f"{result.steps:,}"), ("episodes", f"{result.episodes:,}"), ("gradient steps", f"{result.updates:,}"),
        ("steps/s", f"{result.steps_per_s:,.0f}"), ("wall s", f"{result.wall_s:.1f}"),
        ("mean episode reward (last 50)", "-" if result.mean_episode_reward is None else f"{result.mean_episode_reward:.3f}"),
        ("last loss", "-" if result.last_loss is None else f"{result.last_loss:.4f}"),
        ("emissions g CO2eq", "-" if result.emissions_kg is None
         else f"{result.emissions_kg * 1000:.3f} ({country} grid mix)"),
    ]
    ev = result.evaluation
    if ev:
        rows += [("held-out reward: policy", f"{ev['policy_reward']:.3f}"),
                 ("held-out reward: objective greedy", f"{ev['greedy_reward']:.3f}")]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    from solvers import checkpoint_metadata_path

    console.print(f"policy written to {args.out} (metadata {checkpoint_metadata_path(args.out)})")
