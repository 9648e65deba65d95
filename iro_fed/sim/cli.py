"""``iro simulate``: run a scenario with a solver, print the totals, write the report.

    iro simulate --scenario bank --solver greedy-objective --seed 1 --hours 24 \
        --set promo_day=0 --out report.json --plot timeline.png
    iro simulate --scenario bank --solver kube-default --plain      # the plain-Kubernetes baseline
    iro simulate --scenario bank --solver greedy-objective --hours 24 \
        --set start="2023-03-01 00:00:00" --set carbon.DE=de.csv --set carbon.FR=fr.csv --set carbon.GB=gb.csv

Exit status 2 (with a message naming it) for an unknown scenario, solver or setting, a seed
or a number of hours out of range, an output path that cannot be written, --out and --plot
naming one file, or a ``carbon.ZONE`` file for a zone the scenario does not read, that cannot
be read, or that does not cover the run and its day of history; all are checked before the run
starts and before any output folder is made. The outputs are written atomically.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iro_fed.limits import MAX_TRAIN_STEPS
from iro_fed.plots import timeline_plot  # drawn there (matplotlib imported lazily); used here by --plot

if TYPE_CHECKING:
    from iro_fed.cli import UsageError

#: Seconds per simulator step: ``build_scenario``'s default, which ``iro simulate`` and
#: ``iro feedback-sim`` never change.
STEP_S = 60.0

REPORT_KEYS = (
    "score", "pending_pct", "utilization_pct", "success_rate_pct", "p99_latency_ms", "cost", "carbon_kg",
    "batch_completion_min", "deadline_misses", "burst_pods",
)


def register(sub: Any) -> None:
    """Add ``simulate`` to the ``iro`` subcommands."""
    p = sub.add_parser("simulate", help="run a cross-domain scenario in the simulator and write a report")
    p.add_argument("--scenario", required=True, metavar="NAME", help="bank, edge-iot, promo-surge or openb")
    p.add_argument("--solver", required=True, metavar="NAME", help="registered solver (see `iro solvers`)")
    p.add_argument("--seed", type=int, default=0, help="scenario and solver seed (default 0)")
    p.add_argument("--hours", type=float, default=None, help="simulated hours (default: the scenario's)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="scenario parameter or engine setting (e.g. promo_day=0, deferral=none), or carbon.ZONE=FILE: "
                        "your own carbon-intensity CSV for a zone the scenario reads (e.g. carbon.DE=de.csv; it must "
                        "cover the run and the day before its start); repeat for several")
    p.add_argument("--plain", action="store_true",
                   help="plain-Kubernetes engine settings (no deferral, consolidation or make-room), as for the kube-default baseline")
    p.add_argument("--solver-set", action="append", metavar="KEY=VALUE", help="solver setting; repeat for several")
    p.add_argument("--out", metavar="FILE", help="write the JSON report here")
    p.add_argument("--plot", metavar="PNG", help="write a timeline plot here")
    p.set_defaults(func=cmd_simulate)

    f = sub.add_parser("feedback-sim", help="run a scenario with the feedback loop (predicted vs observed usage, "
                                            "drift, fine-tuning) and report its errors and triggers")
    f.add_argument("--scenario", default="edge-iot", metavar="NAME", help="scenario (default edge-iot)")
    f.add_argument("--solver", default="greedy-objective", metavar="NAME", help="registered solver (default greedy-objective)")
    f.add_argument("--seed", type=int, default=0, help="scenario and solver seed (default 0)")
    f.add_argument("--hours", type=float, default=12.0, help="simulated hours (default 12)")
    f.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="scenario parameter or engine setting, e.g. usage_noise=0.1, usage_shift_at_h=6, "
                        "usage_shift_class='ingest-*', usage_shift_factor=1.6, or carbon.ZONE=FILE (as for simulate); "
                        "repeat for several")
    f.add_argument("--solver-set", action="append", metavar="KEY=VALUE", help="solver setting; repeat for several")
    f.add_argument("--feedback-set", action="append", metavar="KEY=VALUE",
                   help="feedback loop setting (threshold, alpha, calm, min_samples, window, calibration, refit_every, "
                        "cooldown, settle_every, latency_threshold_ms, latency_alpha); repeat for several")
    f.add_argument("--delay-steps", type=int, default=2,
                   help=f"steps (of {STEP_S:g} s) between a decision and its observation: 0 (the end of the decision's own "
                        "step) up to fewer than the run's steps (default 2)")
    f.add_argument("--dqn-registry", metavar="DIR", help="fine-tune action: train the DQN locally and publish to this registry")
    f.add_argument("--dqn-policy", metavar="FILE", help="with --dqn-registry: policy to start from while the registry is empty "
                                                      "(default: the shipped one)")
    f.add_argument("--dqn-steps", type=int, default=256,
                   help=f"decisions of DQN fine-tuning per trigger (default 256; at least one gradient update's: batch_size + "
                        f"n_step - 1 of the policy it starts from, 66 for the shipped one; at most {MAX_TRAIN_STEPS:,})")
    f.add_argument("--round-request", metavar="DIR", help="fine-tune action: write a federated round request into DIR/requests")
    f.add_argument("--out", metavar="FILE", help="write the JSON report (fixed keys, then per-step series) here")
    f.set_defaults(func=cmd_feedback_sim)


#: A simulator or scenario error about one setting: ``setting 'key': why``, perhaps after
#: ``scenario 'name': ``, or ``--set key: why`` (build_scenario's unknown keys).
_SETTING_ERROR = re.compile(r"(?:scenario '[^']*': )?(?:setting '([^']+)'|--set (\S+)): ")


def setting_error(exc: Exception, given: Mapping[str, Any], flag: str = "--set") -> UsageError:
    """A SimConfigError / SignalFormatError as the UsageError of a command line: an error about a
    key of ``given`` names it as ``flag key: why``, as the other ``--set`` errors do (the library
    says ``setting 'promo_day': ...``); any other message is kept as it is. ``iro simulate`` and
    ``iro feedback-sim`` pass their ``--set`` pairs; ``iro train`` may pass ``--scenario-set``'s."""
    from iro_fed.cli import UsageError

    text = str(exc)
    match = _SETTING_ERROR.match(text)
    key = match and (match.group(1) or match.group(2))
    if match and key in given:
        return UsageError(f"{flag} {key}: {text[match.end():]}")
    return UsageError(text)


