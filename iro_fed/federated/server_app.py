"""The ServerApp: runs the chosen strategy, evaluates each round's global policy, publishes it.

Per round: the strategy (``fedavg`` by default, see :mod:`iro_fed.federated.strategies`) sends
the global weights to the sampled sites, validates and aggregates their replies; the server then
evaluates the new global policy greedily on the held-out site (``eval-site``) and writes it to
the policy registry (``registry``) as the next version with its metadata. Each round is also
logged as one ``IRO-FED-ROUND {json}`` line, which ``iro fed local`` reads from the stream.

The deployed ``Grid`` (Flower's ``HttpGrid``) waits for replies in ``send_and_receive`` by
pulling every 3 s (fixed in flwr 1.42); :class:`PollingGrid` wraps it and pulls every 50 ms,
backing off to 0.25 s, so a round ends at most ~0.25 s after its last reply instead of up to 3 s.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from typing import Any

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from iro_fed.federated import wire
from iro_fed.federated.registry import PolicyRegistry
from iro_fed.federated.strategies import make_strategy
from iro_fed.federated.task import FedConfig, build_agent, evaluate_policy, feature_sizes, full_state_dict, get_weights

app = ServerApp()

ROUND_TAG = "IRO-FED-ROUND"


class PollingGrid(Grid):
    """A ``Grid`` that delegates to another and waits for replies with short, backing-off polls.

    Flower's ``HttpGrid.send_and_receive`` sleeps 3 s between two ``pull_messages`` calls; here
    the first poll is after ``interval`` seconds and the pause grows by ``backoff`` up to
    ``max_interval`` (a long round costs one cheap pull request per ``max_interval``). Messages,
    node ids and the run are the wrapped grid's; only the waiting differs.
    """

    def __init__(self, grid: Grid, interval: float = 0.05, max_interval: float = 0.25, backoff: float = 1.5) -> None:
        if not 0.0 < interval <= max_interval:
            raise ValueError(f"interval: expected 0 < interval <= max_interval, got {interval} / {max_interval}")
        if backoff < 1.0:
            raise ValueError(f"backoff: expected >= 1, got {backoff}")
        self.grid = grid
        self.interval, self.max_interval, self.backoff = float(interval), float(max_interval), float(backoff)
        self.polls = 0

    def set_run(self, run: Any) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
        return self.grid.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push ``messages``, then pull until every one has a reply or ``timeout`` seconds have passed."""
        pending = {mid for mid in self.push_messages(list(messages)) if mid}
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        pause = self.interval
        while pending:
            got = list(self.pull_messages(list(pending)))
            self.polls += 1
            replies.extend(got)
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            if not pending or (end is not None and time.monotonic() >= end):
                break
            time.sleep(pause if end is None else max(0.0, min(pause, end - time.monotonic())))
            pause = min(self.max_interval, pause * self.backoff)
        return replies


#: Environment variable: a fixed seconds-between-pulls for :class:`PollingGrid` (e.g. ``3`` reproduces
#: Flower's own wait, for comparisons); unset: 50 ms backing off to 0.25 s.
POLL_ENV = "IRO_FED_GRID_POLL_S"


def polling_grid(grid: Grid) -> PollingGrid:
    """``grid`` wrapped in a :class:`PollingGrid` (intervals from ``$IRO_FED_GRID_POLL_S`` when set)."""
    raw = os.environ.get(POLL_ENV, "").strip()
    if not raw:
        return PollingGrid(grid)
    try:
        fixed = float(raw)
    except ValueError as exc:
        raise ValueError(f"{POLL_ENV}: expected seconds, got {raw!r}") from exc
    if not 0.0 < fixed <= 60.0:
        raise ValueError(f"{POLL_ENV}: expected a number in (0, 60], got {raw!r}")
    return PollingGrid(grid, interval=fixed, max_interval=fixed, backoff=1.0)


def no_version_note(registry: PolicyRegistry) -> str:
    """What a ``resume`` run says when the registry holds no version (a mistyped path, say)."""
    return f"resume: registry {str(registry.root)!r} has no version; starting a fresh policy"


