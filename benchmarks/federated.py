#!/usr/bin/env python
"""Federated training of the placement policy: quality, robustness, round overhead, emissions.

On ``edge-iot`` with five heterogeneous sites (:data:`iro_fed.federated.task.EDGE_IOT_SITES`;
sites 0-3 train, site 4 is held out and never trained on), every policy gets the same number
of environment steps and is evaluated greedily on the held-out site:

1. **Quality**: local-only policies (one per training site, all steps on its own slice), a
   centrally trained policy (all steps on the four slices pooled: one learner, four envs), and
   the federated global policy (FedAvg, ``rounds x local_steps`` per site). Reported: held-out
   return per episode (the objective's change summed over decisions, in units of one unplaced
   pod: the simulator env's reward) and the simulator's score, plus the objective's greedy
   choice and a random valid action as references; candidate slots are shuffled at evaluation
   (see :func:`iro_fed.federated.task.evaluate_policy`). Targets: federated >= 95 % of
   centralized R, and better than the mean local-only policy. Training is repeated for
   ``--seeds`` benchmark seeds (seed ``s``: initial policy and federation seed ``s``, local-only
   site ``i`` trains with seed ``500 + i + 1000 s``, centralized with ``700 + 1000 s``; seed 0 is
   the single-seed run of earlier releases); every policy is evaluated on the same ``--episodes``
   held-out episodes (env seeds ``--eval-seed``, ``+1``, ...). Reported: the mean over seeds with
   its standard deviation, and per seed the federated minus mean local-only difference. Each
   federated site keeps its replay buffer from round to round (``keep-replay``, the default),
   as a local-only site keeps its own over its steps; ``--set keep-replay=false`` starts every
   round with an empty buffer (the earlier behaviour, for comparison).
2. **Poisoning**: five clients, one sends ``w + 1e6`` every round. FedAvg without the norm
   check (Flower's plain behaviour) against FedAvg with our update validation, FedMedian, Krum
   and FedTrimmedAvg (validation off, so the aggregator alone must resist). Target: robust
   within 5 % of clean R; FedAvg degrades.
3. **Round overhead** with a real SuperLink and 3 SuperNodes on loopback (``flwr run``), one
   local step per site: per round after the first, wall time minus the slowest site's training
   (target <= 5 s), with its breakdown, run twice: ``before`` with Flower 1.42's defaults (a new
   ``flwr-clientapp`` process per message, 3 s reply polls) and ``after`` with the warm ClientApp
   executor (:mod:`iro_fed.federated.executor`) and short reply polls
   (:class:`iro_fed.federated.server_app.PollingGrid`).
4. **Emissions** of the federated training (codecarbon, offline, per site, summed).

Quality and poisoning run the deployed ServerApp loop and ClientApp handlers through the
in-process grid (:mod:`iro_fed.federated.inprocess`) so that many federations fit in one run;
the overhead part uses real processes.

    .venv/bin/python benchmarks/federated.py --quick      # 3 seeds x 8 episodes, about 10 minutes on 2 shared cores
    .venv/bin/python benchmarks/federated.py              # more rounds and steps, 3 seeds x 10 episodes
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_common import IntRange, check_names, check_output_file, check_seed, usage_errors, write_json  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "results" / "federated.json"
TRAIN_SITES = (0, 1, 2, 3)
HELD_OUT = 4


def _quiet_flower() -> None:
    import logging

    from flwr.common.logger import FLOWER_LOGGER  # importing it sets its level; override afterwards

    FLOWER_LOGGER.setLevel(logging.ERROR)


def _machine() -> dict[str, Any]:
    import flwr
    import torch

    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "torch": torch.__version__, "flwr": flwr.__version__, "numpy": np.__version__,
            "load_avg": os.getloadavg()[0]}


#: First env seed of the held-out evaluation episodes (the server's per-round evaluation uses it too).
EVAL_SEED = 10_000
#: Greedy episodes of the server's evaluation after every round (the ``per_round`` trace).
ROUND_EPISODES = 2


def evaluate(weights: dict[str, np.ndarray], cfg: Any, episodes: int, seed: int = EVAL_SEED) -> dict[str, float]:
    from iro_fed.federated.task import evaluate_policy

    return evaluate_policy(weights, cfg, HELD_OUT, episodes=episodes, seed=seed)


def federate(cfg: Any, node_configs: Sequence[dict[str, Any]], strategy: str, registry: Path,
             **strategy_overrides: Any) -> dict[str, Any]:
    """One in-process federation with the deployed ServerApp loop; the final global weights and summary."""
    from iro_fed.federated.inprocess import InProcessGrid
    from iro_fed.federated.server_app import run_federation
    from iro_fed.federated.strategies import make_strategy

    cfg = cfg.replace(strategy=strategy, registry=str(registry), min_nodes=len(node_configs))
    random.seed(cfg.seed)  # Flower samples nodes with random.sample: the same sample in every federation
    grid = InProcessGrid(node_configs, cfg.to_run_config())
    t0 = time.perf_counter()
    summary = run_federation(grid, cfg, strategy=make_strategy(strategy, cfg, **strategy_overrides))
    weights = summary["weights"]  # unpacked from the one flat array the federation exchanges
    return {"weights": weights, "rounds": summary["rounds"], "emissions_g": summary["emissions_g"],
            "wall_s": time.perf_counter() - t0}


def quality(cfg: Any, episodes: int, work: Path, console: Console, seed: int = 0,
            eval_seed: int = EVAL_SEED) -> dict[str, Any]:
    """One benchmark seed of the quality part (see the module docstring for the seeds it derives)."""
    import torch

    from iro_fed.federated.task import (
        build_agent,
        full_state_dict,
        get_weights,
        greedy_choice,
        make_site_env,
        random_choice,
        run_episodes,
    )
    from solvers import train_dqn as train

    torch.set_num_threads(1)
    cfg = cfg.replace(seed=seed)
    budget = cfg.num_server_rounds * cfg.local_steps  # steps per site
    initial = get_weights(build_agent(cfg).online)
    out: dict[str, Any] = {"seed": seed, "steps_per_site": budget, "total_steps": budget * len(TRAIN_SITES)}
    out["greedy"] = run_episodes(greedy_choice, cfg, HELD_OUT, episodes, eval_seed)
    out["random"] = run_episodes(random_choice(1), cfg, HELD_OUT, episodes, eval_seed)
    out["initial"] = evaluate(initial, cfg, episodes, eval_seed)

    tag = f"[bold]quality[/bold] (seed {seed})"
    console.print(f"{tag}: local-only on sites {list(TRAIN_SITES)} ({budget} steps each)")
    local = {}
    for site in TRAIN_SITES:
        s_seed = 500 + site + 1000 * seed
        agent, _ = train([lambda s=site, e=s_seed: make_site_env(cfg.scenario, s, e, cfg.hours, cfg.top_k)],
                         cfg.dqn_config(), steps=budget, seed=s_seed, progress=False, track_emissions=False,
                         initial_state=full_state_dict(cfg, initial))
        local[site] = evaluate(get_weights(agent.online), cfg, episodes, eval_seed)
    out["local"] = local

    console.print(f"{tag}: centralized on the pooled sites ({budget * len(TRAIN_SITES)} steps)")
    t0 = time.perf_counter()
    c_seed = 700 + 1000 * seed
    agent, res = train([lambda s=site: make_site_env(cfg.scenario, s, c_seed + s, cfg.hours, cfg.top_k)
                        for site in TRAIN_SITES], cfg.dqn_config(), steps=budget * len(TRAIN_SITES), seed=c_seed,
                       progress=False, track_emissions=cfg.track_emissions, initial_state=full_state_dict(cfg, initial))
    out["centralized"] = {**evaluate(get_weights(agent.online), cfg, episodes, eval_seed),
                          "emissions_g": _grams_of(res.emissions_kg), "wall_s": time.perf_counter() - t0}

    console.print(f"{tag}: federated FedAvg, {cfg.num_server_rounds} rounds x {cfg.local_steps} steps")
    fed = federate(cfg, [{"site": s} for s in TRAIN_SITES], "fedavg", work / f"quality-{seed}")
    out["federated"] = {**evaluate(fed["weights"], cfg, episodes, eval_seed), "emissions_g": fed["emissions_g"],
                        "wall_s": fed["wall_s"], "per_round": [r["eval-reward"] for r in fed["rounds"]],
                        "replay_kept": [r.get("replay_kept", 0) for r in fed["rounds"]]}
    return out


ARMS = ("greedy", "random", "initial", "centralized", "federated")
METRICS = ("eval-reward", "eval-score", "eval-carbon-kg", "eval-pending-pct")


def combine_seeds(per_seed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over the benchmark seeds (``*-std``: standard deviation over seeds) in the one-seed layout.

    Each arm keeps the keys of :func:`quality` (means), plus ``eval-reward-std`` and
    ``eval-reward-seeds``; ``local_mean`` is each seed's mean over the local-only policies,
    averaged; ``fed_minus_local`` is the mean of the per-seed differences, with its spread and
    ``fed_beats_local_seeds`` (seeds where federated > that seed's mean local-only policy).
    """
    def mean_of(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {k: float(np.mean([r[k] for r in rows])) for k in METRICS if k in rows[0]}
        rewards = [float(r["eval-reward"]) for r in rows]
        out["eval-reward-std"] = float(np.std(rewards))
        out["eval-reward-seeds"] = rewards
        for k in ("emissions_g", "wall_s"):
            if k in rows[0]:
                out[k] = _mean_or_none([r[k] for r in rows])
        return out

    q: dict[str, Any] = {"seeds": [r["seed"] for r in per_seed], "steps_per_site": per_seed[0]["steps_per_site"],
                         "total_steps": per_seed[0]["total_steps"]}
    for arm in ARMS:
        q[arm] = mean_of([r[arm] for r in per_seed])
    q["federated"]["per_round"] = [float(np.mean(v)) for v in zip(*(r["federated"]["per_round"] for r in per_seed),
                                                                  strict=True)]
    q["local"] = {site: mean_of([r["local"][site] for r in per_seed]) for site in per_seed[0]["local"]}
    local_means = [{k: float(np.mean([m[k] for m in r["local"].values()])) for k in METRICS} for r in per_seed]
    q["local_mean"] = mean_of(local_means)
    diffs = [r["federated"]["eval-reward"] - lm["eval-reward"] for r, lm in zip(per_seed, local_means, strict=True)]
    # A ratio over a centralized reward of exactly 0 has no value (null in the JSON, "-" in the table).
    ratios = [_ratio(r["federated"]["eval-reward"], r["centralized"]["eval-reward"]) for r in per_seed]
    q["fed_minus_local"] = float(np.mean(diffs))
    q["fed_minus_local_std"] = float(np.std(diffs))
    q["fed_minus_local_seeds"] = diffs
    q["fed_beats_local_seeds"] = int(sum(d > 0 for d in diffs))
    q["fed_vs_central"] = _ratio(q["federated"]["eval-reward"], q["centralized"]["eval-reward"])
    q["fed_vs_central_seeds"] = ratios
    base = q["random"]["eval-reward"]
    span = q["centralized"]["eval-reward"] - base
    q["fed_vs_central_gain"] = _ratio(q["federated"]["eval-reward"] - base, span)
    q["per_seed"] = list(per_seed)
    return q


def _grams_of(kg: float | None) -> float | None:
    """Training emissions in grams; None when not measured (track-emissions off, codecarbon failed)."""
    return None if kg is None else 1000.0 * float(kg)


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    """The mean, or None when a seed has no value (emissions not measured): not a mean of fewer seeds."""
    return None if any(v is None for v in values) else float(np.mean(values))


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{100 * ratio:.1f}"


def poisoning(cfg: Any, episodes: int, work: Path, console: Console, eval_seed: int = EVAL_SEED) -> dict[str, Any]:
    nodes = [{"site": s} for s in TRAIN_SITES] + [{"site": 0, "attack": "scale"}]
    clean_nodes = [{"site": s} for s in TRAIN_SITES]
    runs: dict[str, Any] = {}
    plan = [
        ("fedavg (clean, 4 honest)", "fedavg", clean_nodes, {}),
        ("fedavg, no validation", "fedavg", nodes, {"norm_factor": math.inf}),
        ("fedavg + update validation", "fedavg", nodes, {}),
        ("fedmedian, no validation", "fedmedian", nodes, {"norm_factor": math.inf}),
        ("krum, no validation", "krum", nodes, {"norm_factor": math.inf}),
        ("fedtrimmedavg, no validation", "fedtrimmedavg", nodes, {"norm_factor": math.inf}),
    ]
    for label, strategy, node_configs, overrides in plan:
        console.print(f"[bold]poisoning[/bold]: {label}")
        fed = federate(cfg, node_configs, strategy, work / label.split()[0], **overrides)
        finite = all(np.isfinite(v).all() for v in fed["weights"].values())
        max_abs = max(float(np.abs(v).max()) for v in fed["weights"].values())
        runs[label] = {**evaluate(fed["weights"], cfg, episodes, eval_seed), "max_abs_weight": max_abs, "finite": finite,
                       "dropped": sum(r["dropped"] for r in fed["rounds"])}
    return runs


#: The two ways the overhead part runs the same federation: Flower 1.42's defaults (a new
#: ``flwr-clientapp`` process per message, the ServerApp pulling replies every 3 s) and ours.
OVERHEAD_MODES: dict[str, dict[str, Any]] = {
    "before": {"executor": "flower", "grid_poll_s": 3.0,
               "label": "Flower defaults: new flwr-clientapp process per message, 3 s reply polls"},
    "after": {"executor": "warm", "grid_poll_s": None,
              "label": "warm executor (forked, modules preloaded), 50-250 ms reply polls"},
}
OVERHEAD_TARGET_S = 5.0
BREAKDOWN = (("dispatch_s", "sent -> ClientApp handler starts (SuperNode 3 s poll, process start, imports)"),
             ("client_setup_s", "handler before training (network, site env, carbon data)"),
             ("client_train_s", "local training (compute, not overhead)"),
             ("return_s", "reply created -> pulled by the ServerApp (pushes, polls)"),
             ("server_eval_s", "server: held-out evaluation + registry write"),
             ("server_other_s", "server: aggregation, next round's messages"))


def round_overhead(stamps: Sequence[float], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-round wall time and overhead from the times the ``IRO-FED-ROUND`` lines arrived and their rows.

    A round's wall time is the time between two consecutive round lines (so the first round,
    which includes the ServerApp's start, is left out: "after start-up"); its overhead is that
    minus the slowest site's training (the only client compute: sites do not evaluate, the
    server does, and its evaluation is counted as overhead here). The breakdown is the
    critical path of :func:`iro_fed.federated.strategies.round_timing` per round.
    """
    n = min(len(stamps), len(rows))
    out: list[dict[str, Any]] = []
    for i in range(1, n):
        row = rows[i]
        wall = stamps[i] - stamps[i - 1]
        train = float(row.get("client_train_s_max", row.get("client_train_s", 0.0)))
        parts = {k: float(row.get(k, 0.0)) for k, _ in BREAKDOWN if k != "server_other_s"}
        parts["server_other_s"] = max(0.0, wall - float(row.get("replies_s", 0.0)) - parts["server_eval_s"])
        out.append({"round": int(row.get("round", i + 1)), "wall_s": wall, "train_s": train,
                    "overhead_s": wall - train, **parts})
    mean = {k: float(np.mean([r[k] for r in out])) for k in out[0] if k != "round"} if out else {}
    return {"per_round": out, "mean": mean}


def overhead_run(nodes: int, rounds: int, mode: str, console: Console) -> dict[str, Any]:
    """One federation on real processes in ``mode`` (see :data:`OVERHEAD_MODES`); timings."""
    from iro_fed.federated.local import LocalFederation
    from iro_fed.federated.server_app import ROUND_TAG

    spec = OVERHEAD_MODES[mode]
    console.print(f"[bold]overhead[/bold] ({mode}: {spec['label']}): real SuperLink + {nodes} SuperNodes on "
                  f"loopback, {rounds} rounds, 1 local step per site")
    stamps: list[float] = []
    rows: list[dict[str, Any]] = []

    def on_line(line: str) -> None:
        if ROUND_TAG in line:
            try:
                rows.append(json.loads(line.split(ROUND_TAG, 1)[1].strip()))
                stamps.append(time.perf_counter())
            except json.JSONDecodeError:
                pass

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="iro-fed-bench-") as tmp:
        fed = LocalFederation(nodes, workdir=Path(tmp) / "work", executor=spec["executor"],
                              grid_poll_s=spec["grid_poll_s"])
        with fed:
            started = time.perf_counter()
            result = fed.run({"num-server-rounds": rounds, "local-steps": 1, "hours": 1.0, "track-emissions": False,
                              "min-nodes": nodes, "registry": str(Path(tmp) / "reg")},
                             on_line=on_line, timeout=900)
    total = time.perf_counter() - t0
    load = os.getloadavg()[0]
    return {"mode": mode, "label": spec["label"], "nodes": nodes, "rounds": len(result["rounds"]),
            "processes_start_s": started - t0, "first_round_s": stamps[0] - started if stamps else None,
            **round_overhead(stamps, rows), "total_s": total, "load_avg_after": load, "rows": rows}


def overhead(nodes: int, rounds: int, console: Console, modes: Sequence[str] = ("before", "after")) -> dict[str, Any]:
    """Round overhead before and after, same federation, one after the other."""
    runs = {mode: overhead_run(nodes, rounds, mode, console) for mode in modes}
    after = runs.get("after", {}).get("mean", {}).get("overhead_s")
    return {"nodes": nodes, "rounds": rounds, "target_s": OVERHEAD_TARGET_S, "runs": runs,
            "met": bool(after is not None and after <= OVERHEAD_TARGET_S)}


def _table(title: str, cols: Sequence[str]) -> Table:
    t = Table(title=title)
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i == 0 else "right")
    return t


def report(res: dict[str, Any], console: Console) -> None:
    from iro_fed.federated.cli import format_grams  # "-" for emissions not measured, as `iro fed local`

    q = res.get("quality")
    if q:
        t = _table(f"held-out site {HELD_OUT}: greedy evaluation ({res['episodes']} episode(s)), "
                   f"{q['steps_per_site']} steps per site, mean over {len(q['seeds'])} seed(s) {q['seeds']}",
                   ["policy", "R per episode", "std over seeds", "% of centralized", "sim score", "carbon kg",
                    "train gCO2"])
        cen = q["centralized"]["eval-reward"]

        def row(name: str, m: dict[str, Any]) -> None:
            t.add_row(name, f"{m['eval-reward']:.2f}", f"{m.get('eval-reward-std', 0.0):.2f}",
                      f"{100 * m['eval-reward'] / cen:.1f}", f"{m['eval-score']:.4f}", f"{m['eval-carbon-kg']:.3f}",
                      format_grams(m.get("emissions_g")))

        row("objective greedy (reference)", q["greedy"])
        row("random valid action (reference)", q["random"])
        row("initial policy", q["initial"])
        for site, m in q["local"].items():
            row(f"local-only site {site}", m)
        row("local-only mean", q["local_mean"])
        row("centralized (pooled)", q["centralized"])
        row("federated FedAvg", q["federated"])
        console.print(t)
        console.print(f"federated / centralized R: {_pct(q['fed_vs_central'])} % (target >= 95 %); gain over "
                      f"random, federated / centralized: {_pct(q['fed_vs_central_gain'])} %; federated - mean "
                      f"local-only R: {q['fed_minus_local']:+.2f} +- {q['fed_minus_local_std']:.2f} over seeds "
                      f"(per seed {', '.join(f'{d:+.2f}' for d in q['fed_minus_local_seeds'])}; target > 0), "
                      f"federated ahead in {q['fed_beats_local_seeds']} of {len(q['seeds'])} seed(s)")
    p = res.get("poisoning")
    if p:
        t = _table("poisoning: 1 of 5 clients sends w + 1e6 every round", ["strategy", "R per episode",
                                                                          "% of clean", "sim score", "max |w|",
                                                                          "dropped"])
        clean = p["fedavg (clean, 4 honest)"]["eval-reward"]
        for name, m in p.items():
            t.add_row(name, f"{m['eval-reward']:.2f}", f"{100 * m['eval-reward'] / clean:.1f}",
                      f"{m['eval-score']:.4f}", f"{m['max_abs_weight']:.3g}", str(m["dropped"]))
        console.print(t)
    o = res.get("overhead")
    if o:
        runs = o["runs"]
        modes = list(runs)
        t = _table(f"round overhead: real SuperLink + {o['nodes']} SuperNodes on loopback, {o['rounds']} rounds, "
                   "1 local step per site (means over rounds 2..N, seconds)", ["measure", *modes])

        def cell(mode: str, key: str, where: str = "mean") -> str:
            value = runs[mode][where].get(key) if where == "mean" else runs[mode].get(key)
            return "-" if value is None else f"{value:.2f}"

        t.add_row("start-up (processes)", *(cell(m, "processes_start_s", "run") for m in modes))
        t.add_row("flwr run -> first round done (ServerApp start)", *(cell(m, "first_round_s", "run") for m in modes))
        t.add_row("round wall time", *(cell(m, "wall_s") for m in modes))
        t.add_row(f"[bold]overhead per round[/bold] (wall - slowest training; target <= {o['target_s']:g})",
                  *(cell(m, "overhead_s") for m in modes))
        for key, text in BREAKDOWN:
            t.add_row(f"  {text}", *(cell(m, key) for m in modes))
        t.add_row("load average after the run (2 cores shared)", *(f"{runs[m]['load_avg_after']:.1f}" for m in modes))
        console.print(t)
        for m in modes:
            per = ", ".join(f"{r['overhead_s']:.1f}" for r in runs[m]["per_round"])
            console.print(f"{m} ({runs[m]['label']}): overhead per round {per} s")
        if "after" in runs:
            console.print(f"round overhead after start-up: {cell('after', 'overhead_s')} s "
                          f"({'meets' if o['met'] else 'misses'} the <= {o['target_s']:g} s target)"
                          + (f"; before: {cell('before', 'overhead_s')} s" if "before" in runs else ""))
    if q:
        fed_g, cen_g = q["federated"].get("emissions_g"), q["centralized"].get("emissions_g")
        if fed_g is None and cen_g is None:
            console.print("emissions: not measured (track-emissions false)")
        else:
            console.print(f"emissions (codecarbon, offline, DEU grid): federated training {format_grams(fed_g)} gCO2eq "
                          f"over {len(TRAIN_SITES)} sites; centralized {format_grams(cen_g)} gCO2eq")


PARTS = ("quality", "poisoning", "overhead")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, every value checked before any work (exit 2 naming the flag)."""
    from iro_fed import limits
    from iro_fed.federated.task import MAX_SERVER_ROUNDS

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="few rounds and steps (about 10 minutes on 2 shared cores)")
    ap.add_argument("--rounds", type=IntRange(1, MAX_SERVER_ROUNDS), default=None,
                    help="federated rounds of the quality part (default 8, --quick 6)")
    ap.add_argument("--local-steps", type=IntRange(1, limits.MAX_TRAIN_STEPS), default=None,
                    help="training steps per site and round (default 500, --quick 150)")
    ap.add_argument("--episodes", type=IntRange(1, limits.MAX_EVAL_EPISODES), default=None,
                    help="evaluation episodes on the held-out site (default 10, --quick 8)")
    ap.add_argument("--seeds", type=IntRange(1, 1000), default=3, help="benchmark seeds of the quality part (0, 1, ...)")
    ap.add_argument("--eval-seed", type=int, default=EVAL_SEED,
                    help="first env seed of the held-out evaluation episodes")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="federated setting (kebab-case, e.g. keep-replay=false), applied to every part")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: quality,poisoning,overhead")
    ap.add_argument("--overhead-modes", default="before,after",
                    help="overhead part: which of before (Flower defaults), after (warm executor) to run")
    ap.add_argument("--overhead-rounds", type=int, default=None, help="rounds of each overhead federation")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results file")
    args = ap.parse_args(argv)
    args.modes = usage_errors(ap, lambda: check_names("--overhead-modes", args.overhead_modes, tuple(OVERHEAD_MODES),
                                                      "mode"))
    if args.overhead_rounds is not None and not 2 <= args.overhead_rounds <= MAX_SERVER_ROUNDS:
        ap.error(f"--overhead-rounds: expected 2 to {MAX_SERVER_ROUNDS} (round 1 includes start-up), "
                 f"got {args.overhead_rounds}")
    usage_errors(ap, lambda: check_seed("--eval-seed", args.eval_seed))
    # "--skip qualty" ran every part; an empty --skip (the default) skips nothing
    args.skip = set(usage_errors(ap, lambda: check_names("--skip", args.skip, PARTS, "part"))) if args.skip else set()
    args.rounds = args.rounds if args.rounds is not None else (6 if args.quick else 8)
    args.local_steps = args.local_steps if args.local_steps is not None else (150 if args.quick else 500)
    args.episodes = args.episodes if args.episodes is not None else (8 if args.quick else 10)

    from iro_fed.federated.cli import parse_sets
    from iro_fed.federated.task import FedConfig, FedConfigError

    overrides = usage_errors(ap, lambda: parse_sets(args.set))  # read as `iro fed local --set` reads them
    try:  # the flags' values and --set together, checked by FedConfig before any work
        cfg = FedConfig(num_server_rounds=args.rounds, local_steps=args.local_steps, hours=2.0 if args.quick else 4.0,
                        learning_starts=64, eval_episodes=ROUND_EPISODES, track_emissions=True)
        args.cfg = FedConfig.from_run_config({**cfg.to_run_config(), **overrides})
    except FedConfigError as exc:
        ap.error(f"--set: {exc}" if overrides else str(exc))
    args.out = usage_errors(ap, lambda: check_output_file("--out", args.out))  # a bad --out fails now, not at the end
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    _quiet_flower()
    cfg, rounds, episodes, skip, modes = args.cfg, args.rounds, args.episodes, args.skip, args.modes
    console = Console(width=160)
    res: dict[str, Any] = {"machine": _machine(), "started": datetime.now(UTC).isoformat(), "quick": args.quick,
                           "episodes": episodes, "eval_seed": args.eval_seed, "seeds": args.seeds,
                           "config": cfg.to_run_config()}
    console.print(f"machine: {res['machine']}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="iro-fed-bench-") as tmp:
        work = Path(tmp)
        if "quality" not in skip:
            res["quality"] = combine_seeds([quality(cfg, episodes, work, console, seed, args.eval_seed)
                                            for seed in range(args.seeds)])
        if "poisoning" not in skip:
            pcfg = cfg.replace(num_server_rounds=max(2, rounds - 1), track_emissions=False)
            res["poisoning"] = poisoning(pcfg, episodes, work, console, args.eval_seed)
        if "overhead" not in skip:
            res["overhead"] = overhead(3, args.overhead_rounds or (4 if args.quick else 6), console, modes)
    res["wall_s"] = time.perf_counter() - t0
    report(res, console)
    write_json(args.out, res)  # NaN (a ratio without a span) as null: valid JSON
    console.print(f"wrote {args.out} ({res['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
