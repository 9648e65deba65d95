#!/usr/bin/env python
"""The DQN placement policy against the heuristics: simulator scenarios, larger clusters, latency, ablation.

1. **Scenarios.** Per scenario (``bank``, ``promo-surge``) a policy is trained with ``iro train``'s
   code path (``solvers.make("dqn").fit`` on ``PlacementEnv``) for at most ``--train-minutes``,
   then every solver runs the same held-out scenario seeds in the simulator: kube-default,
   best-fit, greedy-objective, cpsat (batch, 1 s, with its ``gpu_guard``) and dqn. Reported: mean R (the
   report's ``score``), pending %, utilization, success, carbon kg, cost; R's change vs
   kube-default and the gap to the best heuristic. Targets: >= 10 % better R than kube-default
   (relative to |R_kube|), within 5 % of the best heuristic (relative to |R_best|) or better.
2. **Generalization.** The bank policy (trained on the scenario's 60-node cluster) solves
   openb-shaped problems of 100, 1,000 and 5,000 nodes (``decision_throughput``'s generator) next
   to the heuristics: R and unplaced pods.
3. **Inference.** Per-decision latency of ``dqn.decide`` at 5,000 nodes, candidate pre-selection
   included (target <= 1 ms), next to greedy-objective's.
4. **Ablation.** Rainbow variants (each component off in turn, plus named combinations), the
   same short training per variant and training seed, held-out env reward: per variant the mean,
   min, max and standard deviation over the training seeds. The row equal to ``DQNConfig``'s
   defaults is marked. ``--ablation-variants`` picks variants by name (``one-off``, ``combos``,
   ``all`` or single names from :data:`VARIANTS`) or as inline settings
   (``noisy=false+n_step=1``); ``--ablation-seeds 0,1,2`` trains each on several seeds.

    .venv/bin/python benchmarks/dqn.py --quick          # minutes: short training, one seed
    .venv/bin/python benchmarks/dqn.py                  # 10 min training per scenario, 3 seeds
    .venv/bin/python benchmarks/dqn.py --sections ablation --scenarios bank \
        --ablation-variants all-on,dd,dd-c51 --ablation-seeds 0,1,2 --out benchmarks/results/dqn_ablation_bank.json

Writes ``benchmarks/results/dqn.json`` (``--out``) and the policies under ``benchmarks/results/dqn/``
(``--policy-dir``). ``--quick`` sets only the flags not given.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import IntRange, check_names, check_output_file, int_list, usage_errors, write_json  # noqa: E402

import solvers  # noqa: E402
from iro_fed.cli import check_output_folder  # noqa: E402
from iro_fed.learning import TRAIN_CONFIG, env_factories, evaluate_policy, train_hours  # noqa: E402
from iro_fed.model import ClusterState  # noqa: E402
from solvers.dqn.solver import DEFAULT_POLICY  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
HEURISTICS = ("kube-default", "best-fit", "greedy-objective")
#: Every Rainbow switch at "on" (n-step 3); the variants below are this with some switched off.
RAINBOW: dict[str, Any] = {"double": True, "dueling": True, "prioritized": True, "n_step": 3, "noisy": True,
                           "distributional": True, "attention": True}
_MINIMAL = {"prioritized": False, "n_step": 1, "noisy": False, "distributional": False, "attention": False}
#: Named variants: (label, changes to :data:`RAINBOW`). "one-off" turns one component off at a
#: time (the issue's ablation); "combos" keeps subsets the one-off rows suggested.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "all-on": ("all on", {}),
    "no-double": ("no double", {"double": False}),
    "no-dueling": ("no dueling", {"dueling": False}),
    "no-noisy": ("no noisy (epsilon)", {"noisy": False}),
    "no-per": ("no prioritized", {"prioritized": False}),
    "1-step": ("1-step", {"n_step": 1}),
    "no-c51": ("no C51", {"distributional": False}),
    "no-attention": ("no attention", {"attention": False}),
    "dd": ("double+dueling only", _MINIMAL),
    "dd-c51": ("double+dueling+C51", {**_MINIMAL, "distributional": True}),
    "dd-attn": ("double+dueling+attention", {**_MINIMAL, "attention": True}),
    "dd-c51-attn": ("double+dueling+C51+attention", {**_MINIMAL, "distributional": True, "attention": True}),
    "dd-nstep": ("double+dueling+3-step", {**_MINIMAL, "n_step": 3}),
    "no-noisy-per": ("all on - noisy - PER", {"noisy": False, "prioritized": False}),
}
VARIANT_GROUPS = {
    "one-off": ("all-on", "no-double", "no-dueling", "no-noisy", "no-per", "1-step", "no-c51", "no-attention"),
    "combos": ("all-on", "dd", "dd-c51", "dd-attn", "dd-c51-attn", "dd-nstep", "no-noisy-per"),
}
VARIANT_GROUPS["all"] = tuple(VARIANTS)


def parse_variants(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``--ablation-variants``: ``(id, label, changes)`` per comma-separated item, in order, no duplicates.

    An item is a group (``one-off``, ``combos``, ``all``), a name of :data:`VARIANTS`, or inline
    DQNConfig settings on top of :data:`RAINBOW` joined by ``+`` (``noisy=false+n_step=1``).
    """
    import dataclasses

    from solvers import DQNConfig, parse_setting  # the solvers' own text-to-type conversion

    kinds = {f.name: {"int": int, "float": float, "bool": bool}[str(f.type)] for f in dataclasses.fields(DQNConfig)}
    out: list[tuple[str, str, dict[str, Any]]] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if item in VARIANT_GROUPS:
            out += [(name, *VARIANTS[name]) for name in VARIANT_GROUPS[item]]
        elif item in VARIANTS:
            out.append((item, *VARIANTS[item]))
        elif "=" in item:
            changes: dict[str, Any] = {}
            for pair in item.split("+"):
                key, _, value = pair.partition("=")
                key = key.strip()
                if key not in kinds:
                    raise SystemExit(f"--ablation-variants {item}: unknown DQN config field {key!r} "
                                     f"(known: {', '.join(sorted(kinds))})")
                try:
                    changes[key] = parse_setting(value.strip(), kinds[key], f"--ablation-variants {key}")
                except ValueError as exc:
                    raise SystemExit(str(exc)) from exc
            out.append((item, item, changes))
        else:
            raise SystemExit(f"--ablation-variants: unknown variant {item!r} (groups: {', '.join(VARIANT_GROUPS)}; "
                             f"names: {', '.join(VARIANTS)}; or inline settings like noisy=false+n_step=1)")
    seen: set[str] = set()
    return [v for v in out if not (v[0] in seen or seen.add(v[0]))]


