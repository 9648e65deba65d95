"""SnapshotQueries settings: a label setting that no Prometheus series can carry is a config error."""

from __future__ import annotations

import pytest

from iro_fed.metrics import SnapshotQueries


@pytest.mark.parametrize("label", ["", "node-name", "1node", "node name"])
def test_a_label_setting_no_series_can_carry_is_refused_naming_it(label: str) -> None:
    # Before: accepted, and every series of every node query was dropped (no usage, no error).
    with pytest.raises(ValueError, match="queries.node_label: expected a Prometheus label name"):
        SnapshotQueries.from_dict({"node_label": label})
    assert SnapshotQueries.from_dict({"service_label": "handler"}).service_label == "handler"
