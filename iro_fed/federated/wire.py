"""The policy's weights in Flower messages: ONE flat float32 array plus its layout.

A message's ``arrays`` record holds a single array, :data:`~iro_fed.federated.task.FLAT_KEY`
(every exchanged weight concatenated in the network's ``state_dict`` order), and its ``config``
record holds :data:`~iro_fed.federated.task.LAYOUT_FIELD`, the JSON (UTF-8 bytes) of a
:class:`~iro_fed.federated.task.WeightLayout` (names, shapes, dtypes). Both directions use it:
the ServerApp sends the layout in the train config, a ClientApp replies with the layout of what
it sends, and the server's update validation rejects a reply whose layout differs from the one
it sent (like a wrong shape). Flower moves each array as its own objects, one HTTP request per
object and hop, so this cuts a message from ~60 objects to ~6.

A message without a layout is read the old way (one array per ``state_dict`` entry) and a
ClientApp answers it in that format, so a server or site of the previous release still works.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from iro_fed.federated.task import CONFIG_RECORD, FLAT_KEY, LAYOUT_FIELD, WeightLayout, pack_weights

__all__ = ["decode", "encode", "layout_config", "layout_of", "per_layer_record", "read_weights"]


def encode(weights: Mapping[str, np.ndarray]) -> tuple[ArrayRecord, WeightLayout]:
    """``(ArrayRecord with the one flat array, its layout)`` for named arrays."""
    flat, layout = pack_weights(weights)
    return ArrayRecord({FLAT_KEY: Array(flat)}), layout


def per_layer_record(weights: Mapping[str, np.ndarray]) -> ArrayRecord:
    """The previous format: one array per ``state_dict`` entry (for messages without a layout)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in weights.items()})


def layout_of(content: RecordDict) -> WeightLayout | None:
    """The layout a message's ``config`` record carries; ``None`` without one, ``ValueError`` when malformed."""
    config = content.config_records.get(CONFIG_RECORD)
    if config is None or LAYOUT_FIELD not in config:
        return None
    return WeightLayout.from_json(config[LAYOUT_FIELD])


def decode(arrays: ArrayRecord, layout: WeightLayout | None) -> dict[str, np.ndarray]:
    """Named arrays from an ``arrays`` record: unpacked with ``layout``, or one per entry without one."""
    if layout is None:
        return {k: v.numpy() for k, v in arrays.items()}
    if list(arrays.keys()) != [FLAT_KEY]:
        raise ValueError(f"arrays: expected the one flat array {FLAT_KEY!r}, got {list(arrays.keys())[:5]}")
    return layout.unflatten(arrays[FLAT_KEY].numpy())


def read_weights(content: RecordDict, key: str = "arrays") -> tuple[dict[str, np.ndarray], WeightLayout | None]:
    """``(named arrays, layout or None)`` of a message's content."""
    if key not in content.array_records:
        raise ValueError(f"message: no {key!r} array record")
    layout = layout_of(content)
    return decode(content.array_records[key], layout), layout


def layout_config(layout: WeightLayout, **extra: object) -> ConfigRecord:
    """A ``config`` record holding ``layout`` (and ``extra`` settings)."""
    # bytes, not str: Flower's strategies log their configs at start and print bytes as <bytes>
    return ConfigRecord({LAYOUT_FIELD: layout.to_json().encode("utf-8"), **extra})  # type: ignore[arg-type]