def note_scenario(name: str, notes: Mapping[str, Any]) -> None:
    """A scenario's ``notes["messages"]`` (what it did not do as the user may expect, not an error:
    the bank's default promotion day past a short run) as ``note: ...`` lines on stderr."""
    from iro_fed.cli import _console

    for message in notes.get("messages", ()):
        _console(stderr=True, markup=False).print(f"note: scenario {name!r}: {message}")


def _pairs(pairs: list[str] | None, flag: str) -> dict[str, str]:
    from iro_fed.cli import split_pairs

    return {key: value.strip() for key, value in split_pairs(pairs, flag)}


def _check_run_args(args: argparse.Namespace) -> None:
    """The checks ``simulate`` and ``feedback-sim`` share: scenario, solver, hours, seed and --out
    (its folder made later, by :func:`_make_outputs`)."""
    import solvers
    from iro_fed.cli import UsageError, check_hours, check_output_file, check_seed, refuse_empty
    from iro_fed.sim.scenarios import SCENARIOS

    if args.scenario not in SCENARIOS:
        raise UsageError(f"--scenario: unknown scenario {args.scenario!r} (known: {', '.join(SCENARIOS)})")
    if args.solver not in solvers.registered():
        raise UsageError(f"--solver: unknown solver {args.solver!r} (registered: {', '.join(solvers.registered())})")
    if args.hours is not None:
        check_hours("--hours", args.hours)
        from iro_fed.sim.scenarios.common import run_steps

        if run_steps(args.hours, STEP_S) < 1:  # the scenarios round hours to whole steps
            raise UsageError(f"--hours: must cover at least one step of {STEP_S:g} s, got {args.hours:g}")
    check_seed("--seed", args.seed)
    refuse_empty(("--out", args.out))
    if args.out:
        check_output_file("--out", args.out, make=False)


