"""The strategy's update validation computes ``||w_global||`` and the float64 copy of the global weights
once per round (task n6, item 2); before, the norm was computed twice per round and every reply's check
converted the global weights to float64 again. The aggregate and the drop decisions are unchanged."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Message, MetricRecord, RecordDict  # noqa: E402

from iro_fed.federated import strategies, wire  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.strategies import make_strategy  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402

BASE = {"layer.weight": np.ones((3, 4), np.float32), "layer.bias": np.zeros(4, np.float32)}


class _CountingArray(np.ndarray):
    """An ndarray that counts its ``astype(float64)`` calls (one list shared by all views)."""

    casts: list[int]

    def astype(self, dtype, *args, **kwargs):  # type: ignore[override]
        if np.dtype(dtype) == np.float64:
            self.casts.append(1)
        return super().astype(dtype, *args, **kwargs)


def _moved(delta: float) -> dict[str, np.ndarray]:
    out = {k: v.copy() for k, v in BASE.items()}
    out["layer.bias"][0] += np.float32(delta)
    return out


def _round(deltas: list[float], monkeypatch: pytest.MonkeyPatch) -> tuple[dict, np.ndarray, int, int]:
    """One fedavg round of len(deltas) replies; (round info, aggregate, global_norm calls, float64 casts
    of the global weights)."""
    strategy = make_strategy("fedavg", FedConfig(min_nodes=len(deltas)))
    grid = InProcessGrid([{"site": i} for i in range(len(deltas))], FedConfig().to_run_config())
    flat, layout = wire.encode(BASE)
    sent = sorted(strategy.configure_train(1, flat, wire.layout_config(layout), grid),
                  key=lambda m: m.metadata.dst_node_id)
    casts: list[int] = []
    for key, value in strategy._reference.items():
        view = value.view(_CountingArray)
        view.casts = casts
        strategy._reference[key] = view
    calls: list[int] = []
    real = strategies.global_norm
    monkeypatch.setattr(strategies, "global_norm", lambda ref: calls.append(1) or real(ref))
    replies = []
    for msg, delta in zip(sent, deltas, strict=True):
        arrays, lay = wire.encode(_moved(delta))
        content = RecordDict({"arrays": arrays, "config": wire.layout_config(lay),
                              "metrics": MetricRecord({"num-examples": 100})})
        replies.append(Message(content=content, reply_to=msg))
    arrays, _ = strategy.aggregate_train(1, replies)
    assert arrays is not None
    return strategy.rounds[1], arrays["weights"].numpy(), len(calls), len(casts)


@pytest.mark.parametrize("deltas", [[0.5, 0.4], [0.5, 0.4, 0.3, 0.45, 0.35, 100.0]])
def test_global_norm_and_float64_reference_once_per_round(deltas, monkeypatch) -> None:
    info, _, norm_calls, casts = _round(deltas, monkeypatch)
    assert norm_calls == 1  # was 2 per round (validation, then the lone-reply / floor check)
    assert casts == 0  # was one float64 copy of the global weights per reply and entry
    assert info["dropped"] == ([] if len(deltas) == 2 else [
        {"node": info["dropped"][0]["node"], "reason": "update norm 100 > 10 x cohort median 0.4"}])


def test_aggregate_unchanged(monkeypatch) -> None:
    info, weights, _, _ = _round([0.5, 0.4, 0.3, 0.45, 0.35, 100.0], monkeypatch)
    kept = [0.5, 0.4, 0.3, 0.45, 0.35]  # equal num-examples: the plain mean of the kept ones
    expected = np.concatenate([BASE["layer.weight"].ravel(), BASE["layer.bias"]]).astype(np.float64)
    expected[12] = np.mean([np.float32(d) for d in kept], dtype=np.float64)
    assert len(info["nodes"]) == 5 and len(info["dropped"]) == 1
    np.testing.assert_allclose(weights, expected, rtol=0, atol=1e-7)