def is_default(changes: dict[str, Any]) -> bool:
    """Whether RAINBOW + ``changes`` is what ``DQNConfig()`` sets for the Rainbow switches."""
    from solvers import DQNConfig

    defaults = DQNConfig().to_dict()
    return all(defaults[k] == v for k, v in {**RAINBOW, **changes}.items())


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, Python {platform.python_version()}"


def hours_for(args: argparse.Namespace, scenario: str) -> float:
    """Training episode length: ``--train-hours`` or ``iro train``'s default for the scenario."""
    return args.train_hours if args.train_hours is not None else train_hours(scenario)


def train_policy(scenario: str, out: Path, steps: int, minutes: float, hours: float, seed: int,
                 config: dict[str, Any] | None = None, console: Console | None = None) -> dict[str, Any]:
    solver = solvers.make("dqn", seed=seed)
    fns = env_factories(scenario, 4, seed, hours, 16, {})
    result = solver.fit(fns, steps, out=out, config=config or {}, metadata={"scenario": scenario, "hours": hours},
                        time_limit_s=minutes * 60, progress=console is not None, console=console)
    return {"steps": result.steps, "wall_s": result.wall_s, "steps_per_s": result.steps_per_s,
            "emissions_g": None if result.emissions_kg is None else result.emissions_kg * 1000,
            "mean_episode_reward": result.mean_episode_reward}


