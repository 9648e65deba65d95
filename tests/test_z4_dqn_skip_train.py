"""benchmarks/dqn.py --skip-train never trains: on a fresh checkout (no git-ignored
``results/dqn/<scenario>.pt``) bank uses the shipped policy, another scenario is refused (exit 2).

Was: ``--skip-train --sections scenarios,latency --scenarios bank`` trained for up to
``--train-minutes`` (10 by default) because ``results/dqn/bank.pt`` was missing.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

from solvers.dqn.solver import DEFAULT_POLICY  # noqa: E402


@pytest.fixture()
def bench(load_benchmark, tmp_path, monkeypatch):
    module = load_benchmark("dqn", "dqn_benchmark_z4")
    monkeypatch.setattr(module, "RESULTS", tmp_path / "results")  # a fresh checkout: no trained policies
    return module


def test_shipped_policy_is_the_bank_policy() -> None:
    meta = json.loads(DEFAULT_POLICY.with_suffix(".json").read_text())
    assert DEFAULT_POLICY.is_file() and meta["scenario"] == "bank"


def test_skip_train_without_a_trained_bank_policy_uses_the_shipped_one(bench, tmp_path) -> None:
    args = bench.parse_args(["--skip-train", "--sections", "scenarios,latency", "--scenarios", "bank", "--hours", "6"])
    assert args.policies == {"bank": DEFAULT_POLICY}
    assert not bench.trains(args)
    # a policy trained earlier under results/dqn/ is still the one reused
    trained = tmp_path / "results" / "dqn" / "bank.pt"
    trained.parent.mkdir(parents=True)
    trained.write_bytes(DEFAULT_POLICY.read_bytes())
    args = bench.parse_args(["--skip-train", "--sections", "scenarios,latency", "--scenarios", "bank"])
    assert args.policies == {"bank": trained}


@pytest.mark.parametrize("argv, flag", [
    (["--skip-train", "--sections", "scenarios", "--scenarios", "promo-surge"], "--skip-train"),
    (["--skip-train", "--sections", "scenarios", "--scenarios", "bank,promo-surge"], "--skip-train"),
    (["--sections", "latency", "--scenarios", "promo-surge"], "--sections latency"),
])
def test_no_trained_policy_and_no_shipped_one_exits_2(bench, tmp_path, capsys, argv, flag) -> None:
    out = tmp_path / "dqn.json"
    with pytest.raises(SystemExit) as exc:  # short training limits: the old code trained here
        bench.main([*argv, "--train-steps", "10", "--train-minutes", "0.05", "--eval-seeds", "101", "--hours", "0.5",
                    "--latency-pods", "5", "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"{flag}: no trained promo-surge policy" in err
    assert str(tmp_path / "results" / "dqn" / "promo-surge.pt") in err
    assert not out.exists() and not (tmp_path / "results").exists()


def test_skip_train_run_evaluates_the_shipped_policy_without_training(bench, tmp_path, capsys) -> None:
    out = tmp_path / "dqn.json"
    # Short training limits only so that the old code (which trained here) fails fast.
    rc = bench.main(["--skip-train", "--sections", "scenarios", "--scenarios", "bank", "--hours", "0.5",
                     "--eval-seeds", "101", "--train-steps", "10", "--train-minutes", "0.05", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "training on bank" not in printed
    assert "using the shipped bank policy" in printed
    doc = json.loads(out.read_text())
    assert doc["scenarios"][0]["training"] == {"reused": str(DEFAULT_POLICY), "shipped": True}
    assert doc["settings"]["policies"] == {"bank": str(DEFAULT_POLICY)}
    assert not (tmp_path / "results").exists()  # nothing trained, nothing written there
