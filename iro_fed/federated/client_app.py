"""The ClientApp: an edge site trains the global policy on its own simulator slice and replies.

Node settings (``flower-supernode --node-config``): ``site`` (index into the scenario's sites;
``partition-id`` is accepted as its alias), ``emissions-country`` (ISO 3166-1 alpha-3 code of the
country whose grid mix codecarbon measures the site's training with; default ``DEU``; a code
codecarbon has no mix for is the round's error) and, for robustness experiments only, ``attack``:
``scale`` (reply ``w + 1e6``), ``nan`` or ``shape`` (a truncated array). Run settings come from
``[tool.flwr.app.config]`` through :class:`~iro_fed.federated.task.FedConfig`.

``experience-db`` (a path; the edge agent passes its experience store) makes local training
also learn from the decisions the site's agent recorded (``experience-updates`` gradient steps,
default two passes; see :func:`~iro_fed.federated.task.learn_from_experience`); the reply then
carries ``experience-samples``, ``experience-skipped``, ``experience-updates``, ``experience-loss``,
``experience-mean-reward`` and ``experience-error``, and the ClientApp prints one
``IRO-FED-CLIENT {json}`` line that the agent turns into its log and metrics.

A train reply holds ``arrays`` (the online network's learned ``state_dict`` entries as ONE flat
float32 array, see :mod:`iro_fed.federated.wire`), ``config`` (its ``layout``: names, shapes,
dtypes) and ``metrics``:
``num-examples`` (env steps), ``mean-reward`` (per episode, objective units), ``loss``,
``emissions-g`` (codecarbon, local training; 0.0 when not measured), ``emissions-measured`` (1 when
codecarbon measured it), ``carbon-intensity`` (the site's grid now,
gCO2/kWh), ``site``, ``train-s`` (training alone), ``handler-s`` (the whole handler) and
``since-import-s`` (since this ClientApp process imported the app), ``replay-transitions``
(the site's replay buffer after the round) and ``replay-kept`` (1 when the round continued the
buffer of the site's earlier rounds); and ``emissions`` (:data:`iro_fed.federated.emissions.EMISSIONS_RECORD`, a
``ConfigRecord``: a metric record holds no strings) with ``country``, the ISO alpha-3 code whose
grid mix measured ``emissions-g``, which the server records per site (``emissions_by_site``).

**State across rounds** (``keep-replay``, on by default): the site's replay buffer lives in the
node's ``context.state`` (entries :data:`REPLAY_STATE` and :data:`REPLAY_INFO`), which the
SuperNode keeps for the run and hands to each round's ClientApp process. A round thus learns from
its first step on and from the experience of every earlier round, as a site training alone would.
The weights (online and target network) come from the server every round; the optimizer starts
fresh. The exploration and PER-beta schedules go on across the rounds: round ``r`` starts them
where ``r - 1`` rounds of ``local-steps`` left them, derived from the message's ``server-round``
(see :func:`~iro_fed.federated.task.local_train`; the target network is the round's global policy
at its start, a documented choice there). A state that does not fit the run's settings (another
buffer size, ``top-k`` or feature set) is logged and replaced by an empty buffer.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from iro_fed.federated import wire
from iro_fed.federated.emissions import COUNTRY_KEY, EMISSIONS_RECORD, node_country
from iro_fed.federated.task import (
    FedConfig,
    evaluate_policy,
    feature_sizes,
    local_train,
    new_replay,
    site_carbon,
    sites,
)

app = ClientApp()
_LOADED = time.time()  # Flower starts a ClientApp process per message: its start-up is part of a round

ATTACKS = ("none", "scale", "nan", "shape")


def node_site(context: Context) -> int:
    """The site this node trains on, from ``site`` or ``partition-id`` in its node config."""
    node = context.node_config
    key = "site" if "site" in node else "partition-id"
    value = node.get(key, 0)
    # int() alone truncated site=1.5 to 1 and took true as 1: the node trained and reported another site
    if isinstance(value, str) and value.strip().lstrip("+-").isdecimal():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"node-config {key}: expected an integer >= 0, got {value!r}")
    return value


def check_training_site(cfg: FedConfig, site: int) -> None:
    """Refuse to train on the run's held-out ``eval-site``: on its slice (the site list wraps, so site
    ``eval-site + n`` is the same slice) the server's evaluation would no longer be held out, and
    nothing said so. Raised in the ClientApp, the error is the node's reply: the server logs it and
    counts the node as failing (tried last in later rounds)."""
    n = len(sites(cfg.scenario))
    if site % n == cfg.eval_site % n:
        same = "" if site == cfg.eval_site else f", the same slice of {cfg.scenario!r} as site {cfg.eval_site}"
        raise ValueError(f"node-config site: site {site} is the run's held-out evaluation site (eval-site "
                         f"{cfg.eval_site}{same}); a node on it would train on what the server evaluates on: "
                         "give this node another site (`iro fed node --site`, the agent's federated.site)")


def _reply_records(weights: dict[str, np.ndarray], flat: bool) -> dict[str, object]:
    """``arrays`` (+ ``config`` with the layout) of a reply, in the format the server sent."""
    if not flat:
        return {"arrays": wire.per_layer_record(weights)}
    arrays, layout = wire.encode(weights)
    return {"arrays": arrays, "config": wire.layout_config(layout)}


def poison(weights: dict[str, np.ndarray], attack: str) -> dict[str, np.ndarray]:
    """What a malicious or broken site would send (used by tests and the benchmark)."""
    if attack == "scale":
        return {k: v + np.float32(1e6) for k, v in weights.items()}
    if attack == "nan":
        out = dict(weights)
        first = next(iter(out))
        out[first] = np.full_like(out[first], np.nan)
        return out
    if attack == "shape":
        out = dict(weights)
        first = next(iter(out))
        out[first] = out[first].reshape(-1)[:-1].copy()
        return out
    return weights


CLIENT_TAG = "IRO-FED-CLIENT"

#: ``context.state`` entry holding the site's replay buffer (its :meth:`state_arrays`).
REPLAY_STATE = "iro-fed-replay"
#: ``context.state`` entry (a ``ConfigRecord``) with the settings the buffer was filled under.
REPLAY_INFO = "iro-fed-replay-info"

_log = logging.getLogger(__name__)


def replay_fingerprint(cfg: FedConfig) -> str:
    """The settings a stored buffer's transitions depend on (shapes, n-step returns, capacity,
    and the exponent its stored priorities were raised to)."""
    d = cfg.dqn_config()
    cand_f, ctx_f = feature_sizes()
    return json.dumps({"scenario": cfg.scenario, "top_k": d.top_k, "defer": d.defer_action, "features": [cand_f, ctx_f],
                       "buffer_size": d.buffer_size, "prioritized": d.prioritized, "n_step": d.n_step,
                       "priority_alpha": d.priority_alpha if d.prioritized else None,
                       "gamma": d.gamma, "hours": cfg.hours}, sort_keys=True)


def load_replay(context: Context, cfg: FedConfig, seed: int) -> tuple[Any, bool]:
    """``(buffer, kept)``: the site's buffer from ``context.state``, or a new empty one (``kept`` False)."""
    buffer = new_replay(cfg, seed)
    record, info = context.state.get(REPLAY_STATE), context.state.get(REPLAY_INFO)
    if record is None:
        return buffer, False
    if not isinstance(info, ConfigRecord) or info.get("fingerprint") != replay_fingerprint(cfg):
        _log.warning("replay buffer in the node state was filled under other settings; starting an empty one")
        return buffer, False
    try:
        buffer.load_state_arrays({k: v.numpy() for k, v in record.items()})
    except (ValueError, TypeError, AttributeError) as exc:
        _log.warning("replay buffer in the node state is unusable (%s); starting an empty one", exc)
        return new_replay(cfg, seed), False
    return buffer, True


