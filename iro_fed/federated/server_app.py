"""The ServerApp: runs the chosen strategy, evaluates each round's global policy, publishes it.

Per round: the strategy (``fedavg`` by default, see :mod:`iro_fed.federated.strategies`) sends
the global weights to the sampled sites, validates and aggregates their replies; the server then
evaluates the new global policy greedily on the held-out site (``eval-site``) and writes it to
the policy registry (``registry``) as the next version with its metadata. Each round is also
logged as one ``IRO-FED-ROUND {json}`` line, which ``iro fed local`` reads from the stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from logging import INFO
from typing import Any

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from iro_fed.federated.registry import PolicyRegistry
from iro_fed.federated.strategies import make_strategy
from iro_fed.federated.task import FedConfig, build_agent, evaluate_policy, feature_sizes, full_state_dict, get_weights

app = ServerApp()

ROUND_TAG = "IRO-FED-ROUND"


def run_federation(grid: Grid, cfg: FedConfig, strategy: Any = None,
                   on_round: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run ``cfg.num_server_rounds`` rounds on ``grid``; returns a summary (rounds, versions, registry)."""
    from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES

    strategy = strategy or make_strategy(cfg.strategy, cfg)
    registry = PolicyRegistry(cfg.registry)
    initial = get_weights(build_agent(cfg).online)
    cand_f, ctx_f = feature_sizes()
    base_meta = {
        "config": cfg.dqn_config().to_dict(), "candidate_features": cand_f, "context_features": ctx_f,
        "feature_names": {"candidates": list(CANDIDATE_FEATURES), "context": list(CONTEXT_FEATURES)},
        "scenario": cfg.scenario, "strategy": cfg.strategy, "federation": cfg.to_run_config(),
        "eval_site": cfg.eval_site, "num_rounds": cfg.num_server_rounds,
    }
    rows: list[dict[str, Any]] = []
    totals = {"emissions_g": 0.0}

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        weights = {k: v.numpy() for k, v in arrays.items()}
        metrics = evaluate_policy(weights, cfg, cfg.eval_site)
        if server_round == 0:
            totals["initial"] = metrics
            return MetricRecord(metrics)
        info = strategy.rounds.get(server_round, {})
        totals["emissions_g"] += float(info.get("emissions_g", 0.0))
        meta = {
            **base_meta, "round": server_round, "nodes": info.get("nodes", []), "sites": info.get("sites", []),
            "dropped": info.get("dropped", []), "skipped_high_carbon": info.get("skipped_high_carbon", []),
            "aggregated": bool(info.get("aggregated", True)), "evaluation": metrics,
            "initial_evaluation": totals.get("initial", {}), "emissions_g_round": float(info.get("emissions_g", 0.0)),
            "emissions_g_total": totals["emissions_g"],
        }
        version, path = registry.publish(full_state_dict(cfg, weights), meta)
        row = {"round": server_round, "version": version, "path": str(path), "nodes": len(meta["nodes"]),
               "dropped": len(meta["dropped"]), "emissions_g": meta["emissions_g_round"], **metrics,
               "replies_s": float(info.get("replies_s", 0.0)), "client_handler_s": float(info.get("client_handler_s", 0.0)),
               "round_s": time.time() - float(info.get("started", time.time()))}
        rows.append(row)
        log(INFO, "%s %s", ROUND_TAG, json.dumps(row, sort_keys=True))
        if on_round is not None:
            on_round(row)
        return MetricRecord({**metrics, "version": version})

    initial_record = ArrayRecord({k: Array(v) for k, v in initial.items()})
    result = strategy.start(grid=grid, initial_arrays=initial_record, num_rounds=cfg.num_server_rounds,
                            train_config=ConfigRecord({}), evaluate_fn=evaluate_fn)
    return {"rounds": rows, "initial": totals.get("initial", {}), "emissions_g": totals["emissions_g"],
            "registry": str(registry.root), "result": result}


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = FedConfig.from_run_config(context.run_config)
    run_federation(grid, cfg)
