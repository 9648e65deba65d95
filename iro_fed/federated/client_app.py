"""The ClientApp: an edge site trains the global policy on its own simulator slice and replies.

Node settings (``flower-supernode --node-config``): ``site`` (index into the scenario's sites;
``partition-id`` is accepted as its alias) and, for robustness experiments only, ``attack``:
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
``emissions-g`` (codecarbon, local training), ``carbon-intensity`` (the site's grid now,
gCO2/kWh), ``site``, ``train-s`` (training alone), ``handler-s`` (the whole handler) and
``since-import-s`` (since this ClientApp process imported the app).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from iro_fed.federated import wire
from iro_fed.federated.task import FedConfig, evaluate_policy, local_train, site_carbon

app = ClientApp()
_LOADED = time.time()  # Flower starts a ClientApp process per message: its start-up is part of a round

ATTACKS = ("none", "scale", "nan", "shape")


def node_site(context: Context) -> int:
    """The site this node trains on, from ``site`` or ``partition-id`` in its node config."""
    node = context.node_config
    value = node.get("site", node.get("partition-id", 0))
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"node-config site: expected an integer, got {value!r}") from exc


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


def train_reply(msg: Message, context: Context) -> Message:
    """Local training on this site from the global weights in ``msg`` (the ``@app.train`` body)."""
    started = time.time()
    cfg = FedConfig.from_run_config(context.run_config)
    site = node_site(context)
    config = msg.content.config_records.get("config")
    server_round = int(config.get("server-round", 1)) if config is not None else 1
    mu = float(config.get("proximal-mu", 0.0)) if config is not None else 0.0
    db, updates = node_experience(context)
    weights, layout = wire.read_weights(msg.content)  # layout None: one array per entry
    result = local_train(weights, cfg, site, server_round, proximal_mu=mu, experience_db=db,
                         experience_updates=updates)
    attack = str(context.node_config.get("attack", "none"))
    if attack not in ATTACKS:
        raise ValueError(f"node-config attack: unknown {attack!r} (known: {', '.join(ATTACKS)})")
    metrics: dict[str, Any] = {
        "num-examples": result.num_examples, "mean-reward": result.mean_reward, "loss": result.loss,
        "emissions-g": result.emissions_g, "carbon-intensity": site_carbon(cfg, site, server_round),
        "site": site, "train-s": result.wall_s, "handler-s": time.time() - started,
        "since-import-s": time.time() - _LOADED, **result.experience,
    }
    if db is not None:  # one line for the edge agent that supervises this SuperNode (its log and metrics)
        summary = {"round": server_round, "site": site, "num-examples": result.num_examples,
                   "experience-db": db, **result.experience}
        print(f"{CLIENT_TAG} {json.dumps(summary, sort_keys=True)}", flush=True)
    records = _reply_records(poison(result.weights, attack), flat=layout is not None)
    content = RecordDict({**records, "metrics": MetricRecord(metrics)})  # type: ignore[arg-type]
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