def simulate(scenario: str, solver: str, seed: int, hours: float, settings: dict[str, Any]) -> dict[str, Any]:
    from iro_fed.sim import simulate as run

    report = run(scenario, solver, seed=seed, hours=hours, solver_settings=settings).report()
    keys = ("score", "pending_pct", "utilization_pct", "success_rate_pct", "carbon_kg", "cost")
    # success_rate_pct is None for a run without requests (promo-surge has no services).
    return {k: None if report[k] is None else float(report[k]) for k in keys}


def _mean(values: list[float | None]) -> float | None:
    """The mean of the values that are not None; None when none is."""
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def trains(args: argparse.Namespace) -> bool:
    """Whether this run trains policies: the scenarios section without ``--skip-train``."""
    return "scenarios" in args.sections and not args.skip_train


def shipped_scenario() -> str | None:
    """The scenario the dqn solver's shipped policy (``DEFAULT_POLICY``) was trained on, as its
    metadata says; None when there is no shipped policy."""
    import json

    from solvers import checkpoint_metadata_path as metadata_path

    if not DEFAULT_POLICY.is_file():
        return None
    try:
        return json.loads(metadata_path(DEFAULT_POLICY).read_text()).get("scenario")
    except (OSError, ValueError):
        return None


def policy_paths(args: argparse.Namespace) -> dict[str, Path]:
    """The policy file each scenario's dqn runs load, decided before any section runs.

    A run that trains writes ``<--policy-dir>/<scenario>.pt`` (default ``results/dqn/``). Otherwise
    (``--skip-train``, or only the generalization / latency sections) that file must be there; ``results/`` is git-ignored,
    so on a fresh checkout the scenario of the shipped ``solvers/dqn/policies/default.pt`` (bank)
    falls back to it and any other scenario raises ValueError naming the flag and the file.
    Before, ``--skip-train`` trained silently, up to ``--train-minutes``, when the file was missing.
    """
    needed = list(args.scenarios) if "scenarios" in args.sections else []
    if args.sections & {"generalization", "latency"} and args.scenarios[0] not in needed:
        needed.insert(0, args.scenarios[0])  # these sections run the first scenario's policy
    shipped = shipped_scenario()
    out: dict[str, Path] = {}
    for scenario in needed:
        policy = args.policy_dir / f"{scenario}.pt"
        if trains(args) or policy.is_file():
            out[scenario] = policy
        elif scenario == shipped:
            out[scenario] = DEFAULT_POLICY
        else:
            flag = "--skip-train" if args.skip_train else f"--sections {','.join(sorted(args.sections))}"
            raise ValueError(f"{flag}: no trained {scenario} policy, {policy} does not exist (run the scenarios "
                             "section without --skip-train to train it)")
    return out