def initial_weights(cfg: FedConfig, registry: PolicyRegistry) -> tuple[dict[str, Any], int | None]:
    """The global policy a run starts from and the registry version it came from: with
    ``resume`` the registry's latest (which must have this run's architecture), else a fresh one.

    The version's stored config must describe this run's network (:meth:`DQNConfig.architecture`):
    weights of another head count or C51 support have the same shapes but compute something else,
    so ``load_state_dict`` alone took them. A ``ValueError`` names each differing setting. A
    version without a stored config cannot be read at all (the checkpoint format requires one);
    should one come without it anyway, the shape check of ``load_state_dict`` is the only one.
    """
    from iro_fed.features import feature_layout
    from solvers import ConfigError

    agent = build_agent(cfg)
    version = registry.latest_version() if cfg.resume else None
    if cfg.resume and version is None:
        log(WARNING, "%s", no_version_note(registry))
    if version is not None:
        try:
            state, meta = registry.load(version)
        except ValueError as exc:  # 'latest' names a missing or damaged version
            raise ValueError(f"resume: registry {str(registry.root)!r} 'latest' names version {version}, which "
                             f"cannot be read: {exc}") from None
        where = f"resume: registry version {version} of {str(registry.root)!r}"
        # Same counts in another order fit the network but feed it other columns (as the dqn solver checks).
        names = meta.get("feature_names")
        if names is not None and names != feature_layout():
            raise ValueError(f"{where} was trained on other features than this version computes; start a fresh run "
                             "(resume=false, `iro fed rounds --fresh`)")
        if meta.get("config") is not None:
            try:
                differ = cfg.dqn_config().architecture_differences(meta["config"])
            except ConfigError as exc:
                raise ValueError(f"{where}: its config is not readable ({exc}); start a fresh run "
                                 "(resume=false, `iro fed rounds --fresh`)") from None
            if differ:
                raise ValueError(f"{where} does not fit this run's network ({'; '.join(differ)}); resume with its "
                                 "settings or start a fresh run (resume=false, `iro fed rounds --fresh`)")
        try:
            agent.online.load_state_dict(state)
        except RuntimeError as exc:  # another architecture (embed-dim, hidden-dim, top-k ...)
            raise ValueError(f"{where} does not fit this run's network: {str(exc).splitlines()[0]}") from None
    return get_weights(agent.online), version


def emissions_by_site(info: dict[str, Any], track_emissions: bool) -> list[dict[str, Any]]:
    """A round's ``emissions_by_site`` (the strategy's, see :mod:`iro_fed.federated.strategies`) for its
    metadata: with ``track-emissions`` off no site's number is a measurement (``None``, as the round's)."""
    rows = [dict(r) for r in info.get("emissions_by_site", [])]
    if not track_emissions:
        for r in rows:
            r["emissions_g"] = None
    return rows