def check_fine_tune_steps(flag: str, steps: int, start: tuple[str, str] | None = None) -> int:
    """``steps`` of DQN fine-tuning per trigger: enough for one gradient update with the settings of
    the policy it starts from (fewer published the starting weights as a new "fine-tuned" version,
    or, from a policy of a larger batch_size, failed at every trigger hours later) and at most
    ``MAX_TRAIN_STEPS``. ``start``: ``(flag, path)`` of that policy when known now (a checkpoint,
    or a registry folder whose latest version it is); None: the shipped default. Its settings are
    read from its JSON metadata (no torch). ``iro scheduler --fine-tune-steps`` shares it."""
    from iro_fed.cli import UsageError
    from iro_fed.feedback import fine_tune_config, fine_tune_min_steps, start_policy_config
    from solvers import CheckpointError, InvalidSettingError

    try:
        start_cfg = start_policy_config(start[1] if start else None)
    except (CheckpointError, InvalidSettingError) as exc:
        raise UsageError(f"{start[0] if start else flag}: {exc}") from exc
    # The fine-tune lowers learning_starts with fewer steps (towards batch_size): the fewest it
    # accepts are those of the lowest learning_starts, and any more steps still learn.
    cfg = fine_tune_config(start_cfg, {}, 0)
    least = fine_tune_min_steps(cfg)
    if steps < least:
        which = f"the policy it starts from ({start[0]} {start[1]!r})" if start else "the shipped default policy"
        raise UsageError(f"{flag}: must be at least {least} (fewer decisions make no gradient update: the DQN "
                         f"learns once it holds a batch of transitions; {which} has batch_size {cfg['batch_size']}, "
                         f"n_step {cfg['n_step']}), got {steps}")
    if steps > MAX_TRAIN_STEPS:
        raise UsageError(f"{flag}: must be between {least} and {MAX_TRAIN_STEPS}, got {steps}")
    return steps


def fine_tune_start(registry: tuple[str, str | None], policy: tuple[str, str | None] = ("", None)) -> tuple[str, str] | None:
    """``(flag, path)`` of the policy a :class:`~iro_fed.feedback.DQNFineTune` with this registry
    and start policy starts from, as it picks it: the registry's latest version when it has one,
    else the policy; None: the shipped default."""
    from iro_fed.feedback import fine_tune_start_policy

    chosen = fine_tune_start_policy(registry[1] or None, policy[1])
    if chosen is None:
        return None
    return registry if chosen == registry[1] else policy


def _check_output_folder(flag: str, path: str) -> None:
    """``check_output_folder`` without making anything: the folder there, or makeable."""
    from iro_fed.cli import UsageError, _make_folder

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag}: {str(out)!r} exists and is not a folder")
    _make_folder(flag, out, make=False)


def _make_outputs(files: Sequence[tuple[str, str | None]], folders: Sequence[tuple[str, str | None]] = ()) -> None:
    """Make the folders of a command's outputs (``(flag, path)``; None: not given), once every
    flag is checked: a bad one must leave nothing behind (``--set bad=1 --dqn-registry DIR`` made
    DIR, then failed). Made before the run, not after it, so a folder that cannot be made fails now."""
    from iro_fed.cli import check_output_file, check_output_folder

    for flag, path in files:
        if path:
            check_output_file(flag, path)
    for flag, path in folders:
        if path:
            check_output_folder(flag, path)