def scenario_section(args: argparse.Namespace, console: Console) -> list[dict[str, Any]]:
    rows = []
    for scenario in args.scenarios:
        policy = args.policies[scenario]
        if trains(args):
            console.print(f"[bold]training on {scenario}[/bold] (<= {args.train_minutes:g} min, {args.train_steps:,} steps)")
            training = train_policy(scenario, policy, args.train_steps, args.train_minutes, hours_for(args, scenario), 0,
                                    config=TRAIN_CONFIG.get(scenario), console=console)
        else:
            training = {"reused": str(policy), **({"shipped": True} if policy == DEFAULT_POLICY else {})}
        runs = {name: {} for name in (*HEURISTICS, "cpsat", "dqn")}
        for seed in args.eval_seeds:
            for name in runs:
                settings: dict[str, Any] = {}
                if name == "dqn":
                    settings = {"policy": str(policy)}
                elif name == "cpsat":
                    settings = {"time_limit_s": 1.0, "deterministic": True, "gpu_guard": True}
                t0 = time.perf_counter()
                runs[name][seed] = simulate(scenario, name, seed, args.hours or hours_for(args, scenario), settings)
                console.print(f"  {scenario} seed {seed} {name:17s} R {runs[name][seed]['score']:+.4f}"
                              f"  ({time.perf_counter() - t0:.1f} s)")
        means = {name: {k: _mean([r[k] for r in by_seed.values()]) for k in next(iter(by_seed.values()))}
                 for name, by_seed in runs.items()}
        kube = means["kube-default"]["score"]
        best_name = max(HEURISTICS, key=lambda n: means[n]["score"])
        best = means[best_name]["score"]
        dqn = means["dqn"]["score"]
        rows.append({
            "scenario": scenario, "training": training, "means": means, "seeds": args.eval_seeds,
            "dqn_vs_kube_pct": 100 * (dqn - kube) / abs(kube) if kube else None,
            "dqn_gap_to_best_pct": 100 * (best - dqn) / abs(best) if best else None, "best_heuristic": best_name,
        })
    return rows


def _shapes(dt: Any) -> tuple[Any, Any]:
    from iro_fed.sim.signals import data_dir

    return dt.load_shapes(data_dir())


