"""`iro fed local --set fraction-train=...` samples that share of the sites (review finding).

`fed local` set `min-nodes` to `--nodes`, and Flower samples ``max(int(nodes x fraction-train),
min-nodes)`` sites per round: every site trained every round whatever fraction-train said. The
loopback test starts real Flower processes (a SuperLink, 2 SuperNodes with warm executors,
`flwr run`); training is kept tiny.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from iro_fed.cli import main  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402

TINY = {"local-steps": 40, "hours": 1.0, "learning-starts": 16, "batch-size": 8, "track-emissions": False,
        "embed-dim": 8, "hidden-dim": 16, "eval-episodes": 1}


@pytest.mark.parametrize("settings, nodes, expected", [
    ({}, 3, 3),  # fraction-train 1: every site, as before
    ({"fraction_train": 0.5}, 2, 1), ({"fraction_train": 0.5}, 5, 2), ({"fraction_train": 0.1}, 3, 1),
    ({"fraction_train": 0.5, "strategy": "krum", "min_nodes": 5}, 6, 5),  # Krum's 2f + 3 whatever the fraction
    # carbon-aware: carbon-min-fraction of the sampled sites (as the strategy counts it per round)
    ({"carbon_aware": True}, 3, 2), ({"carbon_aware": True, "fraction_train": 0.5}, 4, 1),
])
def test_local_min_nodes_follows_fraction_train(settings: dict, nodes: int, expected: int) -> None:
    from iro_fed.federated.cli import local_min_nodes

    assert local_min_nodes(FedConfig(**settings), nodes) == expected


def test_fed_local_with_fraction_train_a_half_trains_one_of_two_sites_per_round(tmp_path: Path, capsys,
                                                                                 monkeypatch) -> None:
    from iro_fed.federated.registry import PolicyRegistry

    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    reg, work, out = tmp_path / "policies", tmp_path / "work", tmp_path / "rounds.json"
    argv = ["fed", "local", "--nodes", "2", "--rounds", "2", "--registry", str(reg), "--workdir", str(work),
            "--json", str(out), "--timeout", "900", "--set", "fraction-train=0.5"]
    for k, v in TINY.items():
        argv += ["--set", f"{k}={json.dumps(v)}"]
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    rows = json.loads(out.read_text())["rounds"]
    assert [r["nodes"] for r in rows] == [1, 1]  # was [2, 2]: min-nodes 2 sampled both
    registry = PolicyRegistry(reg)
    for version in (1, 2):
        _, meta = registry.load(version)
        assert len(meta["sites"]) == 1 and meta["federation"]["min-nodes"] == 1