def save_replay(context: Context, cfg: FedConfig, buffer: Any) -> None:
    """Store ``buffer`` in ``context.state`` for the site's next round."""
    context.state[REPLAY_STATE] = wire.per_layer_record(buffer.state_arrays())
    context.state[REPLAY_INFO] = ConfigRecord({"fingerprint": replay_fingerprint(cfg)})


def forget_replay(context: Context) -> None:
    """Drop a stored buffer (``keep-replay=false``: nothing of the site's experience stays in the node state)."""
    for key in (REPLAY_STATE, REPLAY_INFO):
        if key in context.state:
            del context.state[key]


def node_experience(context: Context) -> tuple[str | None, int | None]:
    """``experience-db`` and ``experience-updates`` of the node config (None when not set)."""
    node = context.node_config
    db = node.get("experience-db")
    if db is not None and (not isinstance(db, str) or not db):
        raise ValueError(f"node-config experience-db: expected a file path, got {db!r}")
    updates = node.get("experience-updates")
    if updates is not None:
        try:
            updates = int(updates)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"node-config experience-updates: expected an integer, got {updates!r}") from exc
        if updates < 0:
            raise ValueError(f"node-config experience-updates: expected >= 0, got {updates}")
    return db, updates


def resumed_from_of(config: ConfigRecord | None) -> int:
    """The train config's ``resumed-from``: the registry version a resumed run started from, which the
    site's seeds fold in (:func:`~iro_fed.federated.task.site_seed`); 0 for a fresh run (none sent)."""
    value = config.get("resumed-from", 0) if config is not None else 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"train config resumed-from: expected a registry version >= 0, got {value!r}")
    return value


