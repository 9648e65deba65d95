"""Federated emissions with ``track-emissions`` off are not measured: None (null), shown as "-".

Before, `iro fed local ... --set track-emissions=false` showed ``train gCO2 0.000`` in its table,
``"emissions_g": 0.0`` in its --json rows and ``emissions_g_total: 0.0`` in the registry's
policy.json: a measured zero, where nothing was measured (`iro train --no-emissions` prints "-").
The sites still send 0.0 (a Flower metric record holds no None); the server decides from the run
config. benchmarks/federated.py (some arms with tracking off) formatted and averaged the None.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.server_app import run_federation  # noqa: E402
from iro_fed.federated.strategies import make_strategy  # noqa: E402
from iro_fed.federated.task import FedConfig  # noqa: E402

TINY = dict(local_steps=20, hours=1.0, learning_starts=8, batch_size=8, track_emissions=False, min_nodes=2,
            embed_dim=16, hidden_dim=32, eval_episodes=1)
TINY_SETS = ["hours=1", "learning-starts=8", "batch-size=8", "embed-dim=16", "hidden-dim=32", "eval-episodes=1"]
SITES = [{"site": 0}, {"site": 2}]


def _policy_meta(registry: Path, version: int) -> dict[str, Any]:
    return json.loads((registry / f"v{version:04d}" / "policy.json").read_text())


def test_server_reports_no_emissions_when_tracking_is_off(tmp_path) -> None:
    reg = tmp_path / "policies"
    cfg = FedConfig(num_server_rounds=2, registry=str(reg), **TINY)
    summary = run_federation(InProcessGrid(SITES, cfg.to_run_config()), cfg)
    assert summary["emissions_g"] is None
    assert [r["emissions_g"] for r in summary["rounds"]] == [None, None]
    for version in (1, 2):
        meta = _policy_meta(reg, version)
        assert meta["emissions_g_round"] is None and meta["emissions_g_total"] is None


def test_server_sums_what_the_sites_report_when_tracking_is_on(tmp_path) -> None:
    # The server's cfg tracks; the sites' run config does not (no codecarbon in a test): what the
    # sites report is replaced by 1.5 g per round, as a tracking site's replies would sum to.
    reg = tmp_path / "policies"
    cfg = FedConfig(num_server_rounds=2, registry=str(reg), **{**TINY, "track_emissions": True})
    strategy = make_strategy(cfg.strategy, cfg)
    aggregate = strategy.aggregate_train

    def reported(server_round: int, replies: Any) -> Any:
        out = aggregate(server_round, replies)
        strategy.rounds[server_round].update(emissions_g=1.5, emissions_measured=True)
        return out

    strategy.aggregate_train = reported
    grid = InProcessGrid(SITES, cfg.replace(track_emissions=False).to_run_config())
    summary = run_federation(grid, cfg, strategy=strategy)
    assert [r["emissions_g"] for r in summary["rounds"]] == [1.5, 1.5]
    assert summary["emissions_g"] == pytest.approx(3.0)
    meta = _policy_meta(reg, 2)
    assert meta["emissions_g_round"] == 1.5 and meta["emissions_g_total"] == pytest.approx(3.0)


class _InProcessFederation:
    """`iro fed local`'s LocalFederation with the ServerApp's loop run in this process: its rows
    reach the CLI through the ROUND log line, as from `flwr run`."""

    def __init__(self, nodes: int, workdir: Path | None = None, **_kwargs: Any) -> None:
        self.workdir = workdir or Path.cwd() / "fed-work"
        self.workdir.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> _InProcessFederation:
        return self

    def __exit__(self, *_exc: Any) -> None:
        return None

    def wait_for_nodes(self) -> None:
        return None

    def run(self, overrides: dict[str, Any], on_line: Any = None, timeout: float | None = None) -> dict[str, Any]:
        from iro_fed.federated.cli import _pyproject_config
        from iro_fed.federated.server_app import ROUND_TAG

        cfg = FedConfig.from_run_config({**_pyproject_config(), **overrides})
        rows: list[dict[str, Any]] = []

        def on_round(row: dict[str, Any]) -> None:
            line = f"INFO : {ROUND_TAG} {json.dumps(row, sort_keys=True)}"
            rows.append(json.loads(line.split(ROUND_TAG, 1)[1]))
            if on_line is not None:
                on_line(line)

        run_federation(InProcessGrid(SITES, cfg.to_run_config()), cfg, on_round=on_round)
        return {"rounds": rows, "status": 0, "wall_s": 1.0, "output": "", "run_id": 1}


def test_fed_local_shows_a_dash_and_writes_null_when_tracking_is_off(tmp_path, monkeypatch, capsys) -> None:
    import iro_fed.federated.local as local
    from iro_fed.cli import main

    monkeypatch.setattr(local, "LocalFederation", _InProcessFederation)
    reg, out = tmp_path / "reg", tmp_path / "run.json"
    sets = [a for s in ["track-emissions=false", *TINY_SETS] for a in ("--set", s)]
    code = main(["fed", "local", "--nodes", "2", "--rounds", "1", "--local-steps", "20", *sets, "--registry",
                 str(reg), "--json", str(out), "--workdir", str(tmp_path / "work")])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    (row,) = [line for line in stdout.splitlines() if "v0001" in line and "│" in line]
    cells = [c.strip() for c in row.strip().strip("│").split("│")]
    assert cells[0] == "1" and cells[-1] == "-", row  # train gCO2: not measured
    doc = json.loads(out.read_text())
    assert doc["rounds"][0]["emissions_g"] is None
    assert _policy_meta(reg, 1)["emissions_g_total"] is None


# --- benchmarks/federated.py ---------------------------------------------------------------------


def _arm(reward: float, **extra: Any) -> dict[str, Any]:
    return {"eval-reward": reward, "eval-score": 0.1, "eval-carbon-kg": 1.0, "eval-pending-pct": 0.0, **extra}


@pytest.fixture()
def federated_bench(load_benchmark):
    pytest.importorskip("gymnasium")
    return load_benchmark("federated", "federated_benchmark_h6")


def test_benchmark_keeps_unmeasured_emissions_as_null_and_dash(federated_bench, monkeypatch, tmp_path,
                                                              capsys) -> None:
    def quality(cfg, episodes, work, console, seed, eval_seed):
        return {
            "seed": seed, "steps_per_site": 1, "total_steps": 4,
            "greedy": _arm(-1.0), "random": _arm(-3.0), "initial": _arm(-3.0),
            "local": {s: _arm(-2.5) for s in federated_bench.TRAIN_SITES},
            "centralized": _arm(-2.0, emissions_g=None, wall_s=1.0),
            "federated": _arm(-2.0, emissions_g=None, wall_s=1.0, per_round=[-2.0], replay_kept=[0]),
        }

    monkeypatch.setattr(federated_bench, "quality", quality)
    out = tmp_path / "fed.json"
    assert federated_bench.main(["--seeds", "2", "--skip", "poisoning,overhead", "--set", "track-emissions=false",
                                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["quality"]["federated"]["emissions_g"] is None
    assert doc["quality"]["centralized"]["emissions_g"] is None
    assert doc["quality"]["federated"]["wall_s"] == 1.0
    text = capsys.readouterr().out
    fed_row = next(line for line in text.splitlines() if "federated FedAvg" in line)
    assert fed_row.rstrip().rstrip("│").split("│")[-1].strip() == "-"
    assert "emissions: not measured" in text and "0.000 gCO2eq" not in text


def test_benchmark_mean_of_measured_emissions(federated_bench) -> None:
    assert federated_bench._mean_or_none([1.0, 2.0]) == 1.5
    assert federated_bench._mean_or_none([1.0, None]) is None  # not the mean of the seeds that have one
    assert federated_bench._grams_of(None) is None  # centralized without tracking: not 0.0
    assert federated_bench._grams_of(0.002) == pytest.approx(2.0)


def test_a_site_without_codecarbon_makes_the_round_unmeasured(tmp_path, monkeypatch) -> None:
    # track-emissions on but no codecarbon (the deploy image has no 'carbon' extra): each site sent
    # 0.0 and the server summed it as a measured 0 g
    import sys

    monkeypatch.setitem(sys.modules, "codecarbon", None)  # import codecarbon -> ImportError
    reg = tmp_path / "policies"
    cfg = FedConfig(num_server_rounds=1, registry=str(reg), **{**TINY, "track_emissions": True})
    summary = run_federation(InProcessGrid(SITES, cfg.to_run_config()), cfg)
    assert [r["emissions_g"] for r in summary["rounds"]] == [None]
    assert summary["emissions_g"] is None
    meta = _policy_meta(reg, 1)
    assert meta["emissions_g_round"] is None and meta["emissions_g_total"] is None