@contextmanager
def _progress(description: str) -> Iterator[Callable[[int, int], None]]:
    """A transient rich progress bar on stderr; yields the simulator's ``progress(done, total)`` callback."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from iro_fed.cli import _console

    # markup=False: descriptions printed as they are (iro_fed.cli._console)
    progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=_console(stderr=True, markup=False), transient=True)
    with progress:
        task = progress.add_task(description, total=None)

        def tick(done: int, total: int) -> None:
            if done % 30 == 0 or done == total:
                progress.update(task, completed=done, total=total)

        yield tick


def cmd_simulate(args: argparse.Namespace) -> int:
    from iro_fed.cli import EXIT_OK, _console, _parse_settings, check_distinct_outputs, refuse_empty, write_outputs
    from iro_fed.problem_io import write_json_atomic
    from iro_fed.sim import build_simulator
    from iro_fed.sim.engine import SimConfigError
    from iro_fed.sim.signals import SignalFormatError

    _check_run_args(args)
    refuse_empty(("--plot", args.plot))
    if args.plot:
        from iro_fed.plots import check_plot_file

        check_plot_file("--plot", args.plot, make=False)
    settings = _pairs(args.set, "--set")
    check_distinct_outputs(("--out", args.out), ("--plot", args.plot), inputs=setting_files(settings))
    if args.plain:
        from iro_fed.sim import PLAIN_KUBERNETES

        settings = {**PLAIN_KUBERNETES, **settings}
    solver_settings = _parse_settings(args.solver_set, args.solver, "--solver-set", flag_value_errors=True)
    try:  # the scenario and every setting read (data files too) before any output folder is made
        sim = build_simulator(args.scenario, args.solver, args.seed, args.hours, settings, solver_settings)
    except (SimConfigError, SignalFormatError) as exc:
        raise setting_error(exc, settings) from exc
    note_scenario(args.scenario, sim.sc.notes)
    _make_outputs([("--out", args.out), ("--plot", args.plot)])
    with _progress(f"{args.scenario} / {args.solver}") as tick:
        try:
            result = sim.run(progress=tick)
        except (SimConfigError, SignalFormatError) as exc:
            raise setting_error(exc, settings) from exc
    console = _console(markup=False)  # titles and paths printed as they are (iro_fed.cli._console)
    seeds = seed_label(result.seed, result.solver_seed)
    console.print(totals_table(result.totals, f"{args.scenario} with {args.solver}, {seeds}, "
                                              f"{result.totals['hours']:g} h"))
    # The image first: it has more ways to fail, and then nothing is written.
    write_outputs(
        ("--plot", args.plot, lambda: timeline_plot(result.series, args.plot,
                                                    title=f"{args.scenario} / {args.solver} / {seeds}")),
        ("--out", args.out, lambda: write_json_atomic(args.out, result.report())),
    )
    if args.out:
        console.print(f"report written to {args.out}")
    if args.plot:
        console.print(f"plot written to {args.plot}")
    return EXIT_OK


def setting_files(settings: dict[str, str]) -> list[tuple[str, str]]:
    """The ``--set`` values that name a file here (a carbon trace, an openb list): a command's
    inputs, which its outputs must not replace (``--set carbon.DE=de.csv --out de.csv`` did)."""
    return [(f"--set {key}", value) for key, value in settings.items() if value and os.path.isfile(value)]


def seed_label(seed: int, solver_seed: Any) -> str:
    """``seed N`` for a title, with the solver's own seed when ``--solver-set seed=M`` gave another
    (the scenario still draws from ``--seed``: the same workload, other solver choices)."""
    if solver_seed == seed:
        return f"seed {seed}"
    return f"seed {seed} (solver seed {solver_seed})"


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{digits}f}"


def totals_table(totals: dict[str, Any], title: str) -> Any:
    """A rich table of a run's totals (the report's fixed keys and a few more)."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("score (mean R)", _fmt(totals["score"], 4)),
        ("pending % of ready pods", _fmt(totals["pending_pct"])),
        ("pending % at peak", _fmt(totals["pending_at_peak_pct"])),
        ("mean wait of pending pods, min", _fmt(totals["mean_pending_min"])),
        ("utilization % of powered nodes", _fmt(totals["utilization_pct"])),
        ("request success %", _fmt(totals["success_rate_pct"], 4)),
        ("P99 latency ms", _fmt(totals["p99_latency_ms"], 0)),
        ("cost", _fmt(totals["cost"])),
        ("carbon kg CO2", _fmt(totals["carbon_kg"])),
        ("energy kWh (IT)", _fmt(totals["energy_kwh"])),
        ("batch completion min (mean)", _fmt(totals["batch_completion_min"], 1)),
        ("batch deadline misses", _fmt(totals["deadline_misses"])),
        ("batch jobs deferred for carbon", _fmt(totals["deferred_pods"])),
        ("pods burst to the cloud", _fmt(totals["burst_pods"])),
        ("decisions / solver calls", f"{totals['decisions']:,} / {totals['solver_calls']:,}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


FEEDBACK_KEYS = (
    "scenario", "solver", "seed", "solver_settings", "hours", "shift_at_h", "decisions", "observations", "calibrations",
    "fine_tunes", "threshold", "moving_error_before_shift_max", "moving_error_before_shift_mean",
    "moving_error_after_shift_max", "moving_error_1h_after_last_fine_tune_max", "moving_error_end",
    "decision_mae_utilization", "decision_mae_latency_ms", "factors", "latency_offset_ms", "triggers", "settings",
)


def feedback_settings(pairs: list[str] | None) -> Any:
    """``--feedback-set KEY=VALUE`` pairs applied to the simulator's default loop settings."""
    import dataclasses

    from iro_fed.cli import UsageError
    from iro_fed.sim.feedback import SIM_FEEDBACK

    kinds = {fl.name: str(fl.type) for fl in dataclasses.fields(SIM_FEEDBACK)}
    changes: dict[str, Any] = {}
    for key, value in _pairs(pairs, "--feedback-set").items():
        if key not in kinds:
            raise UsageError(f"--feedback-set {key}: unknown setting (known: {', '.join(sorted(kinds))})")
        kind = kinds[key]
        try:
            if "None" in kind and value.lower() in ("none", ""):
                changes[key] = None
            elif kind.startswith("int"):
                changes[key] = int(value)
            else:
                changes[key] = float(value)
        except ValueError:
            raise UsageError(f"--feedback-set {key}: expected {kind.split()[0]}, got {value!r}") from None
    try:
        return dataclasses.replace(SIM_FEEDBACK, **changes)
    except ValueError as exc:
        raise UsageError(f"--feedback-set {exc}") from exc


def cmd_feedback_sim(args: argparse.Namespace) -> int:
    from iro_fed.cli import (
        EXIT_OK,
        UsageError,
        _console,
        _parse_settings,
        check_distinct_outputs,
        check_input_file,
        refuse_empty,
        write_outputs,
    )
    from iro_fed.feedback import DQNFineTune, FederatedRoundRequest
    from iro_fed.problem_io import write_json_atomic
    from iro_fed.sim import build_simulator
    from iro_fed.sim.engine import SimConfigError
    from iro_fed.sim.feedback import run_feedback_sim
    from iro_fed.sim.scenarios.common import run_steps
    from iro_fed.sim.signals import SignalFormatError

    _check_run_args(args)
    if args.delay_steps < 0:
        raise UsageError(f"--delay-steps: must be >= 0, got {args.delay_steps}")
    # 0 observes a decision at the end of its own step (the engine calls decided, then stepped).
    # A delay as long as the run observes nothing: every error and trigger in the report would be empty.
    steps = run_steps(args.hours, STEP_S)  # the scenarios' rounding (the command line never changes the step)
    if args.delay_steps >= steps:
        raise UsageError(f"--delay-steps: must be less than the run's {steps} steps of {STEP_S:g} s (--hours "
                         f"{args.hours:g}), got {args.delay_steps}: no decision would be observed")
    refuse_empty(("--dqn-registry", args.dqn_registry), ("--dqn-policy", args.dqn_policy),
                  ("--round-request", args.round_request))
    if args.dqn_policy:
        if not args.dqn_registry:  # the policy is only the fine-tune's starting point
            raise UsageError("--dqn-policy: only used with --dqn-registry (the policy DQN fine-tuning starts from)")
        check_input_file("--dqn-policy", args.dqn_policy)
    # against the policy the first fine-tune starts from: one of a larger batch needs more steps
    check_fine_tune_steps("--dqn-steps", args.dqn_steps,
                          fine_tune_start(("--dqn-registry", args.dqn_registry), ("--dqn-policy", args.dqn_policy)))
    # The actions write only when drift fires, possibly hours into the run: their folders are
    # checked now and made (by _make_outputs) once every flag is.
    folders = [("--round-request", args.round_request), ("--dqn-registry", args.dqn_registry)]
    for flag, folder in folders:
        if folder:
            _check_output_folder(flag, folder)
    settings = _pairs(args.set, "--set")
    check_distinct_outputs(("--out", args.out), *folders,
                           inputs=[*setting_files(settings), ("--dqn-policy", args.dqn_policy)])
    config = feedback_settings(args.feedback_set)
    solver_settings = _parse_settings(args.solver_set, args.solver, "--solver-set", flag_value_errors=True)
    try:  # the scenario and every setting read before any folder is made (run_feedback_sim builds its own)
        sim = build_simulator(args.scenario, args.solver, args.seed, args.hours, settings, solver_settings)
    except (SimConfigError, SignalFormatError) as exc:
        raise setting_error(exc, settings) from exc
    note_scenario(args.scenario, sim.sc.notes)
    actions: list[Any] = []
    try:
        if args.round_request:
            actions.append(FederatedRoundRequest(args.round_request, site=args.scenario))
        if args.dqn_registry:
            # Trigger.at counts simulator steps: each fine-tune trains on the hour before its trigger.
            actions.append(DQNFineTune(registry=args.dqn_registry, policy=args.dqn_policy, scenario=args.scenario, hours=1.0,
                                       settings={**settings, "usage_shift_at_h": "0"} if "usage_shift_at_h" in settings
                                       else settings, steps=args.dqn_steps, seed=args.seed, steps_flag="--dqn-steps",
                                       step_s=STEP_S))
    except ValueError as exc:
        raise UsageError(f"--round-request / --dqn-registry: {exc}") from exc
    _make_outputs([("--out", args.out)], folders)
    with _progress(f"{args.scenario} / {args.solver} with feedback") as tick:
        try:
            run = run_feedback_sim(args.scenario, args.solver, seed=args.seed, hours=args.hours, settings=settings,
                                   solver_settings=solver_settings, config=config, actions=actions,
                                   delay_steps=args.delay_steps, progress=tick)
        except (SimConfigError, SignalFormatError) as exc:
            raise setting_error(exc, settings) from exc
    report = run.report()
    console = _console(markup=False)
    seeds = seed_label(run.result.seed, run.result.solver_seed)
    console.print(feedback_table(report, f"feedback loop: {args.scenario} with {args.solver}, {seeds}, "
                                         f"{report['hours']:g} h"))
    if report["triggers"]:
        console.print(triggers_table(report["triggers"]))
    if args.out:
        write_outputs(("--out", args.out, lambda: write_json_atomic(
            args.out, {**{k: report[k] for k in FEEDBACK_KEYS}, "series": run.series})))
        console.print(f"report written to {args.out}")
    return EXIT_OK


def feedback_table(report: dict[str, Any], title: str) -> Any:
    """A rich table of a feedback run's counts and errors."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("decisions / observations", f"{report['decisions']:,} / {report['observations']:,}"),
        ("usage shift at hour", _fmt(report["shift_at_h"], 1)),
        ("calibrations / fine-tunes", f"{report['calibrations']} / {report['fine_tunes']}"),
        ("threshold (moving abs. error of node CPU share)", _fmt(report["threshold"], 3)),
        ("moving error before the shift: max / mean",
         f"{_fmt(report['moving_error_before_shift_max'], 3)} / {_fmt(report['moving_error_before_shift_mean'], 3)}"),
        ("moving error after the shift: max", _fmt(report["moving_error_after_shift_max"], 3)),
        ("moving error from 1 h after the last fine-tune: max", _fmt(report["moving_error_1h_after_last_fine_tune_max"], 3)),
        ("moving error at the end", _fmt(report["moving_error_end"], 3)),
        ("decision error, node CPU share (mean abs.)", _fmt(report["decision_mae_utilization"], 3)),
        ("decision error, latency ms (mean abs.)", _fmt(report["decision_mae_latency_ms"], 2)),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def triggers_table(triggers: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="fine-tunes")
    for col in ("hour", "moving error", "threshold", "samples", "error after refit", "settled error", "actions"):
        table.add_column(col, justify="left" if col == "actions" else "right")
    for t in triggers:
        actions = "; ".join(f"{k}: {v}" for k, v in t["results"].items()) or "refit usage model"
        table.add_row(_fmt(t["at_h"]), _fmt(t["moving_error"], 3), _fmt(t["threshold"], 3), str(t["samples"]),
                      _fmt(t["error_after"], 3), _fmt(t["settled_error"], 3), actions)
    return table