def run_federation(grid: Grid, cfg: FedConfig, strategy: Any = None,
                   on_round: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run ``cfg.num_server_rounds`` rounds on ``grid``; returns a summary.

    Keys: ``rounds`` (one row per round), ``initial`` (the initial policy's evaluation),
    ``emissions_g`` (``None``, as each row's, when not measured: ``track-emissions`` off, or a site
    without codecarbon in that round),
    ``registry``, ``result`` (Flower's), ``layout`` and ``weights`` (the final global policy's
    named arrays, unpacked from the one flat array).
    """
    from iro_fed.features import feature_layout

    strategy = strategy or make_strategy(cfg.strategy, cfg)
    if not isinstance(grid, PollingGrid):
        grid = polling_grid(grid)
    registry = PolicyRegistry(cfg.registry)
    initial, resumed_from = initial_weights(cfg, registry)
    # The weights travel as ONE flat array plus this layout (sent in every train/evaluate config):
    # Flower moves each array as its own objects, one request per object and hop.
    initial_record, layout = wire.encode(initial)
    cand_f, ctx_f = feature_sizes()
    base_meta = {
        "config": cfg.dqn_config().to_dict(), "candidate_features": cand_f, "context_features": ctx_f,
        "feature_names": feature_layout(),
        "scenario": cfg.scenario, "strategy": cfg.strategy, "federation": cfg.to_run_config(),
        "eval_site": cfg.eval_site, "num_rounds": cfg.num_server_rounds, "resumed_from": resumed_from,
    }
    rows: list[dict[str, Any]] = []
    # Not measured (None: null in the JSON) when the sites train without codecarbon: they still send
    # 0.0 (a metric record holds no None), which read as a measured zero. The run config says which.
    totals: dict[str, Any] = {"emissions_g": 0.0 if cfg.track_emissions else None}

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        eval_started = time.time()
        weights = wire.decode(arrays, layout)
        metrics = evaluate_policy(weights, cfg, cfg.eval_site)
        if server_round == 0:
            totals["initial"] = metrics
            return MetricRecord(metrics)
        info = strategy.rounds.get(server_round, {})
        measured = cfg.track_emissions and bool(info.get("emissions_measured", False))
        round_g = float(info.get("emissions_g", 0.0)) if measured else None
        # a round not measured (tracking off, a site without codecarbon) leaves the run's total unknown
        totals["emissions_g"] = None if round_g is None or totals["emissions_g"] is None else totals["emissions_g"] + round_g
        meta = {
            **base_meta, "round": server_round, "nodes": info.get("nodes", []), "sites": info.get("sites", []),
            "valid_nodes": info.get("valid_nodes", []), "valid_sites": info.get("valid_sites", []),
            "dropped": info.get("dropped", []), "skipped_high_carbon": info.get("skipped_high_carbon", []),
            "skipped_failing": info.get("skipped_failing", []), "no_reply": info.get("no_reply", []),
            "aggregated": bool(info.get("aggregated", True)), "evaluation": metrics,
            "initial_evaluation": totals.get("initial", {}), "emissions_g_round": round_g,
            "emissions_g_total": totals["emissions_g"],
            "emissions_by_site": emissions_by_site(info, cfg.track_emissions),
        }
        version, path = registry.publish(full_state_dict(cfg, weights), meta)
        row = {"round": server_round, "version": version, "path": str(path), "nodes": len(meta["nodes"]),
               "dropped": len(meta["dropped"]), "emissions_g": meta["emissions_g_round"],
               "replay_kept": int(info.get("replay_kept", 0)), "emissions_by_site": meta["emissions_by_site"],
               **metrics,
               **{k: float(v) for k, v in info.get("timing", {}).items()},
               "server_eval_s": time.time() - eval_started,
               "round_s": time.time() - float(info.get("started", time.time()))}
        rows.append(row)
        log(INFO, "%s %s", ROUND_TAG, json.dumps(row, sort_keys=True))
        if on_round is not None:
            on_round(row)
        return MetricRecord({**metrics, "version": version})

    # A resumed run counts its rounds from 1 again: the version it resumed from keeps its sites'
    # episodes apart from the earlier runs' (task.site_seed); a fresh run sends none (seeds unchanged).
    train_extra = {"resumed-from": resumed_from} if resumed_from else {}
    result = strategy.start(grid=grid, initial_arrays=initial_record, num_rounds=cfg.num_server_rounds,
                            train_config=wire.layout_config(layout, **train_extra),
                            evaluate_config=wire.layout_config(layout),
                            evaluate_fn=evaluate_fn)
    # Flower's Result keeps an empty ArrayRecord when no round aggregated anything (every reply
    # dropped, Bulyan short of 4f + 3): the global policy is then still the initial one.
    final = result.arrays if len(result.arrays) else initial_record
    return {"rounds": rows, "initial": totals.get("initial", {}), "emissions_g": totals["emissions_g"],
            "registry": str(registry.root), "resumed_from": resumed_from, "result": result, "layout": layout,
            "weights": wire.decode(final, layout)}


@app.main()
def main(grid: Grid, context: Context) -> None:
    from iro_fed.federated.executor import quick_object_pull_retry

    cfg = FedConfig.from_run_config(context.run_config)
    if os.environ.get(POLL_ENV, "").strip() == "":  # with Flower's own 3 s polls, Flower's own pull backoff
        quick_object_pull_retry()  # a reply pulled early: its content is fetched after 20 ms, not 1 s
    run_federation(grid, cfg)
