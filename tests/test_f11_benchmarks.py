"""The benchmark scripts' flags: every value checked before any work (exit 2 naming the flag),
``--quick`` only for flags not given, ``--out`` checked first, valid JSON, dqn's ``--policy-dir``,
joint_solvers' CPU time and load beside wall time, the extender benchmark's shutdown and width.

Fast: each test stops before the real work. Where the old code would have started it, the
work's first step is replaced by one that fails the test at once (``_no_work``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
OPENB = REPO.parent / "shared" / "data" / "alibaba-openb-2023"
needs_openb = pytest.mark.skipif(not (OPENB / "openb_node_list_gpu_node.csv").is_file(), reason="openb trace missing")


def _no_work(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("the benchmark started its work before rejecting the command line")


def _exits_2(capsys: pytest.CaptureFixture[str], call: Any, flag: str) -> str:
    with pytest.raises(SystemExit) as exc:
        call()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err
    return err


def _strict_json(path: Path) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"invalid JSON constant {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


# --- bench_common ------------------------------------------------------------------------------


def test_write_json_writes_non_finite_numbers_as_null(load_benchmark, tmp_path) -> None:
    import numpy as np

    common = load_benchmark("bench_common", "bench_common")
    out = tmp_path / "r.json"
    common.write_json(out, {"a": math.nan, "b": [np.float64("inf"), 1.5, np.int64(3)], "c": (np.nan, Path("x"))})
    assert _strict_json(out) == {"a": None, "b": [None, 1.5, 3], "c": [None, "x"]}


# --- federated.py ------------------------------------------------------------------------------


@pytest.fixture()
def federated(load_benchmark, monkeypatch):
    pytest.importorskip("flwr")
    pytest.importorskip("torch")
    module = load_benchmark("federated", "federated_f11")
    for name in ("quality", "poisoning", "overhead"):
        monkeypatch.setattr(module, name, _no_work)
    return module


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--episodes", "-1"], "--episodes"),  # was: NaN everywhere, exit 0, bare NaN in the JSON
        (["--episodes", "0"], "--episodes"),  # was: replaced by the default
        (["--rounds", "0"], "--rounds"),
        (["--rounds", "-1"], "--rounds"),  # was: a FedConfigError traceback
        (["--local-steps", "0"], "--local-steps"),
        (["--eval-seed", "-1"], "--eval-seed"),
        (["--skip", "qualty,poisoning,overhead"], "--skip"),  # was: ran every part
        (["--skip", ","], "--skip"),
        (["--overhead-modes", ","], "--overhead-modes"),
    ],
)
def test_federated_bad_values_exit_2_before_any_work(federated, tmp_path, capsys, argv, flag) -> None:
    out = tmp_path / "fed.json"
    skip = [] if "--skip" in argv else ["--skip", "quality,poisoning,overhead"]
    _exits_2(capsys, lambda: federated.main([*argv, *skip, "--out", str(out)]), flag)
    assert not out.exists()


def test_federated_bad_out_fails_before_any_work(federated, tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    _exits_2(capsys, lambda: federated.main(["--out", str(blocker / "fed.json")]), "--out")


def test_federated_explicit_values_are_kept_with_quick(federated, tmp_path) -> None:
    out = str(tmp_path / "fed.json")
    args = federated.parse_args(["--quick", "--rounds", "2", "--local-steps", "3", "--episodes", "1", "--out", out])
    assert (args.rounds, args.local_steps, args.episodes) == (2, 3, 1)
    assert args.cfg.num_server_rounds == 2 and args.cfg.local_steps == 3
    args = federated.parse_args(["--quick", "--out", out])
    assert (args.rounds, args.local_steps, args.episodes) == (6, 150, 8)


def test_federated_help_states_the_quick_run_time(federated, capsys) -> None:
    with pytest.raises(SystemExit):
        federated.main(["--help"])
    assert "about 10 minutes on 2 shared cores" in " ".join(capsys.readouterr().out.split())


def _arm(reward: float, **extra: Any) -> dict[str, Any]:
    return {"eval-reward": reward, "eval-score": 0.1, "eval-carbon-kg": 1.0, "eval-pending-pct": 0.0, **extra}


def test_federated_json_is_valid_when_a_ratio_is_undefined(federated, monkeypatch, tmp_path) -> None:
    # centralized == random: the gain over random has no span (NaN), written as a bare NaN before
    def quality(cfg, episodes, work, console, seed, eval_seed):
        return {
            "seed": seed,
            "steps_per_site": 1,
            "total_steps": 4,
            "greedy": _arm(-1.0),
            "random": _arm(-2.0),
            "initial": _arm(-2.0),
            "local": {s: _arm(-2.0) for s in federated.TRAIN_SITES},
            "centralized": _arm(-2.0, emissions_g=0.0, wall_s=1.0),
            "federated": _arm(-2.0, emissions_g=0.0, wall_s=1.0, per_round=[-2.0], replay_kept=[0]),
        }

    monkeypatch.setattr(federated, "quality", quality)
    out = tmp_path / "fed.json"
    assert federated.main(["--seeds", "1", "--skip", "poisoning,overhead", "--out", str(out)]) == 0
    doc = _strict_json(out)
    assert doc["quality"]["fed_vs_central_gain"] is None


# --- dqn.py ------------------------------------------------------------------------------------


@pytest.fixture()
def dqn(load_benchmark, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("gymnasium")
    module = load_benchmark("dqn", "dqn_benchmark_f11")
    monkeypatch.setattr(module, "RESULTS", tmp_path / "results")  # the repo's results folder stays untouched
    return module


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--eval-seeds", "abc"], "--eval-seeds"),
        (["--sizes", "x"], "--sizes"),
        (["--sizes", "100,,5"], "--sizes"),
        (["--latency-pods", "0"], "--latency-pods"),
        (["--hours", "-2"], "--hours"),
        (["--hours", "nan"], "--hours"),
        (["--train-steps", "0"], "--train-steps"),
        (["--train-minutes", "0"], "--train-minutes"),
        (["--ablation-variants", "bogus"], "--ablation-variants"),  # was: exit 1 without a usage line
        (["--ablation-seeds", "x"], "--ablation-seeds"),
        (["--sections", "scenario"], "--sections"),  # was: ran nothing, exit 0
        (["--scenarios", "nope"], "--scenarios"),
        (["--ablation-scenarios", "nope"], "--ablation-scenarios"),
    ],
)
def test_dqn_bad_values_exit_2_with_usage(dqn, tmp_path, capsys, argv, flag) -> None:
    out = tmp_path / "dqn.json"
    err = _exits_2(capsys, lambda: dqn.parse_args([*argv, "--out", str(out)]), flag)
    assert "usage:" in err
    assert not out.exists() and not (tmp_path / "results").exists()


def test_dqn_quick_keeps_explicit_flags(dqn, tmp_path) -> None:
    common = ["--skip-train", "--sections", "latency", "--scenarios", "bank", "--out", str(tmp_path / "d.json")]
    args = dqn.parse_args(
        [
            "--quick",
            "--latency-pods",
            "7",
            "--eval-seeds",
            "5,6",
            "--sizes",
            "10",
            "--hours",
            "3",
            "--train-steps",
            "11",
            "--ablation-steps",
            "12",
            "--train-minutes",
            "1",
            *common,
        ]
    )
    assert (args.latency_pods, args.eval_seeds, args.sizes, args.hours) == (7, [5, 6], [10], 3.0)
    assert (args.train_steps, args.ablation_steps, args.train_minutes) == (11, 12, 1.0)
    args = dqn.parse_args(["--quick", *common])  # the quick values where nothing was given
    assert (args.latency_pods, args.eval_seeds, args.sizes, args.hours) == (100, [101], [100, 1000], None)
    assert (args.train_steps, args.ablation_steps, args.ablation_episodes) == (3000, 1500, 1)
    args = dqn.parse_args(common)
    assert (args.latency_pods, args.eval_seeds, args.hours, args.train_steps) == (300, [101, 102, 103], 24.0, 200_000)


def test_dqn_policy_dir_holds_every_policy(dqn, tmp_path, monkeypatch) -> None:
    policies = tmp_path / "elsewhere"
    args = dqn.parse_args(
        [
            "--sections",
            "scenarios,ablation",
            "--scenarios",
            "bank",
            "--ablation-variants",
            "all-on",
            "--policy-dir",
            str(policies),
            "--out",
            str(tmp_path / "d.json"),
        ]
    )
    assert args.policies == {"bank": policies / "bank.pt"} and policies.is_dir()

    written: list[Path] = []

    class Solver:
        def fit(self, _envs, _steps, out, **_kwargs):
            written.append(Path(out))
            raise KeyboardInterrupt  # stop before any training

    monkeypatch.setattr(dqn.solvers, "make", lambda *_a, **_k: Solver())
    monkeypatch.setattr(dqn, "env_factories", lambda *_a, **_k: [])
    with pytest.raises(KeyboardInterrupt):
        dqn.ablation_section(args, None)
    assert written == [policies / "ablation" / "bank" / "all-on_s0.pt"]
    assert not (tmp_path / "results").exists()


def test_dqn_policy_dir_is_used_by_skip_train(dqn, tmp_path) -> None:
    policies = tmp_path / "elsewhere"
    policies.mkdir()
    (policies / "promo-surge.pt").write_bytes(b"")
    args = dqn.parse_args(
        [
            "--skip-train",
            "--sections",
            "scenarios",
            "--scenarios",
            "promo-surge",
            "--policy-dir",
            str(policies),
            "--out",
            str(tmp_path / "d.json"),
        ]
    )
    assert args.policies == {"promo-surge": policies / "promo-surge.pt"}


# --- scenarios.py ------------------------------------------------------------------------------


@pytest.fixture()
def scenarios(load_benchmark, monkeypatch):
    module = load_benchmark("scenarios", "scenarios_f11")
    monkeypatch.setattr(module, "run", _no_work)
    return module


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--seeds", "abc"], "--seeds"),
        (["--seeds", "3-1"], "--seeds"),
        (["--scenarios", "nope"], "--scenarios"),
        (["--hours", "-1"], "--hours"),
        (["--hours", "nan"], "--hours"),
        (["--variants", ","], "--variants"),
        (["--variants", "best-fit,nope"], "--variants"),
    ],
)
def test_scenarios_bad_values_exit_2(scenarios, tmp_path, capsys, argv, flag) -> None:
    out = tmp_path / "sc.json"
    _exits_2(capsys, lambda: scenarios.main([*argv, "--out", str(out)]), flag)
    assert not out.exists()


def test_scenarios_bad_out_fails_before_the_run(scenarios, tmp_path, capsys) -> None:
    (tmp_path / "file").write_text("")
    _exits_2(capsys, lambda: scenarios.main(["--quick", "--out", str(tmp_path / "file" / "sc.json")]), "--out")


def test_scenarios_quick_keeps_explicit_seeds_and_scenarios(scenarios, monkeypatch, tmp_path) -> None:
    seen: dict[str, Any] = {}

    def run(scenario_names, variants, seeds, hours, extra, console):
        seen.update(scenarios=scenario_names, seeds=seeds, hours=hours)
        raise KeyboardInterrupt

    monkeypatch.setattr(scenarios, "run", run)
    with pytest.raises(KeyboardInterrupt):
        scenarios.main(["--quick", "--seeds", "2,3", "--scenarios", "edge-iot", "--out", str(tmp_path / "s.json")])
    assert seen == {"scenarios": ["edge-iot"], "seeds": [2, 3], "hours": 24.0}
    with pytest.raises(KeyboardInterrupt):
        scenarios.main(["--quick", "--hours", "6", "--out", str(tmp_path / "s.json")])
    assert seen == {"scenarios": ["bank"], "seeds": [1], "hours": 6.0}


def test_scenarios_quick_gives_a_promotion_day_only_when_the_run_reaches_it(scenarios, monkeypatch, tmp_path) -> None:
    # --quick --hours 6 passed promo_day 0, which simulate() now refuses: its promotion (11:00-19:00) is not in 6 h
    seen: list[dict] = []

    def run(scenario_names, variants, seeds, hours, extra, console):
        seen.append(extra)
        raise KeyboardInterrupt

    monkeypatch.setattr(scenarios, "run", run)
    for hours in ("6", "24"):
        with pytest.raises(KeyboardInterrupt):
            scenarios.main(["--quick", "--hours", hours, "--out", str(tmp_path / "s.json")])
    assert seen == [{"bank": {"promo_day": -1}}, {"bank": {"promo_day": 0}}]


# --- fragmentation.py --------------------------------------------------------------------------


@needs_openb
@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--seeds", "abc"], "--seeds"),
        (["--pod-lists", "nope"], "--pod-lists"),
        (["--policies", "nope"], "--policies"),  # was: raised in a worker, after the pool started
        (["--policies", "cpsat"], "--policies"),
        (["--policies", ","], "--policies"),
    ],
)
def test_fragmentation_bad_values_exit_2(load_benchmark, monkeypatch, tmp_path, capsys, argv, flag) -> None:
    module = load_benchmark("fragmentation", "fragmentation_f11")
    monkeypatch.setattr(module, "ProcessPoolExecutor", _no_work)
    out = tmp_path / "fr.json"
    _exits_2(capsys, lambda: module.main([*argv, "--out", str(out), "--plot", str(tmp_path / "fr.png")]), flag)
    assert not out.exists()


# --- decision_throughput.py / joint_solvers.py -------------------------------------------------


@needs_openb
@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--profile", "greedy-objective@abc"], "--profile"),
        (["--profile", "cpsat@200"], "--profile"),  # was: AttributeError 'reset' after the run
        (["--profile", "best-fit@0"], "--profile"),
        (["--seed", "-1"], "--seed"),
        (["--solvers", ","], "--solvers"),
        (["--pods", "0"], "--pods"),
    ],
)
def test_decision_throughput_bad_values_exit_2(load_benchmark, monkeypatch, tmp_path, capsys, argv, flag) -> None:
    module = load_benchmark("decision_throughput", "decision_throughput")
    monkeypatch.setattr(module, "make_pods", _no_work)
    monkeypatch.setattr(module, "build", _no_work)
    out = tmp_path / "dt.json"
    assert module.main(["--quick", *argv, "--out", str(out)]) == 2
    assert flag in capsys.readouterr().err
    assert not out.exists()


@needs_openb
def test_decision_throughput_bad_out_fails_before_the_run(load_benchmark, monkeypatch, tmp_path, capsys) -> None:
    module = load_benchmark("decision_throughput", "decision_throughput")
    monkeypatch.setattr(module, "build", _no_work)
    (tmp_path / "file").write_text("")
    assert module.main(["--quick", "--out", str(tmp_path / "file" / "dt.json")]) == 2
    assert "--out" in capsys.readouterr().err


@pytest.fixture()
def joint(load_benchmark, monkeypatch):
    module = load_benchmark("joint_solvers", "joint_solvers_f11")
    monkeypatch.setattr(module, "warm_up", _no_work)
    monkeypatch.setattr(module, "run_size", _no_work)
    return module


@needs_openb
@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--seed", "-1"], "--seed"),
        (["--solvers", ","], "--solvers"),
        (["--solvers", "best-fit,nope"], "--solvers"),
        (["--empty-nodes", "1.5"], "--empty-nodes"),
        (["--empty-nodes", "-0.1"], "--empty-nodes"),
        (["--empty-nodes", "nan"], "--empty-nodes"),
    ],
)
def test_joint_solvers_bad_values_exit_2(joint, tmp_path, capsys, argv, flag) -> None:
    out = tmp_path / "js.json"
    assert joint.main(["--quick", *argv, "--out", str(out)]) == 2
    assert flag in capsys.readouterr().err
    assert not out.exists()


@needs_openb
def test_joint_solvers_bad_out_fails_before_the_run(joint, tmp_path, capsys) -> None:
    (tmp_path / "file").write_text("")
    assert joint.main(["--quick", "--solvers", "best-fit", "--out", str(tmp_path / "file" / "js.json")]) == 2
    assert "--out" in capsys.readouterr().err


def test_joint_solvers_time_verdict_names_its_clock_with_cpu_and_load(load_benchmark) -> None:
    module = load_benchmark("joint_solvers", "joint_solvers_f11")
    row = module.Row(
        solver="qubo",
        pods=100,
        nodes=20,
        score=-1.0,
        unplaced=0,
        time_s=8.0,
        valid=True,
        status="ok",
        cpu_s=2.5,
        load_avg=6.0,
        below_cpsat_abs=0.0,
    )
    module.judge(row, (100, 20), None)
    assert row.verdict == "SHORT"
    assert row.shortfalls == ["8.0 s wall > 2 s (CPU 2.5 s, load 6.0)"]


@needs_openb
def test_joint_solvers_rows_record_cpu_time_and_load(load_benchmark) -> None:
    from rich.console import Console

    module = load_benchmark("joint_solvers", "joint_solvers_f11")
    node_shapes, pod_shapes = module.dt.load_shapes(module.dt.DEFAULT_DATA)
    (row,) = module.run_size(node_shapes, pod_shapes, (4, 2), ["best-fit"], True, 0, Console(file=None, quiet=True))
    assert row.cpu_s is not None and row.cpu_s >= 0.0
    assert row.load_avg is not None and row.load_avg >= 0.0


# --- extender.py / iro_fed.k8s.bench -----------------------------------------------------------


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--solver", "nope"], "--solver"),  # was: exit 134 (SIGABRT, the watch thread alive at exit)
        (["--seconds", "-1"], "--seconds"),  # was: TypeError in the table
        (["--seconds", "nan"], "--seconds"),
        (["--clients", "0"], "--clients"),  # was: TypeError in the table
        (["--threads", "0"], "--threads"),
        (["--scheduler-pods", "-5"], "--scheduler-pods"),  # was: negative pods/s, exit 0
        (["--names", "10", "--nodes", "5"], "--names"),
    ],
)
def test_extender_bench_bad_values_exit_2(monkeypatch, tmp_path, capsys, argv, flag) -> None:
    import iro_fed.k8s.testing
    from iro_fed.k8s import bench

    monkeypatch.setattr(iro_fed.k8s.testing, "FakeApiServer", _no_work)
    out = tmp_path / "ext.json"
    _exits_2(capsys, lambda: bench.main([*argv, "--out", str(out)]), flag)
    assert not out.exists()


def test_extender_bench_stops_the_cache_when_the_run_fails(monkeypatch) -> None:
    import iro_fed.k8s.client
    import iro_fed.k8s.extender
    from iro_fed.k8s import bench

    stopped: list[bool] = []
    real_stop = iro_fed.k8s.client.ClusterCache.stop

    def stop(self, *args: Any, **kwargs: Any) -> Any:
        stopped.append(True)
        return real_stop(self, *args, **kwargs)

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("extender failed to start")

    monkeypatch.setattr(iro_fed.k8s.client.ClusterCache, "stop", stop)
    monkeypatch.setattr(iro_fed.k8s.extender, "Extender", broken)
    with pytest.raises(RuntimeError, match="extender failed to start"):
        bench.main(["--nodes", "3", "--names", "2", "--seconds", "0.1", "--scheduler-pods", "0"])
    assert stopped == [True]  # the watch thread is stopped on the error path too


def test_extender_bench_solver_error_exits_2_not_sigabrt(tmp_path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "extender.py"),
            "--solver",
            "nope",
            "--nodes",
            "3",
            "--names",
            "2",
            "--scheduler-pods",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--solver: unknown solver 'nope'" in proc.stderr


def test_extender_bench_table_is_not_cut_at_80_columns_when_piped(tmp_path) -> None:
    out = tmp_path / "ext.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "extender.py"),
            "--nodes",
            "3",
            "--names",
            "2",
            "--seconds",
            "0.1",
            "--clients",
            "1",
            "--threads",
            "1",
            "--scheduler-pods",
            "0",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if "nodeCacheCapable: true)" in line]
    assert len(rows) == 2 and all("filter" in r or "prioritize" in r for r in rows)
    assert _strict_json(out)["nodes"] == 3


def test_joint_solvers_give_the_qubo_its_time_target_as_budget(joint) -> None:
    # The 2 s at 100x20 is asked of the QUBO as time_limit_s (as CP-SAT's 10 s at 500x100); other
    # sizes keep the solver's default budget.
    assert joint.settings_for("qubo", (100, 20), True, 3) == {"time_limit_s": 2.0, "seed": 3}
    assert "time_limit_s" not in joint.settings_for("qubo", (500, 100), False, 0)
    assert joint.settings_for("cpsat", (500, 100), False, 0)["time_limit_s"] == 10.0


@needs_openb
def test_joint_solvers_empty_nodes_start_empty_and_are_not_judged(load_benchmark, monkeypatch) -> None:
    """--empty-nodes: that share of the nodes starts with nothing allocated and every card free
    (consolidation problems); the issue's targets are for the problems as built, so not judged."""
    from rich.console import Console

    module = load_benchmark("joint_solvers", "joint_solvers_f11")
    node_shapes, pod_shapes = module.dt.load_shapes(module.dt.DEFAULT_DATA)
    plain = module.build_problem(node_shapes, pod_shapes, 20, 40, 0)
    assert plain.allocated.any(axis=1).all()  # as built, every node has something allocated
    half = module.build_problem(node_shapes, pod_shapes, 20, 40, 0, 0.5)
    empty = ~half.allocated.any(axis=1)
    assert 0 < empty.sum() < 40
    assert (half.gpu_free[empty & (half.gpu_count > 0)] != 0).all()  # (padding -1 aside) every card free
    assert ((half.gpu_free[empty] == 1000) | (half.gpu_free[empty] < 0)).all()
    assert module.build_problem(node_shapes, pod_shapes, 20, 40, 0, 1.0).allocated.sum() == 0
    monkeypatch.setitem(module.TARGETS, ("best-fit", (10, 4)), {"max_time_s": 1e9})  # a target this size would pass
    quiet = Console(file=None, quiet=True)
    assert module.run_size(node_shapes, pod_shapes, (10, 4), ["best-fit"], True, 0, quiet)[0].verdict == "PASS"
    assert module.run_size(node_shapes, pod_shapes, (10, 4), ["best-fit"], True, 0, quiet, 1.0)[0].verdict == "n/a"