def generalization_section(args: argparse.Namespace, console: Console) -> list[dict[str, Any]]:
    dt = importlib.import_module("decision_throughput")
    import iro_fed

    node_shapes, pod_shapes = _shapes(dt)
    policy = args.policies[args.scenarios[0]]
    rows = []
    for nodes in args.sizes:
        pods = max(50, nodes // 5)
        doc = dt.make_document(dt.make_nodes(node_shapes, nodes, 0), dt.make_pods(pod_shapes, pods, 0))
        problem = iro_fed.problem_from_dict(doc)
        row: dict[str, Any] = {"nodes": nodes, "pods": pods}
        for name in (*HEURISTICS, "dqn"):
            settings = {"policy": str(policy)} if name == "dqn" else {}
            t0 = time.perf_counter()
            placement = solvers.make(name, **settings).solve(problem)
            row[name] = {"R": placement.objective.score, "unplaced": int(placement.objective.unplaced),
                         "time_s": time.perf_counter() - t0}
        console.print(f"  {nodes:,} nodes: " + ", ".join(f"{n} {row[n]['R']:+.4f}" for n in (*HEURISTICS, "dqn")))
        rows.append(row)
    return rows


def latency_section(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    dt = importlib.import_module("decision_throughput")
    import iro_fed

    node_shapes, pod_shapes = _shapes(dt)
    nodes = 5000
    doc = dt.make_document(dt.make_nodes(node_shapes, nodes, 1), dt.make_pods(pod_shapes, args.latency_pods, 1))
    problem = iro_fed.problem_from_dict(doc)
    out: dict[str, Any] = {"nodes": nodes, "decisions": args.latency_pods}
    for name, settings in (("greedy-objective", {}), ("dqn", {"policy": str(args.policies[args.scenarios[0]])})):
        solver = solvers.make(name, **settings)
        state = ClusterState(problem)
        solver.decide(state, 0)  # load the policy, warm caches
        times = []
        for w in range(problem.num_workloads):
            t0 = time.perf_counter()
            d = solver.decide(state, w)
            times.append(time.perf_counter() - t0)
            if d.node >= 0:
                state.place(w, d.node, d.cards)
        ms = np.array(times) * 1000
        out[name] = {"mean_ms": float(ms.mean()), "p50_ms": float(np.percentile(ms, 50)),
                     "p99_ms": float(np.percentile(ms, 99))}
        console.print(f"  {name}: mean {ms.mean():.3f} ms, p99 {np.percentile(ms, 99):.3f} ms per decision")
    return out


def ablation_section(args: argparse.Namespace, console: Console,
                     save: Any = None) -> list[dict[str, Any]]:
    """Train every variant on every ablation seed and scenario; one row per (scenario, variant).

    ``save(rows)`` is called after each training run so a long ablation keeps what it measured.
    """
    rows: list[dict[str, Any]] = []
    for scenario in args.ablation_scenarios:
        hours = hours_for(args, scenario)
        greedy: float | None = None
        by_variant: dict[str, dict[str, Any]] = {}
        for vid, label, change in args.ablation_variants:
            by_variant[vid] = {"scenario": scenario, "variant": label, "id": vid, "change": change,
                               "config": {**RAINBOW, **change}, "default": is_default(change),
                               "steps": args.ablation_steps, "seeds": [], "policy_rewards": [], "train_s": []}
            rows.append(by_variant[vid])
        for seed in args.ablation_seeds:  # seed-major: a run cut short has every variant on the same seeds
            for vid, label, _ in args.ablation_variants:
                row = by_variant[vid]
                name = f"{vid.replace('=', '-').replace('+', '_')}_s{seed}.pt"
                solver = solvers.make("dqn", seed=seed)
                result = solver.fit(env_factories(scenario, 4, seed, hours, 16, {}), args.ablation_steps,
                                    out=args.policy_dir / "ablation" / scenario / name, config=row["config"],
                                    progress=False, track_emissions=False)
                ev = evaluate_policy(solver.agent, scenario, args.ablation_episodes, hours, 16, {},
                                     baseline=greedy is None)
                if greedy is None:
                    greedy = ev["greedy_reward"]
                row["seeds"].append(seed)
                row["policy_rewards"].append(ev["policy_reward"])
                row["train_s"].append(result.wall_s)
                values = np.array(row["policy_rewards"])
                row.update(greedy_reward=greedy, policy_reward=float(values.mean()), min=float(values.min()),
                           max=float(values.max()), std=float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                           mean_train_s=float(np.mean(row["train_s"])))
                console.print(f"  {scenario} {label:30s} seed {seed} held-out reward {ev['policy_reward']:+.3f} "
                              f"(greedy {greedy:+.3f}, {result.wall_s:.0f} s)")
                if save is not None:
                    save([r for r in rows if r["seeds"]])
    return rows


def print_tables(doc: dict[str, Any], console: Console) -> None:
    for row in doc["scenarios"]:
        t = Table(title=f"{row['scenario']}: held-out seeds {row['seeds']} (means)")
        for col in ("solver", "R", "pending %", "util %", "success %", "carbon kg", "cost"):
            t.add_column(col, justify="right")
        for name, m in row["means"].items():
            t.add_row(name, f"{m['score']:+.4f}", _cell(m["pending_pct"], ".2f"), f"{m['utilization_pct']:.1f}",
                      _cell(m["success_rate_pct"], ".3f"), f"{m['carbon_kg']:.2f}", f"{m['cost']:.1f}")
        console.print(t)
        console.print(f"dqn vs kube-default: {_cell(row['dqn_vs_kube_pct'], '+.1f')} % (target >= +10 %); gap to the best "
                      f"heuristic ({row['best_heuristic']}): {_cell(row['dqn_gap_to_best_pct'], '.1f')} % (target <= 5 %)")
    if doc.get("generalization"):
        t = Table(title="Generalization: the policy on larger openb-shaped clusters (R, unplaced)")
        t.add_column("nodes", justify="right")
        for name in (*HEURISTICS, "dqn"):
            t.add_column(name, justify="right")
        for row in doc["generalization"]:
            t.add_row(f"{row['nodes']:,}", *[f"{row[n]['R']:+.4f} ({row[n]['unplaced']})" for n in (*HEURISTICS, "dqn")])
        console.print(t)
    if doc.get("latency"):
        lat = doc["latency"]
        console.print(f"Inference at {lat['nodes']:,} nodes: dqn mean {lat['dqn']['mean_ms']:.3f} ms, p99 "
                      f"{lat['dqn']['p99_ms']:.3f} ms (target <= 1 ms); greedy-objective mean "
                      f"{lat['greedy-objective']['mean_ms']:.3f} ms")
    if doc.get("ablation"):
        seeds = doc["settings"].get("ablation_seeds", [0])
        t = Table(title=f"Ablation: held-out env reward after {doc['settings'].get('ablation_steps')} training steps, "
                        f"training seeds {seeds} (* = DQNConfig defaults)")
        for col in ("scenario", "variant", "mean", "min", "max", "std", "greedy", "train s"):
            t.add_column(col, justify="right", no_wrap=col == "variant")
        for row in doc["ablation"]:
            t.add_row(row["scenario"], row["variant"] + (" *" if row["default"] else ""), f"{row['policy_reward']:+.3f}",
                      f"{row['min']:+.3f}", f"{row['max']:+.3f}", f"{row['std']:.3f}", f"{row['greedy_reward']:+.3f}",
                      f"{row['mean_train_s']:.0f}")
        console.print(t)


SECTIONS = ("scenarios", "generalization", "latency", "ablation")
#: Largest cluster of the generalization section (decision_throughput's generator builds it in memory).
MAX_NODES = 100_000
#: ``--quick``'s values, for the flags not given (their argparse default is None).
QUICK = {"train_steps": 3000, "train_minutes": 2.0, "eval_seeds": "101", "sizes": "100,1000", "ablation_steps": 1500,
         "ablation_episodes": 1, "latency_pods": 100}
FULL = {"train_steps": 200_000, "train_minutes": 10.0, "eval_seeds": "101,102,103", "sizes": "100,1000,5000",
        "ablation_steps": 6000, "ablation_episodes": 3, "latency_pods": 300}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from iro_fed import limits

    steps = IntRange(1, limits.MAX_TRAIN_STEPS)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="short training, one seed, 1,000 nodes, short ablation (flags given explicitly still apply)")
    ap.add_argument("--scenarios", default="bank,promo-surge")
    ap.add_argument("--train-steps", type=steps, default=None, help="default 200,000 (--quick 3,000)")
    ap.add_argument("--train-minutes", type=float, default=None, help="default 10 (--quick 2)")
    ap.add_argument("--train-hours", type=float, default=None,
                    help="simulated hours per training episode (default: iro train's per scenario, "
                         "6 for bank, 14 for promo-surge)")
    ap.add_argument("--hours", type=float, default=None,
                    help="simulated hours per evaluation run (default 24; --quick: the training length, 6 h bank, "
                         "14 h promo-surge)")
    ap.add_argument("--eval-seeds", default=None, help="default 101,102,103 (--quick 101)")
    ap.add_argument("--sizes", default=None, help="generalization cluster sizes, default 100,1000,5000 (--quick 100,1000)")
    ap.add_argument("--latency-pods", type=IntRange(1, 1_000_000), default=None, help="default 300 (--quick 100)")
    ap.add_argument("--ablation-steps", type=steps, default=None, help="default 6,000 (--quick 1,500)")
    ap.add_argument("--ablation-episodes", type=IntRange(1, limits.MAX_EVAL_EPISODES), default=None,
                    help="default 3 (--quick 1)")
    ap.add_argument("--ablation-seeds", default="0", help="training seeds per ablation variant (default 0)")
    ap.add_argument("--ablation-variants", default="one-off",
                    help="comma-separated: groups one-off (default), combos, all; names "
                         f"({', '.join(VARIANTS)}); or inline settings on top of all-on, e.g. noisy=false+n_step=1")
    ap.add_argument("--ablation-scenarios", default=None,
                    help="scenarios of the ablation (default: the first of --scenarios)")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--skip-train", action="store_true",
                    help="never train: reuse the policies under --policy-dir (bank without one: the shipped "
                         "solvers/dqn/policies/default.pt; another scenario without one: exit 2)")
    ap.add_argument("--policy-dir", default=None,
                    help="folder of the trained policies (<scenario>.pt, ablation/<scenario>/*.pt; "
                         "default benchmarks/results/dqn)")
    ap.add_argument("--out", default=str(RESULTS / "dqn.json"))
    args = ap.parse_args(argv)
    usage_errors(ap, lambda: check_values(args))
    try:
        args.ablation_variants = parse_variants(args.ablation_variants)
    except SystemExit as exc:  # parse_variants' own error (it is also called without a parser)
        ap.error(str(exc))
    for flag, values in (("--ablation-seeds", args.ablation_seeds), ("--ablation-variants", args.ablation_variants),
                         ("--ablation-scenarios", args.ablation_scenarios)):
        if "ablation" in args.sections and not values:
            ap.error(f"{flag}: empty")
    try:  # before any work: --skip-train must never fall back to training
        args.policies = policy_paths(args)
    except ValueError as exc:
        ap.error(str(exc))
    args.out = usage_errors(ap, lambda: check_output_file("--out", args.out))
    if trains(args) or "ablation" in args.sections:  # only a run that writes policies makes their folder
        usage_errors(ap, lambda: check_output_folder("--policy-dir", args.policy_dir))
    return args


