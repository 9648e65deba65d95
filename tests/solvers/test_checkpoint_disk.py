"""A policy checkpoint written to a full disk (review finding): ``iro train --out`` ended in torch's
``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0`` traceback.

A real ``iro train`` process whose file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) is below a
checkpoint's size: each write past it fails with EFBIG as a write to a full disk fails with ENOSPC.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from solvers.dqn.checkpoint import CheckpointWriteError, save_checkpoint  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

_LIMITED_TRAIN = """
import resource, signal, sys
from iro_fed.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
sys.exit(main(["train", "--scenario", "bank", "--steps", "8", "--envs", "1", "--hours", "0.2", "--eval-episodes", "0",
               "--no-emissions", "--out", sys.argv[1]]))
"""


def test_iro_train_on_a_full_disk_exits_2_naming_the_file_and_keeps_the_old_policy(tmp_path):
    out = tmp_path / "policy.pt"
    save_checkpoint(out, {"w": torch.ones(3)}, {"note": "the policy trained before"})  # the one in service
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(before) == ["policy.json", "policy.pt"]
    proc = subprocess.run([sys.executable, "-c", _LIMITED_TRAIN, str(out)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"iro train: error: policy {str(out)!r}: cannot write the checkpoint (disk full or not writable?)" \
        in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    # the old checkpoint and its metadata as they were; no temporary file left beside them
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_the_error_is_an_oserror_naming_the_path(tmp_path):
    # A folder where the metadata goes: refused before anything is written, nothing left behind.
    (tmp_path / "policy.json").mkdir()
    message = f"policy {str(tmp_path / 'policy.pt')!r}: cannot write the checkpoint: .*policy.json' is a folder"
    with pytest.raises(CheckpointWriteError, match=message) as exc:
        save_checkpoint(tmp_path / "policy.pt", {"w": torch.ones(3)}, {})
    assert isinstance(exc.value, OSError)
    assert [p.name for p in tmp_path.iterdir()] == ["policy.json"]


def test_an_optimizer_state_that_does_not_fit_is_reported_as_well(tmp_path):
    # The policy fits under the limit, its optimizer state (Adam: twice the weights) does not.
    # Before: torch's RuntimeError traceback after the policy had been written.
    out = tmp_path / "policy.pt"
    script = _LIMITED_TRAIN.replace("(2000, 2000)", "(1_300_000, 1_300_000)").replace(
        '"--no-emissions",', '"--no-emissions", "--set", "learning_starts=4", "--set", "batch_size=4",')  # Adam moments exist
    proc = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "iro train: error: optimizer state" in proc.stderr and "disk full or not writable?" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert out.stat().st_size < 1_300_000  # the policy itself was written
