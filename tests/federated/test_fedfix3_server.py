"""The ServerApp's loop with a site whose every update is dropped: carbon-aware selection stops asking it.

Real ClientApps on the in-process grid (one of them poisons its update with NaN every round), the
deployed strategy and the policy registry; training is kept tiny.
"""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.registry import PolicyRegistry  # noqa: E402
from iro_fed.federated.server_app import run_federation  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402

TINY = dict(local_steps=40, hours=1.0, learning_starts=16, batch_size=8, track_emissions=False, min_nodes=2,
            embed_dim=8, hidden_dim=16, keep_replay=False)


def test_a_site_dropped_every_round_is_skipped_once_two_replies_in_a_row_were_dropped(tmp_path) -> None:
    cfg = FedConfig(num_server_rounds=3, registry=str(tmp_path / "reg"), carbon_aware=True, carbon_min_fraction=0.5,
                    **TINY)
    # node ids 1..4 are sites 0..3; site 3 sends NaN: dropped, so its site and intensity stay unknown
    grid = InProcessGrid([{"site": 0}, {"site": 1}, {"site": 2}, {"site": 3, "attack": "nan"}], cfg.to_run_config())
    run_federation(grid, cfg)
    registry = PolicyRegistry(cfg.registry)
    metas = {v: registry.load(v)[1] for v in (1, 2, 3)}
    dropped = {v: [d["node"] for d in m["dropped"]] for v, m in metas.items()}
    # rounds 1 and 2: unknown intensity counts as low, so node 4 is asked (and dropped) each time;
    # round 3: two dropped in a row, it is tried last and not needed (was: asked and dropped again)
    assert dropped == {1: [4], 2: [4], 3: []}
    assert [metas[v]["skipped_failing"] for v in (1, 2, 3)] == [[], [], [4]]
    assert 3 not in metas[3]["sites"] and len(metas[3]["sites"]) >= 2
