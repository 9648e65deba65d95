"""A file that is no torch checkpoint, given as the dqn solver's `policy` setting or `iro train
--resume`: exit 2 naming the setting or flag and the file, in a few words. It used to end with
torch's whole text, which advises re-running with `weights_only=False` (that would run any code
pickled into the file)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from solvers.dqn.checkpoint import CheckpointError, load_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "problems" / "bank-three-zone.json"


def _iro(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iro_fed.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1"}, timeout=300, check=False)


def _short(stderr: str) -> None:
    assert "weights_only" not in stderr and "pytorch.org" not in stderr and len(stderr.splitlines()) == 1, stderr


def test_solve_with_a_json_policy_names_the_setting_and_the_file(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"steps": 7}))
    proc = _iro("solve", str(PROBLEM), "--solver", "dqn", "--set", f"policy={policy}", "--out", "out.json",
                cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"iro solve: error: solver 'dqn' setting 'policy': policy {str(policy)!r}: not a "
                           "readable torch checkpoint (not a file torch.save wrote)\n")
    _short(proc.stderr)
    assert [p.name for p in tmp_path.iterdir()] == ["policy.json"]


def test_train_resume_from_a_json_file_names_the_flag_and_the_file(tmp_path: Path) -> None:
    resume = tmp_path / "run.json"
    resume.write_text("{}")
    proc = _iro("train", "--scenario", "bank", "--steps", "10", "--resume", str(resume), "--out", "p.pt",
                "--no-emissions", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"iro train: error: --resume: policy {str(resume)!r}: not a readable torch "
                                  "checkpoint (not a file torch.save wrote)"), proc.stderr
    assert proc.stderr.count("--resume") == 1
    _short(proc.stderr)
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_refused_pickled_objects_and_damaged_files_say_why_without_torchs_advice(tmp_path: Path) -> None:
    pickled = tmp_path / "objects.pt"
    torch.save({"format": "iro-fed-dqn/1", "state_dict": argparse.Namespace(a=1)}, pickled)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(pickled)
    assert str(caught.value) == (f"policy {str(pickled)!r}: not a readable torch checkpoint (it holds objects other "
                                 "than tensors and plain values, which are not loaded)")
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(pickled.read_bytes()[:200])
    with pytest.raises(CheckpointError, match=r"not a readable torch checkpoint \(PytorchStreamReader failed") as c2:
        load_checkpoint(damaged)
    assert "weights_only" not in str(c2.value) and "\n" not in str(c2.value)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"not a readable torch checkpoint \(an empty file\)$"):
        load_checkpoint(empty)


def test_the_metadata_given_for_its_checkpoint_names_the_checkpoint(tmp_path: Path) -> None:
    torch.save({"x": torch.zeros(1)}, tmp_path / "policy.pt")
    (tmp_path / "policy.json").write_text("{}")
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(tmp_path / "policy.json")
    assert str(caught.value).endswith(f"(not a file torch.save wrote; it is the metadata of "
                                      f"{str(tmp_path / 'policy.pt')!r})")

