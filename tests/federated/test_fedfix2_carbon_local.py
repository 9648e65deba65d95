"""`iro fed local --carbon-aware` skips high-carbon sites (review finding).

`fed local` set `min-nodes` to `--nodes`, and carbon-aware participation never trains fewer than
`min-nodes`: it only ever down-weighted. The loopback test starts real Flower processes
(a SuperLink, 2 SuperNodes with warm executors, `flwr run`); training is kept tiny.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from iro_fed.cli import main  # noqa: E402
from iro_fed.federated.cli import local_min_nodes  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402

TINY = {"local-steps": 40, "hours": 1.0, "learning-starts": 16, "batch-size": 8, "track-emissions": False,
        "embed-dim": 8, "hidden-dim": 16, "eval-episodes": 1}


@pytest.mark.parametrize("settings, nodes, expected", [
    ({}, 2, 1), ({}, 3, 2), ({"carbon_min_fraction": 1.0}, 4, 4), ({"carbon_min_fraction": 0.1}, 3, 1),
    ({"strategy": "krum", "min_nodes": 5}, 6, 5),  # Krum with f = 1 needs 5 replies whatever the fraction
])
def test_carbon_min_nodes_leaves_room_to_skip(settings: dict, nodes: int, expected: int) -> None:
    assert local_min_nodes(FedConfig(carbon_aware=True, **settings), nodes) == expected


def test_carbon_aware_krum_with_too_few_nodes_is_refused_naming_min_nodes(tmp_path: Path, capsys) -> None:
    argv = ["fed", "local", "--nodes", "3", "--carbon-aware", "--strategy", "krum", "--registry", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "--nodes: krum with num-malicious 1 needs at least 5" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_fed_local_carbon_aware_trains_only_the_low_carbon_site(tmp_path: Path, capsys, monkeypatch) -> None:
    from iro_fed.federated.registry import PolicyRegistry
    from iro_fed.federated.task import site_carbon

    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    reg, work, out = tmp_path / "policies", tmp_path / "work", tmp_path / "rounds.json"
    argv = ["fed", "local", "--nodes", "2", "--rounds", "2", "--carbon-aware", "--registry", str(reg),
            "--workdir", str(work), "--json", str(out), "--timeout", "900"]
    for k, v in TINY.items():
        argv += ["--set", f"{k}={json.dumps(v)}"]
    assert main(argv) == 0, capsys.readouterr().err[-3000:]

    cfg = FedConfig.from_run_config(TINY)
    low, high = sorted((0, 1), key=lambda site: site_carbon(cfg, site, 2))  # round 2's grid: oslo vs madrid
    assert site_carbon(cfg, low, 2) < site_carbon(cfg, high, 2)
    rows = json.loads(out.read_text())["rounds"]
    # round 1: no site has said which it is yet, both train; round 2: only the low-carbon one
    assert [r["nodes"] for r in rows] == [2, 1]  # was [2, 2]: min-nodes 2 kept both
    registry = PolicyRegistry(reg)
    _, first = registry.load(1)
    _, second = registry.load(2)
    assert sorted(first["sites"]) == [0, 1] and first["skipped_high_carbon"] == []
    assert second["sites"] == [low] and len(second["skipped_high_carbon"]) == 1


def test_wait_for_nodes_returns_once_all_joined_and_names_a_shortfall(tmp_path: Path, monkeypatch) -> None:
    from iro_fed.federated.local import FederationError, LocalFederation

    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    with LocalFederation(2, workdir=tmp_path / "work", executor="flower") as fed:
        fed.wait_for_nodes()  # both SuperNodes online at the SuperLink
        with pytest.raises(FederationError, match=r"3 SuperNode\(s\) did not join the SuperLink in time \(2 online\)"):
            fed.wait_for_nodes(3, timeout=0)