def check_values(args: argparse.Namespace) -> None:
    """Every flag's value read and checked in place (UsageError naming the flag); --quick's values
    only for the flags not given."""
    from iro_fed.cli import check_hours, check_number, parse_seeds
    from iro_fed.sim.scenarios import SCENARIOS

    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.hours is not None:
        check_hours("--hours", args.hours)
    elif not args.quick:
        args.hours = 24.0  # --quick: None, the training length
    if args.train_hours is not None:
        check_hours("--train-hours", args.train_hours)
    check_number("--train-minutes", args.train_minutes, 0.0, 7 * 24 * 60, low_open=True)
    args.policy_dir = Path(args.policy_dir) if args.policy_dir is not None else RESULTS / "dqn"
    args.sections = set(check_names("--sections", args.sections, SECTIONS, "section"))
    args.scenarios = check_names("--scenarios", args.scenarios, tuple(SCENARIOS), "scenario")
    args.ablation_scenarios = (check_names("--ablation-scenarios", args.ablation_scenarios, tuple(SCENARIOS), "scenario")
                               if args.ablation_scenarios else args.scenarios[:1])
    args.eval_seeds = parse_seeds(str(args.eval_seeds), "--eval-seeds")
    args.ablation_seeds = parse_seeds(str(args.ablation_seeds), "--ablation-seeds")
    args.sizes = int_list("--sizes", args.sizes, 1, MAX_NODES, "cluster size")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=False, width=None if sys.stdout.isatty() else 150)  # files/pipes: tables unclipped
    settings = {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()}
    settings["ablation_variants"] = [vid for vid, _, _ in args.ablation_variants]
    settings["policies"] = {scenario: str(path) for scenario, path in args.policies.items()}
    settings["policy_dir"], settings["out"] = str(args.policy_dir), str(args.out)
    doc: dict[str, Any] = {"machine": machine(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
                           "settings": settings}
    console.print(f"[dim]{doc['machine']}[/dim]")
    for scenario, policy in args.policies.items():
        if policy == DEFAULT_POLICY:
            console.print(f"{scenario}: no {args.policy_dir / f'{scenario}.pt'}, using the shipped {scenario} policy "
                          f"{policy}", highlight=False)
    doc["scenarios"] = scenario_section(args, console) if "scenarios" in args.sections else []
    if "generalization" in args.sections:
        doc["generalization"] = generalization_section(args, console)
    if "latency" in args.sections:
        doc["latency"] = latency_section(args, console)
    if "ablation" in args.sections:
        def save(rows: list[dict[str, Any]]) -> None:
            write_json(args.out, {**doc, "ablation": rows, "partial": True})

        doc["ablation"] = ablation_section(args, console, save)
    print_tables(doc, console)
    write_json(args.out, doc)
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
