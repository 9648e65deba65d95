"""Benchmark output flags given as a folder (a trailing '/') are refused before any work.

``type=Path`` on ``--out`` dropped the trailing '/', so ``--out /tmp/dir/`` wrote the results to a
plain file ``/tmp/dir`` and exited 0; the ``iro`` commands refuse such a path (``check_output_file``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
OPENB = REPO.parent / "shared" / "data" / "alibaba-openb-2023"
needs_openb = pytest.mark.skipif(not (OPENB / "openb_node_list_gpu_node.csv").is_file(), reason="openb trace missing")


def _no_work(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("the benchmark started its work before rejecting the command line")


def _refused(capsys: pytest.CaptureFixture[str], target: Path, flag: str) -> None:
    err = capsys.readouterr().err
    assert flag in err
    assert "folder" in err
    assert not target.exists()  # neither a file nor a folder made under that name


@needs_openb
def test_joint_solvers_out_ending_in_slash_exits_2_and_writes_nothing(load_benchmark, monkeypatch, tmp_path, capsys) -> None:
    module = load_benchmark("joint_solvers", "joint_solvers_j7")
    monkeypatch.setattr(module, "warm_up", _no_work)
    monkeypatch.setattr(module, "run_size", _no_work)
    target = tmp_path / "dir"
    assert module.main(["--sizes", "2x1", "--solvers", "best-fit", "--out", f"{target}/"]) == 2
    _refused(capsys, target, "--out")


@needs_openb
def test_decision_throughput_out_ending_in_slash_exits_2_and_writes_nothing(load_benchmark, monkeypatch, tmp_path, capsys) -> None:
    module = load_benchmark("decision_throughput", "decision_throughput_j7")
    monkeypatch.setattr(module, "make_pods", _no_work)
    monkeypatch.setattr(module, "build", _no_work)
    target = tmp_path / "dir"
    assert module.main(["--quick", "--solvers", "best-fit", "--out", f"{target}/"]) == 2
    _refused(capsys, target, "--out")


@needs_openb
@pytest.mark.parametrize("flag", ["--out", "--plot"])
def test_fragmentation_output_ending_in_slash_exits_2_and_writes_nothing(load_benchmark, monkeypatch, tmp_path, capsys, flag) -> None:
    module = load_benchmark("fragmentation", "fragmentation_j7")
    monkeypatch.setattr(module, "ProcessPoolExecutor", _no_work)
    target = tmp_path / "dir"
    paths = {"--out": str(tmp_path / "fr.json"), "--plot": str(tmp_path / "fr.png"), flag: f"{target}/"}
    argv = ["--pod-lists", "default", "--policies", "best-fit", "--seeds", "42", "--workers", "1"]
    with pytest.raises(SystemExit) as exc:
        module.main([*argv, "--out", paths["--out"], "--plot", paths["--plot"]])
    assert exc.value.code == 2
    _refused(capsys, target, flag)
    assert not (tmp_path / "fr.json").exists() and not (tmp_path / "fr.png").exists()


@needs_openb
def test_fragmentation_empty_plot_is_refused_not_skipped(load_benchmark, monkeypatch, tmp_path, capsys) -> None:
    module = load_benchmark("fragmentation", "fragmentation_j7")
    monkeypatch.setattr(module, "ProcessPoolExecutor", _no_work)
    with pytest.raises(SystemExit) as exc:
        module.main(["--pod-lists", "default", "--policies", "best-fit", "--seeds", "42", "--out", str(tmp_path / "fr.json"), "--plot", ""])
    assert exc.value.code == 2
    assert "--plot" in capsys.readouterr().err
    assert not (tmp_path / "fr.json").exists()
