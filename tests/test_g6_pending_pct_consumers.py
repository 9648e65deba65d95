"""The readers of ``pending_pct`` take its None (no pod became ready): the federated evaluation
averages the episodes that had ready pods (float(None) was a TypeError), the DQN benchmark's
table prints "-" (a format of None was a TypeError)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from iro_fed.federated import task


class _OneStepEnv:
    def __init__(self, totals: dict[str, Any]) -> None:
        self.totals = totals

    def reset(self, seed: int) -> tuple[dict, dict]:
        return {}, {}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        return {}, 1.0, True, False, {"totals": self.totals}

    def close(self) -> None:
        pass


def _episodes(monkeypatch, pending: list[float | None]) -> dict[str, float]:
    envs = iter(_OneStepEnv({"score": 0.5, "carbon_kg": 1.0, "pending_pct": p}) for p in pending)
    monkeypatch.setattr(task, "make_site_env", lambda *a, **k: next(envs))
    cfg = SimpleNamespace(scenario="bank", hours=1.0, top_k=8)
    return task.run_episodes(lambda obs: 0, cfg, site=0, episodes=len(pending), seed=0)


def test_run_episodes_averages_the_episodes_with_ready_pods(monkeypatch) -> None:
    out = _episodes(monkeypatch, [None, 20.0, 40.0])
    assert out["eval-pending-pct"] == pytest.approx(30.0)
    assert out["eval-score"] == pytest.approx(0.5)


def test_run_episodes_without_any_ready_pod_reports_nan(monkeypatch) -> None:
    out = _episodes(monkeypatch, [None, None])
    assert math.isnan(out["eval-pending-pct"])  # bench_common.write_json writes it as null


def test_the_dqn_benchmark_table_prints_a_missing_pending_share_as_a_dash(load_benchmark) -> None:
    module = load_benchmark("dqn", "dqn_benchmark_g6")
    m = {"score": 0.1, "pending_pct": None, "utilization_pct": 50.0, "success_rate_pct": None, "carbon_kg": 1.0,
         "cost": 2.0}
    doc = {"scenarios": [{"scenario": "s", "seeds": [1], "means": {"kube-default": m}, "dqn_vs_kube_pct": None,
                          "best_heuristic": "best-fit", "dqn_gap_to_best_pct": None}]}
    console = Console(width=200, record=True)
    module.print_tables(doc, console)
    line = next(x for x in console.export_text().splitlines() if "kube-default" in x)
    assert [c.strip() for c in line.strip("│ ").split("│")][2] == "-"


def test_a_real_env_keeps_a_missing_pending_share_as_none() -> None:
    """PlacementEnv's end totals keep pending_pct None (no pod became ready): dropping it made
    run_episodes read the missing key as NaN and average it in."""
    from iro_fed.sim.env import PlacementEnv

    env = PlacementEnv("promo-surge", hours=1.0, k=4, seed=0)  # no pod becomes ready in its first hour
    obs, info = env.reset(seed=0)
    done = "totals" in info
    while not done:
        mask = obs["mask"]
        obs, _, term, trunc, info = env.step(0 if mask[0] else len(mask) - 1)
        done = bool(term or trunc)
    env.close()
    assert "pending_pct" in info["totals"] and info["totals"]["pending_pct"] is None


def test_a_registry_version_publishes_with_a_metric_that_is_not_finite(tmp_path) -> None:
    """An evaluation with nothing to average (eval-pending-pct NaN) is written as null: the version
    is published, not refused because JSON cannot hold NaN."""
    import json

    torch = pytest.importorskip("torch")
    from iro_fed.federated.registry import PolicyRegistry
    from solvers.dqn.config import DQNConfig

    cfg = DQNConfig().to_dict()
    meta = {"config": cfg, "candidate_features": 20, "context_features": 18, "steps": 0,
            "evaluation": {"eval-pending-pct": math.nan, "eval-score": 0.5}}
    try:
        version, path = PolicyRegistry(tmp_path / "reg").publish({"w": torch.zeros(2)}, meta)
    except Exception as exc:  # the metadata the registry requires may differ: show what it wanted
        pytest.fail(f"publish refused: {exc}")
    doc = json.loads((path.parent / "metadata.json").read_text())
    assert doc["evaluation"] == {"eval-pending-pct": None, "eval-score": 0.5}