def train_reply(msg: Message, context: Context) -> Message:
    """Local training on this site from the global weights in ``msg`` (the ``@app.train`` body)."""
    started = time.time()
    cfg = FedConfig.from_run_config(context.run_config)
    site = node_site(context)
    check_training_site(cfg, site)  # before any work: the reply is this error
    country = node_country(context.node_config)  # as is a country codecarbon has no grid mix for
    config = msg.content.config_records.get("config")
    server_round = int(config.get("server-round", 1)) if config is not None else 1
    mu = float(config.get("proximal-mu", 0.0)) if config is not None else 0.0
    resumed_from = resumed_from_of(config)
    db, updates = node_experience(context)
    weights, layout = wire.read_weights(msg.content)  # layout None: one array per entry
    replay, kept = load_replay(context, cfg, server_round) if cfg.keep_replay else (None, False)
    result = local_train(weights, cfg, site, server_round, proximal_mu=mu, experience_db=db,
                         experience_updates=updates, replay=replay, resumed_from=resumed_from,
                         emissions_country=country)
    if cfg.keep_replay:
        save_replay(context, cfg, result.replay)
    else:
        forget_replay(context)
    attack = str(context.node_config.get("attack", "none"))
    if attack not in ATTACKS:
        raise ValueError(f"node-config attack: unknown {attack!r} (known: {', '.join(ATTACKS)})")
    metrics: dict[str, Any] = {
        "num-examples": result.num_examples, "mean-reward": result.mean_reward, "loss": result.loss,
        "emissions-g": result.emissions_g, "emissions-measured": int(result.emissions_measured), "carbon-intensity": site_carbon(cfg, site, server_round),
        "site": site, "train-s": result.wall_s, "handler-s": time.time() - started,
        "since-import-s": time.time() - _LOADED, "replay-transitions": len(result.replay),
        "replay-kept": int(kept), **result.experience,
    }
    if db is not None:  # one line for the edge agent that supervises this SuperNode (its log and metrics)
        summary = {"round": server_round, "site": site, "num-examples": result.num_examples,
                   "experience-db": db, "emissions-country": result.emissions_country, **result.experience}
        print(f"{CLIENT_TAG} {json.dumps(summary, sort_keys=True)}", flush=True)
    records = _reply_records(poison(result.weights, attack), flat=layout is not None)
    # where the grams were measured, for the server's per-site record (a metric record holds no strings)
    emissions = ConfigRecord({COUNTRY_KEY: result.emissions_country})
    content = RecordDict({**records, "metrics": MetricRecord(metrics),  # type: ignore[arg-type]
                          EMISSIONS_RECORD: emissions})
    return Message(content=content, reply_to=msg)


def evaluate_reply(msg: Message, context: Context) -> Message:
    """Greedy evaluation of the global weights on this site (the ``@app.evaluate`` body)."""
    cfg = FedConfig.from_run_config(context.run_config)
    site = node_site(context)
    metrics = evaluate_policy(wire.read_weights(msg.content)[0], cfg, site)
    return Message(content=RecordDict({"metrics": MetricRecord({**metrics, "num-examples": 1, "site": site})}),
                   reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    return train_reply(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return evaluate_reply(msg, context)
