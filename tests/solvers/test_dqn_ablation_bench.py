"""benchmarks/dqn.py's ablation: variant parsing, several training seeds, per-variant statistics."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("dqn", "dqn_benchmark")


def test_variants_groups_names_and_inline_settings(bench) -> None:
    parsed = bench.parse_variants("one-off,dd-c51,noisy=false+n_step=1,all-on")
    ids = [vid for vid, _, _ in parsed]
    assert ids[:8] == list(bench.VARIANT_GROUPS["one-off"]) and ids[8:] == ["dd-c51", "noisy=false+n_step=1"]
    inline = dict((vid, change) for vid, _, change in parsed)["noisy=false+n_step=1"]
    assert inline == {"noisy": False, "n_step": 1}
    dd_c51 = {**bench.RAINBOW, **bench.VARIANTS["dd-c51"][1]}
    assert dd_c51 == {"double": True, "dueling": True, "prioritized": False, "n_step": 1, "noisy": False,
                      "distributional": True, "attention": False}
    # exactly one named variant is the DQNConfig defaults' Rainbow switches
    assert sum(bench.is_default(change) for _, (_, change) in bench.VARIANTS.items()) == 1
    with pytest.raises(SystemExit, match="unknown variant 'no-such'"):
        bench.parse_variants("all-on,no-such")
    with pytest.raises(SystemExit, match="unknown DQN config field 'nosiy'"):
        bench.parse_variants("nosiy=false")
    with pytest.raises(SystemExit, match="n_step"):
        bench.parse_variants("n_step=three")


def test_ablation_over_seeds_reports_mean_min_max(bench, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bench, "RESULTS", tmp_path)  # checkpoints of the short runs go here
    out = tmp_path / "ablation.json"
    rc = bench.main(["--sections", "ablation", "--scenarios", "bank", "--ablation-variants", "all-on,no-c51",
                     "--ablation-seeds", "0,1", "--ablation-steps", "24", "--ablation-episodes", "1",
                     "--train-hours", "2", "--out", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert "partial" not in doc and doc["settings"]["ablation_variants"] == ["all-on", "no-c51"]
    rows = doc["ablation"]
    assert [r["id"] for r in rows] == ["all-on", "no-c51"]
    for row in rows:
        rewards = row["policy_rewards"]
        assert row["seeds"] == [0, 1] and len(rewards) == 2 and len(row["train_s"]) == 2
        assert row["policy_reward"] == pytest.approx(np.mean(rewards))
        assert row["min"] == min(rewards) and row["max"] == max(rewards)
        assert row["std"] == pytest.approx(np.std(rewards, ddof=1))
        assert row["greedy_reward"] == rows[0]["greedy_reward"] is not None  # evaluated once per scenario
    assert rows[1]["config"]["distributional"] is False and rows[0]["config"]["distributional"] is True
    assert sorted(p.name for p in (tmp_path / "dqn" / "ablation" / "bank").glob("*.pt") if "optim" not in p.name) == [
        "all-on_s0.pt", "all-on_s1.pt", "no-c51_s0.pt", "no-c51_s1.pt"]
